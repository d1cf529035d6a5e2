"""Finding and reading τ-bench and τ²-bench data at run time (nothing of it ships with muarl).

Two layouts of τ-bench (v1) are understood, so that a user can point muarl at what they already have:

* the *exported* layout (``<data>/tau-bench/<domain>/``): ``users.json`` and the other tables, ``policy.md``
  and ``tasks_<split>.json`` (a list of ``{id, user_id, instruction, actions, outputs}``);
* a *checkout* of the τ-bench repository (``<data>/tau_bench/envs/<domain>/``): ``data/*.json``, ``wiki.md``
  and ``tasks_<split>.py``. Those task files are Python source; they are parsed with :mod:`ast` and their
  literals read, never executed, so pointing muarl at a checkout runs none of its code.

τ²-bench data lives in ``<data>/tau2-bench/<domain>/``: ``tasks.json``, ``split_tasks.json``, ``policy.md``,
and for retail its own ``db.json``; τ²'s airline database is τ-bench's airline tables. ``split_tasks.json`` names
the tasks of each split: ``train`` and ``test`` are tasks of ``tasks.json``; τ²'s other task sets come in files
of their own (telecom's ``small`` in ``tasks_small.json``, ``full`` in ``tasks_full.json``) and are splits where
that file is present (:func:`tau2_splits`).

Where no directory is given, the data is looked for in ``$MUARL_DATA``, then in the user's cache, where
``muarl data pull tau-bench`` / ``tau2-bench`` puts it (:mod:`muarl.data.store`).
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muarl.data.store import find_root, pull_hint
from muarl.errors import InputError
from muarl.types import Action, Task, UserScenario

V1_TABLES = {"retail": ("users", "orders", "products"), "airline": ("users", "reservations", "flights")}
V1_SPLITS = {"retail": ("train", "dev", "test"), "airline": ("test",)}
TAU2_SPLITS = ("train", "test")  # τ²'s own splits of tasks.json; its other task sets are offered where present (tau2_splits)


class TauDataError(InputError, FileNotFoundError):
    """The τ-bench / τ²-bench data is missing, unreadable or not laid out as expected; the message names the file."""


_JSON_NAMES = {dict: "object", list: "list", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def read_json(path: Path, expect: type[dict] | type[list] | None = None) -> Any:
    """A JSON file's content, of type ``expect`` when given; any problem is a TauDataError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TauDataError(f"{path}: not a readable JSON file ({type(exc).__name__}: {exc})") from None
    if expect is not None and not isinstance(data, expect):
        raise TauDataError(f"{path}: expected a JSON {_JSON_NAMES[expect]}, got {_json_type(data)}")
    return data


def check_table(rows: Any, where: str) -> dict[str, dict[str, Any]]:
    """A table of records (``{key: {field: value}}``) as the tools expect it; else a TauDataError naming ``where``."""
    if not isinstance(rows, dict):
        raise TauDataError(f"{where}: expected a JSON object of records, got {_json_type(rows)}")
    bad = next((key for key, record in rows.items() if not isinstance(record, dict)), None)
    if bad is not None:
        raise TauDataError(f"{where}: record {bad!r} is not a JSON object")
    return rows


def convert_tasks(raws: Any, where: str | Path, convert: Callable[[int, Any], Task]) -> list[Task]:
    """``convert(index, raw)`` of every raw task in a list, a TauDataError naming the file and task when one does not fit."""
    if not isinstance(raws, list):
        raise TauDataError(f"{where}: expected a JSON list of tasks, got {_json_type(raws)}")
    tasks = []
    for i, raw in enumerate(raws):
        try:
            tasks.append(convert(i, raw))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            reason = f"missing field {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
            raise TauDataError(f"{where}: task {i} is not a τ-bench task ({reason[:300]})") from None
    return tasks


# ---------------------------------------------------------------- τ-bench (v1)


