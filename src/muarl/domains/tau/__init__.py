"""τ-bench and τ²-bench retail and airline worlds, scored as the benchmarks score them.

Four domains, registered in :data:`muarl.domains.DOMAINS`:

* ``tau-retail`` (splits train / dev / test) and ``tau-airline`` (test): τ-bench's tools, data and tasks; the
  reward is muarl's outcome reward, which is τ-bench's (the database after the episode equals the one the
  gold actions produce, and every required output was said to the user).
* ``tau2-retail`` and ``tau2-airline`` (train / test, from τ²'s ``split_tasks.json``): τ²'s tools and tasks; score
  them with the ``tau2`` reward (:mod:`muarl.domains.tau.tau2_criteria`), which applies τ²'s DB, COMMUNICATE, ACTION
  and NL_ASSERTION criteria as each task's ``reward_basis`` asks.

The data is read at run time from a directory (see :mod:`muarl.domains.tau.loader`); nothing is shipped.
The agent's system prompt is the domain policy; the agent opens with τ-bench's greeting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from muarl.domains.base import (
    ArgumentError,
    BaseData,
    Domain,
    EpisodeDefaults,
    GoldReplayError,
    State,
    ToolError,
    ToolRegistry,
)
from muarl.domains.tau import airline_tools, retail_tools, tau2_tools
from muarl.domains.tau.loader import (
    V1_SPLITS,
    V1Source,
    check_table,
    read_json,
    tau2_dir,
    tau2_task_sets,
    tau2_tasks,
)
from muarl.types import Action, CheckVerdict, Episode, Task

GREETING = "Hi! How can I help you today?"

DataDir = str | os.PathLike[str] | None

# τ² scores an episode with its own criteria (DB, COMMUNICATE, ACTION, ENV, NL assertions; see
# muarl.domains.tau.tau2_criteria), which the exact final-state equality of the outcome reward does not match: a harmless
# extra read or refused call fails it, a missing transfer_to_human_agents passes it
TAU2_DEFAULTS = EpisodeDefaults(reward="tau2")


class TauDomain(Domain):
    """A τ world. Its gold replay keeps going past refused calls, as both benchmarks do, and runs each action on
    the side that takes it (the user's phone for τ² telecom's user actions).

    Some gold action lists contain calls the tools refuse (a product id that does not exist, a gift card that
    cannot pay); τ-bench and τ² show the refusal and carry on, so the refusal is part of the gold trajectory and
    changes nothing. Arguments the tools cannot take (an unknown or missing name; in τ², a value of the wrong
    type) still fail loudly: that would be our bug.
    """

    def conduct_checks(self, task: Task, episode: Episode) -> list[CheckVerdict]:
        """τ² tasks' own assertions, as the τ² reward recorded them in the episode (none when it was scored
        otherwise): ``tau2_actions`` (every expected call was made) and ``tau2_nl_assertions`` (the judge found
        every natural-language assertion met; not applicable when no judge graded them)."""
        details = episode.reward.details if episode.reward is not None else {}
        if "tau2" not in task.metadata or "reward_basis" not in details:
            return []
        verdicts = []
        actions = details.get("actions") or {}
        missed = [name for name, made in actions.items() if not made]
        verdicts.append(CheckVerdict(check="tau2_actions", status="fail" if missed else "pass" if actions else "not_applicable",
                                     detail=f"expected call(s) not made: {missed[:3]}" if missed else f"{len(actions)} expected call(s) made"))
        graded = details.get("nl_assertions") or []
        unmet = [g for g in graded if not g.get("met")]
        verdicts.append(CheckVerdict(
            check="tau2_nl_assertions", status="fail" if unmet else "pass" if graded else "not_applicable",
            detail=(f"not met: {unmet[0].get('assertion', '')[:120]!r} ({unmet[0].get('reasoning', '')[:120]})" if unmet
                    else f"{len(graded)} assertion(s) met" if graded else "no judge graded the assertions")))
        return verdicts

    def replay(self, state: State, actions: Iterable[Action]) -> list[str]:
        outputs = []
        for i, action in enumerate(actions):
            by_user = action.requestor == "user"
            if action.name not in (self.user_tools if by_user else self.tools):
                raise GoldReplayError(f"gold action {i} calls {action.name!r}, which {self.name}'s {action.requestor} does not have")
            try:
                outputs.append((self.run_user_tool if by_user else self.run_tool)(state, action.name, action.kwargs))
            except ArgumentError as exc:
                raise GoldReplayError(f"gold action {i} ({action.name} {action.kwargs}) does not fit the tool: {exc}") from None
            except ToolError as exc:
                outputs.append(f"Error: {exc}")
        return outputs


def _no_options(name: str, options: dict[str, Any]) -> None:
    if options:
        raise TypeError(f"domain {name!r} takes no options, got {sorted(options)}")


def _v1_domain(name: str, domain: str, tools: list[Callable[..., Any]], data_dir: DataDir) -> Domain:
    """A τ-bench world. Its tools are untyped (see :class:`muarl.domains.base.Tool`): τ-bench hands the model's
    JSON values to its Python tools unchecked, and some wrongly typed values go through and change the records
    (``item_ids: ""`` requests a return of nothing; an integer zip is stored), so refusing them up front would
    disagree with the benchmark that scores the agent."""
    source = V1Source.find(domain, data_dir)

    def load_tasks(split: str) -> list[Task]:
        return source.tasks(name, split)

    return TauDomain(
        name=name, base=BaseData(source.tables()), tools=ToolRegistry.from_functions(tools, typed=False), policy=source.policy(),
        task_loader=load_tasks, splits=V1_SPLITS[domain], greeting=GREETING, confirms_writes=True,
        description=f"τ-bench {domain} (data: {source.root})",
    )


def tau_retail(data_dir: DataDir = None, **options: Any) -> Domain:
    """τ-bench retail: 16 tools, tasks train (500) / dev (20) / test (115)."""
    _no_options("tau-retail", options)
    return _v1_domain("tau-retail", "retail", retail_tools.TOOLS, data_dir)


def tau_airline(data_dir: DataDir = None, **options: Any) -> Domain:
    """τ-bench airline: 14 tools, tasks test (50)."""
    _no_options("tau-airline", options)
    return _v1_domain("tau-airline", "airline", airline_tools.TOOLS, data_dir)


def tau2_description(title: str, domain: str, data_dir: DataDir) -> str:
    """What ``muarl tasks list`` says of a τ² world: where its data is, and which of τ²'s task sets it lacks."""
    absent = tau2_task_sets(domain, data_dir)[1]
    lacks = f"; τ² task sets not in it: {', '.join(f'{s} (tasks_{s}.json)' for s in absent)}" if absent else ""
    return f"{title} (data: {tau2_dir(domain, data_dir)}{lacks})"


