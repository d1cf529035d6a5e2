"""τ²-bench telecom: technical support where the user holds the phone (dual control).

The agent has the carrier's 13 tools (:mod:`.agent_tools`); the user has 30 tools of its own phone
(:mod:`.user_tools`) and calls them inside its turn, when the agent asks it to check or change something. Both
act on one state: the carrier's tables (``plans``, ``customers``, ``lines``, ``bills``, ``devices``, from
``db.toml``) and the ``phone`` table (the ``device`` from ``user_db.toml``, its ``surroundings`` and the VPN server
it connects to). After every call, either side's, the phone's view of the carrier's records is brought up to date
(:func:`.phone.sync_with_carrier`), as τ² does after every step.

Each task starts from the seed data broken its own way (its ``initialization_actions``, :mod:`.scenario`) and is
scored by τ²'s criteria: ``ENV_ASSERTION`` (checks of the final phone and records, run on the state reached by
replaying the trajectory's calls, both sides', from the task's initial state) and, for some, ``ACTION`` (each gold
action, the user's included, was called). The agent's system prompt is τ²'s: the main policy and the tech-support
manual. Splits are τ²'s ``train`` / ``test`` from ``split_tasks.json``, and its ``small`` and ``full`` task sets where
the data holds their files (:func:`~muarl.domains.tau.loader.tau2_task_sets`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from muarl.domains.base import BaseData, State, ToolError, ToolRegistry
from muarl.domains.tau import GREETING, TAU2_DEFAULTS, TauDomain, tau2_description
from muarl.domains.tau.loader import TauDataError, check_table, tau2_dir, tau2_task_sets, tau2_tasks
from muarl.domains.tau.telecom import scenario
from muarl.domains.tau.telecom.agent_tools import AGENT_TOOLS
from muarl.domains.tau.telecom.phone import (
    DEVICE_DEFAULTS,
    PHONE,
    SURROUNDINGS_DEFAULTS,
    VPN_DEFAULT_DETAILS,
    VPN_SERVER,
    merged,
    sync_with_carrier,
)
from muarl.domains.tau.telecom.user_tools import USER_TOOLS
from muarl.types import Message, Task, executed_calls

# each table's key field, and the fields a record may leave out (τ²'s defaults)
TABLES: dict[str, tuple[str, dict[str, Any]]] = {
    "plans": ("plan_id", {}),
    "customers": ("customer_id", {"account_status": "Pending Verification", "payment_methods": [], "line_ids": [], "bill_ids": [],
                                  "created_at": "2025-01-01T00:00:00", "last_extension_date": None, "goodwill_credit_used_this_year": 0.0}),
    "lines": ("line_id", {"status": "Pending Activation", "device_id": None, "data_used_gb": 0.0, "data_refueling_gb": 0.0,
                          "roaming_enabled": False, "contract_end_date": None, "last_plan_change_date": None,
                          "last_sim_replacement_date": None, "suspension_start_date": None}),
    "bills": ("bill_id", {"line_items": [], "status": "Draft"}),
    "devices": ("device_id", {"imei": None, "activated": False, "activation_date": None, "last_esim_transfer_date": None}),
}


def _read_toml(path: os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TauDataError(f"{path}: not a readable TOML file ({type(exc).__name__}: {exc})") from None


def load_tables(folder: os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The carrier's tables (keyed by id, every field present) and the phone, from ``db.toml`` and ``user_db.toml``."""
    db = _read_toml(os.path.join(folder, "db.toml"))
    tables: dict[str, dict[str, Any]] = {}
    for name, (key, defaults) in TABLES.items():
        rows = db.get(name, [])
        if not isinstance(rows, list) or not all(isinstance(r, dict) and key in r for r in rows):
            raise TauDataError(f"{folder}/db.toml: {name!r} must be a list of tables, each with a {key!r}")
        tables[name] = check_table({r[key]: {**defaults, **r} for r in rows}, f"{folder}/db.toml {name}")
    user = _read_toml(os.path.join(folder, "user_db.toml"))
    tables[PHONE] = {
        "device": merged(DEVICE_DEFAULTS, user.get("device") or {}),
        "surroundings": merged(SURROUNDINGS_DEFAULTS, user.get("surroundings") or {}),
        VPN_SERVER: dict(VPN_DEFAULT_DETAILS),
    }
    return tables


