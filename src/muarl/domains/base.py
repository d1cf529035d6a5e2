"""What every domain is made of: tools with derived schemas, a copy-on-write state, gold replay.

A *tool* is a plain typed function ``fn(state, **arguments)`` with a Google-style docstring; the
``@tool`` decorator marks its kind (read / write / think / generic) and whether it ends the episode, and
its JSON schema is derived from the signature and the docstring, so what the model is told and what the
code accepts cannot drift apart.

The *state* is a set of tables of JSON-like records. Resetting it must cost nothing, because RL runs
thousands of episodes on the same seed database: a fresh :class:`State` shares every table and record
with the frozen :class:`BaseData`, copies a table's index only when it is first written and a record
only when it is edited (copy-on-write). Its hash covers only the records that differ from the base, so
hashing is proportional to what an episode changed, not to the size of the database; two states over the
same base have the same hash exactly when their records are equal.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from muarl.errors import InputError
from muarl.types import Action, CheckVerdict, Episode, Message, RewardInfo, Task, ToolKind, ToolSpec

_DELETED = object()


class ToolError(Exception):
    """A tool refused the call; its message is shown to the agent as the observation."""


class ArgumentError(ToolError):
    """The call's arguments do not match the tool's schema."""


def canonical_json(value: Any) -> str:
    """The one JSON text of a value that hashing and comparison use (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def clone(value: Any) -> Any:
    """Deep copy of a JSON-like value; several times faster than ``copy.deepcopy`` on such data."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


class BaseData:
    """The frozen seed database a domain's states start from. Never mutate what it holds."""

    def __init__(self, tables: Mapping[str, Mapping[str, Any]]):
        self.tables: dict[str, dict[str, Any]] = {name: dict(rows) for name, rows in tables.items()}
        self._canonical: dict[tuple[str, str], str] = {}
        self.digest = hashlib.sha256(canonical_json(self.tables).encode()).hexdigest()

    def canonical(self, table: str, key: str) -> str | None:
        """Canonical JSON of a base record (cached), None if the base has no such record."""
        ck = (table, key)
        text = self._canonical.get(ck)
        if text is None:
            rows = self.tables.get(table)
            if rows is None or key not in rows:
                return None
            text = self._canonical[ck] = canonical_json(rows[key])
        return text

    def recompute_digest(self) -> str:
        """Hash of the base as it is now; equals ``digest`` unless some code mutated shared records."""
        return hashlib.sha256(canonical_json(self.tables).encode()).hexdigest()


class State:
    """A mutable view over :class:`BaseData` with copy-on-write tables and records.

    Read with :meth:`get` / :meth:`table` (the returned objects may be shared with the base: never mutate
    them); change with :meth:`edit` (returns a private copy you may mutate), :meth:`put`, :meth:`delete`.
    """

    __slots__ = ("base", "_tables", "_copied", "_dirty")

    def __init__(self, base: BaseData):
        self.base = base
        self._tables: dict[str, dict[str, Any]] = dict(base.tables)
        self._copied: set[str] = set()
        self._dirty: dict[str, set[str]] = {}

    # reading
    def table(self, name: str) -> Mapping[str, Any]:
        """The table's records by key (read-only by convention)."""
        try:
            return self._tables[name]
        except KeyError:
            raise KeyError(f"no table {name!r}; tables: {sorted(self._tables)}") from None

    def get(self, table: str, key: str, default: Any = None) -> Any:
        return self._tables.get(table, {}).get(key, default)

    def __contains__(self, table_key: tuple[str, str]) -> bool:
        table, key = table_key
        return key in self._tables.get(table, {})

    # writing
    def _writable(self, table: str) -> dict[str, Any]:
        if table not in self._copied:
            self._tables[table] = dict(self._tables.get(table, {}))
            self._copied.add(table)
        return self._tables[table]

    def edit(self, table: str, key: str) -> Any:
        """A private, mutable copy of a record, stored back in the table; KeyError if absent."""
        rows = self._writable(table)
        if key not in rows:
            raise KeyError(f"no record {key!r} in table {table!r}")
        dirty = self._dirty.setdefault(table, set())
        if key not in dirty:
            rows[key] = clone(rows[key])
            dirty.add(key)
        return rows[key]

    def put(self, table: str, key: str, record: Any) -> None:
        """Insert or replace a record (the state takes ownership of ``record``)."""
        self._writable(table)[key] = record
        self._dirty.setdefault(table, set()).add(key)

    def delete(self, table: str, key: str) -> None:
        del self._writable(table)[key]
        self._dirty.setdefault(table, set()).add(key)

    # identity
    def changes(self) -> Iterator[tuple[str, str, str | None]]:
        """(table, key, canonical JSON or None if deleted) for each record that differs from the base."""
        for table in sorted(self._dirty):
            rows = self._tables[table]
            for key in sorted(self._dirty[table]):
                now = canonical_json(rows[key]) if key in rows else None
                if now != self.base.canonical(table, key):
                    yield table, key, now

    def hash(self) -> str:
        """Deterministic hash: equal for two states over the same base exactly when their records are equal."""
        h = hashlib.sha256(self.base.digest.encode())
        for table, key, text in self.changes():
            h.update(b"\x00" + table.encode() + b"\x00" + key.encode() + b"\x00")
            h.update(b"\x01" if text is None else text.encode())
        return h.hexdigest()

    def snapshot(self) -> dict[str, Any]:
        """An independent copy of the changes, to :meth:`restore` later (e.g. to branch an episode)."""
        return {
            "tables": {t: dict(self._tables[t]) for t in self._copied},
            "dirty": {t: set(keys) for t, keys in self._dirty.items()},
            "records": {(t, k): clone(self._tables[t][k]) for t, ks in self._dirty.items() for k in ks if k in self._tables[t]},
        }

    def restore(self, snap: dict[str, Any]) -> None:
        self._tables = dict(self.base.tables)
        self._tables.update({t: dict(rows) for t, rows in snap["tables"].items()})
        self._copied = set(snap["tables"])
        self._dirty = {t: set(keys) for t, keys in snap["dirty"].items()}
        for (t, k), record in snap["records"].items():
            self._tables[t][k] = clone(record)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The whole database as plain data (for export and debugging; not on any hot path)."""
        return {name: clone(dict(rows)) for name, rows in self._tables.items()}


# ---------------------------------------------------------------- tools

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _schema_for(annotation: Any) -> tuple[dict[str, Any], bool]:
    """JSON schema for a type annotation, and whether the annotation admits None."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            return _schema_for(args[0])[0], nullable
        return {"anyOf": [_schema_for(a)[0] for a in args]}, nullable
    if origin is Literal:
        values = list(typing.get_args(annotation))
        return {"type": _JSON_TYPES[type(values[0])], "enum": values}, False
    if origin in (list, tuple, Iterable, typing.Sequence) or annotation in (list, tuple):
        args = typing.get_args(annotation)
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _schema_for(args[0])[0]
        return schema, False
    if typing.is_typeddict(annotation):  # a structured object: its fields, and descriptions from its docstring
        _, field_docs = parse_docstring(annotation.__doc__ or "")
        fields = {}
        for key, hint in typing.get_type_hints(annotation).items():
            fields[key] = _schema_for(hint)[0]
            if key in field_docs:
                fields[key]["description"] = field_docs[key]
        return {"type": "object", "properties": fields, "required": [k for k in fields if k in annotation.__required_keys__]}, False
    if origin is dict or annotation is dict or annotation is Any:
        return ({"type": "object"} if annotation is not Any else {}), False
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}, False
    raise TypeError(f"cannot derive a JSON schema for annotation {annotation!r}")


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|Attributes):\s*$")
_SECTION_HEADER = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {argument: description}) from a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            section, current = "args", None
            continue
        if _SECTION_HEADER.match(line):
            section, current = "other", None
            continue
        if section == "summary":
            summary.append(line)
        elif section == "args":
            m = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if m and (current is None or indent <= 4):
                current = m.group(1)
                args[current] = m.group(3).strip()
            elif current and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
    return " ".join(" ".join(summary).split()), args


