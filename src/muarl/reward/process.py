"""``process``: the outcome, gated by the policy's hard rules.

The outcome bit pays a success the same whether the agent asked the user's "yes" before writing or not, and
whether the fact it told came from a tool or from nowhere. ``process`` pays a success in full only when it also
passed the hard process checks the domain names (``Domain.process_checks``: by default confirmed before write,
grounded actions and grounded facts, :mod:`muarl.checks`); a success that failed one earns
``violation_reward`` (0.0 by default: a policy breach is worth no more than a failure). A check that does not
apply (no write ran, no claim was made) does not gate. Failures earn 0.0 as with the outcome.

``success`` stays the benchmark's verdict; ``components`` holds ``outcome`` and ``process`` (1.0 when every
gate passed), and ``details["violations"]`` the failed checks with their reasons.

A reward sees the messages, not how the episode ended, so checks that read the ending (``turn_limit``,
``turns_after_completion``) cannot gate; the efficiency terms (:mod:`muarl.reward.efficiency`) price turns.
"""

from __future__ import annotations

from collections.abc import Sequence

from muarl.checks import CHECKS
from muarl.domains.base import Domain, RewardFn
from muarl.reward.outcome import outcome_reward
from muarl.types import Episode, Message, RewardInfo, Task

READS_ENDING = ("turn_limit", "turns_after_completion")  # checks that read Episode.termination, which a reward never sees


def process_reward(violation_reward: float = 0.0, checks: Sequence[str] | None = None) -> RewardFn:
    """The outcome gated by ``checks`` (default: each domain's ``process_checks``); a gated success earns
    ``violation_reward`` in [0, 1)."""
    if not isinstance(violation_reward, (int, float)) or isinstance(violation_reward, bool) or not 0 <= violation_reward < 1:
        raise ValueError(f"reward option violation_reward must be in [0, 1) (a breach worth less than a clean success), got {violation_reward!r}")
    if checks is not None:
        if isinstance(checks, str) or not all(isinstance(c, str) for c in checks):
            raise ValueError(f"reward option checks must be a list of check names, got {checks!r}")
        bad = [c for c in checks if c not in CHECKS or c in READS_ENDING]
        if bad:
            gates = sorted(set(CHECKS) - set(READS_ENDING))
            raise ValueError(f"reward option checks: {bad[0]!r} cannot gate a reward; choose from {gates}")
    chosen = tuple(checks) if checks is not None else None

    def reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
        info = outcome_reward(domain, task, final_hash, messages, agent_turns)
        if not info.success:
            info.components = {"outcome": 0.0, "process": 0.0}
            return info
        violations = violated(domain, task, messages, chosen if chosen is not None else domain.process_checks)
        info.components = {"outcome": 1.0, "process": 0.0 if violations else 1.0}
        if violations:
            info.reward = float(violation_reward)
            info.details = {**info.details, "violations": violations}
        return info

    return reward


def violated(domain: Domain, task: Task, messages: Sequence[Message], names: Sequence[str]) -> list[str]:
    """``"check: why"`` for each of the named checks the trajectory fails (a check that raises counts as failed:
    a reward cannot vouch for what it could not judge)."""
    # the checks read the messages only (the gates exclude those that read the ending): the episode is a carrier
    episode = Episode(task_id=task.id, domain=domain.name, split=task.split, messages=list(messages), termination="user_stop")
    found = []
    for name in names:
        check = CHECKS.get(name)
        if check is None:  # a domain naming a check that does not exist: said, never raised mid-episode
            found.append(f"{name}: no such check (Domain.process_checks of {domain.name})")
            continue
        try:
            verdict = check(domain, task, episode)
        except Exception as exc:  # noqa: BLE001 - a defect of the check: the success is not vouched for
            found.append(f"{name}: the check failed ({type(exc).__name__})")
            continue
        if verdict.status == "fail":
            found.append(f"{name}: {verdict.detail}")
    return found
