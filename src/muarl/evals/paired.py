"""Is run A better than run B on the same tasks? Paired statistics for a learning claim.

Two evaluations of the same held-out tasks are paired: a task's outcome under A and under B are not
independent (an easy task tends to pass in both), so comparing two unpaired confidence intervals wastes most
of the evidence. Two tests use the pairing:

- the **exact McNemar test**: only discordant tasks carry information, ``b`` passed by A alone and ``c`` by
  B alone; under "no difference" each discordant task is A's with probability 1/2, so the two-sided p-value
  is ``min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)])``. It needs one pass/fail per task (greedy or
  single-trial evaluations);
- a **paired bootstrap** 95% CI of the difference of success rates: resample tasks with replacement (seeded)
  and take the 2.5th and 97.5th percentiles of the mean per-task difference.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from math import comb

from muarl.evals.passk import per_task
from muarl.types import Episode


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (1.0 when there are none)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0 (b={b}, c={c})")
    n = b + c
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap_ci(diffs: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of ``diffs`` (one per task), resampling tasks."""
    rng = random.Random(seed)
    boots = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(draws))
    return boots[int(0.025 * draws)], boots[int(0.975 * draws) - 1]


@dataclass
class PairedComparison:
    """A against B over the tasks both scored. ``only_a``/``only_b``/``p_mcnemar`` are None unless every shared
    task has a single pass/fail in each run; ``ci95`` is None without tasks or resamples."""

    n_tasks: int
    success_a: float | None
    success_b: float | None
    delta: float | None  # success_a - success_b
    ci95: tuple[float, float] | None
    only_a: int | None
    only_b: int | None
    p_mcnemar: float | None

    def to_json(self) -> dict:
        return asdict(self)


def compare(a: Mapping[str, float], b: Mapping[str, float], draws: int = 2000, seed: int = 0) -> PairedComparison:
    """Compare per-task success rates (task id -> rate in [0, 1]) over the tasks in both."""
    shared = sorted(set(a) & set(b))
    if not shared:
        return PairedComparison(0, None, None, None, None, None, None, None)
    diffs = [a[t] - b[t] for t in shared]
    binary = all(a[t] in (0.0, 1.0) and b[t] in (0.0, 1.0) for t in shared)
    only_a = sum(d > 0 for d in diffs) if binary else None
    only_b = sum(d < 0 for d in diffs) if binary else None
    return PairedComparison(
        n_tasks=len(shared), success_a=sum(a[t] for t in shared) / len(shared), success_b=sum(b[t] for t in shared) / len(shared),
        delta=sum(diffs) / len(diffs), ci95=paired_bootstrap_ci(diffs, draws, seed) if draws else None,
        only_a=only_a, only_b=only_b, p_mcnemar=mcnemar_exact(only_a, only_b) if binary else None,
    )


def success_rates(episodes: Iterable[Episode]) -> dict[str, float]:
    """Each task's share of successful finished episodes (pass^1); tasks with none finished are left out."""
    return {r.task_id: r.c / r.n for r in per_task(episodes) if r.n}


def compare_runs(episodes_a: Iterable[Episode], episodes_b: Iterable[Episode], draws: int = 2000, seed: int = 0) -> PairedComparison:
    """Two runs' pass^1 compared over the tasks both finished (errored episodes never count)."""
    return compare(success_rates(episodes_a), success_rates(episodes_b), draws, seed)