def _tau2_domain(name: str, domain: str, tables: dict[str, Any], tools: list[Callable[..., Any]], data_dir: DataDir) -> Domain:
    folder = tau2_dir(domain, data_dir)
    return TauDomain(
        name=name, base=BaseData(tables), tools=ToolRegistry.from_functions(tools),
        policy=(folder / "policy.md").read_text(encoding="utf-8"),
        task_loader=lambda split: tau2_tasks(domain, name, split, data_dir), splits=tau2_task_sets(domain, data_dir)[0],
        greeting=GREETING, confirms_writes=True, description=tau2_description(f"τ²-bench {domain}", domain, data_dir),
        defaults=TAU2_DEFAULTS,
    )


def tau2_retail(data_dir: DataDir = None, **options: Any) -> Domain:
    """τ²-bench retail: its own database (``db.json``), 16 tools, tasks train / test."""
    _no_options("tau2-retail", options)
    path = tau2_dir("retail", data_dir) / "db.json"
    db = read_json(path, dict)
    tables = {t: check_table(db.get(t), f"{path} table {t!r}") for t in ("users", "orders", "products")}
    return _tau2_domain("tau2-retail", "retail", tables, tau2_tools.RETAIL_TOOLS, data_dir)


def tau2_airline(data_dir: DataDir = None, **options: Any) -> Domain:
    """τ²-bench airline: τ-bench's airline database, 14 tools, tasks train / test."""
    _no_options("tau2-airline", options)
    tables = V1Source.find("airline", data_dir).tables()
    return _tau2_domain("tau2-airline", "airline", tables, tau2_tools.AIRLINE_TOOLS, data_dir)
