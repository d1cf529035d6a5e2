"""What the trajectory checks and the failure attribution cost, against the oracle rollout they judge.

For every test task of τ-retail and τ-airline this runs the oracle episode (with the scripted user, local tools,
the outcome reward) with the checks switched off, then judges the recorded episodes (:func:`muarl.checks.annotate`:
every check and the attribution) and compares the CPU time of the two, per domain, best of ``--repeats``
rounds; once as each task is first seen, and again as on a task's later trials. Target: the checks cost at
most 5% of the rollout.

    python bench/checks_overhead.py [--domains tau-retail tau-airline] [--repeats 5] [--per-check]

``--per-check`` also times each part of the judging alone over the recorded episodes (the shared reading of an
episode, each check, the domain's checks and the attribution), in µs per episode, best of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time

from muarl.checks import CHECKS, annotate
from muarl.checks.attribution import attribute
from muarl.checks.conversation import EpisodeView
from muarl.domains import load_domain
from muarl.models.oracle import OracleAgent
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.users.scripted import ScriptedUser


def one_round(name: str) -> tuple[float, float, float, int]:
    """(rollout CPU seconds, checks CPU seconds on first sight of each task, the same again, episodes) for every
    test task of a domain. Two things the checks need are worked out once per task and kept (the oracle's planned
    turns; what the gold solution's tool results show): the second pass is what every trial after a task's first
    costs, as in evaluation with several trials or GRPO's groups."""
    domain = load_domain(name)
    tasks = domain.tasks("test")
    domain.gold_hash(tasks[0])  # the domain's data is loaded; gold states are part of what a rollout costs
    start = time.process_time()
    episodes = [asyncio.run(run_episode(domain, t, OracleAgent(), ScriptedUser(), seed=i, config=LoopConfig(checks=False)))
                for i, t in enumerate(tasks)]
    rollout = time.process_time() - start
    passes = []
    for _ in range(2):
        start = time.process_time()
        for task, episode in zip(tasks, episodes):
            annotate(domain, task, episode)
        passes.append(time.process_time() - start)
    return rollout, passes[0], passes[1], len(episodes)


def per_check(name: str, repeats: int) -> dict[str, float]:
    """µs per episode of each part of :func:`annotate`, run in its order with the clock read around each part
    (best of ``repeats`` rounds over the test set's oracle episodes)."""
    domain = load_domain(name)
    tasks = domain.tasks("test")
    episodes = [asyncio.run(run_episode(domain, t, OracleAgent(), ScriptedUser(), seed=i, config=LoopConfig(checks=False)))
                for i, t in enumerate(tasks)]
    for task, episode in zip(tasks, episodes):
        annotate(domain, task, episode)  # per-task caches filled: the figures are those of later trials
    parts = {"reading the episode (EpisodeView)": lambda t, e: EpisodeView.of(e.messages)}
    parts |= {check: (lambda t, e, c=fn: c(domain, t, e)) for check, fn in CHECKS.items()}
    parts["domain checks + attribution"] = lambda t, e: (domain.conduct_checks(t, e), attribute(domain, t, e, e.checks))
    best = dict.fromkeys(parts, float("inf"))
    for _ in range(repeats):
        spent = dict.fromkeys(parts, 0.0)
        for task, episode in zip(tasks, episodes):
            for part, run in parts.items():
                start = time.process_time()
                run(task, episode)
                spent[part] += time.process_time() - start
        best = {part: min(best[part], spent[part]) for part in parts}
    return {part: 1e6 * seconds / len(episodes) for part, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["tau-retail", "tau-airline"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--per-check", action="store_true", help="also time each part of the judging alone")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    for name in args.domains:
        rounds = [one_round(name) for _ in range(args.repeats)]
        rollout, first, later = (min(r[i] for r in rounds) for i in range(3))
        n = rounds[0][3]
        print(f"{name}: {n} oracle episodes (best of {args.repeats}) · rollout {1000 * rollout / n:.3f} ms/episode"
              f" · checks, task's first episode {1000 * first / n:.3f} ms ({100 * first / rollout:.1f}% of the rollout)"
              f" · checks, later trials {1000 * later / n:.3f} ms ({100 * later / rollout:.1f}%)")
        if args.per_check:
            print("  " + " · ".join(f"{part} {us:.1f} µs" for part, us in per_check(name, args.repeats).items()))


if __name__ == "__main__":
    main()
