"""Training the top N decoder blocks only (``ModelConfig.train_top_layers``): which weights learn, that the
backward records nothing below them (the point: it costs N / L of a full backward), that updates with the
shared prefix, gradient checkpointing and SFT stay exact, and that the KL reference run from the policy's
frozen trunk (``muarl.train.frozen_trunk``) gives its whole forward's numbers."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from muarl.config import ConfigError
from muarl.domains import DOMAINS
from muarl.models.tiny import tiny_random_lm
from muarl.train.config import GRPOConfig, ModelConfig, SFTConfig
from muarl.train.frozen_trunk import TrunkTap, reference_logprobs_from_tap, shared_trunk_depth, trunk_depth
from muarl.train.model_setup import enable_checkpointing, freeze_below_top, load_trainable, trainable_parameters
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.sft import run_sft
from muarl.train.shared_prefix import backward_prefix, encode_prefix
from muarl.train.trainer import GRPOTrainer


def names_trainable(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_only_the_top_blocks_and_the_final_norm_are_trainable():
    model, _ = tiny_random_lm(seed=0, layers=4)
    freeze_below_top(model, 1)
    trainable = names_trainable(model)
    assert trainable == {n for n, _ in model.named_parameters() if n.startswith("model.layers.3.") or n == "model.norm.weight"}
    assert "model.embed_tokens.weight" not in trainable  # and so the head tied to it
    freeze_below_top(model, 4)
    assert trainable_parameters(model) and not names_trainable(model) & {"model.embed_tokens.weight"}
    assert {n for n in names_trainable(model) if ".layers." in n} == {n for n, _ in model.named_parameters() if ".layers." in n}


def test_more_blocks_than_the_model_has_or_lora_are_refused():
    model, _ = tiny_random_lm(seed=0, layers=2)
    with pytest.raises(ConfigError, match="3 blocks asked for, the model has 2"):
        freeze_below_top(model, 3)
    with pytest.raises(ValueError, match="with LoRA choose lora_targets"):
        ModelConfig(name="tiny-random", finetune="lora", train_top_layers=1)
    with pytest.raises(ValueError):
        ModelConfig(name="tiny-random", train_top_layers=0)


def shared_update(model, ids, masks, cut):
    """One weighted backward of every sequence's log-probs, the first ``cut`` tokens encoded once."""
    model.zero_grad(set_to_none=True)
    prefix = encode_prefix(model, ids[0][:cut])
    batch = pad_sequences([s[cut:] for s in ids], [m[cut:] for m in masks], 0)
    flat, _ = supervised_logprobs(model, batch, prefix=prefix)
    (flat * torch.linspace(-1.0, 1.0, flat.numel())).sum().backward()
    backward_prefix(prefix)
    return prefix


def sequences():
    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(5, 300, (30,), generator=gen).tolist()
    ids = [prefix + torch.randint(5, 300, (n,), generator=gen).tolist() for n in (12, 12)]
    masks = [[0] * 31 + [1] * 11 for _ in ids]
    return ids, masks


def test_nothing_below_the_top_blocks_enters_the_backward_with_a_shared_prefix():
    model, _ = tiny_random_lm(seed=2, layers=3)
    freeze_below_top(model, 1)
    seen = {}
    hooks = [block.register_forward_hook(lambda mod, args, out, i=i: seen.setdefault(i, []).append(
        (out[0] if isinstance(out, tuple) else out).requires_grad)) for i, block in enumerate(model.model.layers)]
    ids, masks = sequences()
    prefix = shared_update(model, ids, masks, cut=30)
    for hook in hooks:
        hook.remove()
    # the frozen blocks' cache is no leaf that asks for a gradient, so their suffix outputs carry no graph
    assert [k.requires_grad for k, _ in prefix.leaves] == [False, False, True]
    assert seen[0] == [False, False] and seen[1] == [False, False] and seen[2] == [True, True]
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None for n, g in grads.items() if not n.startswith(("model.layers.2.", "model.norm")))
    assert grads["model.layers.2.self_attn.k_proj.weight"].abs().sum() > 0  # the prefix's part reached the top block


def test_the_top_blocks_gradients_are_those_of_the_full_model_with_and_without_checkpointing():
    ids, masks = sequences()
    full, _ = tiny_random_lm(seed=2, layers=3)
    shared_update(full, ids, masks, cut=30)
    expected = {n: p.grad.clone() for n, p in full.named_parameters() if n.startswith("model.layers.2.")}
    for checkpointing in (False, True):
        model, _ = tiny_random_lm(seed=2, layers=3)
        freeze_below_top(model, 1)
        model.zero_grad(set_to_none=True)
        if checkpointing:  # no KV cache under checkpointing: whole sequences, as the trainer runs them then
            enable_checkpointing(model)
            model.train()
            flat, _ = supervised_logprobs(model, pad_sequences(ids, masks, 0))
            (flat * torch.linspace(-1.0, 1.0, flat.numel())).sum().backward()
        else:
            shared_update(model, ids, masks, cut=30)
        for name, grad in expected.items():
            got = dict(model.named_parameters())[name].grad
            assert got is not None, (checkpointing, name)
            torch.testing.assert_close(got, grad, atol=2e-5, rtol=1e-4, msg=f"{checkpointing} {name}")


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(DOMAINS, "toy", "booking_world:load")


def test_a_grpo_update_moves_the_top_block_only_and_sharing_the_prefix_changes_nothing(tmp_path, toy_registered):
    def trainer(name: str, share: bool) -> GRPOTrainer:
        cfg = GRPOConfig(out=str(tmp_path / name), domain="toy", steps=1, tasks_per_step=1, group_size=4, max_turns=2,
                         max_new_tokens=8, max_context=1024, micro_batch_size=2, lr=1e-3, plot=False, share_prefix=share,
                         model=ModelConfig(name="tiny-random", precision="fp32", train_top_layers=1))
        return GRPOTrainer(cfg, progress=False)

    plain, shared = trainer("plain", False), trainer("shared", True)
    start = {k: v.clone() for k, v in plain.model.state_dict().items()}
    assert len(plain.params) == len(trainable_parameters(plain.model)) < len(list(plain.model.parameters()))
    samples = list(zip(plain.rollout(plain.next_tasks())[0], [1.0, -1.0, 0.5, -0.5]))
    assert shared._shared_prefix(samples)[0] > 100
    plain.update(samples)
    shared.update(samples)
    top = f"model.layers.{plain.model.config.num_hidden_layers - 1}."
    after, after_shared = plain.model.state_dict(), shared.model.state_dict()
    for key, value in start.items():
        moved = not torch.equal(after[key], value)
        assert moved == (key.startswith(top) or key == "model.norm.weight"), key
        torch.testing.assert_close(after_shared[key], after[key], atol=1e-6, rtol=1e-5, msg=key)


def test_sft_with_frozen_blocks_keeps_them_and_saves_a_whole_model(tmp_path):
    conversation = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
                                 {"role": "assistant", "content": "Hello, how can I help?"}]}
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(conversation) + "\n")
    model_cfg = ModelConfig(name="tiny-random", precision="fp32", train_top_layers=1)
    start, _ = load_trainable(model_cfg)
    out = run_sft(SFTConfig(data=str(data), out=str(tmp_path / "run"), epochs=3, lr=1e-2, model=model_cfg), progress=False)
    saved, _ = load_trainable(ModelConfig(name=str(out), precision="fp32"))
    before, after = start.state_dict(), saved.state_dict()
    assert set(after) == set(before)
    top = f"model.layers.{start.config.num_hidden_layers - 1}."
    for key in before:
        assert torch.equal(after[key], before[key]) != (key.startswith(top) or key == "model.norm.weight"), key


