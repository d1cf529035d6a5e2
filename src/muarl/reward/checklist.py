"""``checklist``: partial credit over a task's sub-tasks, a success still worth the most.

The sub-tasks come from the task itself: each gold write (a call of a write tool among its gold actions) and
each required output. A failed episode earns ``partial_weight`` times the share of sub-tasks it did; a success
earns 1.0. So an episode that made the right change but never told the fee is told it was closer than one that
did nothing, which the outcome bit cannot say (both earn 0), and a group of all-failing episodes can still carry
a signal.

What counts as done, so that the checklist cannot be earned without doing the work:

- a gold write is reached by a write call that ran (was not refused) with the same tool and the same arguments
  (leaf values compared as the outcome compares outputs: lower case, commas removed), each call matching one
  gold write at most. Every write that ran and matches no gold write (a wrong value, or the right one again)
  takes one reached write back: spraying candidate values, or repeating a right write, earns nothing;
- a required output is told when it was said to the user after a tool result or the user showed it
  (:func:`muarl.checks.grounding.fact_told`); an output no tool of the gold solution shows (a sum the agent
  works out) counts when said. Saying a guessed fee earns nothing.

``success`` stays the benchmark's verdict; ``components`` holds ``outcome``, ``writes`` and ``outputs`` (the
shares reached), ``extra_writes`` (the count) and ``credit`` (the share of sub-tasks done).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from muarl.checks.conversation import EpisodeView, leaf_values, normalise
from muarl.checks.grounding import fact_told
from muarl.domains.base import Domain, RewardFn
from muarl.reward.outcome import outcome_reward
from muarl.types import Action, Message, RewardInfo, Task


def checklist_reward(partial_weight: float = 0.5) -> RewardFn:
    """Success 1.0; otherwise ``partial_weight`` (in [0, 1): a failure is never worth a success) times the share
    of sub-tasks done."""
    if not isinstance(partial_weight, (int, float)) or isinstance(partial_weight, bool) or not 0 <= partial_weight < 1:
        raise ValueError(f"reward option partial_weight must be in [0, 1) (partial credit below a success), got {partial_weight!r}")

    def reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
        info = outcome_reward(domain, task, final_hash, messages, agent_turns)
        terms = checklist(domain, task, messages)
        info.components = {"outcome": float(info.success), **terms}
        if not info.success:
            info.reward = partial_weight * terms["credit"]
        return info

    return reward


def gold_writes(domain: Domain, task: Task) -> list[Action]:
    """The task's gold actions the agent must take that change the state (calls of its write tools)."""
    writes = domain.task_tools(task).names_of_kind("write")
    return [a for a in task.actions if a.requestor != "user" and a.name in writes]


def _stated(arguments: dict[str, Any]) -> dict[str, list[str]]:
    """The arguments that carry a value (an explicit null or empty one is the same as leaving it out), each as
    its normalised leaf values."""
    stated = {k: sorted(normalise(v) for v in leaf_values(value)) for k, value in arguments.items()}
    return {k: v for k, v in stated.items() if v}


def _same_call(name: str, arguments: dict[str, Any] | None, action: Action) -> bool:
    return name == action.name and arguments is not None and _stated(arguments) == _stated(action.kwargs)


def checklist(domain: Domain, task: Task, messages: Sequence[Message]) -> dict[str, float]:
    """The sub-task terms of a trajectory: shares of gold writes reached and outputs told, the extra writes, and
    the share of all sub-tasks done (extra writes taken off the writes reached)."""
    view = EpisodeView.of(list(messages))
    writes = domain.task_tools(task).names_of_kind("write")
    wanted = gold_writes(domain, task)
    open_ = list(range(len(wanted)))
    reached = extra = 0
    for call in view.calls:
        if not call.ok or call.name not in writes:
            continue
        match = next((k for k in open_ if _same_call(call.name, call.arguments, wanted[k])), None)
        if match is None:
            extra += 1
        else:
            open_.remove(match)
            reached += 1
    told = sum(fact_told(domain, task, view, output)[0] in ("grounded", "untraceable") for output in task.outputs)
    items = len(wanted) + len(task.outputs)
    done = max(0, reached - extra) + told
    return {"writes": reached / len(wanted) if wanted else 1.0, "extra_writes": float(extra),
            "outputs": told / len(task.outputs) if task.outputs else 1.0, "credit": done / items if items else 0.0}
