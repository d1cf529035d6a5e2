"""Demonstrations kept in GRPO's update: a supervised term against forgetting (InstructGPT's PPO-ptx, on chat data).

Why: on clinic-lite GRPO's first updates cost level-2 tasks the cold start solved (issue 21: 16 -> 9 of 16 on
validation after one update, although the batch held level-2 episodes), and the loss is in the update's direction,
not its size: the same step in random signs keeps all 16 (docs/benchmarks.md, twenty-fourth session). A policy
gradient from a few groups only sees the tasks it drew; nothing in it says what the rest of the policy should keep.
With ``anchor_coef`` each optimizer step also back-propagates ``anchor_coef`` times the mean negative
log-likelihood of the assistant tokens of ``anchor_per_step`` demonstrations (say, the cold start's own SFT data),
which pulls the update back toward the behaviour they show wherever the policy gradient is silent or weak. A KL
penalty cannot do this at a run's first step: the policy is its reference, so its gradient is zero.

A fixed weight does not say how hard the anchor pulls: that is its gradient against the policy's, and AdamW's first
step moves every weight by the learning rate in the sign of the sum, so whichever term is larger there decides the
direction. At weight 3 the anchor's gradient was 0.7x the policy's on one cold start (level 2 kept, the change of
mind learnt) and 2.8x on another (bf16 seed 1: all four updates lost level 2 alike, and the same first step without
the anchor kept it); weight 10 on the first did the same as 3 on the second. With ``anchor_grad_ratio`` each step
sets the weight so the anchor's gradient norm is that fraction of the policy gradient's (:func:`relative_weight`).
It is not enough there: at 0.7 the same bf16 seed-1 step still lost level 2 (docs/benchmarks.md, twenty-eighth
session), so that cold start's anchor costs level 2 by its direction as well as its size.

The draw is a pure function of the optimizer step: epoch ``e`` of the demonstrations is a permutation seeded by
(seed, e), and step ``s`` takes the next ``anchor_per_step`` of that stream, so a resumed run anchors on what the
uninterrupted one would have. Demonstrations are tokenised exactly as SFT tokenises them, and their shared system
turn runs once per step (``muarl.train.sft.backward_nll``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from muarl.train.sft import Example, backward_nll, demonstration_examples, fit_examples
from muarl.train.shared_prefix import prefix_to_share


class Anchor:
    """Tokenised demonstrations, drawn a few per optimizer step, and their weighted NLL back-propagated."""

    def __init__(self, path: str | Path, tokenizer: Any, chat_format: str, max_tokens: int, per_step: int, seed: int):
        # a demonstration of a test task was refused by read_conversations: anchoring on one would leak it
        self.examples: list[Example] = fit_examples(
            demonstration_examples(path, tokenizer, chat_format), max_tokens)
        self.per_step = min(per_step, len(self.examples))
        self.seed = seed
        self.max_tokens = max_tokens
        self.pad_id = tokenizer.pad_token_id

    def indices(self, step: int) -> list[int]:
        """The demonstrations optimizer step ``step`` (0-based) anchors on: positions ``step * per_step`` onward of
        the concatenated seeded epochs."""
        n, out = len(self.examples), []
        for position in range(step * self.per_step, (step + 1) * self.per_step):
            epoch, offset = divmod(position, n)
            order = list(range(n))
            random.Random(f"{self.seed}/anchor/{epoch}").shuffle(order)
            out.append(order[offset])
        return out

    def backward(self, model: Any, step: int, coef: float, *, bf16: bool, share_prefix: bool) -> tuple[float, int]:
        """Back-propagate ``coef`` times the mean NLL of step ``step``'s demonstrations; (that mean NLL, tokens)."""
        picked = [self.examples[i] for i in self.indices(step)]
        ids = [x[: self.max_tokens] for x, _ in picked]
        masks = [m[: self.max_tokens] for _, m in picked]
        cut = prefix_to_share(ids, masks, enabled=share_prefix)
        rows = [(x[cut:], m[cut:]) for x, m in zip(ids, masks)]
        nll, tokens = backward_nll(model, rows, self.pad_id, bf16=bf16, prefix_ids=ids[0][:cut] if cut else None, scale=coef)
        return nll, tokens

    def backward_relative(self, model: Any, params: list[torch.Tensor], step: int, ratio: float, *, bf16: bool,
                          share_prefix: bool) -> tuple[float, float]:
        """Add the anchor's gradient to the policy gradient already in ``params``' ``.grad``, weighted so its norm is
        ``ratio`` times the policy gradient's; (the mean NLL, the weight it got)."""
        policy = [p.grad.detach().clone() if p.grad is not None else None for p in params]
        policy_norm = _norm(policy)
        for p in params:
            p.grad = None
        nll, _ = self.backward(model, step, 1.0, bf16=bf16, share_prefix=share_prefix)
        weight = relative_weight(policy_norm, _norm([p.grad for p in params]), ratio)
        for p, g in zip(params, policy):
            if p.grad is None:
                p.grad = g
                continue
            p.grad.mul_(weight)
            if g is not None:
                p.grad.add_(g)
        return nll, weight


def relative_weight(policy_norm: float, anchor_norm: float, ratio: float) -> float:
    """The weight that makes an anchor gradient of norm ``anchor_norm`` ``ratio`` times ``policy_norm`` long; 0 when
    either is 0 (no policy gradient: nothing for the anchor to be measured against, and it does not move alone)."""
    if policy_norm <= 0 or anchor_norm <= 0:
        return 0.0
    return ratio * policy_norm / anchor_norm


def _norm(grads: list[torch.Tensor | None]) -> float:
    return float(torch.nn.utils.get_total_norm([g for g in grads if g is not None]))