@dataclass(frozen=True)
class Tool:
    """A callable tool with its schema. ``fn(state, **arguments)`` returns a str or JSON-able value.

    A *typed* tool (the default) refuses arguments of the wrong type before it runs. An untyped one
    (``typed=False``) checks only the argument names and runs on whatever values it is given, turning any
    exception its code raises into the refusal: that is how a benchmark that calls plain Python functions with
    the model's JSON behaves (τ-bench), and a world that must agree with it on every call it accepts needs the
    same leniency. :meth:`validate` is the full schema check either way.
    """

    fn: Callable[..., Any]
    spec: ToolSpec
    required: frozenset[str]
    typed: bool = True

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> ToolKind:
        return self.spec.kind

    @property
    def terminal(self) -> bool:
        return self.spec.terminal

    def check_names(self, arguments: Mapping[str, Any]) -> None:
        """Raise :class:`ArgumentError` for an unknown or a missing argument."""
        props = self.spec.parameters["properties"]
        unknown = sorted(set(arguments) - set(props))
        if unknown:
            raise ArgumentError(f"unexpected argument(s) {unknown} for {self.name}; it takes {sorted(props)}")
        missing = sorted(self.required - set(arguments))
        if missing:
            raise ArgumentError(f"missing required argument(s) {missing} for {self.name}")

    def validate(self, arguments: Mapping[str, Any]) -> None:
        """Raise :class:`ArgumentError` (with a message an agent can act on) if the arguments do not fit."""
        self.check_names(arguments)
        props = self.spec.parameters["properties"]
        for name, value in arguments.items():
            problem = _type_problem(value, props[name])
            if problem:
                raise ArgumentError(f"argument {name!r} of {self.name}: {problem}")

    def __call__(self, state: State, arguments: Mapping[str, Any]) -> str:
        """Validate (all of the schema, or only the names if untyped), run, and render the output as text
        (JSON for structured results)."""
        if self.typed:
            self.validate(arguments)
            with int_digit_limit_kept():
                result = self.fn(state, **arguments)
        else:
            self.check_names(arguments)
            try:
                with int_digit_limit_kept():
                    result = self.fn(state, **arguments)
            except ToolError:
                raise
            except Exception as exc:  # noqa: BLE001 - the value did not suit the code: the refusal, as in τ-bench
                raise ToolError(str(exc)) from None
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _type_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    if "anyOf" in schema:
        ok = any(_type_problem(value, s) is None for s in schema["anyOf"])
        return None if ok else f"{value!r} matches none of the allowed types"
    kind = schema.get("type")
    if value is None:
        return None if schema.get("nullable") else f"expected {kind}, got null"
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    if kind in checks and not checks[kind](value):
        return f"expected {kind}, got {type(value).__name__} {value!r}"[:200]
    if "enum" in schema and value not in schema["enum"]:
        return f"{value!r} is not one of {schema['enum']}"
    if kind == "array" and "items" in schema:
        for i, item in enumerate(value):
            problem = _type_problem(item, schema["items"])
            if problem:
                return f"item {i}: {problem}"
    return None


