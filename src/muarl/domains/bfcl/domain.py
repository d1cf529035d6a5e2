"""BFCL v3 multi-turn categories as muarl domains: tasks from the data, tools from its function docs.

Each BFCL entry becomes a :class:`~muarl.types.Task` whose user follows a fixed script (the entry's user turns,
said one per agent reply by the scripted user) and whose gold actions are the possible answer's calls, each
tagged with its turn (``Action.request``), so the oracle replays them turn by turn. The agent is offered the
functions of the entry's classes, with the schemas BFCL gives function-calling models (its types mapped to
JSON schema ones). In ``miss_func`` the held-out functions are not offered at first; at the turn the data
names, the user's message announces them with their documentation (muarl's tool list is fixed for an
episode, so they arrive in the message, as in BFCL's prompting mode; they are in the task's tools, unlisted,
so they can be called).

The verdict is BFCL's own (see :mod:`muarl.domains.bfcl.checker`), through :meth:`BfclDomain.verdict`, so
the default ``outcome`` reward scores these domains as BFCL does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from muarl.domains.base import BaseData, Domain, EpisodeDefaults, Tool, ToolError, ToolRegistry
from muarl.domains.bfcl import upstream
from muarl.domains.bfcl.calls import parse_call
from muarl.domains.bfcl.checker import judge
from muarl.domains.bfcl.world import BfclState, bind_arguments
from muarl.errors import InputError
from muarl.types import Action, Message, RewardInfo, Task, ToolSpec, UserScenario

POLICY = """You help a user by calling the functions you are given; the user speaks over several turns.
In each turn, keep calling functions (one or more per message) until the user's request is done, then reply in
plain text: that ends your turn. If no function can do what the user asks, or the request lacks a value a
function needs, say so in your reply instead of guessing."""

MAX_TURNS = 60  # agent turns: the longest entry's possible answer, one call per message, plus a reply per user turn, is 37

HELD_OUT_MESSAGE = "You can now also use these functions:\n{functions}\nPlease go on with my request."

# BFCL's parameter types that JSON schema spells differently (BFCL maps them the same way for FC models)
_JSON_TYPE = {"dict": "object", "float": "number", "tuple": "array", "any": "string", "list": "array", "bool": "boolean"}


def json_schema(doc: Any) -> Any:
    """A BFCL parameter schema (``dict``, ``float``... types) as JSON schema, recursively."""
    if isinstance(doc, list):
        return [json_schema(d) for d in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: json_schema(v) for k, v in doc.items()}
    if isinstance(doc.get("type"), str):
        out["type"] = _JSON_TYPE.get(doc["type"], doc["type"])
    if isinstance(doc.get("properties"), dict):
        out["properties"] = {name: json_schema(p) for name, p in doc["properties"].items()}
    return out


def tool_spec(doc: dict[str, Any]) -> ToolSpec:
    return ToolSpec(name=doc["name"], description=doc.get("description", ""), parameters=json_schema(doc["parameters"]))


def _call_backend(name: str, state: BfclState, **arguments: Any) -> str:
    return state.run(name, arguments)


@dataclass
class BfclDomain(Domain):
    """One BFCL multi-turn category. Its states are per entry (:meth:`new_state` needs the task)."""

    category: str = ""
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # BFCL entry (with its ground truth) by id
    class_of: dict[str, str] = field(default_factory=dict)  # function name -> BFCL class
    _task_tools: dict[str, ToolRegistry] = field(default_factory=dict, repr=False)

    def new_state(self, task: Task | None = None) -> BfclState:  # type: ignore[override]
        if task is None:
            raise InputError(f"{self.name}: a BFCL world starts from its entry's configuration; it needs the task "
                             "(serving BFCL domains over MCP is not supported)")
        entry = self.entry(task)
        return BfclState(entry["initial_config"], entry["involved_classes"], long_context=self.category == "long_context")

    def entry(self, task: Task) -> dict[str, Any]:
        try:
            return self.entries[task.id]
        except KeyError:
            raise InputError(f"{self.name}: no BFCL entry {task.id!r}") from None

    def task_tools(self, task: Task) -> ToolRegistry:
        """The functions of the entry's classes; miss_func's held-out ones run but are unlisted (the user's message
        announces them at their turn)."""
        if task.id not in self._task_tools:
            classes = set(task.metadata["involved_classes"])
            held_out = {name for names in task.metadata["held_out"].values() for name in names}
            self._task_tools[task.id] = ToolRegistry((t for t in self.tools if self.class_of[t.name] in classes), unlisted=held_out)
        return self._task_tools[task.id]

    def run_tool(self, state: BfclState, name: str, arguments: dict[str, Any]) -> str:  # type: ignore[override]
        """Call the backend with the model's arguments as they are (BFCL checks neither names nor types first:
        whatever the method refuses, by raising, is the error the agent sees)."""
        if name not in self.tools:
            raise ToolError(f"unknown tool {name!r}; available tools: {self.tools.names()}")
        try:
            return state.run(name, arguments)
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - the backend refused the call
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    def verdict(self, task: Task, final_hash: str, messages: Sequence[Message]) -> RewardInfo:
        return judge(self, task, final_hash, messages)

    def gold_hash(self, task: Task) -> str:
        """Hash of the entry's state after all its possible answer's calls (a failing call is part of it, as in BFCL)."""
        h = self._gold_hashes.get(task.id)
        if h is None:
            state = self.new_state(task)
            for action in task.actions:
                state.result(action.name, action.kwargs)
            h = self._gold_hashes[task.id] = state.hash()
        return h


def _turn_texts(entry: dict[str, Any], docs: dict[str, dict[str, Any]]) -> list[str]:
    texts = []
    for i, turn in enumerate(entry["question"]):
        added = entry.get("missed_function", {}).get(str(i))
        if added and not turn:
            specs = [tool_spec(docs[name]).to_openai() for name in added]
            texts.append(HELD_OUT_MESSAGE.format(functions=json.dumps(specs, ensure_ascii=False)))
        else:
            texts.append("\n".join(m["content"] for m in turn))
    return texts


def _task(entry: dict[str, Any], domain_name: str, category: str, docs: dict[str, dict[str, Any]]) -> Task:
    classes = entry["involved_classes"]
    actions = []
    for turn, calls in enumerate(entry["ground_truth"]):
        for text in calls:
            call = parse_call(text)
            actions.append(Action(name=call.name, kwargs=bind_arguments(classes, call.name, call.args, call.kwargs), request=turn))
    script = _turn_texts(entry, docs)
    return Task(
        id=entry["id"], domain=domain_name, split="test",
        user=UserScenario(instruction="\n".join(t for t in script if t), script=script),
        actions=actions,
        metadata={"category": category, "involved_classes": classes, "turns": len(script),
                  "held_out": entry.get("missed_function", {})},
    )


def load_category(category: str, domain_name: str) -> BfclDomain:
    """The BFCL multi-turn category (a value of :data:`muarl.domains.bfcl.BFCL_SUITE`) as a domain named ``domain_name``."""
    docs_by_class = upstream.function_docs()
    docs = {d["name"]: d for ds in docs_by_class.values() for d in ds}
    class_of = {d["name"]: cls for cls, ds in docs_by_class.items() for d in ds}
    entries = {e["id"]: e for e in upstream.entries(category)}
    tools = ToolRegistry(
        Tool(fn=partial(_call_backend, name), spec=tool_spec(doc), required=frozenset(doc["parameters"].get("required", [])), typed=False)
        for name, doc in docs.items()
    )

    def tasks(split: str) -> list[Task]:
        return [_task(e, domain_name, category, docs) for e in entries.values()]

    return BfclDomain(name=domain_name, base=BaseData({}), tools=tools, policy=POLICY, task_loader=tasks, splits=("test",),
                      description=f"BFCL v3 multi-turn, {category} ({len(entries)} entries, bfcl-eval {upstream.PINNED_VERSION})",
                      category=category, entries=entries, class_of=class_of,
                      defaults=EpisodeDefaults(max_turns=MAX_TURNS, parallel_tool_calls=True))
