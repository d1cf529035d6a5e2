"""Trajectory checks and failure attribution: *how* an episode went and *whose fault* a failure is.

The outcome reward gives a conversation one bit. The checks look at the trajectory instead: each is a small,
pure function ``check(domain, task, episode) -> CheckVerdict`` (pass / fail / not applicable, with the message
indices and short quotes that show why), doing no I/O. A check applies where the domain declares what it needs
(write tools, ``Domain.confirms_writes``) and says ``not_applicable`` elsewhere; a domain adds its own through
:meth:`muarl.domains.base.Domain.conduct_checks`. :func:`run_checks` runs them all; a check that raises is a
defect of the check, recorded as an ``error`` verdict so that it never stops an evaluation or a training step.

:mod:`muarl.checks.attribution` labels each failed or errored episode agent / user / task / infra. The
definitions, and what each check can and cannot see, are in docs/checks.md.
"""

from __future__ import annotations

from collections.abc import Callable

from muarl.checks.confirmation import confirmed_before_write
from muarl.checks.efficiency import malformed_calls, repeated_calls, turn_limit, turns_after_completion, turns_vs_oracle
from muarl.checks.grounding import grounded_actions, grounded_facts, grounded_writes
from muarl.domains.base import Domain
from muarl.types import Attribution, CheckVerdict, Episode, Task

Check = Callable[[Domain, Task, Episode], CheckVerdict]

CHECKS: dict[str, Check] = {
    "confirmed_before_write": confirmed_before_write,
    "grounded_actions": grounded_actions,
    "grounded_writes": grounded_writes,
    "grounded_facts": grounded_facts,
    "turn_limit": turn_limit,
    "malformed_calls": malformed_calls,
    "repeated_calls": repeated_calls,
    "turns_vs_oracle": turns_vs_oracle,
    "turns_after_completion": turns_after_completion,
}


def run_checks(domain: Domain, task: Task, episode: Episode) -> list[CheckVerdict]:
    """Every generic check's verdict, then the domain's own; none for an errored episode (nothing to judge)."""
    if episode.errored:
        return []
    verdicts = []
    for name, check in CHECKS.items():
        try:
            verdicts.append(check(domain, task, episode))
        except Exception as exc:  # noqa: BLE001 - a defect of the check: recorded, never fatal
            verdicts.append(CheckVerdict(check=name, status="error", detail=f"{type(exc).__name__}: {exc}"[:200]))
    try:
        verdicts += domain.conduct_checks(task, episode)
    except Exception as exc:  # noqa: BLE001
        verdicts.append(CheckVerdict(check=f"{domain.name}_checks", status="error", detail=f"{type(exc).__name__}: {exc}"[:200]))
    return verdicts


def annotate(domain: Domain, task: Task, episode: Episode) -> Episode:
    """The episode with its check verdicts and, if it failed or errored, its attribution filled in (recomputed
    when already there); never raises: an attribution that fails is recorded as ``undecided`` with the reason."""
    from muarl.checks.attribution import attribute

    episode.checks = run_checks(domain, task, episode)
    try:
        episode.attribution = attribute(domain, task, episode, episode.checks)
    except Exception as exc:  # noqa: BLE001 - a defect of the rules: recorded, never fatal
        episode.attribution = Attribution(label="undecided", reason=f"attribution failed: {type(exc).__name__}: {exc}"[:300])
    return episode