@dataclass(frozen=True)
class V1Source:
    """Where one τ-bench domain's files are, in either layout."""

    domain: str
    root: Path  # the domain folder
    checkout: bool  # True for a τ-bench repository checkout

    @classmethod
    def find(cls, domain: str, data_dir: str | os.PathLike[str] | None = None) -> V1Source:
        if domain not in V1_TABLES:
            raise ValueError(f"τ-bench has no domain {domain!r}; it has {sorted(V1_TABLES)}")
        base = find_root("tau-bench", data_dir, also=("tau_bench", "envs"))
        for folder in (base / "tau-bench" / domain, base / domain):
            if (folder / "users.json").is_file():
                return cls(domain, folder, checkout=False)
        for folder in (base / "tau_bench" / "envs" / domain, base / "envs" / domain):
            if (folder / "data" / "users.json").is_file():
                return cls(domain, folder, checkout=True)
        raise TauDataError(
            f"no τ-bench {domain} data under {str(base)!r}: expected tau-bench/{domain}/users.json (exported layout) "
            f"or tau_bench/envs/{domain}/data/users.json (a τ-bench checkout); {pull_hint('tau-bench')}"
        )

    def tables(self) -> dict[str, dict[str, Any]]:
        folder = self.root / "data" if self.checkout else self.root
        return {name: check_table(read_json(folder / f"{name}.json"), str(folder / f"{name}.json")) for name in V1_TABLES[self.domain]}

    def policy(self) -> str:
        path = self.root / ("wiki.md" if self.checkout else "policy.md")
        return path.read_text(encoding="utf-8")

    def tasks(self, domain_name: str, split: str) -> list[Task]:
        """The split's tasks, in order (see :func:`v1_task`)."""
        if split not in V1_SPLITS[self.domain]:
            raise ValueError(f"τ-bench {self.domain} has no split {split!r}; it has {list(V1_SPLITS[self.domain])}")
        if not self.checkout:
            path = self.root / f"tasks_{split}.json"
            raws = read_json(path)
        else:
            path = self.root / f"tasks_{split}.py"
            if not path.is_file():
                raise TauDataError(f"τ-bench checkout has no task file {str(path)!r}")
            raws = tasks_from_python(path.read_text(encoding="utf-8"), str(path))
        return convert_tasks(raws, path, lambda i, raw: v1_task(domain_name, split, i, raw))


def tasks_from_python(source: str, filename: str = "<tasks>") -> list[dict[str, Any]]:
    """Read a τ-bench ``tasks_*.py`` file without running it: the first module-level list of ``Task(...)`` calls.

    ``Task(...)`` and ``Action(...)`` calls become dicts of their keyword arguments; everything else must be
    a plain literal (strings, numbers, lists, dicts), which is all those files contain.
    """
    tree = ast.parse(source, filename)
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.List) and value.elts and _call_name(value.elts[0]) == "Task":
            return [_literal(e, filename) for e in value.elts]
    raise TauDataError(f"{filename}: no module-level list of Task(...) found")


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        fn = node.func
        return fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
    return None


def _literal(node: ast.AST, filename: str) -> Any:
    name = _call_name(node)
    if name is not None:
        if name not in ("Task", "Action") or node.args:  # type: ignore[attr-defined]
            raise TauDataError(f"{filename}:{node.lineno}: unexpected call {name}(...) in a task file")
        return {kw.arg: _literal(kw.value, filename) for kw in node.keywords}  # type: ignore[attr-defined]
    if isinstance(node, ast.List):
        return [_literal(e, filename) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k, filename): _literal(v, filename) for k, v in zip(node.keys, node.values)}
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise TauDataError(f"{filename}:{getattr(node, 'lineno', '?')}: not a literal: {ast.unparse(node)[:80]}") from None


def v1_task(domain_name: str, split: str, index: int, raw: dict[str, Any]) -> Task:
    """A muarl Task from a τ-bench task. Its id is ``<split>-<index>``: τ-bench numbers tasks per split."""
    return Task(
        id=f"{split}-{index}",
        domain=domain_name,
        split=split,
        user=UserScenario(instruction=raw["instruction"], known_info={"user_id": raw["user_id"]}),
        actions=[Action(name=a["name"], kwargs=a.get("kwargs", {})) for a in raw["actions"]],
        outputs=list(raw.get("outputs") or []),
        metadata={"user_id": raw["user_id"], "index": index, **({"annotator": raw["annotator"]} if "annotator" in raw else {})},
    )


# ---------------------------------------------------------------- τ²-bench


