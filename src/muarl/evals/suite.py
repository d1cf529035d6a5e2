"""Benchmark suites: named lists of categories, each a domain split run through the normal runner and scored.

A suite is data: :data:`SUITES` maps its name to :class:`SuiteEntry` rows (category, domain, split, and how an
episode of it runs and is scored). Running one (:func:`run_suite`) goes through ``rollout.runner.run_many``,
the path ``muarl rollout`` takes, so episodes land in ``OUT/<category>/episodes.jsonl`` and a run can be
resumed. A category whose domain is not installed (registered in :data:`muarl.domains.DOMAINS` or by a
plugin) or whose data is absent is reported as skipped with the reason, never silently dropped; adding a
benchmark's categories to a suite is adding rows here once its domains exist.

A category's accuracy is the mean over its *units* of their success, with a 95% bootstrap interval over
units: a unit is a task, except in ACEBench's normal multi-turn categories, where it is a conversation (its
steps are tasks, and it counts as solved when all of them are, as ACEBench scores it); *process accuracy*
is then the mean share of a conversation's steps solved (for agent entries, the reward's own process accuracy).
ACEBench's overall score weights its groups' unweighted category means as its repository does: normal 0.578,
special 0.2676, agent 0.1545; it is given only when every category of the three ran on all its tasks (a run with
``--limit`` that cuts a category marks its row ``partial: the first N of M tasks``, and gives no overall score).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from muarl.domains import DOMAINS, load_domain, plugin_domains
from muarl.domains.base import Domain
from muarl.domains.bfcl import BFCL_SUITE, MAX_TURNS
from muarl.errors import InputError
from muarl.evals.conduct import conduct
from muarl.evals.paired import paired_bootstrap_ci
from muarl.models.base import Agent
from muarl.rollout.runner import prompts_beyond_context, run_many
from muarl.rollout.store import EPISODES_FILE, atomic_write_text, latest_per_key, read_episodes
from muarl.rollout.world import WorldConfig, build_world
from muarl.types import Episode, Task
from muarl.users.base import UserSimulator


@dataclass(frozen=True)
class SuiteEntry:
    """One category of a suite: which tasks, how their episodes run, how they are scored and grouped."""

    category: str
    domain: str
    split: str | None = None  # None: the domain's "test" split, else its last one
    max_turns: int | None = None  # this many whatever the run's (one response; BFCL's budget); None: the run's, else the domain's
    unit: Literal["task", "conversation"] = "task"  # conversation: Task.metadata["conversation"] groups the tasks
    group: str | None = None  # the suite's score group (ACEBench: normal / special / agent)
    process: bool = False  # report process accuracy (a conversation's share of steps, or the reward's process_accuracy)
    user: str | None = None  # a user spec this category always uses, whatever the run's (ACEBench multi-step: scripted)


def _acebench() -> list[SuiteEntry]:
    from muarl.domains.acebench import NORMAL_SPLITS, SPECIAL_SPLITS  # names only: no data is read

    one = {"max_turns": 1}  # one response, scored by the domains' own verdict (ACEBench's checker)
    rows = [SuiteEntry(f"normal_{s}", "acebench-normal", s, group="normal", **one,
                       **({"unit": "conversation", "process": True} if s.startswith("multi_turn") else {})) for s in NORMAL_SPLITS]
    rows += [SuiteEntry(f"special_{s}", "acebench-special", s, group="special", **one) for s in SPECIAL_SPLITS]
    agent = {"group": "agent", "process": True}
    rows += [SuiteEntry("agent_multi_turn", "acebench-agent", "multi_turn", **agent),
             SuiteEntry("agent_multi_step", "acebench-agent", "multi_step", user="scripted", **agent)]
    return rows


SUITES: dict[str, list[SuiteEntry]] = {
    "acebench": _acebench(),
    "tau": [SuiteEntry(name, name) for name in ("tau-retail", "tau-airline", "tau2-retail", "tau2-airline", "tau2-telecom")],
    "bfcl": [SuiteEntry(name, name, max_turns=MAX_TURNS, user="scripted") for name in BFCL_SUITE],  # as long as BFCL needs
}

# a suite's overall score: weights of its groups' unweighted category means (ACEBench's repository)
OVERALL_WEIGHTS: dict[str, dict[str, float]] = {"acebench": {"normal": 0.578, "special": 0.2676, "agent": 0.1545}}


def suite_entries(name: str, categories: Sequence[str] = ()) -> list[tuple[str, SuiteEntry]]:
    """(suite, entry) rows of a suite (``all``: every suite), only the named categories if any are given."""
    names = list(SUITES) if name == "all" else [name]
    if any(n not in SUITES for n in names):
        raise InputError(f"unknown suite {name!r}; suites: {sorted(SUITES) + ['all']}")
    rows = [(n, e) for n in names for e in SUITES[n]]
    if categories:
        unknown = sorted(set(categories) - {e.category for _, e in rows})
        if unknown:
            raise InputError(f"no category {unknown} in suite {name!r}; its categories: {[e.category for _, e in rows]}")
        rows = [(n, e) for n, e in rows if e.category in categories]
    return rows


@dataclass
class CategoryResult:
    suite: str
    category: str
    domain: str
    split: str | None
    status: Literal["ran", "skipped"]
    reason: str = ""  # why it was skipped
    incomplete: str = ""  # set when the run covered only part of the category's tasks (--limit): then no overall score
    warning: str = ""  # said before the category ran: its system turn does not fit the agent's context
    group: str | None = None
    unit: str = "task"
    n_tasks: int = 0
    n_units: int = 0  # units scored (tasks, or conversations)
    n_errored: int = 0  # errored episodes (never scored)
    accuracy: float | None = None
    ci95: tuple[float, float] | None = None
    process_accuracy: float | None = None  # see SuiteEntry.process
    checks: dict[str, float] = field(default_factory=dict)  # pass rate of each trajectory check over the episodes it applies to
    user_faults: int = 0  # failed episodes whose failure the attribution gives to the simulated user
    episodes: str = ""


@dataclass
class SuiteReport:
    categories: list[CategoryResult] = field(default_factory=list)
    agent: str = ""
    user: str = ""

    def groups(self, suite: str) -> dict[str, float]:
        """The unweighted mean accuracy of each group whose categories all ran."""
        members: dict[str, list[CategoryResult]] = defaultdict(list)
        for c in self.categories:
            if c.suite == suite and c.group:
                members[c.group].append(c)
        return {g: sum(c.accuracy for c in cs) / len(cs) for g, cs in members.items()
                if all(c.status == "ran" and c.accuracy is not None for c in cs)}

    def overall(self, suite: str) -> tuple[float | None, str]:
        """The suite's weighted overall score, or None and why it cannot be given."""
        weights = OVERALL_WEIGHTS.get(suite)
        if not weights:
            return None, "this suite has no overall score"
        groups = self.groups(suite)
        missing = [g for g in weights if g not in groups]
        if missing:
            return None, f"group(s) {missing} did not run in full"
        partial = [c for c in self.categories if c.suite == suite and c.group in weights and c.incomplete]
        if partial:
            return None, f"{len(partial)} category(ies) ran on part of their tasks ({partial[0].category}: {partial[0].incomplete})"
        return sum(w * groups[g] for g, w in weights.items()), ""

    def to_json(self) -> dict[str, Any]:
        suites = sorted({c.suite for c in self.categories})
        return {
            "agent": self.agent, "user": self.user,
            "categories": [asdict(c) for c in self.categories],
            "suites": {s: {"groups": self.groups(s), "overall": self.overall(s)[0], "overall_note": self.overall(s)[1]} for s in suites},
        }


