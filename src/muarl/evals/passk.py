"""Reliability metrics over repeated trials, as τ-bench reports them.

For a task with ``n`` finished trials of which ``c`` succeeded:
- pass^k = C(c, k) / C(n, k): the chance that k trials drawn without replacement *all* succeed (τ-bench's
  reliability metric; falls with k for an inconsistent agent);
- pass@k = 1 − C(n − c, k) / C(n, k): the chance that *at least one* of k trials succeeds.
Both are averaged over tasks that have at least k finished trials. Success is the binary outcome (state
matches gold and every required output was told), whatever reward variant was trained on. Errored episodes
are counted apart and never enter a metric. Confidence intervals resample tasks (bootstrap).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import comb

from muarl.types import Episode


def pass_hat_k(c: int, n: int, k: int) -> float:
    if not 0 < k <= n:
        raise ValueError(f"pass^k needs 0 < k <= n (k={k}, n={n})")
    return comb(c, k) / comb(n, k)


def pass_at_k(c: int, n: int, k: int) -> float:
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 0 < k <= n (k={k}, n={n})")
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass
class TaskResult:
    task_id: str
    n: int
    c: int
    mean_reward: float
    errored: int

    @property
    def flipped(self) -> bool:
        return 0 < self.c < self.n


@dataclass
class Summary:
    n_tasks: int
    n_trials: int  # the smallest number of finished trials of any task
    n_errored: int
    mean_reward: float
    pass_hat_k: dict[int, float]
    pass_at_k: dict[int, float]
    ci95: dict[str, tuple[float, float]]
    flip_rate: float
    tasks: list[TaskResult] = field(default_factory=list)

    def to_json(self) -> dict:
        """Plain JSON data; undefined metrics (NaN: nothing finished) become null, which strict parsers accept."""
        return {
            "n_tasks": self.n_tasks, "n_trials": self.n_trials, "n_errored": self.n_errored, "mean_reward": _defined(self.mean_reward),
            "pass_hat_k": {str(k): _defined(v) for k, v in self.pass_hat_k.items()},
            "pass_at_k": {str(k): _defined(v) for k, v in self.pass_at_k.items()},
            "ci95": {name: [_defined(b) for b in bounds] for name, bounds in self.ci95.items()},
            "flip_rate": _defined(self.flip_rate),
        }


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else value


def per_task(episodes: Iterable[Episode]) -> list[TaskResult]:
    groups: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[ep.task_id].append(ep)
    out = []
    for task_id in sorted(groups):
        eps = groups[task_id]
        ok = [e for e in eps if not e.errored]
        rewards = [e.reward.reward for e in ok if e.reward is not None]
        out.append(TaskResult(task_id, len(ok), sum(e.succeeded for e in ok), sum(rewards) / len(rewards) if rewards else 0.0, len(eps) - len(ok)))
    return out


def _mean_metric(results: Sequence[TaskResult], k: int, fn) -> float:
    eligible = [r for r in results if r.n >= k]
    return sum(fn(r.c, r.n, k) for r in eligible) / len(eligible) if eligible else float("nan")


def summarise(episodes: Iterable[Episode], ks: Sequence[int] | None = None, bootstrap: int = 1000, seed: int = 0) -> Summary:
    """All metrics of a run; ``ks`` defaults to 1..(fewest finished trials of any task)."""
    episodes = list(episodes)
    results = per_task(episodes)
    finished = [r for r in results if r.n > 0]
    n_trials = min((r.n for r in finished), default=0)
    ks = list(ks) if ks else list(range(1, n_trials + 1))
    rewards = [e.reward.reward for e in episodes if e.reward is not None]
    hat = {k: _mean_metric(finished, k, pass_hat_k) for k in ks}
    at = {k: _mean_metric(finished, k, pass_at_k) for k in ks}
    ci: dict[str, tuple[float, float]] = {}
    if finished and bootstrap:
        rng = random.Random(seed)
        for k in ks:
            draws = sorted(
                _mean_metric([rng.choice(finished) for _ in finished], k, pass_hat_k) for _ in range(bootstrap)
            )
            ci[f"pass^{k}"] = (draws[int(0.025 * bootstrap)], draws[min(bootstrap - 1, int(0.975 * bootstrap))])
    return Summary(
        n_tasks=len(finished), n_trials=n_trials, n_errored=sum(r.errored for r in results),
        mean_reward=sum(rewards) / len(rewards) if rewards else float("nan"), pass_hat_k=hat, pass_at_k=at, ci95=ci,
        flip_rate=sum(r.flipped for r in finished) / len(finished) if finished else float("nan"), tasks=results,
    )
