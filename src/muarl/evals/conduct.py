"""How a run's agent behaved and whose fault its failures were: the trajectory checks and failure attribution
(:mod:`muarl.checks`) summed over a run's episodes.

- per check: over the episodes it applies to, how many passed, with a 95% Wilson interval;
- attribution: the labels of failed and errored episodes, counted and as shares of them;
- pass^k as scored, and with the episodes labelled ``user`` left out (a failure the simulated user caused says
  nothing of the agent);
- the same few numbers as flat scalars for training steps (:func:`conduct_scalars`).

Episodes written before the checks existed carry none, and those judged before a check was added lack its verdict;
:func:`judged` recomputes them where the task can be found, since checks are pure functions of (domain, task,
episode).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from muarl.checks import CHECKS, annotate
from muarl.domains.base import Domain
from muarl.evals.passk import Summary, summarise
from muarl.types import CheckVerdict, Episode, Task

LABELS = ("agent", "user", "task", "infra", "undecided")


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion (sensible at 0 and n, unlike the normal one)."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at 0 and n passes the bounds are exactly 0 and 1; floating point would leave 1e-17 on either side
    return (0.0 if passed == 0 else centre - half, 1.0 if passed == n else centre + half)


@dataclass
class CheckRate:
    check: str
    applicable: int
    passed: int
    errors: int  # the check raised (a defect of the check)

    @property
    def rate(self) -> float:
        return self.passed / self.applicable if self.applicable else float("nan")

    def to_json(self) -> dict:
        lo, hi = wilson(self.passed, self.applicable)
        return {"check": self.check, "applicable": self.applicable, "passed": self.passed, "errors": self.errors,
                "pass_rate": _defined(self.rate), "ci95": [_defined(lo), _defined(hi)]}


@dataclass
class ConductSummary:
    checks: list[CheckRate]
    labels: dict[str, int]  # over failed and errored episodes
    failed: int
    unjudged: int  # episodes with no verdicts (written before the checks, and their task not found)
    as_scored: Summary
    without_user_faults: Summary
    failures: list[tuple[Episode, str]] = field(default_factory=list)  # each failed episode and its first evidence

    def to_json(self) -> dict:
        return {
            "checks": [c.to_json() for c in self.checks],
            "attribution": {"failed_or_errored": self.failed, "counts": self.labels,
                            "rates": {k: (v / self.failed if self.failed else None) for k, v in self.labels.items()}},
            "unjudged": self.unjudged,
            "pass_hat_k_as_scored": self.as_scored.to_json()["pass_hat_k"],
            "pass_hat_k_without_user_faults": self.without_user_faults.to_json()["pass_hat_k"],
            "failures": [{"task_id": ep.task_id, "trial": ep.trial, "label": ep.attribution.label if ep.attribution else None,
                          "reason": ep.attribution.reason if ep.attribution else None, "evidence": evidence}
                         for ep, evidence in self.failures],
        }


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else value


def judged(episodes: Sequence[Episode], task_of: Callable[[Episode], tuple[Domain, Task] | None]) -> list[Episode]:
    """The episodes, each with its verdicts and label: kept where complete, recomputed where missing, or lacking a
    check added since the episode was judged, and ``task_of`` finds its domain and task (else left as it is)."""
    out = []
    for ep in episodes:
        if ep.checks is None or (not ep.errored and not _judged_by_every_check(ep.checks)):
            found = task_of(ep)
            if found is not None:
                ep = annotate(found[0], found[1], ep.model_copy())
        out.append(ep)
    return out


def _judged_by_every_check(verdicts: Sequence[CheckVerdict]) -> bool:
    return set(CHECKS) <= {v.check for v in verdicts}


def is_user_fault(episode: Episode) -> bool:
    return episode.attribution is not None and episode.attribution.label == "user"


def conduct(episodes: Sequence[Episode], ks: Sequence[int] | None = None, bootstrap: int = 1000) -> ConductSummary:
    """The checks and labels of a run's (latest, judged) episodes."""
    names = list(CHECKS) + sorted({v.check for ep in episodes for v in ep.checks or [] if v.check not in CHECKS})
    rates = {n: CheckRate(n, 0, 0, 0) for n in names}
    for ep in episodes:
        for v in ep.checks or []:
            r = rates[v.check]
            r.errors += v.status == "error"
            if v.status in ("pass", "fail"):
                r.applicable += 1
                r.passed += v.status == "pass"
    failed = [ep for ep in episodes if ep.errored or not (ep.reward and ep.reward.success)]
    labels = Counter(ep.attribution.label for ep in failed if ep.attribution is not None)
    first = [(ep, f"#{ep.attribution.evidence[0].index} {ep.attribution.evidence[0].quote}" if ep.attribution and ep.attribution.evidence else "")
             for ep in failed]
    kept = [ep for ep in episodes if not is_user_fault(ep)]
    as_scored = summarise(episodes, ks=ks, bootstrap=0)
    return ConductSummary(  # the same k both ways: a task keeps in pass^k the trials it has left
        checks=[rates[n] for n in names], labels={k: labels.get(k, 0) for k in LABELS}, failed=len(failed),
        unjudged=sum(ep.checks is None for ep in episodes), as_scored=as_scored,
        without_user_faults=summarise(kept, ks=list(as_scored.pass_hat_k) or None, bootstrap=0), failures=first,
    )


def check_pass_rate(episodes: Sequence[Episode], name: str) -> float | None:
    """The share of the episodes check ``name`` applies to that passed it (None: it applies to none)."""
    verdicts = [v.status == "pass" for ep in episodes for v in ep.checks or [] if v.check == name and v.status in ("pass", "fail")]
    return sum(verdicts) / len(verdicts) if verdicts else None


def measured_values(episode: Episode, name: str) -> list[float]:
    """Check ``name``'s measured values on one episode, where it applied and measured one."""
    return [v.value for v in episode.checks or [] if v.check == name and v.status in ("pass", "fail") and v.value is not None]


def check_mean_value(episodes: Sequence[Episode], name: str) -> float | None:
    """The mean of check ``name``'s measured value over the episodes it applies to (None: it applies to none)."""
    values = [value for ep in episodes for value in measured_values(ep, name)]
    return sum(values) / len(values) if values else None


def check_values_per_task(episodes: Sequence[Episode], name: str) -> dict[str, float]:
    """Each task's mean of check ``name``'s measured value over its episodes (tasks it measured nothing on left
    out): the per-task form a paired comparison of two runs needs."""
    values: dict[str, list[float]] = {}
    for ep in episodes:
        values.setdefault(ep.task_id, []).extend(measured_values(ep, name))
    return {task: sum(vs) / len(vs) for task, vs in values.items() if vs}


def conduct_scalars(episodes: Sequence[Episode]) -> dict[str, float]:
    """For a training step: each check's violation rate over the episodes it applies to, and over all judged
    episodes the share whose failure is the user's and the share that claimed an action never done."""
    judged_eps = [ep for ep in episodes if ep.checks is not None]
    if not judged_eps:
        return {}
    out: dict[str, float] = {}
    for name in CHECKS:
        verdicts = [v for ep in judged_eps for v in ep.checks or [] if v.check == name and v.status in ("pass", "fail")]
        if verdicts:
            out[f"check_violation/{name}"] = sum(v.status == "fail" for v in verdicts) / len(verdicts)
    n = len(judged_eps)
    out["user_fault_rate"] = sum(is_user_fault(ep) for ep in judged_eps) / n
    out["grounded_claim_failure_rate"] = sum(any(v.check == "grounded_actions" and v.status == "fail" for v in ep.checks or [])
                                             for ep in judged_eps) / n
    return out
