"""The KL reference's log-probabilities without running its frozen trunk again.

When a full fine-tune trains only the top blocks (``ModelConfig.train_top_layers``), the embeddings and the
blocks under them never change: policy and reference hold the same weights there and compute the same hidden
states. So the update records what the policy's decoder hands its first trainable block (the hidden states and
the keyword arguments it passes every block: attention mask, positions, rotary embeddings, cache) and runs the
reference from there: its top blocks, its final norm, the head at the supervised positions. With 8 of
SmolLM2's 30 blocks trained that is about a quarter of the reference's forward, which is otherwise a quarter
of an update.

The same kernels on the same inputs give the same numbers, so this is exact, provided the trunks really are
equal: ``shared_trunk_depth`` compares them weight by weight rather than trusting the config (a checkpoint
trained with more blocks, loaded under fewer, would differ).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from muarl.models.logits import autocast_for, causal_lm_parts
from muarl.train.sequences import PaddedBatch, target_logprobs


def trunk_depth(model: Any) -> int:
    """How many bottom blocks are frozen with everything under them (the input embeddings): 0 when the
    embeddings train, when block 0 does, or when the model keeps no ``layers`` list."""
    decoder, _ = causal_lm_parts(model)
    blocks = getattr(decoder, "layers", None)
    if blocks is None or any(p.requires_grad for p in decoder.get_input_embeddings().parameters()):
        return 0
    for i, block in enumerate(blocks):
        if any(p.requires_grad for p in block.parameters()):
            return i
    return 0  # nothing in the blocks trains: no trunk to share with a reference that differs above it


def shared_trunk_depth(policy: Any, reference: Any) -> int:
    """``trunk_depth(policy)`` if the reference's embeddings and bottom blocks equal the policy's, else 0."""
    depth = trunk_depth(policy)
    if depth == 0:
        return 0
    pol, ref = causal_lm_parts(policy)[0], causal_lm_parts(reference)[0]
    pairs = [(pol.get_input_embeddings(), ref.get_input_embeddings())] + list(zip(pol.layers[:depth], ref.layers[:depth]))
    with torch.no_grad():
        for a, b in pairs:
            if not all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters())):
                return 0
    return depth


class TrunkTap:
    """What the policy's decoder handed block ``depth`` in its last forward under ``recording``."""

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError("a trunk tap needs at least one frozen block under it")
        self.depth = depth
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}

    @contextlib.contextmanager
    def recording(self, model: Any) -> Iterator[None]:
        def keep(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self.args, self.kwargs = args, kwargs

        decoder, _ = causal_lm_parts(model)
        handle = decoder.layers[self.depth].register_forward_pre_hook(keep, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()

    def clear(self) -> None:
        self.args, self.kwargs = (), {}


def reference_logprobs_from_tap(reference: Any, tap: TrunkTap, batch: PaddedBatch, *, bf16: bool, cache: Any = None,
                                temperature: float = 1.0) -> torch.Tensor:
    """The reference's log-probabilities at ``batch``'s supervised positions, its top blocks run from what the
    policy's forward of the same batch handed block ``tap.depth``. ``cache`` is the reference's own KV cache of a
    shared prefix (``SharedPrefix.cache_for``) in place of the policy's, or None without one."""
    if not tap.args:
        raise ValueError("the trunk tap recorded no forward: run the policy on this batch under tap.recording first")
    from transformers import Cache

    decoder, head = causal_lm_parts(reference)
    hidden, *rest = tap.args
    kwargs = {k: (cache if isinstance(v, Cache) else v) for k, v in tap.kwargs.items()}
    with torch.no_grad(), autocast_for(reference, bf16):
        hidden = hidden.detach()
        for block in decoder.layers[tap.depth:]:
            out = block(hidden, *rest, **kwargs)
            hidden = out[0] if isinstance(out, tuple) else out
        hidden = decoder.norm(hidden)
    target_mask = batch.loss_mask[:, 1:].to(hidden.device)
    return target_logprobs(head, hidden, batch.input_ids.to(hidden.device), target_mask, temperature)[0]
