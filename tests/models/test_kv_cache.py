"""Shared prefix caches and left-padded row batches give the model exactly the context it would see alone."""

from __future__ import annotations

import asyncio

import pytest
import torch
from booking_world import ListUser
from transformers import DynamicCache

from muarl.models import kv_cache
from muarl.models.kv_cache import (
    PrefixCache,
    RowBatch,
    cache_layers,
    growing_cache,
    make_cache,
)
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.models.logits import cache_argument
from muarl.models.prefix_attention import SharedPrefix, rows_logits
from muarl.models.tiny import tiny_random_lm
from muarl.rollout.episode import LoopConfig, run_episode


def _episodes(policy: LocalPolicy, domain, seeds: list[int]):
    """One episode per seed, one after another (no batching: the prefix cache alone is under test)."""
    async def run():
        out = []
        for seed in seeds:
            user = ListUser(["Hello, I need a booking.", "Monday please.", "###STOP###"])
            out.append(await run_episode(domain, domain.tasks("train")[0], policy, user, seed=seed, config=LoopConfig(max_turns=3)))
        return out
    return asyncio.run(run())


def test_shared_prefix_gives_the_same_episodes_as_prefilling_each(domain):
    model, tok = tiny_random_lm(seed=4)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10)
    shared = LocalPolicy(model, tok, sampling=sampling, share_prefix=True, batch=False)
    alone = LocalPolicy(model, tok, sampling=sampling, share_prefix=False, batch=False)
    seeds = [1, 2, 3]
    with_prefix, without = _episodes(shared, domain, seeds), _episodes(alone, domain, seeds)
    assert shared.prefix_cache.misses == 1 and shared.prefix_cache.hits == 2
    for a, b in zip(with_prefix, without):
        assert a.tokens.input_ids == b.tokens.input_ids and a.tokens.loss_mask == b.tokens.loss_mask
        # the same math in two forwards instead of one: float32 rounding only
        torch.testing.assert_close(torch.tensor(a.tokens.logprobs), torch.tensor(b.tokens.logprobs), atol=1e-5, rtol=0)
    assert len({tuple(e.tokens.input_ids) for e in with_prefix}) == 3  # different seeds really sampled differently


def test_prefix_cache_is_recomputed_when_the_weights_change():
    model, tok = tiny_random_lm(seed=4)
    cache = PrefixCache(model)
    ids = tok("<|im_start|>system\nYou help.<|im_end|>\n")["input_ids"]

    def prefill(x):
        c = DynamicCache()
        with torch.no_grad():
            model(input_ids=torch.tensor([x]), **{cache_argument(model): c}, use_cache=True)
        return c

    first = cache_layers(cache.session_cache(ids, prefill))
    again = cache_layers(cache.session_cache(ids, prefill))
    assert (cache.misses, cache.hits) == (1, 1) and all(a[0] is b[0] for a, b in zip(first, again))  # shared, not copied
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight.mul_(2.0)  # an in-place update, as an optimizer step does
    changed = cache_layers(cache.session_cache(ids, prefill))
    assert cache.misses == 2
    assert not torch.allclose(changed[0][0], first[0][0])
    torch.testing.assert_close(changed[0][0], cache_layers(prefill(ids))[0][0])


def test_row_batch_decodes_rows_of_different_lengths_like_each_row_alone():
    model, _ = tiny_random_lm(seed=6)
    gen = torch.Generator().manual_seed(0)
    contexts = [torch.randint(3, 300, (1, n), generator=gen) for n in (5, 17, 9)]
    nexts = [[11, 12], [13, 14], [15, 16]]  # two decode steps per row
    expected = []
    with torch.no_grad():
        for ctx, nxt in zip(contexts, nexts):
            logits = model(input_ids=torch.cat([ctx, torch.tensor([nxt])], dim=1)).logits[0, -2:]
            expected.append(logits)
        batch = RowBatch()
        for ctx in contexts:
            cache = DynamicCache()
            model(input_ids=ctx, **{cache_argument(model): cache}, use_cache=True)
            batch.add([cache])  # one at a time: free slots, widening and rebuilds all happen
        assert batch.pads == [12, 0, 8] and batch.lengths == [5, 17, 9]
        got = []
        for step in range(2):
            got.append(rows_logits(model, False, False, torch.tensor([[n[step]] for n in nexts]), batch.cache, batch.prefixes,
                                   batch.lengths, batch.pads))
            batch.advance()
        for r in range(3):
            torch.testing.assert_close(torch.stack([got[0][r], got[1][r]]), expected[r], atol=1e-5, rtol=0)
        # the longest row leaves: the others keep their tokens, padding nobody needs is trimmed
        (row1,), order = batch.remove([1])
        assert order == [0, 2] and batch.lengths == [7, 11] and batch.pads == [4, 0] and batch.width == 11
        alone = DynamicCache()
        model(input_ids=torch.cat([contexts[1], torch.tensor([nexts[1]])], dim=1), **{cache_argument(model): alone}, use_cache=True)
        for (k, v), (k2, v2) in zip(cache_layers(row1), cache_layers(alone)):
            assert k.shape == k2.shape == (1, k.shape[1], 19, k.shape[3])
            torch.testing.assert_close(k, k2, atol=1e-5, rtol=0)
            torch.testing.assert_close(v, v2, atol=1e-5, rtol=0)


def test_growing_layer_appends_in_place_and_never_writes_into_tensors_it_was_given():
    gen = torch.Generator().manual_seed(0)
    shared = [(torch.randn(1, 2, 5, 4, generator=gen), torch.randn(1, 2, 5, 4, generator=gen)) for _ in range(2)]
    before = [(k.clone(), v.clone()) for k, v in shared]
    cache = make_cache(shared, growing=True)
    expected = [(k, v) for k, v in shared]
    storage = None
    for step, new in enumerate((3, 1, 1, 300)):  # the last append outgrows the first allocation's headroom
        for i in range(2):
            k, v = torch.randn(1, 2, new, 4, generator=gen), torch.randn(1, 2, new, 4, generator=gen)
            got_k, got_v = cache.update(k, v, i)
            expected[i] = (torch.cat([expected[i][0], k], dim=2), torch.cat([expected[i][1], v], dim=2))
            assert torch.equal(got_k, expected[i][0]) and torch.equal(got_v, expected[i][1])
        pointer = cache.layers[0].keys.data_ptr()
        if step in (1, 2):
            assert pointer == storage  # appended into the capacity it owns: no copy of the cache
        storage = pointer
    assert cache.get_seq_length() == 5 + 3 + 1 + 1 + 300
    for (k, v), (k0, v0) in zip(shared, before):
        assert torch.equal(k, k0) and torch.equal(v, v0)  # the shared prefix was copied, never written into
    # keys replaced from outside (transformers reindexing a batch): the next append starts from them
    layer = cache.layers[0]
    layer.keys, layer.values = layer.keys[:, :, :7], layer.values[:, :, :7]
    k, v = torch.randn(1, 2, 1, 4, generator=gen), torch.randn(1, 2, 1, 4, generator=gen)
    got_k, _ = cache.update(k, v, 0)
    assert torch.equal(got_k, torch.cat([expected[0][0][:, :, :7], k], dim=2))


def test_growing_layer_stores_its_dtype():
    cache = growing_cache(torch.bfloat16)
    k = torch.randn(1, 2, 3, 4)
    got_k, _ = cache.update(k, k + 1, 0)
    assert got_k.dtype == torch.bfloat16 and torch.equal(got_k, k.to(torch.bfloat16))


def test_bfloat16_storage_samples_what_float32_storage_under_autocast_samples(domain, monkeypatch):
    """Attention under bfloat16 autocast reads keys and values in bfloat16, so storing them in bfloat16 is the same
    rounding done once: the same tokens and the same log-probabilities, bit for bit."""
    model, tok = tiny_random_lm(seed=2)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, bf16=True)

    def episodes(policy):
        async def run():
            async def one(seed):
                user = ListUser(["Hello, I need a booking.", "Monday please.", "###STOP###"])
                return await run_episode(domain, domain.tasks("train")[0], policy, user, seed=seed, config=LoopConfig(max_turns=3))
            return await asyncio.gather(*[one(s) for s in range(4)])
        return asyncio.run(run())

    bf16_policy = LocalPolicy(model, tok, sampling=sampling)
    float32_policy = LocalPolicy(model, tok, sampling=sampling)
    monkeypatch.setattr(float32_policy, "kv_cache", lambda: growing_cache(None))
    stored = episodes(bf16_policy)
    assert cache_layers(bf16_policy.prefix_cache.session_cache(stored[0].tokens.input_ids[:5], bf16_policy.prefill))[0][0].dtype == torch.bfloat16
    for a, b in zip(stored, episodes(float32_policy)):
        assert a.tokens.input_ids == b.tokens.input_ids and a.tokens.logprobs == b.tokens.logprobs
    assert len({tuple(e.tokens.input_ids) for e in stored}) > 1