def test_the_trunk_is_the_frozen_blocks_under_the_first_trainable_one():
    model, _ = tiny_random_lm(seed=0, layers=4)
    assert trunk_depth(model) == 0  # everything trains
    freeze_below_top(model, 1)
    assert trunk_depth(model) == 3
    reference = copy.deepcopy(model)
    assert shared_trunk_depth(model, reference) == 3
    with torch.no_grad():
        reference.model.layers[1].mlp.up_proj.weight.add_(1e-3)  # a checkpoint whose trunk was trained
    assert shared_trunk_depth(model, reference) == 0
    with pytest.raises(ValueError, match="at least one frozen block"):
        TrunkTap(0)


@pytest.mark.parametrize(("with_prefix", "bf16"), [(False, False), (True, False), (True, True)])
def test_the_reference_from_the_policys_trunk_equals_its_whole_forward(with_prefix, bf16):
    policy, _ = tiny_random_lm(seed=4, layers=3)
    freeze_below_top(policy, 1)
    reference = copy.deepcopy(policy).eval()
    with torch.no_grad():  # the policy has moved: only its top block differs from the reference
        for p in policy.model.layers[2].parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids, masks = sequences()
    cut = 30 if with_prefix else 0
    batch = pad_sequences([s[cut:] for s in ids], [m[cut:] for m in masks], 0)
    ref_prefix = None
    if with_prefix:
        with torch.no_grad():
            ref_prefix = encode_prefix(reference, ids[0][:cut], bf16=bf16)
    policy_prefix = encode_prefix(policy, ids[0][:cut], bf16=bf16) if with_prefix else None
    tap = TrunkTap(trunk_depth(policy))
    with tap.recording(policy):
        policy_flat, _ = supervised_logprobs(policy, batch, prefix=policy_prefix, temperature=0.7, bf16=bf16)
    with torch.no_grad():
        whole, _ = supervised_logprobs(reference, batch, prefix=ref_prefix, temperature=0.7, bf16=bf16)
    from_tap = reference_logprobs_from_tap(reference, tap, batch, bf16=bf16, temperature=0.7,
                                           cache=None if ref_prefix is None else ref_prefix.cache_for(len(ids)))
    assert not torch.allclose(policy_flat.detach(), whole)  # the policy is not its reference
    torch.testing.assert_close(from_tap, whole, atol=1e-6, rtol=1e-6)
    assert not from_tap.requires_grad
    tap.clear()
    with pytest.raises(ValueError, match="recorded no forward"):
        reference_logprobs_from_tap(reference, tap, batch, bf16=False)


def test_grpo_updates_with_and_without_the_trunk_tap_land_on_the_same_weights(tmp_path, toy_registered, monkeypatch):
    def trainer(name: str) -> GRPOTrainer:
        cfg = GRPOConfig(out=str(tmp_path / name), domain="toy", steps=1, tasks_per_step=1, group_size=4, max_turns=2,
                         max_new_tokens=8, max_context=1024, micro_batch_size=2, lr=1e-3, plot=False, kl_coef=0.5,
                         model=ModelConfig(name="tiny-random", precision="fp32", train_top_layers=1))
        return GRPOTrainer(cfg, progress=False)

    tapped, whole = trainer("tapped"), trainer("whole")
    monkeypatch.setattr(whole, "_trunk_tap", lambda: None)
    samples = list(zip(tapped.rollout(tapped.next_tasks())[0], [1.0, -1.0, 0.5, -0.5]))
    for _ in range(2):  # the first update is at the reference (no reference forward); the second runs it
        stats = [t.update(samples) for t in (tapped, whole)]
    assert tapped._trunk == 1 and stats[0]["kl"] > 0
    assert stats[0]["kl"] == pytest.approx(stats[1]["kl"], rel=1e-5)
    a, b = tapped.model.state_dict(), whole.model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5, msg=key)
