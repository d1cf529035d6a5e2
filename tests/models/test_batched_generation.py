"""Concurrent episodes decoded together keep token-exact traces and match one-at-a-time generation."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter

import pytest
import torch
from booking_world import ListUser

from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.models.logits import cache_argument
from muarl.models.tiny import tiny_random_lm
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Episode


class ProbeLM(torch.nn.Module):
    """A real tiny LM that keeps, next to its KV cache, the token ids each cache row holds.

    After every forward it writes the fed ids into one extra cache layer (as float "keys"). The engine moves
    that layer with the others (prefix sharing, rows joining a left-padded batch, leaving it), so at each
    forward the probe reads, per row, the ids the row is really conditioned on: that layer's positions the
    attention mask lets through, then the new ids. This checks the batching independently of its own
    bookkeeping. With prefix-shared attention a row's cache holds only what follows the shared prefix; the
    probe then reads the prefix's ids from the prefix's own probe layer. It is its own decoder: the engine runs
    the decoder, then the output projection (``muarl.models.logits``).
    """

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.probe = inner.config.num_hidden_layers
        self.contexts: list[tuple[int, ...]] = []  # per forward and row: the ids its last logits are conditioned on
        self.batch_sizes: list[int] = []

    def get_decoder(self):
        return self

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, cache, attention_mask=None, muarl_prefix_rows=None, **kwargs):
        held = cache.layers[self.probe].keys[:, 0, :, 0] if len(cache.layers) > self.probe else input_ids.new_zeros(input_ids.shape[0], 0)
        prefixes = [()] * input_ids.shape[0]
        for prefix, members in muarl_prefix_rows.groups if muarl_prefix_rows is not None else ():
            ids = tuple(prefix.layers[self.probe][0][0, 0, :, 0].long().tolist())
            for r in range(input_ids.shape[0]) if members is None else members.tolist():
                prefixes[r] = ids
        for r in range(input_ids.shape[0]):
            if attention_mask is None:
                visible = held[r]
            elif attention_mask.dim() == 4:  # prefix-shared attention's mask: the first new token's row
                visible = held[r][attention_mask[r, 0, 0, :held.shape[1]]]
            else:
                visible = held[r][attention_mask[r, :held.shape[1]].bool()]
            self.contexts.append(prefixes[r] + tuple(visible.long().tolist()) + tuple(input_ids[r].tolist()))
        self.batch_sizes.append(input_ids.shape[0])
        if muarl_prefix_rows is not None:
            kwargs["muarl_prefix_rows"] = muarl_prefix_rows
        decoder = self.inner.get_decoder()
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, **{cache_argument(decoder): cache}, **kwargs)
        fed = input_ids.to(torch.float32)[:, None, :, None]
        cache.update(fed, fed, self.probe)
        return out


USER_SCRIPTS = [  # different numbers of turns and lengths, so the rows join and leave at different times
    ["Hello.", "###STOP###"],
    ["I would like to book an appointment with the doctor, please.", "Monday.", "Thank you.", "###STOP###"],
    ["Hi!", "Can you help me?", "###STOP###"],
    ["Book mon-9 for Ann Lee.", "Yes, that one.", "No, the other one.", "Fine.", "###STOP###"],
]


def _concurrent(policy: LocalPolicy, domain, seeds: list[int]) -> list[Episode]:
    async def run():
        return await asyncio.gather(*[
            run_episode(domain, domain.tasks("train")[0], policy, ListUser(USER_SCRIPTS[seed % len(USER_SCRIPTS)]),
                        seed=seed, config=LoopConfig(max_turns=5))
            for seed in seeds
        ])
    return asyncio.run(run())


def _full_forward_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
    return logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_batched_rows_are_conditioned_on_exactly_their_traces(domain):
    inner, tok = tiny_random_lm(seed=3)
    model = ProbeLM(inner)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, max_new_tokens=12), share_prefix=True, batch=True)
    seeds = [10, 11, 12, 13]
    episodes = _concurrent(policy, domain, seeds)

    assert all(ep.error is None for ep in episodes)
    assert len({len(ep.tokens.input_ids) for ep in episodes}) == 4  # four different lengths
    assert policy.generator.stats.max_rows >= 3 and max(model.batch_sizes) >= 3
    assert policy.prefix_cache.misses == 1 and policy.prefix_cache.hits == 3
    # every sampled token was drawn from a forward whose row held exactly the trace before it, token for token
    needed = Counter(tuple(ep.tokens.input_ids[:i]) for ep in episodes for i, m in enumerate(ep.tokens.loss_mask) if m)
    seen = Counter(model.contexts)
    assert all(seen[ctx] >= n for ctx, n in needed.items())
    # and the model was run for nothing else: one forward row per sampled token, plus the one shared prefix
    assert len(model.contexts) == sum(needed.values()) + 1
    for ep in episodes:
        trace = ep.tokens
        mask = torch.tensor(trace.loss_mask[1:], dtype=torch.bool)
        # float32: the batched, padded path differs from a full forward by rounding only
        torch.testing.assert_close(_full_forward_logprobs(inner, trace.input_ids)[mask], torch.tensor(trace.logprobs[1:])[mask],
                                   atol=1e-5, rtol=0)


def test_finished_turns_leave_no_request_and_no_kv_cache_behind(domain):
    """A request and its future must not outlive the turn in a reference cycle: only the cyclic collector
    would free them, and with them that turn's KV tensors (in SmolLM2 rollouts they piled up at ~1 GB a minute)."""
    from muarl.models.batched_generation import GenerationRequest

    model, tok = tiny_random_lm(seed=5)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, max_new_tokens=6))
    gc.collect()
    gc.disable()  # what the cyclic collector has not yet freed is what a long rollout carries
    try:
        episodes = _concurrent(policy, domain, [1, 2, 3])
        assert sum(ep.agent_turns for ep in episodes) >= 6
        assert [o for o in gc.get_objects() if isinstance(o, GenerationRequest)] == []
    finally:
        gc.enable()


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_batched_and_shared_equals_one_at_a_time(domain, temperature):
    model, tok = tiny_random_lm(seed=5)
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=10)
    seeds = [1, 2, 3, 4]
    batched = _concurrent(LocalPolicy(model, tok, sampling=sampling), domain, seeds)
    alone = LocalPolicy(model, tok, sampling=sampling, share_prefix=False, batch=False)
    sequential = [_concurrent(alone, domain, [s])[0] for s in seeds]  # really one at a time
    for a, b in zip(batched, sequential):
        assert a.tokens.input_ids == b.tokens.input_ids and a.tokens.loss_mask == b.tokens.loss_mask
        torch.testing.assert_close(torch.tensor(a.tokens.logprobs), torch.tensor(b.tokens.logprobs), atol=1e-5, rtol=0)
        assert [m.content for m in a.messages] == [m.content for m in b.messages]


