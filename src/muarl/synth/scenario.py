"""A synthesis scenario defined only by data: tool JSON schemas, a policy, a small seed database, tasks.

A YAML or JSON file (see ``examples/scenarios/``) becomes a :class:`~muarl.domains.base.Domain` whose
tools have schemas but no code: they are answered by a tool LLM (:mod:`muarl.synth.simulated_tools`) or
by an MCP server. ``seed_db`` is inline or the path of a JSON file relative to the scenario file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from muarl.domains.base import BaseData, Domain, Tool, ToolError, ToolRegistry
from muarl.types import Task, ToolKind, ToolSpec, UserScenario


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioTool(_Strict):
    name: str
    description: str
    kind: ToolKind = "generic"  # read / write decide the confirmation and identification rules
    terminal: bool = False
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}, "required": []})


class ScenarioTask(_Strict):
    id: str
    instruction: str  # what the (LLM) user is told to do, in natural language
    persona: str = ""
    known_info: dict[str, str] = Field(default_factory=dict)
    goal: str = ""
    split: str = "train"


class Scenario(_Strict):
    name: str
    description: str = ""
    policy: str  # the agent's system prompt
    tools: list[ScenarioTool]
    seed_db: dict[str, dict[str, Any]] | str = Field(default_factory=dict)  # {table: {key: record}} or a JSON path
    identification_tools: list[str] = Field(default_factory=list)  # read tools that identify the user
    greeting: str | None = None
    tasks: list[ScenarioTask]

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tool names in {names}")
        unknown = [n for n in self.identification_tools if n not in names]
        if unknown:
            raise ValueError(f"identification_tools {unknown} are not among the tools {names}")
        if not self.tasks:
            raise ValueError("a scenario needs at least one task")
        return self

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario file; errors name the file and the field to fix."""
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))  # YAML is a superset of JSON
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cannot read scenario {path}: {exc}") from None
        try:
            scenario = cls.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(f"invalid scenario {path}:\n{exc}") from None
        if isinstance(scenario.seed_db, str):
            db_path = path.parent / scenario.seed_db
            try:
                scenario.seed_db = json.loads(db_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(f"cannot read seed_db {db_path} of scenario {path}: {exc}") from None
        return scenario

    def tasks_as_muarl(self) -> list[Task]:
        return [
            Task(
                id=t.id, domain=self.name, split=t.split,
                user=UserScenario(instruction=t.instruction, persona=t.persona, known_info=t.known_info, goal=t.goal),
            )
            for t in self.tasks
        ]

    def domain(self) -> Domain:
        """The scenario as a Domain: schemas for the agent and the rules; calls need a simulating backend."""
        tools = ToolRegistry(
            Tool(
                fn=_simulated_only(t.name),
                spec=ToolSpec(name=t.name, description=t.description, parameters=t.parameters, kind=t.kind, terminal=t.terminal),
                required=frozenset(t.parameters.get("required", [])),
            )
            for t in self.tools
        )
        tasks = self.tasks_as_muarl()
        splits = tuple(dict.fromkeys(t.split for t in tasks))
        seed = self.seed_db if isinstance(self.seed_db, dict) else {}
        return Domain(
            name=self.name, base=BaseData(seed), tools=tools, policy=self.policy, description=self.description,
            greeting=self.greeting, splits=splits, task_loader=lambda split: [t for t in tasks if t.split == split],
        )


def _simulated_only(name: str) -> Any:
    def run(state: Any, **arguments: Any) -> str:
        raise ToolError(f"tool {name!r} is defined by data only; run it with the simulated (tool LLM) or an MCP backend")

    return run
