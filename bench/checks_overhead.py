"""What the trajectory checks and the failure attribution cost, against the oracle rollout they judge.

For every test task of τ-retail and τ-airline this runs the oracle episode (with the scripted user, local tools,
the outcome reward; all of them through ``run_many``, as evaluation and GRPO run episodes) and compares the CPU time of judging it (:func:`muarl.checks.annotate`: every check and the
attribution) with the CPU time of the rest of the rollout, per domain, two ways:

- *in the loop*: the episode loop judges each episode as it ends (``LoopConfig(checks=True)``, as every run
  does), with the clock read around that call; the judging then runs on code and data that the rollout has
  pushed out of the processor's caches;
- *apart*: all episodes are run with the checks off, then judged one after another (warm caches).

Each round starts from a fresh copy of the domain (:meth:`muarl.domains.base.Domain.fresh`: its tasks read anew,
no gold replay kept), so its first pass over the tasks is what a task's first episode costs (the reward replays
the gold actions; the checks plan the oracle's turns and may read the gold results); a second pass is what a
task's later trials cost (evaluation with several trials, GRPO's groups). The figures are medians over the
rounds (a warm-up round is left out), as the machine is shared. Target: the checks cost at most 5% of the rollout.

    python bench/checks_overhead.py [--domains tau-retail tau-airline] [--rounds 7] [--per-check]

``--per-check`` also times each part of the judging (the shared reading of an episode, each check, the domain's
checks and the attribution) right after each episode ends, in µs per episode on later trials, the median of
the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time

import muarl.rollout.episode as loop
from muarl.checks import CHECKS, annotate
from muarl.checks.attribution import attribute
from muarl.checks.conversation import EpisodeView
from muarl.domains import load_domain
from muarl.models.oracle import OracleAgent
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.runner import run_many
from muarl.types import Episode
from muarl.users.scripted import ScriptedUser

WAYS = ("in the loop", "apart")
SIGHTS = ("first", "later")


def rollout(domain, tasks, checks: bool) -> list[Episode]:  # noqa: ANN001
    """Every task's oracle episode, run as evaluation and GRPO run them (:func:`muarl.rollout.runner.run_many`:
    one event loop, several episodes under way at once)."""
    episodes: list[Episode] = []

    async def run() -> None:  # returns nothing: on Python 3.11, asyncio.run formats its main task's result with
        # repr() on the way out (signal.getsignal of the SIGINT handler it installed), every episode included
        episodes.extend((await run_many(domain, tasks, OracleAgent(), ScriptedUser(), progress=False, config=LoopConfig(checks=checks))).episodes)

    asyncio.run(run())
    return episodes


class TimedJudging:
    """The episode loop's call of :func:`annotate`, with the CPU time it takes added up."""

    def __init__(self):
        self.seconds = 0.0

    def __call__(self, domain, task, episode):  # noqa: ANN001, ANN204
        start = time.process_time()
        try:
            return annotate(domain, task, episode)
        finally:
            self.seconds += time.process_time() - start


def one_round(name: str, way: str) -> dict[str, tuple[float, float]]:
    """Per sight (first, later): (rollout CPU seconds without the judging, judging CPU seconds) over every test
    task of a fresh copy of the domain."""
    domain = load_domain(name).fresh()
    tasks = domain.tasks("test")
    spent = {}
    for sight in SIGHTS:
        if way == "in the loop":
            judging = loop.annotate = TimedJudging()
            try:
                start = time.process_time()
                rollout(domain, tasks, checks=True)
                total = time.process_time() - start
            finally:
                loop.annotate = annotate
            spent[sight] = (total - judging.seconds, judging.seconds)
        else:
            start = time.process_time()
            episodes = rollout(domain, tasks, checks=False)
            middle = time.process_time()
            by_id = {task.id: task for task in tasks}
            for episode in episodes:
                annotate(domain, by_id[episode.task_id], episode)
            spent[sight] = (middle - start, time.process_time() - middle)
    return spent


def per_check(name: str, rounds: int) -> dict[str, float]:
    """µs per episode of each part of :func:`annotate`, run in its order right after each episode ends (as in the
    loop) with the clock read around each part; later trials (per-task caches filled), median of ``rounds``."""
    domain = load_domain(name)
    tasks = domain.tasks("test")
    parts = {"reading the episode (EpisodeView)": lambda t, e: EpisodeView.of(e.messages)}
    parts |= {check: (lambda t, e, c=fn: c(domain, t, e)) for check, fn in CHECKS.items()}
    parts["domain checks + attribution"] = lambda t, e: (domain.conduct_checks(t, e), attribute(domain, t, e, e.checks))
    figures: dict[str, list[float]] = {part: [] for part in parts}
    for _ in range(rounds + 1):  # the first round fills the per-task caches
        spent = dict.fromkeys(parts, 0.0)
        for i, task in enumerate(tasks):
            episode = asyncio.run(run_episode(domain, task, OracleAgent(), ScriptedUser(), seed=i, config=LoopConfig(checks=False)))
            for part, run in parts.items():
                start = time.process_time()
                run(task, episode)
                spent[part] += time.process_time() - start
        for part, seconds in spent.items():
            figures[part].append(1e6 * seconds / len(tasks))
    return {part: statistics.median(values[1:]) for part, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["tau-retail", "tau-airline"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-check", action="store_true", help="also time each part of the judging alone")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    for name in args.domains:
        n = len(load_domain(name).tasks("test"))
        rounds = [{way: one_round(name, way) for way in WAYS} for _ in range(args.rounds + 1)][1:]  # the ways alternate
        print(f"{name}: {n} oracle episodes, median of {args.rounds} rounds, ms per episode")
        for way in WAYS:
            for sight in SIGHTS:
                spent = [r[way][sight] for r in rounds]
                rollout_ms, checks_ms = (1000 * statistics.median(s[k] for s in spent) / n for k in (0, 1))
                share = 100 * statistics.median(checks / roll for roll, checks in spent)
                print(f"  {way}, {sight} episode of a task: rollout {rollout_ms:.3f} · checks {checks_ms:.3f} ({share:.1f}% of the rollout)")
        if args.per_check:
            print("  " + " · ".join(f"{part} {us:.1f} µs" for part, us in per_check(name, args.rounds).items()))


if __name__ == "__main__":
    main()