def tau2_dir(domain: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    base = find_root("tau2-bench", data_dir)
    for folder in (base / "tau2-bench" / domain, base / domain):
        if (folder / "tasks.json").is_file():
            return folder
    raise TauDataError(
        f"no τ²-bench {domain} data under {str(base)!r}: expected tau2-bench/{domain}/tasks.json; {pull_hint('tau2-bench')}"
    )


def tau2_instruction(scenario: dict[str, Any]) -> str:
    """The user simulator's instructions, as the sections τ² gives its user."""
    ins = scenario.get("instructions") or {}
    if isinstance(ins, str):
        return ins
    parts = [
        ("Domain", ins.get("domain")),
        ("Reason for call", ins.get("reason_for_call")),
        ("Known info", ins.get("known_info")),
        ("Unknown info", ins.get("unknown_info")),
        ("Task instructions", ins.get("task_instructions")),
    ]
    return "\n".join(f"{title}:\n{text.strip()}" for title, text in parts if text)


def tau2_goal(scenario: dict[str, Any]) -> str:
    """What the caller opens with: the reason for the call and who they are (not the hidden task instructions)."""
    ins = scenario.get("instructions") or {}
    if isinstance(ins, str):
        return ""
    return " ".join(str(ins.get(k) or "").strip() for k in ("reason_for_call", "known_info")).strip()


def tau2_task(domain_name: str, split: str, raw: dict[str, Any]) -> Task:
    """A muarl Task from a τ² task; τ²'s evaluation criteria travel in ``metadata['tau2']``."""
    criteria = raw.get("evaluation_criteria") or {}
    basis = list(criteria.get("reward_basis") or ["DB"])
    scenario = raw.get("user_scenario") or {}
    communicate = list(criteria.get("communicate_info") or [])
    actions = criteria.get("actions") or []
    return Task(
        id=str(raw["id"]),
        domain=domain_name,
        split=split,
        user=UserScenario(persona=scenario.get("persona") or "", instruction=tau2_instruction(scenario), goal=tau2_goal(scenario)),
        actions=[Action(name=a["name"], kwargs=a.get("arguments") or {}, requestor=a.get("requestor") or "assistant") for a in actions],
        # τ-bench-style outputs only where τ² scores communication, so the plain outcome reward agrees with τ²
        outputs=communicate if "COMMUNICATE" in basis else [],
        metadata={
            "tau2": {
                "reward_basis": basis,
                "actions": [
                    {"action_id": a.get("action_id"), "name": a["name"], "arguments": a.get("arguments") or {},
                     "compare_args": a.get("compare_args"), "requestor": a.get("requestor", "assistant")}
                    for a in actions
                ],
                "communicate_info": communicate,
                "nl_assertions": list(criteria.get("nl_assertions") or []),
                # telecom: how the world is broken before the conversation, and what must hold after it
                "initialization_actions": list((raw.get("initial_state") or {}).get("initialization_actions") or []),
                "env_assertions": list(criteria.get("env_assertions") or []),
            },
            "description": raw.get("description"),
        },
    )


def tau2_task_sets(domain: str, data_dir: str | os.PathLike[str] | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(splits the data holds, task sets ``split_tasks.json`` names whose file is absent): ``train`` and ``test``,
    then each other set named there whose ``tasks_<set>.json`` is present (telecom's ``small``, ``full``)."""
    folder = tau2_dir(domain, data_dir)
    named = [s for s in read_json(folder / "split_tasks.json", dict) if s not in TAU2_SPLITS and s != "base"]  # base: train + test
    held = [s for s in named if (folder / f"tasks_{s}.json").is_file()]
    return (*TAU2_SPLITS, *held), tuple(s for s in named if s not in held)


def tau2_tasks(domain: str, domain_name: str, split: str, data_dir: str | os.PathLike[str] | None = None) -> list[Task]:
    """The split's tasks in ``split_tasks.json``'s order, from ``tasks_<split>.json`` if the data has that file (τ²'s
    own task sets), else from ``tasks.json``."""
    folder = tau2_dir(domain, data_dir)
    splits, absent = tau2_task_sets(domain, data_dir)
    if split not in splits:
        hint = f" ({folder / f'tasks_{split}.json'} is not in the data)" if split in absent else ""
        raise ValueError(f"τ²-bench {domain} has no split {split!r}{hint}; it has {list(splits)}")
    source = folder / (f"tasks_{split}.json" if split not in TAU2_SPLITS else "tasks.json")
    tasks = convert_tasks(read_json(source), source, lambda i, raw: tau2_task(domain_name, split, raw))
    by_id = {t.id: t for t in tasks}
    ids = read_json(folder / "split_tasks.json", dict).get(split, [])
    if not isinstance(ids, list):
        raise TauDataError(f"{folder / 'split_tasks.json'}: split {split!r} must be a list of task ids")
    missing = [str(i) for i in ids if str(i) not in by_id]
    if missing:
        raise TauDataError(f"{folder / 'split_tasks.json'}: split {split!r} names task ids not in {source.name}: {missing[:5]}")
    return [by_id[str(i)] for i in ids]