@contextlib.contextmanager
def int_digit_limit_kept() -> Iterator[None]:
    """Restore Python's limit on integer-string conversion after a tool's code runs, whatever it did to it. Library
    code can lift the limit and, when it fails, leave it lifted (mpmath 1.4 parsing a number from a string, under a
    BFCL ``logarithm`` call); later arguments with more than 4,300 digits would then be read and recorded, and the
    episode file could not be read back by a process that has the limit."""
    limit = sys.get_int_max_str_digits()
    try:
        yield
    finally:
        if sys.get_int_max_str_digits() != limit:
            sys.set_int_max_str_digits(limit)


def tool(kind: ToolKind = "generic", *, terminal: bool = False, name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function ``fn(state, **arguments)`` as a tool; see :func:`make_tool` for what is derived."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__muarl_tool__ = {"kind": kind, "terminal": terminal, "name": name or fn.__name__}  # type: ignore[attr-defined]
        return fn

    return mark


def make_tool(fn: Callable[..., Any], kind: ToolKind = "generic", terminal: bool = False, name: str | None = None, typed: bool = True) -> Tool:
    """Build a :class:`Tool` from a typed function; its first parameter is the state and is not exposed.
    ``typed=False`` makes a tool that does not check argument types before running (see :class:`Tool`)."""
    description, arg_docs = parse_docstring(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in params:
        if p.annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {fn.__name__}: parameter {p.name!r} needs a type annotation")
        schema, nullable = _schema_for(hints[p.name])
        if nullable:
            schema = {**schema, "nullable": True}
        if p.name in arg_docs:
            schema = {**schema, "description": arg_docs[p.name]}
        properties[p.name] = schema
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    spec = ToolSpec(name=name or fn.__name__, description=description, parameters=parameters, kind=kind, terminal=terminal)
    return Tool(fn=fn, spec=spec, required=frozenset(required), typed=typed)


class ToolRegistry:
    """An ordered set of tools, looked up by name. ``unlisted`` tools run but are left out of :meth:`specs`: an
    episode may announce them later in a message (BFCL miss_func's held-out functions) without offering them first."""

    def __init__(self, tools: Iterable[Tool] = (), unlisted: Iterable[str] = ()):
        self._tools: dict[str, Tool] = {}
        self._of_kind: dict[tuple[str, ...], frozenset[str]] = {}  # names_of_kind's answers, until a tool is added
        self.unlisted = frozenset(unlisted)
        for t in tools:
            self.add(t)

    @classmethod
    def from_functions(cls, functions: Iterable[Callable[..., Any]], typed: bool = True) -> ToolRegistry:
        """Registry of the ``@tool``-marked functions, in the given order (``typed``: see :class:`Tool`)."""
        built = []
        for fn in functions:
            meta = getattr(fn, "__muarl_tool__", None)
            if meta is None:
                raise TypeError(f"{fn.__name__} is not marked with @tool")
            built.append(make_tool(fn, **meta, typed=typed))
        return cls(built)

    @classmethod
    def from_module(cls, module: types.ModuleType) -> ToolRegistry:
        """Registry of every ``@tool`` function defined in a module, in source order."""
        fns = [v for v in vars(module).values() if callable(v) and hasattr(v, "__muarl_tool__") and v.__module__ == module.__name__]
        fns.sort(key=lambda f: f.__code__.co_firstlineno)
        return cls.from_functions(fns)

    def add(self, t: Tool) -> None:
        if t.name in self._tools:
            raise ValueError(f"duplicate tool name {t.name!r}")
        self._tools[t.name] = t
        self._of_kind.clear()

    def names_of_kind(self, *kinds: str) -> frozenset[str]:
        """Names of the tools of these kinds (``write``, ``read``, ...); kept, as the trajectory checks ask for
        every episode."""
        names = self._of_kind.get(kinds)
        if names is None:
            names = self._of_kind[kinds] = frozenset(n for n, t in self._tools.items() if t.kind in kinds)
        return names

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values() if t.name not in self.unlisted]


# ---------------------------------------------------------------- domain


@dataclass(frozen=True)
class EpisodeDefaults:
    """How a domain's episodes run and are scored unless the user says otherwise: the benchmark's own settings, so
    that ``muarl rollout --domain X`` scores X as X's authors do (τ²'s criteria on τ² worlds; BFCL's turn budget and
    parallel calls), and every command that runs episodes starts from the same ones."""

    reward: str = "outcome"  # a name of muarl.reward.REWARDS
    max_turns: int = 30  # agent turns before an episode is cut
    parallel_tool_calls: bool = False  # run every call of a turn, not only the first (MUA-RL: one per turn)


class GoldReplayError(RuntimeError):
    """A task's gold actions do not run cleanly: the task is broken, not the agent."""


class RewardFn(Protocol):
    """A trajectory's score: the domain, the task, the final state's hash (not the state, so tools run elsewhere score
    alike), the trajectory and the agent's turn count. Declared beside :class:`Domain` so a benchmark's own scoring
    (τ²'s criteria, ACEBench's checker) can live in its domain package without importing ``muarl.reward``."""

    def __call__(self, domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int) -> RewardInfo: ...


@dataclass
class Domain:
    """A world: seed data, agent tools (and user tools, for domains where the user acts too), policy, tasks.

    Subclasses or factories fill the fields; ``task_loader(split)`` returns that split's tasks.
    """

    name: str
    base: BaseData
    tools: ToolRegistry
    policy: str
    task_loader: Callable[[str], list[Task]]
    splits: tuple[str, ...] = ("train", "test")
    user_tools: ToolRegistry = field(default_factory=ToolRegistry)
    description: str = ""
    greeting: str | None = None  # if set, the agent opens with it (τ-bench: "Hi! How can I help you today?")
    defaults: EpisodeDefaults = EpisodeDefaults()
    # the policy demands the user's explicit "yes" to the stated details before every call of a write tool
    # (clinic; τ-bench's "obtain explicit user confirmation (yes)"): the confirmed-before-write check applies
    confirms_writes: bool = False
    # every value a write tool is given has been said by the user or shown by a tool before the call (the clinic's
    # tasks give their user every value, and its oracle looks up what it writes): the grounded-writes check applies.
    # Not τ-bench: its oracle replays the gold writes without the reads that would show their ids.
    grounds_writes: bool = False
    # the trajectory checks (names of muarl.checks.CHECKS) whose failure breaks the policy outright: a success that
    # fails one earns only a fraction with the ``process`` reward (a check that does not apply passes)
    process_checks: tuple[str, ...] = ("confirmed_before_write", "grounded_actions", "grounded_writes", "grounded_facts")
    _gold_hashes: dict[str, str] = field(default_factory=dict, repr=False)
    _gold_outputs: dict[str, list[str]] = field(default_factory=dict, repr=False)  # what the replay behind each hash answered
    _tasks: dict[str, list[Task]] = field(default_factory=dict, repr=False)

    def fresh(self) -> Domain:
        """This domain with its per-task caches empty (the tasks read, the gold replays), as a new process first
        sees it: what measuring the cost of a task's first episode needs."""
        return replace(self, _gold_hashes={}, _gold_outputs={}, _tasks={})

    def new_state(self, task: Task | None = None) -> State:
        """A fresh state over the seed data; domains whose tasks each set their starting point (ACEBench's
        agent entries, τ² telecom's broken phones, BFCL's entries) start it from ``task``'s."""
        return State(self.base)

    def setup_key(self, task: Task) -> Any:
        """What ``new_state(task)`` depends on besides the seed data and the task's actions (none here), for
        caching gold hashes."""
        return None

    def verdict(self, task: Task, final_hash: str, messages: Sequence[Message]) -> RewardInfo | None:
        """The domain's own scoring of an episode, for benchmarks whose verdict is not "the final state equals the
        gold one" (BFCL checks state and results after every user turn); None: the outcome reward decides."""
        return None

    def conduct_checks(self, task: Task, episode: Episode) -> list[CheckVerdict]:
        """The domain's own trajectory checks of an episode (pure, no I/O), reported beside the generic ones of
        :mod:`muarl.checks`; none here."""
        return []

    def tasks(self, split: str) -> list[Task]:
        if split not in self.splits:
            raise InputError(f"domain {self.name!r} has no split {split!r}; its splits are {list(self.splits)}")
        if split not in self._tasks:
            self._tasks[split] = self.task_loader(split)
        return self._tasks[split]

    def task(self, task_id: str) -> Task:
        for split in self.splits:
            for t in self.tasks(split):
                if t.id == task_id:
                    return t
        raise KeyError(f"no task {task_id!r} in domain {self.name!r}")

    def system_prompt(self, task: Task | None = None) -> str:
        """What the agent is told first: the domain policy (as in τ-bench)."""
        return self.policy

    def task_tools(self, task: Task) -> ToolRegistry:
        """The tools an episode of ``task`` offers the agent: the domain's, unless its tasks each bring their own
        (ACEBench's entries each list the functions the model may call)."""
        return self.tools

    def run_tool(self, state: State, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one agent tool; raises :class:`ToolError` for refusals and unknown tools."""
        t = self.tools.get(name)
        if t is None:
            raise ToolError(f"unknown tool {name!r}; available tools: {self.tools.names()}")
        return t(state, arguments)

    def run_user_tool(self, state: State, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one of the user's own tools (dual-control worlds); raises :class:`ToolError` like :meth:`run_tool`."""
        t = self.user_tools.get(name)
        if t is None:
            raise ToolError(f"unknown tool {name!r}; available tools: {self.user_tools.names()}")
        return t(state, arguments)

    def env_assertions(self, task: Task, trajectory: Sequence[Message]) -> dict[str, bool]:
        """τ²'s ENV_ASSERTION checks of ``task`` on the state ``trajectory`` leads to, by name; only worlds whose
        tasks assert on the environment (τ² telecom) have them."""
        raise ValueError(f"domain {self.name!r} has no environment assertions")

    def replay(self, state: State, actions: Iterable[Action]) -> list[str]:
        """Run gold actions in order; raises :class:`GoldReplayError` on the first tool error."""
        outputs = []
        for i, a in enumerate(actions):
            try:
                outputs.append(self.run_tool(state, a.name, a.kwargs))
            except ToolError as exc:
                raise GoldReplayError(f"gold action {i} ({a.name} {a.kwargs}) failed: {exc}") from None
        return outputs

    def gold_hash(self, task: Task) -> str:
        """Hash of the state reached by replaying the task's gold actions on a fresh state (cached by the actions,
        which are all it depends on: a task read from a results file may share its id with a different one)."""
        key = self._gold_key(task)
        h = self._gold_hashes.get(key)
        if h is None:
            state = self.new_state(task)
            self._gold_outputs[key] = self.replay(state, task.actions)
            h = self._gold_hashes[key] = state.hash()
        return h

    def gold_outputs(self, task: Task) -> list[str] | None:
        """What the tool calls of the gold replay behind :meth:`gold_hash` answered, in order (the outcome reward
        runs it for every episode, so whatever else reads the gold results need not run it again); None before
        it has run, where it failed, or in a domain that hashes its gold state another way."""
        return self._gold_outputs.get(self._gold_key(task))

    def _gold_key(self, task: Task) -> str:
        return canonical_json([[[a.name, a.kwargs, a.requestor] for a in task.actions], self.setup_key(task)])
