"""Chat completions from an in-process local model, with :class:`~muarl.models.openai_client.ChatClient`'s
``complete`` interface: an LLM user simulator (or ``muarl serve``) runs a local model with no HTTP in between.

Each call is one stateless chat completion, like a request to a server: a fresh session renders the whole
conversation (it must open with the system turn, so a conversation without one gets an empty one, as SFT
and the saved chat template render it) and samples one assistant turn. The model is frozen: nothing here
trains it. Sampling options may differ per call; calls with the same options share one
:class:`~muarl.models.local_engine.LocalPolicy`, so concurrent calls (the users of concurrent episodes, a
server's concurrent requests) decode together in its batched generator.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, replace

from muarl.models.base import AgentTurn
from muarl.models.local_engine import DEFAULT_BATCH_ROWS, LocalPolicy, LocalSession
from muarl.types import Message, ToolSpec, Usage

MAX_POLICIES = 8  # distinct sampling settings kept at once (each holds its own prefix cache)


@dataclass
class LocalCompletion:
    """One sampled assistant turn with the exact token ids it was conditioned on and sampled."""

    message: Message
    prompt_ids: list[int]
    completion_ids: list[int]  # the end-of-turn token included when the turn ended by itself
    finish_reason: str  # "stop", "tool_calls", or "length" (cut at max_tokens)


class LocalChatClient:
    """``complete(messages, tools, temperature=, top_p=, max_tokens=, seed=)`` over a local policy; options left
    unset take the policy's, and an unset seed is drawn from the client's own seeded stream."""

    def __init__(self, policy: LocalPolicy, seed: int = 0):
        self.policy = policy
        self.model = policy.name  # as ChatClient.model: names the model in users and servers
        self.usage = Usage()
        self._policies: OrderedDict[tuple[float, float, int], LocalPolicy] = OrderedDict()
        self._seeds = random.Random(seed)

    def policy_for(self, temperature: float | None = None, top_p: float | None = None, max_tokens: int | None = None) -> LocalPolicy:
        """The policy sampling with these options (ValueError when they are out of range)."""
        base = self.policy
        sampling = replace(base.sampling, temperature=base.sampling.temperature if temperature is None else temperature,
                           top_p=base.sampling.top_p if top_p is None else top_p,
                           max_new_tokens=base.sampling.max_new_tokens if max_tokens is None else max_tokens)
        if sampling.max_new_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {sampling.max_new_tokens}")
        key = (sampling.temperature, sampling.top_p, sampling.max_new_tokens)
        policy = self._policies.get(key)
        if policy is None:
            policy = LocalPolicy(base.model, base.tokenizer, base.chat_format, sampling, name=base.name,
                                 share_prefix=base.prefix_cache is not None, batch=base.generator is not None,
                                 max_batch_rows=base.generator.max_rows if base.generator is not None else DEFAULT_BATCH_ROWS)
            self._policies[key] = policy
            while len(self._policies) > MAX_POLICIES:
                self._policies.popitem(last=False)
        self._policies.move_to_end(key)
        return policy

    async def generate(self, messages: list[Message], tools: list[ToolSpec] | None = None, *, temperature: float | None = None,
                       top_p: float | None = None, max_tokens: int | None = None, seed: int | None = None) -> LocalCompletion:
        """One assistant turn; ContextFull when the conversation does not fit the context, ValueError (e.g.
        ChatFormatError) when it cannot be rendered."""
        policy = self.policy_for(temperature, top_p, max_tokens)
        if not messages or messages[0].role != "system":
            messages = [Message(role="system", content=""), *messages]
        session = LocalSession(policy, tools or [], self._seeds.getrandbits(32) if seed is None else seed)
        try:
            turn = await session.act(messages)
        finally:
            await session.aclose()
        self.usage.add(turn.usage)
        prompt = turn.usage.prompt_tokens
        completion = session.ids[prompt:]
        if completion[-1] not in policy.stop_ids:
            finish = "length"
        else:
            finish = "tool_calls" if turn.message.tool_calls else "stop"
        return LocalCompletion(turn.message, session.ids[:prompt], completion, finish)

    async def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, **sampling: float | int | None) -> AgentTurn:
        """As :meth:`ChatClient.complete <muarl.models.openai_client.ChatClient.complete>`."""
        done = await self.generate(messages, tools, **sampling)
        usage = Usage(prompt_tokens=len(done.prompt_ids), completion_tokens=len(done.completion_ids), requests=1)
        return AgentTurn(message=done.message, usage=usage)

    async def aclose(self) -> None:
        """Nothing to release: the model lives as long as the client."""
