"""One forward and one backward of the prompt prefix that every episode of an update shares.

A GRPO batch is n episodes of a few tasks that all open with the same system turn (policy text and tool
schemas: ~2,500 of a clinic episode's ~4,000 SmolLM2 tokens). Run one by one, the update spends most of its
time on that prefix, n times over. Here the prefix runs once per optimizer step:

1. ``encode_prefix`` runs the decoder over the shared ids and keeps its KV cache. With gradients, the cached
   keys and values are *detached copies that require grad* (leaves), and the graph-attached originals are kept;
2. every micro-batch runs only its suffix, attending to the leaves (``supervised_logprobs(..., prefix=)``);
   its backward fills the parameters' gradients for the suffix and accumulates d(loss)/d(prefix KV) on the leaves;
3. ``backward_prefix`` pushes those accumulated gradients through the prefix graph once.

By the chain rule the parameter gradients are exactly those of running every full sequence (the tests check
it to float32 round-off); only the summation order of floating-point terms differs. The prefix is cut before
the first supervised target of every sequence, so no target loses the hidden state that predicts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from muarl.models.kv_cache import LayerKV, cache_layers, make_cache
from muarl.models.logits import autocast_for, causal_lm_parts, returned_cache

MIN_SHARED_TOKENS = 16  # below this the bookkeeping costs more than the prefix forward it saves


def shared_prefix_length(sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]]) -> int:
    """Longest common prefix of token ids that ends before any sequence's first supervised target.

    A target at position t is predicted from the hidden state at t - 1, and a suffix forward starting at P
    yields hidden states from P on, so every supervised position must be > P."""
    if not sequences:
        return 0
    first, length = sequences[0], min(len(s) for s in sequences)
    for seq in sequences[1:]:
        same = 0
        while same < length and seq[same] == first[same]:
            same += 1
        length = same
    for mask in loss_masks:
        first_target = next((t for t, m in enumerate(mask) if m and t >= 1), len(mask))
        length = min(length, first_target - 1)
    return max(0, length)


def prefix_to_share(sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], *, enabled: bool = True) -> int:
    """``shared_prefix_length``, or 0 where sharing does not pay or cannot run: turned off (``enabled`` False,
    e.g. under gradient checkpointing, which drops the KV cache), fewer than two sequences, or fewer than
    ``MIN_SHARED_TOKENS`` shared tokens."""
    if not enabled or len(sequences) < 2:
        return 0
    cut = shared_prefix_length(sequences, loss_masks)
    return cut if cut >= MIN_SHARED_TOKENS else 0


@dataclass
class SharedPrefix:
    """The KV cache of ``length`` shared tokens (batch 1), and what its backward needs."""

    length: int
    leaves: LayerKV  # what suffix forwards attend to: detached leaves with grad, or plain tensors without
    roots: LayerKV | None = None  # the graph-attached originals (None when encoded without gradients)

    def cache_for(self, rows: int) -> object:
        """A fresh ``DynamicCache`` of the prefix for ``rows`` suffixes (views, no copy; never mutated)."""
        return make_cache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.leaves])


def encode_prefix(model: object, ids: Sequence[int], *, bf16: bool = False) -> SharedPrefix:
    """Run the decoder over ``ids``; under ``torch.no_grad()`` the cache is kept as is, otherwise as grad leaves."""
    decoder, _ = causal_lm_parts(model)
    device = next(model.parameters()).device
    with autocast_for(model, bf16):
        out = decoder(input_ids=torch.tensor([list(ids)], device=device), use_cache=True)
    cache = returned_cache(out)
    if cache is None:
        raise RuntimeError("the model returned no KV cache (gradient checkpointing disables it): turn share_prefix off")
    layers = cache_layers(cache)
    if not torch.is_grad_enabled():
        return SharedPrefix(len(ids), layers)
    # a frozen block's cache has no graph behind it: its leaf asks for no gradient, or the suffixes' backward
    # would run down through every frozen block for nothing (``train_top_layers``)
    leaves = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad)) for k, v in layers]
    return SharedPrefix(len(ids), leaves, roots=layers)


def backward_prefix(prefix: SharedPrefix) -> None:
    """Back-propagate the gradients the suffixes left on the prefix leaves through the prefix forward."""
    if prefix.roots is None:
        raise ValueError("this prefix was encoded without gradients")
    roots, grads = [], []
    for (k, v), (leaf_k, leaf_v) in zip(prefix.roots, prefix.leaves):
        for root, leaf in ((k, leaf_k), (v, leaf_v)):
            if leaf.grad is not None:
                roots.append(root)
                grads.append(leaf.grad.to(root.dtype))
    if roots:
        torch.autograd.backward(roots, grads)
