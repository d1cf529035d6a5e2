"""The GRPO math of MUA-RL as pure tensor functions: no model, no optimiser, no I/O.

What the algorithm really is. For each task we sample a *group* of n episodes with the current policy
against the simulated user and score each with the binary outcome reward. There is no value network: an
episode's advantage is its reward standardised within its group, ``A = (r - mean) / (std + eps)`` (``std``
with Bessel's correction, as in the GRPO paper's reference code), and every policy-sampled token of the
episode gets that same advantage. Tokens the policy did not sample (system prompt, user turns, tool
results) have loss mask 0 and carry no gradient. The policy loss is PPO's clipped surrogate per token,
``max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))`` with ``ratio = exp(logp - logp_old)``;
``eps_high > eps_low`` is DAPO's "clip-higher". A KL penalty to a frozen reference policy is *added to the
loss* (not folded into the reward), estimated per token with Schulman's k1, k2 or k3 estimator (k3, the
default, is unbiased and never negative). Everything is averaged over all masked tokens of the batch
("token-mean", so long episodes weigh by their length, as in DAPO); Dr. GRPO's variant drops the std
normalisation and sums tokens per sequence instead, removing the length and difficulty biases. With a shaped
reward, the std can be the benchmark verdicts' instead (``std_of``), so that a fraction of the reward keeps its size.

Shapes: ``B`` sequences of ``T`` positions, ``V`` vocabulary entries. ``mask`` is 1 where a token was sampled
by the policy (float or bool), and position t's log-probability is that of token t given tokens < t.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

KLEstimator = Literal["k1", "k2", "k3"]
Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-sum"]


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, scale_by_std: bool = True,
                     std_of: torch.Tensor | None = None) -> torch.Tensor:
    """Advantages for rewards shaped ``[groups, n]``: reward minus its group's mean, over (std + eps).

    A group whose rewards are all equal gets zero advantages (so no policy gradient) in both modes.
    ``scale_by_std=False`` is Dr. GRPO (mean-centred only). ``std_of`` (shaped like ``rewards``: the
    benchmark's verdicts, 0 or 1) divides by *its* group std instead of the rewards' own, so that a shaped
    reward decides the order within a group while the verdict decides the step's size: standardised by their own
    std, ``[0.1, 0, 0, 0]`` and ``[1, 0, 0, 0]`` give the same advantages and a fraction paid for a breach would
    count for nothing. A group whose ``std_of`` is constant (every verdict the same) falls back to the rewards' std.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [groups, n] with n >= 2, got shape {tuple(rewards.shape)}")
    if std_of is not None and std_of.shape != rewards.shape:
        raise ValueError(f"std_of must be shaped like rewards {tuple(rewards.shape)}, got {tuple(std_of.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale_by_std:
        return centred
    std = rewards.std(dim=1, keepdim=True)
    if std_of is not None:
        verdict_std = std_of.float().std(dim=1, keepdim=True)
        std = torch.where(verdict_std > 0, verdict_std, std)
    return centred / (std + eps)


def kept_advantages(rewards: torch.Tensor, quarantined: torch.Tensor, min_kept: int = 2, eps: float = 1e-6,
                    scale_by_std: bool = True, std_of: torch.Tensor | None = None) -> torch.Tensor | None:
    """Advantages of one group's episodes that are not ``quarantined``, from their rewards alone: ``rewards`` and
    ``quarantined`` are ``[n]`` (float, bool), the result ``[kept]`` in the kept episodes' order, or None when
    fewer than ``min_kept`` (at least 2) remain and the group is dropped. ``std_of`` (``[n]``) is
    :func:`group_advantages`' and loses the same episodes.

    Quarantine is for episodes whose reward says nothing of the policy (a simulated user that left its script):
    kept in the group, a spoiled failure drags the mean down and hands every other episode a positive advantage
    it did not earn. Leaving it out rescores the group from what remains, as if it had been sampled without it.
    """
    if min_kept < 2:
        raise ValueError(f"min_kept must be at least 2 (advantages compare episodes), got {min_kept}")
    if rewards.dim() != 1 or quarantined.shape != rewards.shape:
        raise ValueError(f"rewards and quarantined must both be [n], got {tuple(rewards.shape)} and {tuple(quarantined.shape)}")
    if std_of is not None and std_of.shape != rewards.shape:
        raise ValueError(f"std_of must be [n] like rewards, got {tuple(std_of.shape)}")
    keep = ~quarantined.bool()
    kept = rewards[keep]
    if kept.numel() < min_kept:
        return None
    kept_std_of = None if std_of is None else std_of[keep].unsqueeze(0)
    return group_advantages(kept.unsqueeze(0), eps=eps, scale_by_std=scale_by_std, std_of=kept_std_of)[0]


def uniform_groups(correct: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(all correct, all wrong) per group, from a boolean ``[groups, n]`` tensor of episode successes."""
    return correct.all(dim=1), (~correct).all(dim=1)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position from ``[B, T, V]`` logits and ``[B, T]`` targets, in float32."""
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax distribution per position, ``[B, T, V] -> [B, T]``, in float32."""
    logits = logits.float()
    logz = torch.logsumexp(logits, dim=-1, keepdim=True)
    probs = torch.exp(logits - logz)
    return (logz.squeeze(-1) - (probs * logits).sum(dim=-1))


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' log-probabilities.

    With ``d = ref - logp``: k1 = -d (unbiased, high variance, can be negative); k2 = d^2 / 2 (biased, low
    variance); k3 = exp(d) - d - 1 (unbiased, low variance, >= 0). ``d`` is clamped to [-20, 20] so that
    one wild token cannot make the loss infinite.
    """
    d = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return torch.exp(d) - d - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; choose k1, k2 or k3")


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: Aggregation = "token-mean", seq_norm: float = 1.0) -> torch.Tensor:
    """Reduce per-token ``values [B, T]`` over masked tokens to a scalar.

    ``token-mean``: mean over every masked token of the batch. ``seq-mean-token-mean``: mean per sequence,
    then over sequences (the original GRPO). ``seq-sum``: sum per sequence divided by the constant
    ``seq_norm`` (Dr. GRPO uses the generation budget), then mean over sequences.
    A batch with no masked token reduces to 0 (with a gradient path), never NaN.
    """
    mask = mask.to(values.dtype)
    masked = values * mask
    if mode == "token-mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    per_seq_tokens = mask.sum(dim=1)
    if mode == "seq-mean-token-mean":
        return (masked.sum(dim=1) / per_seq_tokens.clamp(min=1.0)).mean()
    if mode == "seq-sum":
        return (masked.sum(dim=1) / seq_norm).mean()
    raise ValueError(f"unknown aggregation {mode!r}; choose token-mean, seq-mean-token-mean or seq-sum")


def clipped_policy_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
    clip_low: float = 0.2, clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate loss ``[B, T]`` and where clipping bit (bool ``[B, T]``).

    ``advantages`` is per sequence ``[B]`` (broadcast over its tokens) or per token ``[B, T]``.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


@dataclass
class LossTerms:
    """The scalar loss to backpropagate and the diagnostics that tell whether training is healthy."""

    loss: torch.Tensor
    policy_loss: float
    kl: float
    entropy: float
    clip_fraction: float
    ratio_mean: float


def grpo_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
    ref_logprobs: torch.Tensor | None = None, entropy: torch.Tensor | None = None,
    clip_low: float = 0.2, clip_high: float = 0.2, kl_coef: float = 0.001, kl_estimator: KLEstimator = "k3",
    entropy_coef: float = 0.0, aggregation: Aggregation = "token-mean", seq_norm: float = 1.0,
) -> LossTerms:
    """policy loss + kl_coef * KL(policy || reference) - entropy_coef * entropy, each aggregated the same way.

    ``ref_logprobs`` may be None only when ``kl_coef`` is 0; ``entropy`` (per token) is reported if given,
    and must be given when ``entropy_coef`` is not 0.
    """
    per_token, clipped = clipped_policy_loss(logprobs, old_logprobs, advantages, clip_low, clip_high)
    policy = aggregate(per_token, mask, aggregation, seq_norm)
    loss = policy
    kl_value = torch.zeros(())
    if ref_logprobs is not None:
        kl_value = aggregate(kl_to_reference(logprobs, ref_logprobs, kl_estimator), mask, aggregation, seq_norm)
        loss = loss + kl_coef * kl_value
    elif kl_coef != 0:
        raise ValueError("kl_coef is not 0 but no reference log-probabilities were given")
    entropy_value = torch.zeros(())
    if entropy is not None:
        entropy_value = aggregate(entropy, mask, aggregation, seq_norm)
        loss = loss - entropy_coef * entropy_value
    elif entropy_coef != 0:
        raise ValueError("entropy_coef is not 0 but no per-token entropy was given")
    maskf = mask.float()
    n_tokens = maskf.sum().clamp(min=1.0)
    with torch.no_grad():
        ratio_mean = (torch.exp(logprobs - old_logprobs) * maskf).sum() / n_tokens
        clip_fraction = (clipped.float() * maskf).sum() / n_tokens
    return LossTerms(
        loss=loss, policy_loss=float(policy.detach()), kl=float(kl_value.detach()), entropy=float(entropy_value.detach()),
        clip_fraction=float(clip_fraction), ratio_mean=float(ratio_mean),
    )
