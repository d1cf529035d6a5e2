"""Attention that reads a shared prompt prefix once per forward for all the rows that start with it (what
serving engines call cascade attention).

Why. Every episode of a domain opens with the same system turn: the policy and the tool schemas, ~2,500
SmolLM2 tokens in the clinic. Its keys and values are computed once (:class:`~muarl.models.kv_cache.PrefixCache`),
but each session used to copy them into its own cache, so a batched decode step of 64 rows read 64 copies of
them: at 64 rows of ~2,800 tokens, most of the step's memory traffic, and 64 copies of the same ~60 MB
(bfloat16) in memory. Here a session's cache holds only its own tokens after the prefix, the prefix is kept
once (:class:`SharedPrefix`), and each layer's attention is computed in two parts:

- the rows' queries against the shared prefix, all rows of a group in one kernel call (the rows are folded
  into the query length, so the prefix's keys are read once for the batch);
- each row's queries against its own tokens (left padding and future positions masked).

Softmax over the concatenation of two key sets equals the mix of the two parts' softmax outputs weighted by
their normalisers: with ``lse`` the log-sum-exp of a part's scores,
``out = exp(lse_p - lse) * out_p + exp(lse_s - lse) * out_s`` where ``lse = logaddexp(lse_p, lse_s)``, that
is ``out = out_p + sigmoid(lse_s - lse_p) * (out_s - out_p)``: three small ops a layer (``torch.lerp``) where
the first form takes eight, on a decode step's every layer. The merge is exact up to rounding (float32
log-probabilities agree with attention over the full cache to ~1e-6; ``tests/models/test_prefix_attention.py``).

Both parts run torch's CPU flash-attention kernel, the one ``scaled_dot_product_attention`` uses on CPU, called
through the op that also returns the log-sum-exp. Grouped-query attention is handled by folding each key
head's group of query heads into the query length (query head ``h`` reads key head ``h // group``, as
transformers' ``repeat_kv`` does), so no key is repeated.

How it plugs into transformers. The forwards that use it (the local engine's rollouts) run inside
:func:`prefix_attention`, which switches the model's attention implementation to this function for their
duration; they pass the rows' prefixes as a keyword argument, which transformers hands down to every
attention call, and a ready 4-D mask over the rows' own tokens, which it passes through unchanged. Training
forwards never enter it. Only plain softmax attention over every position is supported (no sliding window,
logit soft-capping or attention sinks: :func:`supports_prefix_attention`); other models keep a copy of the
prefix per session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from muarl.models.logits import cache_argument, causal_lm_parts, last_token_logits

ATTENTION = "muarl_prefix_shared"
ROWS_KEYWORD = "muarl_prefix_rows"
_UNSUPPORTED = ("softcap", "sliding_window", "s_aux")  # attention variants this merge does not reproduce


@dataclass(frozen=True, eq=False)
class SharedPrefix:
    """The keys and values of a prompt prefix, stored once and never written into; sessions that start with it
    hold only the tokens after it. Compared by identity: one object per cached prefix."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [1, kv_heads, length, head_dim]
    length: int


@dataclass(frozen=True)
class PrefixRows:
    """The rows of one forward grouped by the prefix they start with (rows with none are in no group), and the
    additive form of the forward's mask, made by the first layer and read by the others."""

    groups: tuple[tuple[SharedPrefix, torch.Tensor | None], ...]  # (prefix, row indices; None: every row)
    _additive: dict[tuple[torch.dtype, int], torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    def additive_mask(self, mask: torch.Tensor, dtype: torch.dtype, group: int) -> torch.Tensor:
        """``mask`` ``[rows, 1, new, width]`` (True: attend) as the additive ``[rows, 1, group * new, width]`` mask
        of the query heads folded by key head (0 where attended, -inf elsewhere), in ``dtype``."""
        key = (dtype, group)
        if key not in self._additive:
            rows, _, new, width = mask.shape
            hidden = ~mask[:, :, None].expand(rows, 1, group, new, width).reshape(rows, 1, group * new, width)
            self._additive[key] = torch.zeros(hidden.shape, dtype=dtype, device=mask.device).masked_fill_(hidden, float("-inf"))
        return self._additive[key]

    @classmethod
    def of(cls, prefixes: Sequence[SharedPrefix | None]) -> PrefixRows:
        rows: dict[int, list[int]] = {}
        by_id: dict[int, SharedPrefix] = {}
        for r, prefix in enumerate(prefixes):
            if prefix is not None:
                rows.setdefault(id(prefix), []).append(r)
                by_id[id(prefix)] = prefix
        return cls(tuple((by_id[key], None if len(members) == len(prefixes) else torch.tensor(members))
                         for key, members in rows.items()))


def forward_inputs(prefixes: Sequence[SharedPrefix | None], cached: Sequence[int], pads: Sequence[int],
                   new_tokens: int, device: torch.device | str = "cpu") -> dict[str, Any]:
    """What a forward of ``new_tokens`` per row over caches of the rows' own tokens needs besides the ids and the
    cache: each row's true positions (its prefix and its ``cached`` tokens come first), a boolean
    ``[rows, 1, new_tokens, width + new_tokens]`` mask (``width`` = ``cached + pads``, equal for all rows: each row
    sees its own tokens, not its ``pads`` of left padding, and the new tokens causally), and the rows' prefixes."""
    width = cached[0] + pads[0]
    if any(n + p != width for n, p in zip(cached, pads)):
        raise ValueError("every row's cached tokens and left padding must fill the same width")
    starts = torch.tensor([(p.length if p is not None else 0) + n for p, n in zip(prefixes, cached)])
    steps = torch.arange(new_tokens)
    columns = torch.arange(width + new_tokens)
    visible = columns[None, :] <= width + steps[:, None]  # [new, columns]: causal over the new tokens
    mask = visible[None] & (columns[None, None, :] >= torch.tensor(list(pads))[:, None, None])
    return {"position_ids": (starts[:, None] + steps[None]).to(device), "attention_mask": mask[:, None].to(device),
            ROWS_KEYWORD: PrefixRows.of(prefixes)}


def _flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
           scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, float32 log-sum-exp of the scores) of softmax attention, ``mask`` additive in the query's dtype."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, False, attn_mask=mask, scale=scale)


