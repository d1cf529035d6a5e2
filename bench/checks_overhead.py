"""What the trajectory checks and the failure attribution cost, against the oracle rollout they judge.

For every test task of τ-retail and τ-airline this runs the oracle episode (with the scripted user, local tools,
the outcome reward) with the checks switched off, then judges the recorded episodes (:func:`muarl.checks.annotate`:
every check and the attribution) and compares the CPU time of the two, per domain. Each round starts from a fresh
copy of the domain (:meth:`muarl.domains.base.Domain.fresh`: its tasks read anew, no gold replay kept), so its
first rollout and first judging are what a task's first episode costs (the reward replays the gold actions; the
checks plan the oracle's turns and may read the gold results); rollout and judging then run again, as on a
task's later trials (evaluation with several trials, GRPO's groups). Rollout and judging alternate within each
round and the figures are medians over the rounds (the first round, a warm-up, is left out), as the machine is
shared. Target: the checks cost at most 5% of the rollout.

    python bench/checks_overhead.py [--domains tau-retail tau-airline] [--rounds 7] [--per-check]

``--per-check`` also times each part of the judging alone over the recorded episodes (the shared reading of an
episode, each check, the domain's checks and the attribution), in µs per episode on later trials, the median of
the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time

from muarl.checks import CHECKS, annotate
from muarl.checks.attribution import attribute
from muarl.checks.conversation import EpisodeView
from muarl.domains import load_domain
from muarl.models.oracle import OracleAgent
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Episode
from muarl.users.scripted import ScriptedUser

PHASES = ("rollout, first", "checks, first", "rollout, later", "checks, later")


def rollout(domain, tasks) -> list[Episode]:  # noqa: ANN001
    return [asyncio.run(run_episode(domain, t, OracleAgent(), ScriptedUser(), seed=i, config=LoopConfig(checks=False)))
            for i, t in enumerate(tasks)]


def one_round(name: str) -> dict[str, float]:
    """CPU seconds of each phase over every test task of a fresh copy of the domain."""
    domain = load_domain(name).fresh()
    tasks = domain.tasks("test")
    spent = {}
    for later in (False, True):
        start = time.process_time()
        episodes = rollout(domain, tasks)
        spent[PHASES[2 * later]] = time.process_time() - start
        start = time.process_time()
        for task, episode in zip(tasks, episodes):
            annotate(domain, task, episode)
        spent[PHASES[2 * later + 1]] = time.process_time() - start
    return spent


def per_check(name: str, rounds: int) -> dict[str, float]:
    """µs per episode of each part of :func:`annotate`, run in its order with the clock read around each part
    (median of ``rounds`` rounds over the test set's oracle episodes, per-task caches filled)."""
    domain = load_domain(name)
    tasks = domain.tasks("test")
    episodes = rollout(domain, tasks)
    for task, episode in zip(tasks, episodes):
        annotate(domain, task, episode)
    parts = {"reading the episode (EpisodeView)": lambda t, e: EpisodeView.of(e.messages)}
    parts |= {check: (lambda t, e, c=fn: c(domain, t, e)) for check, fn in CHECKS.items()}
    parts["domain checks + attribution"] = lambda t, e: (domain.conduct_checks(t, e), attribute(domain, t, e, e.checks))
    figures: dict[str, list[float]] = {part: [] for part in parts}
    for _ in range(rounds):
        spent = dict.fromkeys(parts, 0.0)
        for task, episode in zip(tasks, episodes):
            for part, run in parts.items():
                start = time.process_time()
                run(task, episode)
                spent[part] += time.process_time() - start
        for part, seconds in spent.items():
            figures[part].append(1e6 * seconds / len(episodes))
    return {part: statistics.median(values) for part, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["tau-retail", "tau-airline"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-check", action="store_true", help="also time each part of the judging alone")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    for name in args.domains:
        n = len(load_domain(name).tasks("test"))
        rounds = [one_round(name) for _ in range(args.rounds + 1)][1:]
        ms = {phase: 1000 * statistics.median(r[phase] for r in rounds) / n for phase in PHASES}
        share = {when: 100 * statistics.median(r[f"checks, {when}"] / r[f"rollout, {when}"] for r in rounds) for when in ("first", "later")}
        print(f"{name}: {n} oracle episodes, median of {args.rounds} rounds (ms/episode)")
        for when in ("first", "later"):
            print(f"  {when} episode of a task: rollout {ms[f'rollout, {when}']:.3f} · checks {ms[f'checks, {when}']:.3f}"
                  f" ({share[when]:.1f}% of the rollout)")
        if args.per_check:
            print("  " + " · ".join(f"{part} {us:.1f} µs" for part, us in per_check(name, args.rounds).items()))


if __name__ == "__main__":
    main()