class TelecomDomain(TauDomain):
    """τ² telecom: user tools, a per-task initial state, the carrier sync after every call, env assertions."""

    def _synced(self, run: Any, state: State, name: str, arguments: Mapping[str, Any]) -> str:
        try:
            return run(state, name, arguments)
        finally:
            sync_with_carrier(state)

    def run_tool(self, state: State, name: str, arguments: Mapping[str, Any]) -> str:
        return self._synced(super().run_tool, state, name, arguments)

    def run_user_tool(self, state: State, name: str, arguments: Mapping[str, Any]) -> str:
        return self._synced(super().run_user_tool, state, name, arguments)

    def setup_key(self, task: Task) -> Any:
        return _criteria(task)["initialization_actions"]

    def new_state(self, task: Task | None = None) -> State:
        """The seed data, broken as ``task`` says (its initialization actions, each followed by the carrier sync)."""
        state = super().new_state()
        if task is None:
            return state
        for action in _criteria(task)["initialization_actions"]:
            scenario.lookup(scenario.SETUP, action, "initialization action")(state, **action.get("arguments", {}))
            sync_with_carrier(state)
        return state

    def replayed_state(self, task: Task, trajectory: Sequence[Message]) -> State:
        """The state ``trajectory`` leads to: its executed calls, both sides', run again from the task's start."""
        state = self.new_state(task)
        for requestor, call in executed_calls(list(trajectory)):
            try:
                (self.run_user_tool if requestor == "user" else self.run_tool)(state, call.name, call.parsed_arguments())
            except (ToolError, ValueError):
                continue  # refused or malformed: it changed nothing, in the episode as here
        return state

    def env_assertions(self, task: Task, trajectory: Sequence[Message]) -> dict[str, bool]:
        state = self.replayed_state(task, trajectory)
        return {f"{i}:{a.get('func_name')}": scenario.holds(state, a) for i, a in enumerate(_criteria(task)["env_assertions"])}


def _criteria(task: Task) -> dict[str, Any]:
    criteria = task.metadata.get("tau2")
    if criteria is None or "initialization_actions" not in criteria:
        raise ValueError(f"task {task.id!r} is not a τ² telecom task (no metadata['tau2'] set-up)")
    return criteria


def tau2_telecom(data_dir: str | os.PathLike[str] | None = None, **options: Any) -> TauDomain:
    """τ²-bench telecom: 13 agent tools, 30 user tools, tasks train (74) / test (40), and τ²'s small (20) and full
    (2,285) task sets where the data holds them (``tasks_small.json``, ``tasks_full.json``)."""
    if options:
        raise TypeError(f"domain 'tau2-telecom' takes no options, got {sorted(options)}")
    folder = tau2_dir("telecom", data_dir)
    policy = "\n".join([
        "<main_policy>", (folder / "main_policy.md").read_text(encoding="utf-8"), "</main_policy>",
        "<tech_support_policy>", (folder / "tech_support_manual.md").read_text(encoding="utf-8"), "</tech_support_policy>",
    ])

    def load_tasks(split: str) -> list[Task]:
        return tau2_tasks("telecom", "tau2-telecom", split, data_dir)

    return TelecomDomain(
        name="tau2-telecom", base=BaseData(load_tables(folder)), tools=ToolRegistry.from_functions(AGENT_TOOLS),
        user_tools=ToolRegistry.from_functions(USER_TOOLS), policy=policy, task_loader=load_tasks,
        splits=tau2_task_sets("telecom", data_dir)[0], greeting=GREETING, defaults=TAU2_DEFAULTS,
        description=tau2_description("τ²-bench telecom, dual control", "telecom", data_dir),
    )
