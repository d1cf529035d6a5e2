"""Where an episode's tool calls are executed.

The episode loop only needs two things of its tools: run a call, and tell the final state's hash for the
reward. :class:`LocalToolBackend` does both in process on a fresh copy-on-write state; other backends (an
MCP server that serves a muarl domain, see ``muarl.integrations.mcp``) do them over a protocol, so the same
loop and the same reward serve both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from muarl.domains.base import Domain, State
from muarl.types import Task


class BackendError(RuntimeError):
    """The backend itself failed (a tool server is down or broke the protocol): the episode is recorded as
    errored, like a failed model server, instead of the failure being shown to the agent as a tool refusal."""


class ToolBackend(ABC):
    """One episode's tools. ``call`` raises ``ToolError`` (``ArgumentError`` for schema misfits)."""

    @abstractmethod
    async def call(self, name: str, arguments: dict[str, Any]) -> str: ...

    async def call_user(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one of the user's own tools (dual-control worlds); a backend that cannot fails the episode."""
        raise BackendError(f"{type(self).__name__} does not run user tools; use the local tools backend")

    @abstractmethod
    async def state_hash(self) -> str: ...

    async def aclose(self) -> None:
        """Release the backend's session."""


class LocalToolBackend(ToolBackend):
    """The domain's tools (and the user's, in a dual-control world) on a fresh in-process state: the task's
    starting state."""

    def __init__(self, domain: Domain, task: Task):
        self.domain = domain
        self.state: State = domain.new_state(task)

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        return self.domain.run_tool(self.state, name, arguments)

    async def call_user(self, name: str, arguments: dict[str, Any]) -> str:
        return self.domain.run_user_tool(self.state, name, arguments)

    async def state_hash(self) -> str:
        return self.state.hash()


BackendFactory = Callable[[Domain, Task], ToolBackend]