class Rows:
    """A ``RowBatch`` next to the token ids each of its rows holds, to check every batched forward against the
    same ids run alone. With ``prefix`` ids, every row starts with them and the batch holds only what follows
    (prefix-shared attention); ``ids`` are then each row's ids after the prefix."""

    def __init__(self, model, prefix: list[int] | None = None):
        self.model = model
        self.batch = RowBatch()
        self.ids: list[list[int]] = []  # per row of the batch, in order
        self.prefix_ids = prefix or []
        self.prefix = None
        if prefix:
            cache = growing_cache()
            with torch.no_grad():
                model(input_ids=torch.tensor([prefix]), **{cache_argument(model): cache}, use_cache=True)
            self.prefix = SharedPrefix(cache_layers(cache), len(prefix))

    def feed(self, cache: DynamicCache, cached: int, ids: list[int]) -> torch.Tensor:
        """Feed ``ids`` to a single row's cache holding ``cached`` ids; its last logits."""
        with torch.no_grad():
            return rows_logits(self.model, False, self.prefix is not None, torch.tensor([ids]), cache, [self.prefix], [cached], [0])[0]

    def session(self, ids: list[int]) -> tuple[list[int], DynamicCache]:
        cache = growing_cache()
        self.feed(cache, 0, ids)
        return ids, cache

    def add(self, *sessions: tuple[list[int], DynamicCache]) -> None:
        self.batch.add([cache for _, cache in sessions], [self.prefix] * len(sessions))
        self.ids += [list(ids) for ids, _ in sessions]

    def alone(self, ids: list[int]) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The last logits and (after the prefix) the keys and values of ``ids`` after the prefix, run alone."""
        cache = DynamicCache()
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([self.prefix_ids + ids]), **{cache_argument(self.model): cache}, use_cache=True).logits[0, -1]
        return logits, [(k[:, :, len(self.prefix_ids):], v[:, :, len(self.prefix_ids):]) for k, v in cache_layers(cache)]

    def step(self, token: int) -> None:
        """One decode step (row r is fed ``token + r``); each row's logits must be its ids' alone."""
        feed = [token + r for r in range(len(self.ids))]
        with torch.no_grad():
            out = rows_logits(self.model, False, self.prefix is not None, torch.tensor(feed)[:, None], self.batch.cache,
                              self.batch.prefixes, self.batch.lengths, self.batch.pads)
        self.batch.advance()
        for r, t in enumerate(feed):
            self.ids[r].append(t)
            torch.testing.assert_close(out[r], self.alone(self.ids[r])[0], atol=1e-5, rtol=0)
        assert self.batch.lengths == [len(ids) for ids in self.ids]

    def remove(self, *rows: int) -> list[tuple[list[int], DynamicCache]]:
        """Take rows out; each comes back as a session cache holding exactly its ids."""
        caches, self.order = self.batch.remove(list(rows))
        taken = [(self.ids[r], cache) for r, cache in zip(rows, caches)]
        self.ids = [self.ids[r] for r in self.order]
        for ids, cache in taken:
            for (k, v), (k2, v2) in zip(cache_layers(cache), self.alone(ids)[1]):
                torch.testing.assert_close(k, k2, atol=1e-5, rtol=0)
                torch.testing.assert_close(v, v2, atol=1e-5, rtol=0)
        assert min(self.batch.pads, default=0) == 0  # padding no row needs was dropped
        assert self.batch.prefixes == [self.prefix] * len(self.ids)
        return taken

    def storage(self) -> int:
        return self.batch.cache.layers[0].storage[0].data_ptr()


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("shared_prefix", [False, True], ids=["own-prefix", "shared-prefix"])
def test_rows_joining_together_and_leaving_in_any_order_decode_like_each_row_alone(monkeypatch, shared_prefix):
    """Rows go into free slots, widen the window leftwards, force rebuilds, leave from the middle, first and
    last; after every change each row's next logits are those of its ids alone. Uninitialised storage is
    filled with NaN here, so a padding position the batch forgot to zero would show up in every logit. With a
    shared prefix the rows hold only what follows it, and prefix-shared attention reads it once per step."""
    real = kv_cache.new_storage

    def poisoned(*args, **kwargs):
        return tuple(t.fill_(float("nan")) for t in real(*args, **kwargs))

    monkeypatch.setattr(kv_cache, "new_storage", poisoned)
    model, _ = tiny_random_lm(seed=6)
    rows = Rows(model, _ids(23, 99) if shared_prefix else None)
    a, b, c, d = (rows.session(_ids(n, seed)) for seed, n in enumerate((5, 17, 9, 12)))
    rows.add(a, b, c, d)
    assert rows.batch.pads == [12, 0, 8, 5]
    rows.step(20)
    first = rows.storage()
    taken_c, taken_a = rows.remove(2, 0)  # not in order, and around a row that stays
    assert rows.order == [3, 1] and rows.batch.pads == [5, 0] and rows.storage() == first  # the last row took slot 0
    rows.step(30)
    # a row that had another turn comes back longer than the batch: a free slot, the window widened leftwards
    rows.feed(taken_c[1], len(taken_c[0]), list(range(7, 19)))
    rows.add((taken_c[0] + list(range(7, 19)), taken_c[1]))
    assert rows.batch.lengths == [14, 19, 22] and rows.batch.pads == [8, 3, 0] and rows.storage() == first
    rows.step(40)
    rows.remove(2)  # the last row
    rows.step(50)
    rows.add(taken_a, rows.session(_ids(40, 5)), rows.session(_ids(8, 6)))  # more rows than free slots: one rebuild
    assert rows.storage() != first
    rows.step(60)
    rows.remove(0, 3)
    second = rows.storage()
    rows.add(rows.session(_ids(400, 7)))  # a free slot, but longer than the room on the left: rebuilt
    assert rows.storage() != second
    rows.step(70)
    rows.remove(3, 1, 0, 2)
    assert len(rows.batch) == 0 and rows.batch.cache is None
    rows.add(rows.session(_ids(3, 8)))
    rows.step(80)


def test_joining_rows_copy_the_batch_once_and_leaving_rows_copy_only_themselves(monkeypatch):
    """Storage allocations, counted: 16 rows joining together allocate the batch once (it was rebuilt once per
    row, each time copying every row so far); decode steps, rows leaving and rows joining into free slots
    allocate only the leaving rows' own caches, and the batch's storage stays where it is."""
    allocated: list[int] = []  # rows of each storage allocated
    real = kv_cache.new_storage

    def counted(rows, *args, **kwargs):
        allocated.append(rows)
        return real(rows, *args, **kwargs)

    model, _ = tiny_random_lm(seed=6)
    rows = Rows(model)
    sessions = [rows.session(_ids(n, seed)) for seed, n in enumerate(range(20, 36))]
    monkeypatch.setattr(kv_cache, "new_storage", counted)
    layers = model.config.num_hidden_layers
    rows.add(*sessions)
    assert allocated == [16] * layers
    storage = rows.storage()
    rows.step(5)
    rows.step(6)
    taken = rows.remove(3, 9, 0)
    assert allocated == [16] * layers + [1] * 3 * layers  # the three leaving rows, each into its own storage
    # the last three rows took the three free slots; every other row stayed where it was
    assert rows.order == [13, 1, 2, 14, 4, 5, 6, 7, 8, 15, 10, 11, 12]
    rows.add(*taken[:2])
    rows.step(7)
    assert len(allocated) == 4 * layers and rows.storage() == storage


def test_a_batch_whose_keys_were_replaced_from_outside_starts_from_them():
    """Transformers may reindex a cache's rows (``batch_select_indices``): the batch then holds tensors it does
    not own, so it copies from them (never from its stale storage, never writing into them)."""
    model, _ = tiny_random_lm(seed=6)
    rows = Rows(model)
    rows.add(rows.session(_ids(5, 0)), rows.session(_ids(9, 1)), rows.session(_ids(7, 2)))
    rows.step(10)
    order = [2, 0, 1]
    for layer in rows.batch.cache.layers:
        layer.batch_select_indices(torch.tensor(order))
    given = [(layer.keys, layer.keys.clone()) for layer in rows.batch.cache.layers]
    rows.ids = [rows.ids[r] for r in order]
    rows.batch.lengths = [rows.batch.lengths[r] for r in order]
    rows.batch.pads = [rows.batch.pads[r] for r in order]
    rows.remove(0)
    rows.add(rows.session(_ids(4, 3)))
    rows.step(11)
    assert all(torch.equal(k, before) for k, before in given)