def prefix_shared_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                            **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: ``query`` ``[rows, heads, new, head_dim]``; ``key`` / ``value`` the rows'
    own cached and new tokens ``[rows, kv_heads, width, head_dim]``; ``attention_mask`` from
    :func:`forward_inputs`. Returns the output as ``[rows, new, heads, head_dim]``, as transformers expects."""
    groups: PrefixRows | None = kwargs.get(ROWS_KEYWORD)
    if groups is None or attention_mask is None:
        raise RuntimeError("prefix-shared attention needs the inputs of muarl.models.prefix_attention.forward_inputs")
    for name in _UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"prefix-shared attention does not support {name}")
    if dropout:
        raise NotImplementedError("prefix-shared attention is for inference; dropout must be 0")
    rows, heads, new, head_dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = scaling if scaling is not None else head_dim ** -0.5
    # the dtype scaled_dot_product_attention would compute in: autocast's (it casts its inputs) or the query's
    dtype = torch.get_autocast_dtype(query.device.type) if torch.is_autocast_enabled(query.device.type) else query.dtype
    folded = query.to(dtype).reshape(rows, kv_heads, group * new, head_dim)  # query head h reads key head h // group

    out, lse = _flash(folded, key.to(dtype), value.to(dtype), groups.additive_mask(attention_mask, dtype, group), scale)
    out = out.float()

    for prefix, members in groups.groups:
        prefix_keys, prefix_values = prefix.layers[module.layer_idx]
        part = folded if members is None else folded.index_select(0, members)
        count = part.shape[0]
        # the group's rows folded into the query length: the prefix's keys are read once for all of them
        flat = part.transpose(0, 1).reshape(1, kv_heads, count * group * new, head_dim)
        prefix_out, prefix_lse = _flash(flat, prefix_keys.to(dtype), prefix_values.to(dtype), None, scale)
        prefix_out = prefix_out.reshape(kv_heads, count, group * new, head_dim).transpose(0, 1).float()
        prefix_lse = prefix_lse.reshape(kv_heads, count, group * new).transpose(0, 1)
        own_out, own_lse = (out, lse) if members is None else (out[members], lse[members])
        merged = torch.lerp(prefix_out, own_out, torch.sigmoid(own_lse - prefix_lse)[..., None])  # the module docstring's merge
        if members is None:
            out = merged
        else:
            out[members] = merged
    return out.to(dtype).reshape(rows, heads, new, head_dim).transpose(1, 2).contiguous(), None


def rows_logits(model: Any, bf16: bool, split: bool, ids: torch.Tensor, cache: Any, prefixes: Sequence[SharedPrefix | None],
                cached: Sequence[int], pads: Sequence[int]) -> torch.Tensor:
    """[rows, vocabulary] float32 logits at the last of ``ids`` ``[rows, new]`` fed to rows whose ``cache`` holds
    ``cached`` tokens after ``pads`` of left padding (and after ``prefixes`` when ``split``): every forward of the
    local engine's sampler. Without ``split`` (models :func:`supports_prefix_attention` refuses) the rows hold
    their prefix themselves and transformers' own attention runs, with a 2-D padding mask."""
    forward = {"input_ids": ids, cache_argument(causal_lm_parts(model)[0]): cache, "use_cache": True}
    if split:
        with prefix_attention(model):
            return last_token_logits(model, bf16, **forward, **forward_inputs(prefixes, cached, pads, ids.shape[1], ids.device))
    new = ids.shape[1]
    mask = torch.ones(len(cached), cached[0] + pads[0] + new, dtype=torch.long)
    for r, pad in enumerate(pads):
        mask[r, :pad] = 0
    positions = torch.tensor(list(cached))[:, None] + torch.arange(new)[None]
    return last_token_logits(model, bf16, **forward, attention_mask=mask.to(ids.device), position_ids=positions.to(ids.device))


def supports_prefix_attention(model: Any) -> bool:
    """Whether the model's attention is plain softmax attention over every position, on CPU (what
    :func:`prefix_shared_attention` computes)."""
    config = getattr(causal_lm_parts(model)[0], "config", None)  # a transformers model's (others: not supported)
    if config is None or next(model.parameters()).device.type != "cpu" or config._attn_implementation not in ("sdpa", "eager", None):
        return False
    if getattr(config, "attn_logit_softcapping", None) or getattr(config, "use_sliding_window", False):
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ())


@contextlib.contextmanager
def prefix_attention(model: Any) -> Iterator[None]:
    """Run the model's attention as :func:`prefix_shared_attention` inside the block (synchronous forwards only:
    the setting is the model's, not the call's)."""
    from transformers import AttentionInterface

    if ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION, prefix_shared_attention)
    config = causal_lm_parts(model)[0].config
    previous = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous
