"""The oracle's plan served over HTTP: a stateless LoopbackServer policy for end-to-end tests.

From the request alone it finds which task the conversation is about (the first user message opens with
the task's first request; the user's answer to the identity question names the patient) and answers with
the next step of the oracle's plan for that task: step ``i`` where ``i`` counts the assistant messages
already in the conversation. Being stateless, it gives the same answers however the client retries, and
whatever order concurrent episodes arrive in. ``sloppy`` tasks get a plan without its last tool call (and
the confirmation before it), so a run has failures as well as successes to compare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from muarl.models.loopback_server import HTTPFailure
from muarl.models.oracle import ANYTHING_ELSE, _Plan
from muarl.types import Message, Task, ToolSpec


def _plan(task: Task, tools: list[ToolSpec], sloppy: bool) -> list[Message]:
    steps = [step() for step in _Plan(task, tools).steps]  # its tasks have no revisions to confirm again
    if sloppy:
        last = max(i for i, m in enumerate(steps) if m.tool_calls)
        drop = {last, last - 1} if last > 0 and not steps[last - 1].tool_calls else {last}
        steps = [m for i, m in enumerate(steps) if i not in drop]
    return steps


def oracle_policy(tasks: Iterable[Task], tools: list[ToolSpec],
                  sloppy: Callable[[Task], bool] = lambda t: False) -> Callable[[dict[str, Any]], dict[str, Any]]:
    tasks = list(tasks)
    plans = {t.id: _plan(t, tools, sloppy(t)) for t in tasks}

    def identifies(task: Task, text: str) -> bool:
        known = task.user.known_info
        return (known["email"] in text) if "email" in known else (known["name"] in text)

    def policy(request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        said = [m["content"] or "" for m in messages if m["role"] == "user"]
        step = sum(m["role"] == "assistant" for m in messages)
        candidates = [t for t in tasks if t.user.requests and t.user.requests[0].text in said[0]]
        if step > 0:  # the user has answered the identity question by now
            candidates = [t for t in candidates if identifies(t, said[1])]
        if not candidates or (step > 0 and len(candidates) > 1):
            raise HTTPFailure(400, f"cannot tell the task from {said[:2]!r} ({len(candidates)} candidates)")
        steps = plans[candidates[0].id]
        message = steps[step] if step < len(steps) else Message(role="assistant", content=ANYTHING_ELSE)
        return {k: v for k, v in message.to_openai().items() if k != "role"}

    return policy
