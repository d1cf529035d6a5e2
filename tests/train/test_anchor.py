"""GRPO's anchor (PPO-ptx on demonstrations): the draw per optimizer step, the gradient it adds, and resume."""

from __future__ import annotations

import json

import pytest
import torch

from muarl.models.tiny import tiny_tokenizer
from muarl.train.anchor import Anchor, relative_weight
from muarl.train.config import GRPOConfig
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.trainer import GRPOTrainer

from test_sft import conversation
from test_trainer import config, parity_reward, toy_registered, weights  # noqa: F401 - the toy domain fixture comes along


def demos(tmp_path, n: int = 5):
    path = tmp_path / "demos.jsonl"
    rows = [conversation(f"N{i}", "k" * (i + 1), f"Found it{'!' * i}.") for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_each_epoch_of_the_draw_is_a_permutation_and_the_draw_depends_on_the_step_alone(tmp_path):
    anchor = Anchor(demos(tmp_path), tiny_tokenizer(), "chatml-hermes", 1024, per_step=2, seed=3)
    stream = [i for step in range(5) for i in anchor.indices(step)]  # 10 draws: two epochs of 5
    assert sorted(stream[:5]) == sorted(stream[5:]) == [0, 1, 2, 3, 4]
    assert stream[:5] != stream[5:] or stream[:5] != [0, 1, 2, 3, 4]  # epochs are reshuffled, not the file's order twice
    again = Anchor(demos(tmp_path), tiny_tokenizer(), "chatml-hermes", 1024, per_step=2, seed=3)
    assert [again.indices(s) for s in (4, 0, 2)] == [anchor.indices(s) for s in (4, 0, 2)]
    assert [Anchor(demos(tmp_path), tiny_tokenizer(), "chatml-hermes", 1024, 2, seed=4).indices(s) for s in range(5)] != \
        [anchor.indices(s) for s in range(5)]


def test_an_update_with_zero_advantages_moves_the_weights_by_the_anchors_gradient_alone(tmp_path):
    """With every advantage 0 and no KL the policy loss has no gradient: what reaches the optimizer is coef times the
    gradient of the mean NLL of the step's demonstrations, computed here on whole conversations (the trainer runs
    their shared system turn once)."""
    coef = 0.25
    trainer = GRPOTrainer(config(tmp_path / "run", kl_coef=0.0, anchor_coef=coef, anchor_data=str(demos(tmp_path)),
                                 anchor_per_step=3, grad_clip=1e9), progress=False)
    group = trainer.rollout(trainer.next_tasks())[0]
    picked = [trainer.anchor.examples[i] for i in trainer.anchor.indices(0)]
    trainer.model.zero_grad(set_to_none=True)
    total = sum(sum(m[1:]) for _, m in picked)
    nll = sum(-supervised_logprobs(trainer.model, pad_sequences([ids], [m], 0))[0].sum() for ids, m in picked) / total
    (coef * nll).backward()
    expected = [p.grad.clone() for p in trainer.params]
    seen = []
    trainer.optimizer.step = lambda: seen.append([p.grad.clone() for p in trainer.params])
    stats = trainer.update([(e, 0.0) for e in group])
    assert stats["anchor_nll"] == pytest.approx(float(nll.detach()), rel=1e-5)
    assert any(g.abs().sum() > 0 for g in expected)
    for got, want in zip(seen[0], expected):
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-4)
    trainer.close()


def test_without_the_anchor_the_same_update_moves_nothing_and_logs_no_nll(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "run", kl_coef=0.0), progress=False)
    group = trainer.rollout(trainer.next_tasks())[0]
    before = weights(trainer)
    stats = trainer.update([(e, 0.0) for e in group])
    assert "anchor_nll" not in stats and all(torch.equal(before[k], v) for k, v in weights(trainer).items())
    trainer.close()