def _split(entry: SuiteEntry, domain: Domain) -> str:
    if entry.split:
        return entry.split
    return "test" if "test" in domain.splits else domain.splits[-1]


def _process(episode: Episode) -> float:
    """An episode's process score: the reward's ``process_accuracy`` if it gives one, else its success."""
    given = episode.reward.details.get("process_accuracy") if episode.reward else None
    return float(episode.succeeded) if given is None else given


def _unit_scores(episodes: list[Episode], units: dict[str, str]) -> tuple[list[float], list[float]]:
    """(end, process) score per unit: a unit's end score is the share of trials in which every one of its tasks
    succeeded, its process score the mean process score of its finished episodes."""
    by_unit: dict[str, dict[int, list[Episode]]] = defaultdict(lambda: defaultdict(list))
    for ep in episodes:
        if not ep.errored:
            by_unit[units.get(ep.task_id, ep.task_id)][ep.trial].append(ep)
    end, process = [], []
    for trials in by_unit.values():
        end.append(sum(all(e.succeeded for e in eps) for eps in trials.values()) / len(trials))
        flat = [_process(e) for eps in trials.values() for e in eps]
        process.append(sum(flat) / len(flat))
    return end, process


def score_category(result: CategoryResult, entry: SuiteEntry, tasks: Sequence[Task], episodes: list[Episode], bootstrap: int) -> None:
    """Fill ``result``'s metrics from the category's episodes (the latest per task and trial)."""
    units = {t.id: t.metadata.get("conversation", t.id) if entry.unit == "conversation" else t.id for t in tasks}
    episodes = [ep for ep in latest_per_key(episodes) if ep.task_id in units]
    end, process = _unit_scores(episodes, units)
    result.n_tasks, result.n_units = len(tasks), len(end)
    result.n_errored = sum(ep.errored for ep in episodes)
    if end:
        result.accuracy = sum(end) / len(end)
        result.ci95 = paired_bootstrap_ci(end, draws=bootstrap) if bootstrap else None
        if entry.process:
            result.process_accuracy = sum(process) / len(process)
    behaviour = conduct(episodes, bootstrap=0)
    result.checks = {r.check: r.rate for r in behaviour.checks if r.applicable}
    result.user_faults = behaviour.labels["user"]


