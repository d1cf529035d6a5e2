"""Demonstrations kept in GRPO's update: a supervised term against forgetting (InstructGPT's PPO-ptx, on chat data).

Why: on clinic-lite GRPO's first updates cost level-2 tasks the cold start solved (issue 21: 16 -> 9 of 16 on
validation after one update, although the batch held level-2 episodes), and the loss is in the update's direction,
not its size: the same step in random signs keeps all 16 (docs/benchmarks.md, twenty-fourth session). A policy
gradient from a few groups only sees the tasks it drew; nothing in it says what the rest of the policy should keep.
With ``anchor_coef`` each optimizer step also back-propagates ``anchor_coef`` times the mean negative
log-likelihood of the assistant tokens of ``anchor_per_step`` demonstrations (say, the cold start's own SFT data),
which pulls the update back toward the behaviour they show wherever the policy gradient is silent or weak. A KL
penalty cannot do this at a run's first step: the policy is its reference, so its gradient is zero.

The draw is a pure function of the optimizer step: epoch ``e`` of the demonstrations is a permutation seeded by
(seed, e), and step ``s`` takes the next ``anchor_per_step`` of that stream, so a resumed run anchors on what the
uninterrupted one would have. Demonstrations are tokenised exactly as SFT tokenises them, and their shared system
turn runs once per step (``muarl.train.sft.backward_nll``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from muarl.models.chat_formats import get_chat_format
from muarl.train.sft import Example, backward_nll, fit_examples, read_conversations, tokenize_conversation
from muarl.train.shared_prefix import prefix_to_share


class Anchor:
    """Tokenised demonstrations, drawn a few per optimizer step, and their weighted NLL back-propagated."""

    def __init__(self, path: str | Path, tokenizer: Any, chat_format: str, max_tokens: int, per_step: int, seed: int):
        fmt = get_chat_format(chat_format)

        def encode(text: str) -> list[int]:
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

        # a demonstration of a test task was refused by read_conversations: anchoring on one would leak it
        self.examples: list[Example] = fit_examples(
            [tokenize_conversation(m, t, fmt, encode) for m, t in read_conversations(path)], max_tokens)
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
