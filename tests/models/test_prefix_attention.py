"""Prefix-shared attention computes attention over [shared prefix + a row's own tokens] exactly, for rows that
share one prefix, rows with different prefixes and rows with none, in one forward."""

from __future__ import annotations

import asyncio

import pytest
import torch
from booking_world import ListUser
from transformers import DynamicCache

from muarl.models.kv_cache import RowBatch, cache_layers, growing_cache
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.models.logits import cache_argument
from muarl.models.prefix_attention import PrefixRows, SharedPrefix, forward_inputs, rows_logits, supports_prefix_attention
from muarl.models.tiny import tiny_random_lm
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Message


def test_forward_inputs_positions_and_mask_by_hand():
    prefix = SharedPrefix([], 10)
    got = forward_inputs([prefix, None], cached=[2, 3], pads=[1, 0], new_tokens=2)
    # row 0 continues a 10-token prefix and 2 own tokens; row 1 has no prefix and 3 tokens
    assert got["position_ids"].tolist() == [[12, 13], [3, 4]]
    # columns: 3 cached (row 0's first is padding), then the 2 new tokens, causally
    assert got["attention_mask"].int().tolist() == [
        [[[0, 1, 1, 1, 0], [0, 1, 1, 1, 1]]],
        [[[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]],
    ]
    ((grouped, members),) = got["muarl_prefix_rows"].groups
    assert grouped is prefix and members.tolist() == [0]
    with pytest.raises(ValueError, match="same width"):
        forward_inputs([None, None], cached=[2, 3], pads=[0, 0], new_tokens=1)


def test_rows_are_grouped_by_prefix_object():
    a, b = SharedPrefix([], 3), SharedPrefix([], 3)  # equal contents, different prefixes: identity decides
    groups = PrefixRows.of([a, b, None, a]).groups
    assert [(p, rows.tolist()) for p, rows in groups] == [(a, [0, 3]), (b, [1])]
    (whole,) = PrefixRows.of([a, a]).groups
    assert whole == (a, None)  # every row: no index copies


def _prefix(model, ids: list[int]) -> SharedPrefix:
    cache = growing_cache()
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), **{cache_argument(model): cache}, use_cache=True)
    return SharedPrefix(cache_layers(cache), len(ids))


def _alone(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def test_one_forward_over_rows_with_two_prefixes_and_none_equals_each_row_alone():
    model, _ = tiny_random_lm(seed=7)  # 4 query heads over 2 key heads: grouped-query attention
    gen = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(3, 300, (n,), generator=gen).tolist()  # noqa: E731
    p1, p2 = ids(30), ids(11)
    prefixes = [_prefix(model, p1), _prefix(model, p2)]
    rows = [(prefixes[0], p1, ids(6)), (prefixes[1], p2, ids(9)), (None, [], ids(4)), (prefixes[0], p1, ids(9))]
    caches = []
    for prefix, prefix_ids, own in rows:  # each row prefilled alone (several new tokens, causal) on its own cache
        cache = growing_cache()
        with torch.no_grad():
            first = rows_logits(model, False, True, torch.tensor([own]), cache, [prefix], [0], [0])
        torch.testing.assert_close(first[0], _alone(model, prefix_ids + own), atol=1e-5, rtol=0)
        caches.append(cache)
    batch = RowBatch()
    batch.add(caches, [prefix for prefix, _, _ in rows])
    feed = [[5], [6], [7], [8]]
    with torch.no_grad():
        got = rows_logits(model, False, True, torch.tensor(feed), batch.cache, batch.prefixes, batch.lengths, batch.pads)
    for r, (_, prefix_ids, own) in enumerate(rows):
        torch.testing.assert_close(got[r], _alone(model, prefix_ids + own + feed[r]), atol=1e-5, rtol=0)


def test_under_bfloat16_autocast_it_stays_at_rounding_of_full_attention():
    model, _ = tiny_random_lm(seed=7)
    gen = torch.Generator().manual_seed(2)
    prefix_ids, own = torch.randint(3, 300, (40,), generator=gen).tolist(), torch.randint(3, 300, (12,), generator=gen).tolist()
    prefix = _prefix(model, prefix_ids)
    with torch.no_grad():
        split = rows_logits(model, True, True, torch.tensor([own]), growing_cache(torch.bfloat16), [prefix], [0], [0])
        full = rows_logits(model, True, False, torch.tensor([prefix_ids + own]), DynamicCache(), [None], [0], [0])
        exact = _alone(model, prefix_ids + own)
    # two bf16 roundings of the attention output instead of one: a bf16-sized difference, far below bf16's own error
    assert (split[0] - full[0]).abs().max() < 0.05
    assert (split[0] - exact).abs().max() < 2 * (full[0] - exact).abs().max() + 0.05


def _episodes(policy, domain, seeds):
    async def run():
        return await asyncio.gather(*[
            run_episode(domain, domain.tasks("train")[0], policy, ListUser(["Hello, I need a booking.", "Monday please.", "###STOP###"]),
                        seed=seed, config=LoopConfig(max_turns=3))
            for seed in seeds])
    return asyncio.run(run())


def test_sessions_hold_only_their_own_tokens_and_give_the_same_episodes(domain):
    model, tok = tiny_random_lm(seed=4)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10)
    shared = LocalPolicy(model, tok, sampling=sampling)
    copied = LocalPolicy(model, tok, sampling=sampling, share_prefix=False)  # every session prefills its own
    assert shared.split
    for a, b in zip(_episodes(shared, domain, [1, 2, 3]), _episodes(copied, domain, [1, 2, 3])):
        assert a.tokens.input_ids == b.tokens.input_ids
        torch.testing.assert_close(torch.tensor(a.tokens.logprobs), torch.tensor(b.tokens.logprobs), atol=1e-5, rtol=0)
    # a session's cache holds what follows the system turn, never a copy of it
    task = domain.tasks("train")[0]
    session = shared.new_session(task, domain.tools.specs(), 0)
    asyncio.run(session.act([Message(role="system", content=domain.system_prompt(task)), Message(role="user", content="Hi")]))
    assert session._prefix is shared.prefix_cache.shared(session.ids[:session._prefix.length], shared.prefill)
    assert session._cache.get_seq_length() == len(session.ids) - session._prefix.length - 1  # the last sampled id is fed next turn


def test_only_plain_attention_on_cpu_is_supported():
    model, _ = tiny_random_lm(seed=7)
    assert supports_prefix_attention(model)
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    assert not supports_prefix_attention(model)

    class NotTransformers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 2)

        def get_decoder(self):
            return self

        def get_output_embeddings(self):
            return self.w

    assert not supports_prefix_attention(NotTransformers())
