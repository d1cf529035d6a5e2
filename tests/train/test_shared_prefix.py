"""Encoding the shared prompt prefix once must change nothing but the cost: the same log-probabilities and the
same parameter gradients as running every full sequence, and the same weights after a GRPO update."""

from __future__ import annotations

import pytest
import torch

from muarl.domains import DOMAINS
from muarl.models.tiny import tiny_random_lm
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.shared_prefix import (
    backward_prefix,
    encode_prefix,
    shared_prefix_length,
)
from muarl.train.trainer import GRPOTrainer


def test_prefix_length_stops_at_the_first_difference_and_before_the_first_target():
    a, b = [1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 5, 6]
    assert shared_prefix_length([a, b], [[0] * 6, [0] * 6]) == 3
    # a target at position 3 is predicted from the hidden state at 2: the prefix must end before position 3
    assert shared_prefix_length([a, a], [[0, 0, 0, 1, 1, 1], [0] * 6]) == 2
    assert shared_prefix_length([a, a[:4]], [[0] * 6, [0] * 4]) == 3  # every suffix keeps at least one token
    assert shared_prefix_length([], []) == 0
    assert shared_prefix_length([a], [[0, 1, 1, 1, 1, 1]]) == 0  # position 0 is never a target; 1 is


def sequences(seed: int = 0):
    """Four sequences sharing a 40-token prefix, suffixes of different lengths with scattered targets."""
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(5, 300, (40,), generator=gen).tolist()
    ids, masks = [], []
    for n in (23, 9, 31, 17):
        suffix = torch.randint(5, 300, (n,), generator=gen).tolist()
        mask = [0] * 40 + [int(x) for x in (torch.rand(n, generator=gen) < 0.5).tolist()]
        mask[40] = 0  # the first suffix token is context, as a user turn is
        ids.append(prefix + suffix)
        masks.append(mask)
    return ids, masks


def full_gradients(model, ids, masks, weights):
    model.zero_grad(set_to_none=True)
    for seq, mask, w in zip(ids, masks, weights):
        flat, _ = supervised_logprobs(model, pad_sequences([seq], [mask], 0))
        (flat.sum() * w).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def shared_gradients(model, ids, masks, weights, micro: int):
    model.zero_grad(set_to_none=True)
    cut = shared_prefix_length(ids, masks)
    prefix = encode_prefix(model, ids[0][:cut])
    for start in range(0, len(ids), micro):
        rows = range(start, min(start + micro, len(ids)))
        batch = pad_sequences([ids[i][cut:] for i in rows], [masks[i][cut:] for i in rows], 0)
        flat, _ = supervised_logprobs(model, batch, prefix=prefix)
        counts = [sum(masks[i][cut + 1:]) for i in rows]
        w = torch.cat([torch.full((c,), weights[i]) for c, i in zip(counts, rows)])
        (flat * w).sum().backward()
    backward_prefix(prefix)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("micro", [1, 3])
def test_shared_prefix_gives_the_full_sequences_logprobs_and_gradients(micro):
    model, _ = tiny_random_lm(seed=3)
    ids, masks = sequences()
    assert shared_prefix_length(ids, masks) == 40
    with torch.no_grad():
        full = torch.cat([supervised_logprobs(model, pad_sequences([s], [m], 0))[0] for s, m in zip(ids, masks)])
        prefix = encode_prefix(model, ids[0][:40])
        assert prefix.roots is None  # no graph kept without gradients
        batch = pad_sequences([s[40:] for s in ids], [m[40:] for m in masks], 0)
        shared = supervised_logprobs(model, batch, prefix=prefix)[0]
    torch.testing.assert_close(shared, full, atol=1e-5, rtol=1e-5)

    weights = [0.7, -1.3, 0.2, 1.1]
    expected = full_gradients(model, ids, masks, weights)
    got = shared_gradients(model, ids, masks, weights, micro)
    assert any(g.abs().sum() > 0 for n, g in expected.items() if "layers.0." in n)  # the prefix layers do learn
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=2e-5, rtol=1e-4, msg=name)


def test_backward_prefix_needs_a_prefix_encoded_with_gradients():
    model, _ = tiny_random_lm(seed=0)
    with torch.no_grad():
        prefix = encode_prefix(model, list(range(5, 25)))
    with pytest.raises(ValueError, match="without gradients"):
        backward_prefix(prefix)


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(DOMAINS, "toy", "booking_world:load")


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_grpo_update_with_and_without_prefix_sharing_lands_on_the_same_weights(tmp_path, toy_registered, finetune):
    def trainer(name: str, share: bool) -> GRPOTrainer:
        cfg = GRPOConfig(out=str(tmp_path / name), domain="toy", steps=1, tasks_per_step=1, group_size=4, max_turns=2,
                         max_new_tokens=8, max_context=1024, micro_batch_size=2, lr=1e-4, plot=False,
                         model=ModelConfig(name="tiny-random", precision="fp32", finetune=finetune, lora_r=4), share_prefix=share)
        return GRPOTrainer(cfg, progress=False)

    plain, shared = trainer("plain", False), trainer("shared", True)
    group = plain.rollout(plain.next_tasks())[0]
    samples = list(zip(group, [1.0, -1.0, 0.5, -0.5]))
    cut = shared._shared_prefix(samples)[0]
    assert cut > 100  # the system turn is shared, so the test exercises the shared path
    stats_plain, stats_shared = plain.update(samples), shared.update(samples)
    for key in ("policy_loss", "kl", "entropy", "grad_norm"):
        assert stats_shared[key] == pytest.approx(stats_plain[key], rel=1e-4, abs=1e-6), key
    a, b = plain.model.state_dict(), shared.model.state_dict()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=1e-5, msg=key)
