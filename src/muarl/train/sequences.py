"""Token sequences to training tensors, and the one forward pass both SFT and GRPO use.

Labels come from the loss mask, never from the pad id: SmolLM2's end-of-turn token is also its pad token,
and a collator that masked padding by id would never teach the model to stop.

The forward pass computes logits only where the loss mask is 1 (the decoder runs on every token, the
vocabulary projection only on supervised ones). Supervised tokens are a small share of a multi-turn episode
(system prompt and tool results dominate), so this saves most of the memory and time of a [B, T, V] logits
tensor. It assumes logits = lm_head(last hidden state), true of Llama, Qwen, Mistral and SmolLM families. The
projection runs in float32 under any autocast, as the sampler's does (``muarl.models.logits``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from muarl.models.logits import autocast_for, cache_argument, causal_lm_parts, float32_logits
from muarl.train.grpo import entropy_from_logits, token_logprobs

if TYPE_CHECKING:
    from muarl.train.shared_prefix import SharedPrefix


@dataclass
class PaddedBatch:
    """Right-padded sequences; ``loss_mask[b, t]`` is 1 when token t of row b is supervised."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    loss_mask: torch.Tensor  # [B, T] bool
    extra: torch.Tensor | None = None  # [B, T] float per-token values (e.g. sampling logprobs), 0 on padding

    @property
    def supervised_tokens(self) -> int:
        return int(self.loss_mask[:, 1:].sum())


def pad_sequences(ids: list[list[int]], masks: list[list[int]], pad_id: int, extra: list[list[float]] | None = None) -> PaddedBatch:
    if not ids:
        raise ValueError("cannot build a batch from no sequences")
    width = max(len(x) for x in ids)
    b = len(ids)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    loss_mask = torch.zeros((b, width), dtype=torch.bool)
    values = torch.zeros((b, width), dtype=torch.float32) if extra is not None else None
    for i, (seq, mask) in enumerate(zip(ids, masks)):
        if len(seq) != len(mask):
            raise ValueError(f"sequence {i}: {len(seq)} ids but {len(mask)} mask entries")
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        loss_mask[i, : len(seq)] = torch.tensor(mask, dtype=torch.bool)
        if values is not None:
            values[i, : len(seq)] = torch.tensor(extra[i], dtype=torch.float32)
    return PaddedBatch(input_ids, attention, loss_mask, values)


def supervised_logprobs(
    model: Any, batch: PaddedBatch, *, bf16: bool = False, with_entropy: bool = False, prefix: SharedPrefix | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token t | tokens < t) at every supervised position t >= 1, flattened in row-major order.

    ``temperature`` scales the logits as the sampler did (``softmax(logits / T)``): the policy RL trains is
    the distribution the rollouts were drawn from, so at T != 1 the ratio, the KL and the entropy must be
    computed at that T too, or they belong to another policy. SFT uses T = 1.

    With ``prefix`` (``muarl.train.shared_prefix``), ``batch`` holds the rows *after* those shared tokens and
    attends to their cached keys and values instead of recomputing them.

    Returns ([N] float32 logprobs, [N] float32 entropies or None); N = ``batch.supervised_tokens``.
    """
    decoder, head = causal_lm_parts(model)
    device = next(model.parameters()).device
    ids = batch.input_ids.to(device)
    target_mask = batch.loss_mask[:, 1:].to(device)
    attention = batch.attention_mask.to(device)
    past = {}
    if prefix is not None:
        rows = ids.shape[0]
        attention = torch.cat([torch.ones(rows, prefix.length, dtype=attention.dtype, device=device), attention], dim=1)
        past = {cache_argument(decoder): prefix.cache_for(rows), "use_cache": True}
    with autocast_for(model, bf16):
        hidden = decoder(input_ids=ids, attention_mask=attention, **past).last_hidden_state
    return target_logprobs(head, hidden, ids, target_mask, temperature, with_entropy)


def target_logprobs(head: Any, hidden: torch.Tensor, ids: torch.Tensor, target_mask: torch.Tensor, temperature: float = 1.0,
                    with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """From the decoder's last hidden states [B, T, H]: the head, in float32, only where ``target_mask`` [B, T-1]
    marks a target, then log p(target) at ``temperature`` (and the entropy)."""
    if temperature <= 0:
        raise ValueError(f"log-probabilities need a temperature > 0, got {temperature} (greedy decoding is not trained on)")
    logits = float32_logits(head, hidden[:, :-1][target_mask])
    if temperature != 1.0:
        logits = logits / temperature
    targets = ids[:, 1:][target_mask]
    logprobs = token_logprobs(logits, targets)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logprobs, entropy


def scatter_rows(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put flattened per-token values back at their [B, T-1] target positions (zeros elsewhere)."""
    out = torch.zeros(mask.shape, dtype=flat.dtype, device=flat.device)
    out[mask.to(flat.device)] = flat
    return out
