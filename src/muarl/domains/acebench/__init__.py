"""ACEBench's normal and special categories as muarl domains, scored as ACEBench scores them.

Two domains, registered in :data:`muarl.domains.DOMAINS`, whose splits are ACEBench's sub-categories:

* ``acebench-normal``: ``single_turn_single_function``, ``single_turn_parallel_function``,
  ``multi_turn_user_adjust``, ``multi_turn_user_switch``, ``similar_api``, ``preference`` and the six ``atom_*``;
* ``acebench-special``: ``incomplete``, ``error_param``, ``irrelevant``.

Each entry is one task with its own functions (:meth:`AceBenchDomain.task_tools`): the user says the
conversation so far, and the agent's first message is the answer, as in ACEBench, where the model writes one
response per entry. The functions are never really run (ACEBench has no implementation of them): a call is
acknowledged and ends the episode. The domain's verdict is ACEBench's checker
(:func:`muarl.domains.acebench.checker.acebench_reward`), so the default ``outcome`` reward scores as ACEBench does; a ``normal_multi_turn`` entry is one step of a
conversation, and ACEBench's figure for those categories counts a conversation as solved when all its
steps are (``Task.metadata["conversation"]`` groups them, :mod:`muarl.evals.suite` does the counting).

The data is ACEBench's English release (``data_en/*.json`` and ``data_en/possible_answer/*.json``), read at
run time from ``<shared data>/acebench`` (see :func:`acebench_dir`); nothing of it ships with muarl.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muarl.domains.base import BaseData, Domain, EpisodeDefaults, State, Tool, ToolRegistry
from muarl.data.store import find_root, pull_hint
from muarl.errors import InputError
from muarl.domains.acebench.checker import acebench_reward
from muarl.types import Action, Message, RewardInfo, Task, ToolSpec, UserScenario

NORMAL_SPLITS = (
    "single_turn_single_function", "single_turn_parallel_function", "multi_turn_user_adjust", "multi_turn_user_switch",
    "similar_api", "preference", "atom_bool", "atom_enum", "atom_number", "atom_list", "atom_object_deep", "atom_object_short",
)
SPECIAL_SPLITS = ("incomplete", "error_param", "irrelevant")

ACKNOWLEDGED = "The call was recorded."

POLICY = """You are an assistant that answers by calling the functions you are given.
Read the conversation the user shows you and make the function call(s) the assistant should make next: call every function
the request needs, with the argument values the user gave (in the user's own words when the function does not say what format
to use), and leave out optional arguments the user did not mention. Answer with the calls only.
{time}{profile}"""

SPECIAL_POLICY = POLICY + """
When the calls cannot be made as asked, do not call anything; answer with one sentence instead:
- a value the user gave does not fit the function's definition: "There is incorrect value (VALUE) for the parameters (NAME) in the conversation history."
- the user left out a required argument: "Missing necessary parameters (NAME1, NAME2) for the api (API_NAME)"
- no function can do what the user asks: "Due to the limitations of the function, I cannot solve this problem."
Check the first case before the second."""


class AceBenchDataError(InputError, FileNotFoundError):
    """The ACEBench data is missing or unreadable; the message names the file."""


def acebench_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The ``data_en`` directory: under ``<dir>/acebench``, ``<dir>`` or ``<dir>/data_en`` for a given directory,
    else under ``$MUARL_DATA`` or the user's cache, where ``muarl data pull acebench`` puts it."""
    root = find_root("acebench", data_dir)
    for candidate in (root / "acebench" / "data_en", root / "data_en", root):
        if (candidate / "possible_answer").is_dir():
            return candidate
    raise AceBenchDataError(f"no ACEBench data under {str(root)!r}: expected acebench/data_en/ with possible_answer/; {pull_hint('acebench')}")


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """ACEBench's files hold one JSON object per line."""
    try:
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as exc:
        raise AceBenchDataError(f"{path}: not readable JSON lines ({type(exc).__name__}: {exc})") from None
    if not all(isinstance(r, dict) and "id" in r for r in rows):
        raise AceBenchDataError(f"{path}: every line must be a JSON object with an id")
    return rows


_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "objectArray": "array", "int": "integer", "any": "string"}


