"""The user-simulator interface: ``reply(history) -> text, done``.

The history handed to a user is the conversation as the user sees it: ``assistant`` messages are what the
agent said to the user, ``user`` messages what the user said; tool traffic is never shown. Simulators that
use an LLM flip the roles themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from muarl.types import Message, Task, Termination, Usage

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


class UserSession(ABC):
    @abstractmethod
    async def reply(self, history: list[Message]) -> UserTurn:
        """The user's next message; ``history`` is empty when the user opens the conversation."""


class UserSimulator(ABC):
    name: str = "user"

    @abstractmethod
    def new_session(self, task: Task, seed: int) -> UserSession:
        """A fresh user for one episode of ``task``."""

    async def aclose(self) -> None:
        """Release shared resources."""
