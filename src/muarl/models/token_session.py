"""Append-only token traces of one episode, whatever samples the policy's turns.

A token-level session holds the token ids of its conversation so far. On each turn it appends only the
*delta* (the tool results and user reply since its last turn, rendered by the chat format and tokenised on
their own), has the assistant turn sampled, and keeps the sampled ids as they are. The history is never
re-rendered or re-tokenised, because re-encoding generated text does not always give back the sampled ids;
so the sequence a trainer sees is exactly the sequence the policy was conditioned on and sampled.

This bookkeeping is the same whether the turn is sampled in process (:class:`~muarl.models.local_engine.LocalSession`)
or by an inference server that takes and returns token ids (verl's server manager,
:mod:`muarl.integrations.verl`); subclasses supply only :meth:`TokenSession._sample`. Alongside the ids the
session records

- ``loss_mask``: 1 on every sampled token (the end-of-turn token included: the policy must learn to stop),
  0 on everything rendered (system prompt, user turns, tool results, the template's text after
  end-of-turn, a forced end-of-turn after a turn cut at its token budget);
- ``logprobs``: the log-probability of each sampled token as the sampler reports it; 0.0 where the mask is 0.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from muarl.models.base import AgentSession, AgentTurn, ContextFull, ModelError
from muarl.models.chat_formats import ChatFormat, get_chat_format
from muarl.types import Message, TokenTrace, ToolSpec, Usage


class TokenFormat:
    """A tokenizer with the chat format its model was trained with: the text pieces of a conversation as ids."""

    def __init__(self, tokenizer: Any, chat_format: ChatFormat | str):
        self.tokenizer = tokenizer
        self.chat_format = get_chat_format(chat_format) if isinstance(chat_format, str) else chat_format
        end_id = tokenizer.convert_tokens_to_ids(self.chat_format.end_of_turn)
        if end_id is None or end_id == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer has no token {self.chat_format.end_of_turn!r} required by format {self.chat_format.name!r}")
        self.end_of_turn_id: int = end_id
        self.stop_ids = {end_id} | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


class TokenSession(AgentSession):
    """The token trace of one episode; :meth:`_sample` (the subclass's) samples each assistant turn."""

    def __init__(self, fmt: TokenFormat, tools: list[ToolSpec], max_new_tokens: int, max_context: int):
        self.fmt = fmt
        self.tools = tools
        self.max_new_tokens = max_new_tokens  # per assistant turn
        self.max_context = max_context  # prompt + generated tokens of the episode
        self.ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self._seen = 0  # messages of the conversation already in ids
        self._last: Message | None = None  # the message this session produced last
        self._turns = 0

    @abstractmethod
    async def _sample(self, budget: int) -> tuple[list[int], list[float]]:
        """Sample one assistant turn after ``self.ids``: at most ``budget`` ids (ending with a stop id unless cut
        at the budget) and the log-probability of each."""

    def _system_turn(self, ids: list[int]) -> None:
        """Called with the system turn's ids when the session starts (a local policy takes its cached KV)."""

    # ---------------------------------------------------------------- context
    def _append(self, ids: list[int], logprobs: list[float] | None = None) -> None:
        self.ids.extend(ids)
        self.loss_mask.extend([1 if logprobs is not None else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def _extend_context(self, messages: list[Message]) -> None:
        """Append whatever the conversation gained since this session's last turn, and the generation prompt.

        The first time, the system turn (with the tool schemas) is tokenised on its own: it is the prefix every
        session of the domain shares (as SFT tokenises it)."""
        fmt, chat = self.fmt, self.fmt.chat_format
        if self._last is None:
            if not messages or messages[0].role != "system":
                raise ModelError("a token-level policy session needs the system prompt as the first message")
            system = fmt.encode(chat.system_text(messages[0].content or "", self.tools))
            self._append(system)
            self._system_turn(system)
            self._append(fmt.encode(chat.render_delta(messages[1:]) + chat.generation_prompt))
            return
        if len(messages) < self._seen or messages[self._seen - 1] != self._last:
            raise ModelError("the conversation was rewritten between turns; a token-level policy session only appends")
        closing = "" if self.ids[-1] in fmt.stop_ids else chat.end_of_turn
        self._append(fmt.encode(closing + chat.after_end + chat.render_delta(messages[self._seen:]) + chat.generation_prompt))

    def _budget(self) -> int:
        budget = min(self.max_new_tokens, self.max_context - len(self.ids))
        if budget <= 0:
            raise ContextFull(f"episode context is full ({len(self.ids)} of max_context={self.max_context} tokens)")
        return budget

    # ---------------------------------------------------------------- a turn
    async def act(self, messages: list[Message]) -> AgentTurn:
        self._extend_context(messages)
        prompt_tokens = len(self.ids)
        sampled, logprobs = await self._sample(self._budget())
        self._append(sampled, logprobs)
        body = sampled[:-1] if sampled[-1] in self.fmt.stop_ids else sampled
        text = self.fmt.tokenizer.decode(body, skip_special_tokens=False)
        message = self.fmt.chat_format.parse(text, call_id_prefix=f"call_{self._turns}")
        self._turns += 1
        self._last = message
        self._seen = len(messages) + 1
        return AgentTurn(message=message, usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=len(sampled), requests=1))

    def token_trace(self) -> TokenTrace | None:
        if not self.ids:
            return None
        return TokenTrace(input_ids=list(self.ids), loss_mask=list(self.loss_mask), logprobs=list(self.logprobs))
