"""GRPO math against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from muarl.train.grpo import (
    aggregate,
    clipped_policy_loss,
    entropy_from_logits,
    group_advantages,
    grpo_loss,
    kept_advantages,
    kl_to_reference,
    token_logprobs,
    uniform_groups,
)


def close(a, b, tol=1e-5):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol, rtol=0)


def test_group_advantages_standardise_within_each_group():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards)
    # group 0: mean 0.5, sample std sqrt((4 * 0.25) / 3) = 0.57735 -> +-0.866025
    close(adv[0], [0.866025, -0.866025, -0.866025, 0.866025])
    close(adv[1], [0.0, 0.0, 0.0, 0.0])  # all equal: no signal
    # group 2: mean 0.25, std sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5 -> 1.5, -0.5
    close(adv[2], [1.5, -0.5, -0.5, -0.5])
    close(group_advantages(rewards, scale_by_std=False)[2], [0.75, -0.25, -0.25, -0.25])  # Dr. GRPO
    with pytest.raises(ValueError, match="groups, n"):
        group_advantages(torch.tensor([1.0, 0.0]))


def test_advantages_scaled_by_the_verdicts_std_keep_a_fractions_size():
    shaped = torch.tensor([[0.1, 0.0, 0.0, 0.0], [1.0, 0.1, 0.0, 0.0], [1.0, 0.1, 1.0, 1.0]])
    verdicts = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    # standardised by its own std, [0.1, 0, 0, 0] is [1, 0, 0, 0]: 1.5, -0.5 (the fraction is lost)
    close(group_advantages(shaped)[0], [1.5, -0.5, -0.5, -0.5], tol=1e-4)  # eps 1e-6 against a std of 0.05
    adv = group_advantages(shaped, std_of=verdicts)
    # group 0: centred [0.075, -0.025, ...] over the verdicts' std 0.5: a tenth of the outcome's 1.5, -0.5
    close(adv[0], [0.15, -0.05, -0.05, -0.05])
    # group 1: mean 0.275, centred [0.725, -0.175, -0.275, -0.275], verdicts [1, 1, 0, 0] std sqrt(1/3) = 0.57735
    close(adv[1], [1.255736, -0.303109, -0.476314, -0.476314])
    # group 2: every verdict 1 (std 0): the rewards' own std, mean 0.775, std sqrt(0.6075 / 3) = 0.45
    close(adv[2], [0.5, -1.5, 0.5, 0.5])
    close(group_advantages(shaped, scale_by_std=False, std_of=verdicts), group_advantages(shaped, scale_by_std=False))
    with pytest.raises(ValueError, match="std_of must be shaped like rewards"):
        group_advantages(shaped, std_of=verdicts[:, :2])
    # quarantine drops the same episodes from both: kept [0.1, 0, 0] with verdicts [1, 0, 0], std sqrt(1/3)
    kept = kept_advantages(shaped[0], torch.tensor([False, False, True, False]), std_of=verdicts[0])
    close(kept, [0.0666667 / 0.57735, -0.0333333 / 0.57735, -0.0333333 / 0.57735])


def test_kept_advantages_rescore_the_group_without_the_quarantined_episode():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    # episode 2 quarantined: kept [1, 0, 1], mean 2/3, sample std sqrt((1/9 + 4/9 + 1/9) / 2) = 0.57735
    close(kept_advantages(rewards, torch.tensor([False, False, True, False])), [0.57735, -1.154701, 0.57735])
    # with it, the same episodes get +-0.866: the spoiled failure lent the successes advantage
    close(group_advantages(rewards.unsqueeze(0))[0], [0.866025, -0.866025, -0.866025, 0.866025])
    close(kept_advantages(rewards, torch.tensor([False, False, True, False]), scale_by_std=False), [1 / 3, -2 / 3, 1 / 3])
    close(kept_advantages(rewards, torch.zeros(4, dtype=torch.bool)), group_advantages(rewards.unsqueeze(0))[0])  # none out
    # the only failures quarantined: what remains all succeeded, no signal
    close(kept_advantages(rewards, torch.tensor([False, True, True, False])), [0.0, 0.0])


def test_kept_advantages_drop_a_group_left_under_the_minimum():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert kept_advantages(rewards, torch.tensor([True, True, True, False])) is None  # one left: nothing to compare
    assert kept_advantages(rewards, torch.tensor([True, False, True, False]), min_kept=3) is None
    assert kept_advantages(rewards, torch.tensor([False, False, True, False]), min_kept=3) is not None
    with pytest.raises(ValueError, match="min_kept must be at least 2"):
        kept_advantages(rewards, torch.zeros(4, dtype=torch.bool), min_kept=1)
    with pytest.raises(ValueError, match="must both be"):
        kept_advantages(rewards, torch.zeros(3, dtype=torch.bool))


def test_uniform_groups():
    correct = torch.tensor([[True, True], [False, False], [True, False]])
    all_correct, all_wrong = uniform_groups(correct)
    assert all_correct.tolist() == [True, False, False] and all_wrong.tolist() == [False, True, False]


def test_clipped_policy_loss_by_hand():
    ratios = torch.tensor([[1.5, 0.5, 1.1, 0.7]])
    logp, old = torch.log(ratios), torch.zeros(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = clipped_policy_loss(logp, old, adv, 0.2, 0.2)
    # A>0: min(r, 1.2) -> -1.2, -0.5 ; A<0: max(r, 0.8) -> 1.1, 0.8
    close(loss, [[-1.2, -0.5, 1.1, 0.8]])
    assert clipped.tolist() == [[True, False, False, True]]
    loss_high, _ = clipped_policy_loss(logp, old, adv, 0.2, 0.28)  # clip-higher only widens the upper bound
    close(loss_high, [[-1.28, -0.5, 1.1, 0.8]])


def test_clipped_tokens_get_no_gradient():
    logp = torch.log(torch.tensor([[1.5, 0.9]])).requires_grad_()
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]))  # per-sequence advantage broadcast
    loss.sum().backward()
    close(logp.grad, [[0.0, -0.9]])  # d(-A * r)/d logp = -A * r


def test_aggregation_modes_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    close(aggregate(values, mask, "token-mean"), 7 / 3)
    close(aggregate(values, mask, "seq-mean-token-mean"), (1.5 + 4.0) / 2)
    close(aggregate(values, mask, "seq-sum", seq_norm=2.0), (3 / 2 + 4 / 2) / 2)
    close(aggregate(values, torch.zeros(2, 3), "token-mean"), 0.0)
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(values, mask, "mean")


def test_kl_estimators_by_hand():
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    d = math.log(0.5)  # ref - logp
    close(kl_to_reference(logp, ref, "k1"), [-d])
    close(kl_to_reference(logp, ref, "k2"), [0.5 * d * d])
    close(kl_to_reference(logp, ref, "k3"), [0.5 - d - 1])  # exp(d) - d - 1 = 0.193147
    close(kl_to_reference(logp, ref, "k3"), [0.193147])
    close(kl_to_reference(logp, logp, "k3"), [0.0])
    assert float(kl_to_reference(torch.tensor([0.0]), torch.tensor([-1e4]), "k3")) == pytest.approx(19.0, abs=1e-4)
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_to_reference(logp, ref, "k4")


def test_entropy_and_token_logprobs_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]])) + 7.0  # shift: softmax unchanged
    close(entropy_from_logits(logits), [[1.5 * math.log(2), math.log(3)]])
    close(token_logprobs(logits, torch.tensor([[0, 2]])), [[math.log(0.5), math.log(1 / 3)]])


def test_grpo_loss_combines_terms_with_token_mean():
    ratios = torch.tensor([[1.5, 0.5, 1.0], [1.1, 0.7, 1.0]])
    logp, old = torch.log(ratios), torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    ref = logp - math.log(2.0)  # d = ref - logp = -log 2 on every token: k3 = 1/2 + log 2 - 1
    entropy = torch.full((2, 3), 0.5)
    terms = grpo_loss(logp, old, adv, mask, ref_logprobs=ref, entropy=entropy, kl_coef=0.1, entropy_coef=0.01)
    policy = (-1.2 - 0.5 + 1.1 + 0.8) / 4
    kl = 0.5 + math.log(2) - 1
    assert terms.policy_loss == pytest.approx(policy, abs=1e-5)
    assert terms.kl == pytest.approx(kl, abs=1e-5)
    assert terms.entropy == pytest.approx(0.5)
    assert float(terms.loss) == pytest.approx(policy + 0.1 * kl - 0.01 * 0.5, abs=1e-5)
    assert terms.clip_fraction == pytest.approx(0.5)  # tokens 1.5 (A>0) and 0.7 (A<0)
    assert terms.ratio_mean == pytest.approx((1.5 + 0.5 + 1.1 + 0.7) / 4, abs=1e-5)
    with pytest.raises(ValueError, match="no reference"):
        grpo_loss(logp, old, adv, mask, kl_coef=0.1)