def test_an_anchored_run_resumed_lands_on_the_uninterrupted_runs_weights(tmp_path):
    anchored = {"anchor_coef": 0.5, "anchor_data": str(demos(tmp_path)), "anchor_per_step": 2}
    straight = GRPOTrainer(config(tmp_path / "a", **anchored), reward_fn=parity_reward, progress=False)
    straight.start()
    straight.train()
    first = GRPOTrainer(config(tmp_path / "b", steps=1, **anchored), reward_fn=parity_reward, progress=False)
    first.start()
    first.train()
    resumed = GRPOTrainer(config(tmp_path / "b", **anchored), reward_fn=parity_reward, progress=False)
    resumed.start(resume=True)
    resumed.train()
    a, b = weights(straight), weights(resumed)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5)
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["anchor_nll"] > 0 for r in rows)


def test_an_anchor_weight_without_demonstrations_is_refused(tmp_path):
    with pytest.raises(ValueError, match="anchor_data"):
        GRPOConfig(out=str(tmp_path), domain="toy", anchor_coef=0.1)


def test_the_relative_weight_makes_the_anchors_gradient_the_given_fraction_of_the_policys():
    # hand-computed: a policy gradient of norm 0.3 and an anchor gradient of norm 0.27 (bf16 seed 1's cold start)
    assert relative_weight(0.3, 0.27, 0.7) == pytest.approx(0.7 * 0.3 / 0.27)  # 0.7778: the anchor's norm becomes 0.21
    assert relative_weight(0.3, 0.27, 0.7) * 0.27 == pytest.approx(0.21)
    assert relative_weight(0.0, 0.27, 0.7) == 0.0  # no policy gradient: the anchor does not move the weights alone
    assert relative_weight(0.3, 0.0, 0.7) == 0.0


def test_with_a_gradient_ratio_the_optimizer_sees_the_policy_gradient_plus_the_anchors_scaled_to_that_fraction(tmp_path):
    """The same batch three ways: the policy gradient alone, the anchor's alone (weight 1), and the ratio form; what
    reaches the optimizer in the last is g_policy + w * g_anchor with |w * g_anchor| = ratio * |g_policy|."""
    anchored = {"anchor_data": str(demos(tmp_path)), "anchor_per_step": 3}

    def seen_grads(out, **changes):
        trainer = GRPOTrainer(config(tmp_path / out, grad_clip=1e9, kl_coef=0.0, **changes), reward_fn=parity_reward, progress=False)
        group = trainer.rollout(trainer.next_tasks())[0]
        samples, _ = trainer.training_samples([group])
        assert samples and any(a != 0 for _, a in samples)  # the parity reward gives the group signal
        seen = []
        trainer.optimizer.step = lambda: seen.append([p.grad.clone() for p in trainer.params])
        stats = trainer.update(samples)
        trainer.close()
        return seen[0], stats

    policy, _ = seen_grads("p")
    anchor_and_policy, _ = seen_grads("a", anchor_coef=1.0, **anchored)
    anchor = [ap - p for ap, p in zip(anchor_and_policy, policy)]
    mixed, stats = seen_grads("r", anchor_grad_ratio=0.5, **anchored)
    norm = lambda gs: float(torch.sqrt(sum((g.double() ** 2).sum() for g in gs)))  # noqa: E731
    weight = 0.5 * norm(policy) / norm(anchor)
    assert stats["anchor_weight"] == pytest.approx(weight, rel=1e-3)
    for got, p, a in zip(mixed, policy, anchor):
        torch.testing.assert_close(got, p + weight * a, atol=2e-6, rtol=1e-3)
    assert norm([m - p for m, p in zip(mixed, policy)]) == pytest.approx(0.5 * norm(policy), rel=1e-3)


def test_a_fixed_anchor_weight_and_a_gradient_ratio_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="set one"):
        GRPOConfig(out=str(tmp_path), domain="toy", anchor_coef=0.1, anchor_grad_ratio=0.5, anchor_data=str(demos(tmp_path)))
    with pytest.raises(ValueError, match="anchor_data"):
        GRPOConfig(out=str(tmp_path), domain="toy", anchor_grad_ratio=0.5)
