"""Efficiency terms that wrap any reward: a cost per agent turn, and a cost per turn after the task was complete.

The outcome bit cannot tell a four-turn success from one that talks on to the turn limit; these terms can.
Both apply only where the wrapped reward is positive, and never take it below ``cost_floor``: a cost on
failures would pay a failing policy for failing fast (ending the conversation at once costs the fewest turns).

- ``turn_cost``: per agent turn (the loop's count: every assistant message, tool calls included).
- ``late_turn_cost``: per agent turn after the task was complete, on solved episodes: after the last call that
  changed the state and the first saying of each required output (:func:`muarl.checks.efficiency.completion`,
  the measure of the ``turns_after_completion`` check). Worlds where the user changes the state too (dual
  control) are not measured and pay nothing.

``cost_floor`` below 1.0 minus the costs a success can run up keeps every success above every failure; the
default 0.0 lets a long enough success fall to a failure's reward (and ``success`` stays true).
"""

from __future__ import annotations

from collections.abc import Sequence

from muarl.checks.efficiency import completion
from muarl.domains.base import Domain, RewardFn
from muarl.types import Message, RewardInfo, Task

COST_OPTIONS = ("turn_cost", "late_turn_cost", "cost_floor")


def with_costs(base: RewardFn, turn_cost: float = 0.0, late_turn_cost: float = 0.0, cost_floor: float = 0.0) -> RewardFn:
    """``base`` minus the efficiency costs; the terms go to ``components`` (``base``: the reward before them)."""
    for name, value in (("turn_cost", turn_cost), ("late_turn_cost", late_turn_cost), ("cost_floor", cost_floor)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"reward option {name} must be a number >= 0, got {value!r}")

    def reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
        info = base(domain, task, final_hash, messages, agent_turns)
        if info.reward <= 0:
            return info
        late = 0
        if late_turn_cost and info.success:
            found = completion(domain, task, list(messages))
            late = 0 if isinstance(found, str) else len(found[1])
        costs = {"turn_cost": turn_cost * agent_turns, "late_turn_cost": late_turn_cost * late}
        info.components = {**info.components, "base": info.reward, **{k: -v for k, v in costs.items() if v}}
        info.reward = max(min(cost_floor, info.reward), info.reward - sum(costs.values()))
        return info

    return reward
