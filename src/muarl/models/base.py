"""The policy interface the episode loop talks to.

An :class:`Agent` is a factory of per-episode :class:`AgentSession` objects, because most policies keep
per-episode state: the oracle knows its task's gold actions, and the token-level training engine keeps the
exact token ids (and KV cache) of its conversation so that nothing is ever re-tokenised.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from muarl.types import Message, Task, TokenTrace, ToolSpec, Usage


class ModelError(RuntimeError):
    """A model server failed after its retries; the episode is recorded as errored, not scored."""


class ContextFull(RuntimeError):
    """The conversation no longer fits the policy model's context window.

    Unlike :class:`ModelError` this is the policy's doing (it rambled, or looped on tool calls), so the
    episode ends ``context_full`` and is scored like any other cut episode: it stays in its GRPO group and
    in pass^k, and RL can learn not to do it.
    """


# The error code of an HTTP 400 that says the prompt outgrew the model's context: OpenAI's, which ``muarl serve``
# gives too, so that muarl's client (models/openai_client.py) tells it from a request the server could not serve.
CONTEXT_FULL_CODE = "context_length_exceeded"


@dataclass
class AgentTurn:
    """One policy turn: an assistant message (text for the user, or tool calls) and what it cost."""

    message: Message
    usage: Usage = field(default_factory=Usage)


class AgentSession(ABC):
    @abstractmethod
    async def act(self, messages: list[Message]) -> AgentTurn:
        """The next assistant message given the whole conversation so far (agent's view, system first)."""

    def token_trace(self) -> TokenTrace | None:
        """Exact token ids / loss mask / logprobs of the episode, for engines that record them."""
        return None

    async def aclose(self) -> None:
        """Release per-episode resources (KV caches, connections)."""


class Agent(ABC):
    name: str = "agent"

    @abstractmethod
    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> AgentSession:
        """A fresh session for one episode of ``task``, offered ``tools``."""

    def context_size(self) -> int | None:
        """Tokens one episode's conversation may hold, for agents that know it (token-level ones); else None."""
        return None

    def system_tokens(self, system: str, tools: list[ToolSpec]) -> int | None:
        """Tokens of the opening system turn (the prompt with the tool schemas), for agents that tokenise; else None."""
        return None

    async def aclose(self) -> None:
        """Release shared resources (HTTP clients, models)."""