def test_turns_requested_together_join_the_batch_in_one_add(domain, monkeypatch):
    """Joining rows one ``RowBatch.add`` at a time re-copied the whole batch once per row."""
    from muarl.models.kv_cache import RowBatch

    joined: list[int] = []  # rows per RowBatch.add
    add = RowBatch.add

    def counted(self, row_caches, prefixes=None):
        joined.append(len(row_caches))
        return add(self, row_caches, prefixes)

    monkeypatch.setattr(RowBatch, "add", counted)
    model, tok = tiny_random_lm(seed=5)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, max_new_tokens=10))
    episodes = _concurrent(policy, domain, [1, 2, 3, 4])
    assert all(ep.error is None for ep in episodes)
    assert joined[0] == 4  # the four first turns, submitted together


def test_batch_size_is_bounded_and_a_failing_model_fails_every_turn_in_flight(domain):
    model, tok = tiny_random_lm(seed=5)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(max_new_tokens=6), max_batch_rows=2)
    episodes = _concurrent(policy, domain, [1, 2, 3, 4, 5])
    assert all(ep.error is None for ep in episodes) and policy.generator.stats.max_rows == 2

    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model
            self.calls = 0

        def get_decoder(self):
            return self

        def get_output_embeddings(self):
            return model.get_output_embeddings()

        def forward(self, **kwargs):
            self.calls += 1
            if self.calls > 6:
                raise RuntimeError("device lost")
            return self.inner.get_decoder()(**kwargs)

    broken = LocalPolicy(Broken(), tok, sampling=SamplingConfig(max_new_tokens=6))
    episodes = _concurrent(broken, domain, [1, 2, 3])  # would hang forever if a waiting turn were forgotten
    assert [ep.termination for ep in episodes] == ["error"] * 3
    assert all("device lost" in ep.error for ep in episodes)


def _smollm2_cached() -> bool:
    from muarl.models import hf_loading

    return (hf_loading.embedded_model_dir() / "config.json").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not _smollm2_cached(), reason="SmolLM2 is not converted in $MUARL_CACHE")
def test_smollm2_batched_turns_equal_one_at_a_time():
    """The real model (30 layers, grouped-query attention): three sessions with contexts of different lengths
    decoded in one batch give the tokens and log-probabilities of each session alone (float32)."""
    from muarl.models.hf_loading import EMBEDDED_MODEL, load_causal_lm
    from muarl.types import Message, Task, UserScenario

    model, tok = load_causal_lm(EMBEDDED_MODEL)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8)
    task = Task(id="x", domain="toy", split="train", user=UserScenario(instruction=""))
    asks = ["Hi.", "I need an appointment with Dr. Lee on Monday morning, please.", "What can you do for me today?"]
    conversations = [[Message(role="system", content="You book appointments."), Message(role="user", content=a)] for a in asks]

    def turns(policy: LocalPolicy, concurrent: bool):
        async def one(i):
            session = policy.new_session(task, [], seed=i)
            await session.act(conversations[i])
            return session.token_trace()

        async def run():
            if concurrent:
                return await asyncio.gather(*[one(i) for i in range(3)])
            return [await one(i) for i in range(3)]
        return asyncio.run(run())

    batched_policy = LocalPolicy(model, tok, sampling=sampling)
    batched = turns(batched_policy, True)
    alone = turns(LocalPolicy(model, tok, sampling=sampling, share_prefix=False, batch=False), False)
    assert batched_policy.generator.stats.max_rows == 3
    for a, b in zip(batched, alone):
        assert a.input_ids == b.input_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
