"""The token-level policy: a local transformers model that keeps the exact tokens of its episode.

Token in, token out: a session is a :class:`~muarl.models.token_session.TokenSession` (the append-only
trace of ids, loss mask and log-probs, and why nothing is re-tokenised) whose turns are sampled here, token
by token with a KV cache. The log-probability recorded for each sampled token is taken under the
temperature-scaled model distribution (before top-p truncation); with temperature 1 and top-p 1, the RL
defaults, it is the policy's own log-probability.

Bad output is data: generated text is parsed by the chat format, and a tool call that cannot be parsed is
still returned (raw text as its arguments) for the episode loop to answer with an error observation.

Two speed-ups, both on by default and both invisible in the trace:

- ``share_prefix``: the system turn (prompt and tool schemas, ~2,500 SmolLM2 tokens in the clinic) is the
  same for every episode of a domain; its KV cache is computed once per policy (and again if the weights
  change) and every session starts from it (:class:`~muarl.models.kv_cache.PrefixCache`). Sessions do not copy
  it: their caches hold only their own tokens, and attention reads the prefix once per forward for every row
  that shares it (:mod:`muarl.models.prefix_attention`; models whose attention it does not support keep a copy
  per session);
- ``batch``: sessions of concurrent episodes submit their turns to one
  :class:`~muarl.models.batched_generation.BatchedGenerator`, which decodes them together, one batched
  forward per token. With ``batch=False`` each session generates on its own, one episode at a time.

The system turn is always tokenised on its own (as SFT tokenises it), so the ids are the same whichever
options are on; only the floating-point path to the logits differs (last bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muarl.models.base import Agent
from muarl.models.chat_formats import ChatFormat
from muarl.models.token_session import TokenFormat, TokenSession
from muarl.types import Task, ToolSpec


# Most rows one batched decode step runs. With prefix-shared attention a row adds only its own tokens' keys and
# values to a step's memory traffic, not another copy of the ~2,500-token system turn, so a GRPO step's 64
# episodes (8 tasks x 8) decode together: the weights are read once per step for all of them.
DEFAULT_BATCH_ROWS = 64


@dataclass
class SamplingConfig:
    temperature: float = 1.0  # 0 means greedy decoding (validation)
    top_p: float = 1.0  # nucleus sampling mass; 1.0 keeps the whole distribution
    max_new_tokens: int = 256  # per assistant turn; a turn cut here gets a forced end-of-turn token
    max_context: int = 4096  # prompt + generated tokens of one episode; beyond it the episode ends context_full
    bf16: bool = False  # run generation under bfloat16 autocast (about 3x faster on CPU)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


class LocalPolicy(TokenFormat, Agent):
    """An :class:`Agent` over a transformers causal LM (and its :class:`TokenFormat`); its sessions record
    :class:`~muarl.types.TokenTrace` s."""

    def __init__(self, model: Any, tokenizer: Any, chat_format: ChatFormat | str = "chatml-hermes",
                 sampling: SamplingConfig | None = None, name: str = "local", *,
                 share_prefix: bool = True, batch: bool = True, max_batch_rows: int = DEFAULT_BATCH_ROWS):
        """``share_prefix``: start every session from one cached KV of the system turn. ``batch``: decode the
        turns of concurrent sessions together, at most ``max_batch_rows`` rows per forward.

        The policy's caches assume the weights do not change while its sessions run (the prefix cache checks
        and recomputes if they do); the trainer builds a new policy for each rollout batch."""
        from muarl.models.allocator import large_tensors_from_mmap
        from muarl.models.batched_generation import BatchedGenerator
        from muarl.models.kv_cache import PrefixCache
        from muarl.models.prefix_attention import supports_prefix_attention
        from muarl.models.sampling_weights import sampling_weights

        super().__init__(tokenizer, chat_format)
        self.model = model
        self.sampling = sampling or SamplingConfig()
        self.name = name
        large_tensors_from_mmap()  # growing KV caches otherwise fragment the heap without bound
        self.prefix_cache = PrefixCache(model) if share_prefix else None
        self.split = supports_prefix_attention(model)  # sessions keep the shared prefix out of their caches
        self.weights = sampling_weights(model, self.sampling.bf16)  # what the forwards run: bf16 linears cast once
        self.generator = BatchedGenerator(self.weights, self._sample, self.stop_ids, max_rows=max_batch_rows,
                                          split=self.split) if batch else None

    @classmethod
    def from_pretrained(cls, name_or_path: str, chat_format: str = "chatml-hermes", sampling: SamplingConfig | None = None) -> LocalPolicy:
        from muarl.models.hf_loading import load_causal_lm

        model, tokenizer = load_causal_lm(name_or_path)
        return cls(model, tokenizer, chat_format, sampling, name=name_or_path)

    def _sample(self, logits: Any, generators: Any) -> tuple[list[int], list[float]]:
        """The next token of each row of ``logits`` and its log-probability, row ``r`` drawn with ``generators[r]``."""
        from muarl.models.sampling import sample_rows

        return sample_rows(logits, self.sampling.temperature, self.sampling.top_p, generators)

    def kv_cache(self) -> Any:
        """An empty KV cache for a session: it grows in place, and stores bfloat16 when the policy runs under
        bfloat16 autocast (what attention reads; ``muarl.models.kv_cache``)."""
        import torch

        from muarl.models.kv_cache import growing_cache

        return growing_cache(torch.bfloat16 if self.sampling.bf16 else None)

    def prefill(self, ids: list[int]) -> Any:
        """A new KV cache filled with ``ids`` (for the shared system-turn prefix)."""
        import torch

        from muarl.models.logits import autocast_for, cache_argument, causal_lm_parts

        model = self.weights.model()
        cache = self.kv_cache()
        decoder = causal_lm_parts(model)[0]
        feed = torch.tensor([ids], device=next(model.parameters()).device)
        with torch.no_grad(), autocast_for(model, self.sampling.bf16):
            decoder(input_ids=feed, use_cache=True, **{cache_argument(decoder): cache})  # keys and values only
        return cache

    def context_size(self) -> int:
        return self.sampling.max_context

    def system_tokens(self, system: str, tools: list[ToolSpec]) -> int:
        return len(self.encode(self.chat_format.system_text(system, tools)))

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> LocalSession:
        return LocalSession(self, tools, seed)


class LocalSession(TokenSession):
    """A :class:`TokenSession` whose turns this process samples from the policy's model."""

    def __init__(self, policy: LocalPolicy, tools: list[ToolSpec], seed: int):
        import torch

        super().__init__(policy, tools, policy.sampling.max_new_tokens, policy.sampling.max_context)
        self.policy = policy
        self._cache: Any = None
        self._prefix: Any = None  # the shared prefix the cache continues (SharedPrefix), if any
        self._n_cached = 0  # ids[:_n_cached] are in the prefix and the KV cache
        self._generator = torch.Generator().manual_seed(seed)

    def _system_turn(self, ids: list[int]) -> None:
        """Start from the policy's cached KV of the system turn (the prefix every session of the domain shares)."""
        prefixes = self.policy.prefix_cache
        if prefixes is not None:
            if self.policy.split:
                self._prefix = prefixes.shared(ids, self.policy.prefill)
            else:
                self._cache = prefixes.session_cache(ids, self.policy.prefill)
            self._n_cached = len(ids)

    # ---------------------------------------------------------------- generation
    def _generate(self, budget: int) -> tuple[list[int], list[float]]:
        """This session alone: token by token on its own KV cache."""
        import torch

        from muarl.models.prefix_attention import rows_logits

        policy = self.policy
        model = policy.weights.model()
        if self._cache is None:
            self._cache = self.policy.kv_cache()
        device = next(model.parameters()).device
        feed = torch.tensor([self.ids[self._n_cached:]], device=device)
        sampled: list[int] = []
        logprobs: list[float] = []
        with torch.no_grad():
            for _ in range(budget):
                logits = rows_logits(model, policy.sampling.bf16, policy.split, feed, self._cache, [self._prefix],
                                     [self._cache.get_seq_length()], [0])
                (token,), (logprob,) = policy._sample(logits.cpu(), [self._generator])
                sampled.append(token)
                logprobs.append(logprob)
                if token in policy.stop_ids:
                    break
                feed = torch.tensor([[token]], device=device)
        return sampled, logprobs

    async def _generate_batched(self, budget: int) -> tuple[list[int], list[float]]:
        """Through the policy's batched generator, together with the other sessions waiting for a turn."""
        from muarl.models.batched_generation import GenerationRequest

        if self._cache is None:
            self._cache = self.policy.kv_cache()
        request = GenerationRequest(cache=self._cache, feed=self.ids[self._n_cached:], budget=budget, generator=self._generator,
                                    prefix=self._prefix)
        self._cache = None  # the generator owns it until the turn is done
        done = await self.policy.generator.generate(request)
        self._cache = done.cache
        return done.sampled, done.logprobs

    async def _sample(self, budget: int) -> tuple[list[int], list[float]]:
        prompt_tokens = len(self.ids)
        if self.policy.generator is not None:
            sampled, logprobs = await self._generate_batched(budget)
        else:
            sampled, logprobs = self._generate(budget)
        # every sampled token but the last was fed back, so the cache ends one token before the sequence
        self._n_cached = prompt_tokens + len(sampled) - 1
        return sampled, logprobs

    async def aclose(self) -> None:
        self._cache = self._prefix = None
