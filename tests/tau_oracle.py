"""Oracle trajectories for τ-bench tasks: the gold actions as tool calls, then the required outputs said."""

from __future__ import annotations

import json

from muarl.domains.base import Domain, ToolError
from muarl.reward import outcome_reward
from muarl.types import Action, Message, RewardInfo, Task, ToolCall


def run_actions(domain: Domain, actions: list[Action]) -> str:
    """Final state hash after running ``actions`` (refusals ignored, as the benchmarks do) on a fresh state."""
    state = domain.new_state()
    for a in actions:
        try:
            domain.run_tool(state, a.name, a.kwargs)
        except ToolError:
            pass
    return state.hash()


def oracle_messages(task: Task, actions: list[Action] | None = None, say: str | None = None) -> list[Message]:
    """An OpenAI-format conversation that makes ``actions`` (default: the gold ones) and then says ``say``."""
    messages = [Message(role="system", content="policy"), Message(role="user", content="hi")]
    for i, a in enumerate(task.actions if actions is None else actions):
        messages.append(Message(role="assistant", tool_calls=[ToolCall(id=f"call_{i}", name=a.name, arguments=json.dumps(a.kwargs))]))
        messages.append(Message(role="tool", tool_call_id=f"call_{i}", name=a.name, content="..."))
    messages.append(Message(role="assistant", content=say if say is not None else ("; ".join(task.outputs) or "All done.")))
    return messages


def score(domain: Domain, task: Task, actions: list[Action], say: str | None = None) -> RewardInfo:
    return outcome_reward(domain, task, run_actions(domain, actions), oracle_messages(task, actions, say))
