"""The user-simulator interface: ``reply(history) -> text, done``.

The history handed to a user is the conversation as the user sees it: ``assistant`` messages are what the
agent said to the user, ``user`` messages what the user said; the agent's tool traffic is never shown. Simulators
that use an LLM flip the roles themselves.

In a dual-control world (τ² telecom) the user has tools of its own (its phone): a session made with ``tools``
may answer with ``tool_calls`` instead of text. The episode loop runs them on the user's side of the world,
appends the call (a ``user`` message carrying ``tool_calls``) and each result (a ``tool`` message) to the
history, and asks the user again, until it says something to the agent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from muarl.types import Message, Task, Termination, ToolCall, ToolSpec, Usage, UserFault

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"

_TOKENS: dict[str, Termination] = {STOP: "user_stop", TRANSFER: "user_transfer", OUT_OF_SCOPE: "user_out_of_scope"}


def stop_reason(text: str) -> Termination | None:
    """The termination a user's text asks for, if it contains one of the stop tokens."""
    for token, reason in _TOKENS.items():
        if token in text:
            return reason
    return None


class UserError(RuntimeError):
    """A user-simulator server failed after its retries; the episode is recorded as errored."""


@dataclass
class UserTurn:
    text: str
    done: Termination | None = None  # set when the user ends the conversation
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCall] | None = None  # the user acts on its own tools first (dual control); text comes later
    fault: UserFault | None = None  # a fault injected on purpose in this reply (its index is set by the episode loop)


class UserSession(ABC):
    @abstractmethod
    async def reply(self, history: list[Message]) -> UserTurn:
        """The user's next message; ``history`` is empty when the user opens the conversation."""


class UserSimulator(ABC):
    name: str = "user"

    @property
    def settings(self) -> dict[str, Any]:
        """How this user behaves beyond its name (strategy, sampling, precision as resolved on this machine),
        recorded in every episode it plays, so an episode file alone says which user produced it."""
        return {}

    @abstractmethod
    def new_session(self, task: Task, seed: int, tools: Sequence[ToolSpec] = ()) -> UserSession:
        """A fresh user for one episode of ``task``; ``tools`` are the user's own tools, if the world gives it any
        (the episode loop passes them only then, so simulators for worlds without user tools may omit the argument)."""

    async def aclose(self) -> None:
        """Release shared resources."""
