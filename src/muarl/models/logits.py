"""The one road from tokens to logits that the sampler and the trainer share: the decoder under the run's
autocast, the vocabulary projection always in float32.

Why float32 at the head. Under bfloat16 autocast a linear layer returns bfloat16, and SmolLM2's chosen tokens
sit at logits of 15-30, where bfloat16 values are 0.06-0.125 apart: the log-probability of every token is
rounded by up to a few hundredths, and the sampler (one token at a time on a KV cache) and the trainer (the
whole sequence at once) round differently. Their distributions then differ by rounding alone, an off-policy
error the update does not correct. Measured on sampled clinic-lite episodes (``bench/sampler_trainer_gap.py``,
docs/benchmarks.md): the head is where most of that gap came from. The decoder's own bfloat16 arithmetic, which
carries most of autocast's speed, is left as it is; its final hidden state is float32 (the residual stream of
Llama-family models is), so the projection in float32 sees it unrounded.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

import torch


def causal_lm_parts(model: Any) -> tuple[Any, Any]:
    """(decoder returning hidden states, output projection) of a causal LM, PEFT-wrapped or not. Assumes
    logits = head(last hidden state), true of Llama, Qwen, Mistral and SmolLM families."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.get_decoder(), inner.get_output_embeddings()


def cache_argument(decoder: Any) -> str:
    """The keyword under which ``decoder.forward`` takes a KV cache. transformers 5 renamed ``past_key_values``
    to ``cache``: where both exist the old name warns on every forward (and goes in 5.40), and the verl extra
    pins a transformers that knows only the old one. A forward that names either takes that one; one that only
    passes ``**kwargs`` on (a wrapper) gets the installed transformers' name."""
    return _cache_argument(type(decoder))


@functools.cache
def _cache_argument(decoder_class: type) -> str:
    named = inspect.signature(decoder_class.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in named:
            return name
    from transformers import LlamaModel

    return "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else "past_key_values"


def returned_cache(output: Any) -> Any:
    """The KV cache a decoder's output carries, under either of transformers' names (None if it has none)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def autocast_for(model: Any, bf16: bool) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on the model's device when ``bf16``, else nothing."""
    device = next(model.parameters()).device
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def float32_logits(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` computed in float32 whatever autocast is active around the call."""
    with torch.autocast(hidden.device.type, enabled=False):
        return head(hidden.float())


def last_token_logits(model: Any, bf16: bool, **forward: Any) -> torch.Tensor:
    """[rows, vocabulary] float32 logits of the last position of every row: the decoder run with ``forward``
    (input ids, KV cache, masks) under bfloat16 autocast when ``bf16``, the head in float32. The sampler's
    every forward goes through here, so its log-probabilities are the trainer's (:func:`float32_logits`)."""
    decoder, head = causal_lm_parts(model)
    with autocast_for(model, bf16):
        hidden = decoder(**forward).last_hidden_state[:, -1]
    return float32_logits(head, hidden)
