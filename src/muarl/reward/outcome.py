"""MUA-RL's reward: the outcome bit, and what every shaped reward reads first.

``outcome``: 1.0 when the final database equals the one reached by replaying the task's gold actions (state
hashes match) *and* every required output appears in some message the agent sent to the user
(case-insensitive, commas removed, as in τ-bench); else 0.0. A benchmark with its own checks (BFCL, ACEBench:
``Domain.verdict``) is scored by them instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from muarl.domains.base import Domain
from muarl.types import Message, RewardInfo, Task


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
