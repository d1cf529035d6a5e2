"""One model, many concurrent episodes: their assistant turns are decoded together, one batched forward
per token.

Episodes run as asyncio tasks (``run_many``, the trainer's group rollouts). When a session needs a turn it
submits a :class:`GenerationRequest` (its KV cache, the ids not yet in it, its own random generator, a
token budget) and awaits the result. A scheduler task, started on the first request, does this until no
request is left:

1. yield to the event loop until no more requests arrive (every episode that can reach its next turn
   without the model has done so: tool calls and scripted users are plain Python);
2. admit waiting requests, up to ``max_rows``: each row's new ids (tool results, user reply, generation
   prompt) are prefilled on its own cache, and its first token is sampled from that forward; the rows not
   finished by it then join the batch together (one ``RowBatch.add``);
3. one decode step for the whole batch: the last sampled token of every row, its true position, a
   left-padding attention mask (:class:`~muarl.models.kv_cache.RowBatch`), the rows' shared prompt prefix read
   once for all of them (:mod:`muarl.models.prefix_attention`); then every row's next token is drawn, all
   rows in one batched draw, each with its own generator (:mod:`muarl.models.sampling`);
4. rows that sampled a stop token or reached their budget leave the batch with their cache; their
   session resumes.

New requests join at step boundaries (continuous batching), so episodes whose tools answered at different
times still share decode steps.

What is deterministic. Each row samples from its own ``torch.Generator`` (seeded by its episode), one draw
per sampled token, so which tokens a row draws does not depend on which other rows share its batch, except
through the logits: a batched forward with padding may differ from a single-row forward in the last bits
(about 1e-6 in float32, more under bfloat16), which can flip a sampled token only when a uniform draw
falls within that distance of a boundary. The forwards run on the event loop's thread, so with in-process
users and tools the batch composition, and hence every episode, is the same on every run with the same
seeds. Exactness of the training sequence never depends on any of this: a row's trace is built from the
ids it was fed and the ids it sampled, nothing is re-tokenised.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import torch

from muarl.models.kv_cache import RowBatch
from muarl.models.prefix_attention import SharedPrefix, rows_logits
from muarl.models.sampling_weights import SamplingWeights

SETTLE_LIMIT = 20  # event-loop passes to wait for more requests before a step (each pass costs microseconds)


@dataclass
class GenerationRequest:
    """One assistant turn to generate. ``prefix`` and ``cache`` hold the row's context except its last
    ``len(feed)`` ids (``cache`` all of it when there is no ``prefix``)."""

    cache: Any
    feed: list[int]
    budget: int  # most tokens to sample (the stop token included)
    generator: torch.Generator
    prefix: SharedPrefix | None = None
    sampled: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    future: asyncio.Future | None = None


@dataclass
class GeneratorStats:
    decode_steps: int = 0
    decoded_rows: int = 0  # sum of batch sizes over decode steps
    max_rows: int = 0  # the largest batch a decode step ran with
    prefills: int = 0


class BatchedGenerator:
    """Owns the model's forward passes for every session of a :class:`~muarl.models.local_engine.LocalPolicy`."""

    def __init__(self, weights: SamplingWeights, sample: Any, stop_ids: set[int], max_rows: int, split: bool = False):
        """``weights``: the model to run and whether under bfloat16 autocast (its current sampling copy is taken at
        every forward). ``sample(logits, generators) -> (tokens, logprobs)`` draws the next token of every row of
        ``[rows, vocabulary]`` float logits, row ``r`` with ``generators[r]``. ``split``: run prefix-shared
        attention (:func:`~muarl.models.prefix_attention.rows_logits`)."""
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.weights = weights
        self.sample = sample
        self.stop_ids = stop_ids
        self.max_rows = max_rows
        self.split = split
        self.stats = GeneratorStats()
        self._waiting: list[GenerationRequest] = []
        self._scheduler: asyncio.Task | None = None

    async def generate(self, request: GenerationRequest) -> GenerationRequest:
        """Sample the turn; returns the request with ``sampled``, ``logprobs`` and the grown ``cache``."""
        if not request.feed or request.budget < 1:
            raise ValueError("a generation request needs ids to feed and a budget of at least one token")
        request.future = asyncio.get_running_loop().create_future()
        self._waiting.append(request)
        if self._scheduler is None or self._scheduler.done():
            self._scheduler = asyncio.get_running_loop().create_task(self._run())
        try:
            return await request.future
        finally:
            # the future resolves to the request: left in place, that cycle would keep the request, and the KV
            # cache it held when its session's next turn was prefilled, alive until the cyclic garbage
            # collector ran (in SmolLM2 rollouts, every past turn's full-context KV piled up, ~1 GB a minute)
            request.future = None

    # ---------------------------------------------------------------- scheduler
    async def _run(self) -> None:
        batch = RowBatch()
        rows: list[GenerationRequest] = []
        try:
            while self._waiting or rows:
                await self._settle()
                # inference mode, not just no_grad: no version counters or view tracking on the many small
                # tensors of a step; the caches it makes are only ever read and grown here
                with torch.inference_mode():
                    self._admit(batch, rows)
                    if rows:
                        self._decode_step(batch, rows)
                await asyncio.sleep(0)
        except BaseException as exc:  # a failed forward fails every turn in flight, never hangs them
            for request in rows + self._waiting:
                if not request.future.done():
                    request.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            self._waiting.clear()
            if not isinstance(exc, Exception):
                raise

    async def _settle(self) -> None:
        """Let every runnable episode reach its next request before the model runs."""
        seen = -1
        for _ in range(SETTLE_LIMIT):
            if len(self._waiting) == seen:
                return
            seen = len(self._waiting)
            await asyncio.sleep(0)

    def _admit(self, batch: RowBatch, rows: list[GenerationRequest]) -> None:
        """Prefill waiting requests (one forward each) and move the unfinished ones into the batch, all in one
        ``RowBatch.add`` (one copy of the batch at most, however many join)."""
        if not self._waiting:
            return
        joining = []
        model = self.weights.model()
        device = next(model.parameters()).device
        while self._waiting and len(rows) < self.max_rows:
            request = self._waiting[0]  # still waiting (and failed with the rest) if this forward raises
            feed = torch.tensor([request.feed], device=device)
            logits = rows_logits(model, self.weights.bf16, self.split, feed, request.cache, [request.prefix],
                                 [request.cache.get_seq_length()], [0])
            (finished,) = self._take_rows([request], logits)
            self._waiting.pop(0)
            self.stats.prefills += 1
            if finished:
                self._finish(request, request.cache)
            else:
                rows.append(request)  # in ``rows`` at once, so that a later forward that raises fails it too
                joining.append(request)
        if joining:
            batch.add([request.cache for request in joining], [request.prefix for request in joining])
        for request in joining:
            request.cache = None  # the batch holds a copy now

    def _decode_step(self, batch: RowBatch, rows: list[GenerationRequest]) -> None:
        model = self.weights.model()
        feed = torch.tensor([[r.sampled[-1]] for r in rows], device=next(model.parameters()).device)
        logits = rows_logits(model, self.weights.bf16, self.split, feed, batch.cache, batch.prefixes, batch.lengths, batch.pads)
        batch.advance()
        self.stats.decode_steps += 1
        self.stats.decoded_rows += len(rows)
        self.stats.max_rows = max(self.stats.max_rows, len(rows))
        done = [i for i, finished in enumerate(self._take_rows(rows, logits)) if finished]
        if done:
            taken, order = batch.remove(done)
            for i, cache in zip(done, taken):
                self._finish(rows[i], cache)
            rows[:] = [rows[i] for i in order]

    def _take_rows(self, rows: list[GenerationRequest], logits: torch.Tensor) -> list[bool]:
        """Every row's next token, drawn together (each row with its own generator, so its samples do not
        depend on the batch: :mod:`muarl.models.sampling`); per row, whether its turn is over."""
        tokens, logprobs = self.sample(logits.cpu(), [request.generator for request in rows])
        over = []
        for request, token, logprob in zip(rows, tokens, logprobs):
            request.sampled.append(token)
            request.logprobs.append(logprob)
            over.append(token in self.stop_ids or len(request.sampled) >= request.budget)
        return over

    @staticmethod
    def _finish(request: GenerationRequest, cache: Any) -> None:
        request.cache = cache
        if not request.future.done():  # the awaiting episode may have been cancelled
            request.future.set_result(request)
