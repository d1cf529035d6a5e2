"""Trajectory rewards. The MUA-RL reward is binary and outcome-only.

Rewards receive the final state's hash rather than the state, so that tools executed elsewhere (an MCP
server) are scored the same way as in-process ones.

``outcome``: 1.0 when the final database equals the one reached by replaying the task's gold actions (state
hashes match) *and* every required output appears in some message the agent sent to the user
(case-insensitive, commas removed, as in τ-bench); else 0.0. Variants wrap it and record their terms in
``components``; every reward function sets ``RewardInfo.success``, the binary verdict that pass^k and
training's group statistics read, so shaping the reward never changes what counts as solved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from muarl.domains.base import Domain, RewardFn
from muarl.types import Message, RewardInfo, Task

__all__ = ["RewardFn", "make_reward", "outcome_reward", "turn_penalised"]


def normalise_output(text: str) -> str:
    return text.lower().replace(",", "")


def said_to_user(messages: Sequence[Message]) -> list[str]:
    """The texts the agent actually sent to the user (assistant turns without tool calls)."""
    return [m.content for m in messages if m.role == "assistant" and not m.tool_calls and m.content]


def outcome_reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
    own = domain.verdict(task, final_hash, messages)
    if own is not None:  # a benchmark with its own checks (BFCL, ACEBench): they are its outcome
        return own
    gold_hash = domain.gold_hash(task)
    said = [normalise_output(t) for t in said_to_user(messages)]
    found = {out: any(normalise_output(out) in s for s in said) for out in task.outputs}
    state_match = final_hash == gold_hash
    success = state_match and all(found.values())
    return RewardInfo(reward=float(success), success=success, state_match=state_match, outputs_found=found,
                      final_hash=final_hash, gold_hash=gold_hash)


def turn_penalised(penalty: float = 0.01, floor: float = 0.0) -> RewardFn:
    """Outcome reward minus ``penalty`` per agent turn on successes only (never below ``floor``)."""

    def reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
        info = outcome_reward(domain, task, final_hash, messages, agent_turns)
        if info.reward > 0:
            cost = penalty * agent_turns
            info.components = {"outcome": info.reward, "turn_penalty": -cost}
            info.reward = max(floor, info.reward - cost)
        return info

    return reward


def _tau2(**options: str | float | None) -> RewardFn:
    """τ²-bench's criteria (DB, COMMUNICATE, ACTION, NL assertions); see :mod:`muarl.domains.tau.tau2_criteria`."""
    from muarl.domains.tau.tau2_criteria import tau2_reward

    return tau2_reward(**options)  # type: ignore[arg-type]


REWARDS: dict[str, Callable[..., RewardFn]] = {
    "outcome": lambda: outcome_reward,
    "turn_penalised": turn_penalised,
    "tau2": _tau2,
}


def make_reward(name: str = "outcome", **options: float) -> RewardFn:
    """A reward by name; options are passed to the variant's factory."""
    try:
        factory = REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; choose one of {sorted(REWARDS)}") from None
    return factory(**options)
