"""An LLM plays the user, as in τ-bench (the prompt is in our own words).

The model gets the task's hidden instruction as its system prompt and the conversation with the roles
flipped (the agent's messages become ``user`` turns, its own earlier lines ``assistant`` turns). It must
speak one line at a time, reveal only what is asked, invent nothing, and end with ``###STOP###`` when its
goal is met (``###TRANSFER###`` when handed to a human, ``###OUT-OF-SCOPE###`` when the instruction does
not cover what it is asked). A failing server surfaces as :class:`UserError` and an errored episode.
"""

from __future__ import annotations

from typing import Any

from muarl.models.base import ModelError
from muarl.models.openai_client import ChatClient
from muarl.types import Message, Task
from muarl.users.base import OUT_OF_SCOPE, STOP, TRANSFER, UserError, UserSession, UserSimulator, UserTurn, stop_reason

SYSTEM_PROMPT = """You are role-playing a customer who is talking to a customer-service agent. Stay in character at all times.

What you know and want (hidden from the agent):
{instruction}

How to behave:
- Write only your next message as the customer: one short line, in the first person, in plain words.
- Give a piece of information only when the agent asks for it, and reveal your goals one step at a time.
- Never make up facts that are not given above (ids, emails, numbers, dates). If asked for something you do not know, say you do not know it.
- Do not copy the text above word for word; say it in your own words.
- When everything you wanted is done, or you are told it cannot be done and you have nothing else to ask, answer exactly {stop}.
- If you are transferred to a human agent, answer exactly {transfer}.
- If the agent asks something your situation does not cover and you cannot continue, answer exactly {out_of_scope}."""

OPEN_PROMPT = "(You are now connected to the agent. Start the conversation with your first message.)"


def flip_roles(history: list[Message]) -> list[Message]:
    """The conversation as the user model sees it: the agent speaks as ``user``, the customer as ``assistant``."""
    flipped = []
    for m in history:
        if m.role == "assistant" and m.content:
            flipped.append(Message(role="user", content=m.content))
        elif m.role == "user":
            flipped.append(Message(role="assistant", content=m.content or ""))
    return flipped


class LLMUserSession(UserSession):
    def __init__(self, simulator: LLMUser, task: Task):
        self.simulator = simulator
        self.system = Message(role="system", content=SYSTEM_PROMPT.format(
            instruction=task.user.instruction, stop=STOP, transfer=TRANSFER, out_of_scope=OUT_OF_SCOPE,
        ))

    async def reply(self, history: list[Message]) -> UserTurn:
        convo = flip_roles(history) or [Message(role="user", content=OPEN_PROMPT)]
        try:
            turn = await self.simulator.client.complete([self.system, *convo], **self.simulator.sampling)
        except ModelError as exc:
            raise UserError(f"user simulator failed: {exc}") from None
        text = (turn.message.content or "").strip()
        return UserTurn(text=text, done=stop_reason(text), usage=turn.usage)


class LLMUser(UserSimulator):
    """τ-bench-style user simulator over any OpenAI-compatible endpoint."""

    def __init__(self, client: ChatClient, **sampling: Any):
        self.client = client
        self.sampling = sampling
        self.name = f"llm:{client.model}"

    def new_session(self, task: Task, seed: int) -> UserSession:
        return LLMUserSession(self, task)

    async def aclose(self) -> None:
        await self.client.aclose()