def json_schema(schema: Any) -> Any:
    """ACEBench's parameter schema as JSON Schema for an OpenAI tool (its ``dict``, ``float``, ``tuple``... renamed)."""
    if isinstance(schema, dict):
        out = {k: json_schema(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = _SCHEMA_TYPES.get(out["type"], out["type"])
        return out
    if isinstance(schema, list):
        return [json_schema(v) for v in schema]
    return schema


def _acknowledge(state: State, **arguments: Any) -> str:
    return ACKNOWLEDGED


def function_tools(functions: list[Mapping[str, Any]]) -> ToolRegistry:
    """An entry's functions as tools (the first of a repeated name wins). Calling one only acknowledges it and
    ends the episode: the call is the answer."""
    registry = ToolRegistry()
    for fn in functions:
        if fn["name"] in registry:
            continue
        params = json_schema(fn.get("parameters", fn.get("arguments")) or {"type": "object", "properties": {}})
        params.setdefault("properties", {})
        params["type"] = "object"
        required = params.get("required") if isinstance(params.get("required"), list) else []
        spec = ToolSpec(name=fn["name"], description=fn.get("description", ""), parameters=params, terminal=True)
        registry.add(Tool(fn=_acknowledge, spec=spec, required=frozenset(required), typed=False))
    return registry


@dataclass
class AceBenchDomain(Domain):
    """ACEBench entries, each with its own functions; see the module docstring."""

    data: Path = field(default=Path("."), repr=False)
    group: str = "normal"
    _task_tools: dict[str, ToolRegistry] = field(default_factory=dict, repr=False)

    def task_tools(self, task: Task) -> ToolRegistry:
        if task.id not in self._task_tools:
            self._task_tools[task.id] = function_tools(task.metadata["functions"])
        return self._task_tools[task.id]

    def system_prompt(self, task: Task | None = None) -> str:
        if task is None:
            return self.policy
        time = f"\nThe current time is {task.metadata['time']}." if task.metadata.get("time") else ""
        profile = f"\nThe user's profile: {task.metadata['profile']}" if task.metadata.get("profile") else ""
        return self.policy.format(time=time, profile=profile)

    def run_tool(self, state: State, name: str, arguments: Mapping[str, Any]) -> str:
        """Any offered function (the loop has checked the name against the task's) is acknowledged; an entry's
        functions have no implementation."""
        return ACKNOWLEDGED

    def gold_hash(self, task: Task) -> str:
        return self.new_state().hash()  # nothing is written: every episode ends in the seed state

    def verdict(self, task: Task, final_hash: str, messages: Sequence[Message]) -> RewardInfo:
        """ACEBench's checker on the agent's answer: the default ``outcome`` reward scores these domains as ACEBench does."""
        return acebench_reward(self, task, final_hash, messages)


def _tasks(data: Path, group: str, split: str) -> list[Task]:
    category = f"{group}_{split}"
    rows = _read_lines(data / f"data_{category}.json")
    answers = {a["id"]: a for a in _read_lines(data / "possible_answer" / f"data_{category}.json")}
    tasks = []
    for row in rows:
        if row["id"] not in answers:
            raise AceBenchDataError(f"{data / 'possible_answer'}/data_{category}.json has no answer for {row['id']}")
        possible = answers[row["id"]]["ground_truth"]
        metadata = {"category": category, "functions": row["function"], "possible_answer": possible,
                    "time": row.get("time", ""), "profile": row.get("profile", "")}
        if split.startswith("multi_turn"):
            metadata["conversation"] = row["id"].rsplit("_", 1)[0]
        actions, outputs = [], []
        if group == "normal":
            first = possible[0] if isinstance(possible, list) else possible
            names = {fn["name"] for fn in row["function"]}
            actions = [Action(name=key if key in names else re.sub(r"_\d+$", "", key), kwargs=args) for key, args in first.items()]
        else:
            from muarl.domains.acebench.checker import special_answer

            outputs = [special_answer(split, possible)]
        instruction = f"Here is our conversation so far:\n{row['question']}"
        tasks.append(Task(id=row["id"], domain=f"acebench-{group}", split=split, user=UserScenario(instruction=instruction),
                          actions=actions, outputs=outputs, metadata={**metadata, "single_response": True}))
    return tasks


def _load(group: str, splits: tuple[str, ...], policy: str, data_dir: str | os.PathLike[str] | None, options: dict[str, Any]) -> Domain:
    if options:
        raise TypeError(f"domain acebench-{group} takes no options, got {sorted(options)}")
    data = acebench_dir(data_dir)
    return AceBenchDomain(
        name=f"acebench-{group}", base=BaseData({}), tools=ToolRegistry(), policy=policy,
        task_loader=lambda split: _tasks(data, group, split), splits=splits, data=data, group=group,
        description=f"ACEBench {group} categories (one response per entry, scored by ACEBench's rules)",
        defaults=EpisodeDefaults(max_turns=1, parallel_tool_calls=True),  # one response, all of whose calls are scored
    )


def acebench_normal(data_dir: str | os.PathLike[str] | None = None, **options: Any) -> Domain:
    return _load("normal", NORMAL_SPLITS, POLICY, data_dir, options)


def acebench_special(data_dir: str | os.PathLike[str] | None = None, **options: Any) -> Domain:
    return _load("special", SPECIAL_SPLITS, SPECIAL_POLICY, data_dir, options)