async def run_suite(
    rows: Sequence[tuple[str, SuiteEntry]], agent: Agent, user: UserSimulator, out: Path, *,
    world: WorldConfig | None = None, limit: int | None = None, trials: int = 1, concurrency: int = 8, seed: int = 0,
    resume: bool = False, bootstrap: int = 1000, progress: bool = True, warn: Callable[[str, str], None] | None = None,
) -> SuiteReport:
    """Run each category (skipping, with the reason, those whose domain or data is absent) and score it.

    ``world`` holds what every category shares (data directory, the user's settings, timeout, retries, turn
    limit) and ``user`` is the user built from it; each category's world is that section with the entry's
    domain and split on top (and its own user, if it names one), built by :func:`~muarl.rollout.world.build_world`
    as every command builds its world. Each runs and is scored with its domain's defaults (τ²'s criteria, BFCL's
    turn budget and parallel calls; see :class:`~muarl.domains.base.EpisodeDefaults`); ``world.max_turns``, if
    set, replaces the turn budget of the categories that do not fix their own (one response; BFCL's).
    ``warn(category, text)`` is told, before a category runs, when its tasks' system turn fills the agent's
    context (:func:`~muarl.rollout.runner.prompts_beyond_context`)."""
    world = world or WorldConfig()
    report = SuiteReport(agent=agent.name, user=user.name)
    installed = set(DOMAINS) | set(plugin_domains())
    for suite, entry in rows:
        result = CategoryResult(suite, entry.category, entry.domain, entry.split, "skipped", group=entry.group, unit=entry.unit)
        report.categories.append(result)
        if entry.domain not in installed:
            result.reason = f"domain {entry.domain!r} is not installed"
            continue
        try:
            result.split = _split(entry, load_domain(entry.domain, world.data_dir))
            cfg = world.model_copy(update={
                "domain": entry.domain, "split": result.split, "limit": limit, "reward": None, "parallel_tool_calls": None,
                "max_turns": entry.max_turns or world.max_turns,  # reward and parallel calls: the domain's
                **({"user": entry.user} if entry.user else {}),
            })
            built = build_world(cfg, concurrency, user=None if entry.user else user)
            every = len(built.domain.tasks(result.split))
            if len(built.tasks) < every:
                result.incomplete = f"the first {len(built.tasks)} of {every} tasks"
        except (InputError, FileNotFoundError) as exc:
            result.reason = " ".join(str(exc).split())
            continue
        result.warning = prompts_beyond_context(built.domain, built.tasks, agent) or ""
        if result.warning and warn is not None:
            warn(entry.category, result.warning)
        path = out / entry.category / EPISODES_FILE
        try:
            await run_many(built.domain, built.tasks, agent, built.user, trials=trials, concurrency=concurrency, out=path, resume=resume,
                           seed=seed, config=built.loop, reward_fn=built.reward_fn, backend_factory=built.backend_factory,
                           progress=progress, desc=entry.category, keep_episodes=False)
        finally:
            if entry.user:  # the category's own user; the suite's is its caller's to close
                await built.aclose()
        episodes, _ = read_episodes(path, outcomes_only=True)
        result.status, result.episodes = "ran", str(path)
        score_category(result, entry, built.tasks, episodes, bootstrap)
    return report


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def report_tables(report: SuiteReport) -> dict[str, list[list[str]]]:
    """Per suite, the rows of its table (header first): one per category, then its groups and overall score.
    Beside accuracy: how the agent behaved (the pass rates of confirmed-before-write and grounded-actions where
    they apply) and how many failures the attribution gives to the simulated user (docs/checks.md)."""
    tables: dict[str, list[list[str]]] = {}
    for c in report.categories:
        rows = tables.setdefault(c.suite, [["category", "n", "accuracy %", "95% CI", "process %", "confirmed %", "grounded %",
                                            "user faults", "errored", "note"]])
        ci = f"[{_pct(c.ci95[0])}, {_pct(c.ci95[1])}]" if c.ci95 else "–"
        unit = f"{c.n_units} conv." if c.unit == "conversation" else str(c.n_units)
        note = f"skipped: {c.reason}" if c.reason else f"partial: {c.incomplete}" if c.incomplete else ""
        ran = c.status == "ran"
        rows.append([c.category, unit if ran else "–", _pct(c.accuracy), ci, _pct(c.process_accuracy),
                     _pct(c.checks.get("confirmed_before_write")), _pct(c.checks.get("grounded_actions")),
                     str(c.user_faults) if ran else "–", str(c.n_errored) if ran else "–", note])
    for suite, rows in tables.items():
        for group, value in report.groups(suite).items():
            rows.append([f"{group} (mean)", "", _pct(value)] + [""] * 7)
        value, why = report.overall(suite)
        if suite in OVERALL_WEIGHTS:
            rows.append(["overall (weighted)", "", _pct(value)] + [""] * 6 + [why and f"not given: {why}"])
    return tables


def render_text(tables: dict[str, list[list[str]]]) -> str:
    out = []
    for suite, rows in tables.items():
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        out.append(f"== {suite}")
        out += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        out.append("")
    return "\n".join(out)


def render_markdown(tables: dict[str, list[list[str]]], title: str) -> str:
    out = [f"# {title}", ""]
    for suite, rows in tables.items():
        out += [f"## {suite}", "", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows[1:]]
        out.append("")
    return "\n".join(out)


def write_report(report: SuiteReport, out: Path, title: str) -> tuple[Path, Path]:
    """``suite.json`` and ``suite.md`` in ``out``, each written atomically."""
    tables = report_tables(report)
    json_path, md_path = out / "suite.json", out / "suite.md"
    atomic_write_text(json_path, json.dumps({**report.to_json(), "title": title}, indent=2) + "\n")
    atomic_write_text(md_path, render_markdown(tables, title))
    return json_path, md_path
