"""The weights the sampler multiplies with: under bfloat16 autocast, bfloat16 copies of the linear layers'
weights, cast once per version of the weights instead of at every forward.

Why. Autocast keeps the float32 parameters and casts a linear layer's weight to bfloat16 each time it is used;
its cast cache lives for one autocast block, and the sampler enters one per forward. So every decode step read
SmolLM2's ~540 MB of float32 linear weights and wrote ~270 MB of bfloat16 copies before multiplying anything:
once prefix-shared attention had removed the repeated prefix reads, the largest share of a batched decode step
on a 2-core CPU (docs/benchmarks.md, issue 24). Casting once gives the same bits: autocast's cast and this copy
round the same float32 values to the nearest bfloat16, and autocast leaves a tensor that is already bfloat16 as
it is (``tests/models/test_sampling_weights.py`` requires bit-equal logits). The vocabulary projection (float32
on purpose: :mod:`muarl.models.logits`) and what autocast does not cast (embeddings, norms, rotary buffers) stay
the model's own tensors, shared, not copied.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

import torch

from muarl.models.kv_cache import weights_version
from muarl.models.logits import causal_lm_parts


def bf16_linear_copy(model: Any) -> Any:
    """A copy of ``model`` that shares every parameter and buffer except the linear layers' weights and biases
    (the output projection excepted), which it holds in bfloat16; its decoder layers' norms return bfloat16
    (:func:`cast_norm_outputs`)."""
    head = causal_lm_parts(model)[1]
    memo: dict[int, Any] = {id(t): t for t in (*model.parameters(), *model.buffers())}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            for tensor in (module.weight, module.bias):
                if tensor is not None and tensor is not head.weight:
                    memo[id(tensor)] = torch.nn.Parameter(tensor.detach().to(torch.bfloat16), requires_grad=False)
    sampler = copy.deepcopy(model, memo)
    cast_norm_outputs(sampler)
    return sampler


# model types whose decoder layers use ``input_layernorm`` only as the attention's q/k/v projections' input and
# ``post_attention_layernorm`` only as the MLP's gate/up projections' input (Gemma's post-attention norm, by
# contrast, normalises the attention's output on its way into the residual stream)
NORMS_FEED_LINEARS = ("llama", "mistral", "qwen2", "qwen3")


def cast_norm_outputs(sampler: Any) -> None:
    """Make the decoder layers' two norms return bfloat16 in a sampling copy, where their only readers are linear
    layers that autocast would make cast the same float32 output to bfloat16 each (q, k and v; gate and up): one
    cast per norm instead of one per reader, the same bits (a tensor already in bfloat16 is left as it is). At 64
    rows, each cast of a ``[64, 1, 576]`` activation took ~75 us on 2 cores, 5 per layer (bench/roofline.py's
    profile); the residual stream and the final norm, read by the float32 head, are untouched."""
    decoder = causal_lm_parts(sampler)[0]
    if getattr(getattr(decoder, "config", None), "model_type", None) not in NORMS_FEED_LINEARS:
        return
    for layer in getattr(decoder, "layers", ()):
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.register_forward_hook(_to_bf16)


def _to_bf16(module: Any, args: Any, output: torch.Tensor) -> torch.Tensor:
    return output.to(torch.bfloat16)


class SamplingWeights:
    """The module a local policy's forwards run: the model itself in float32; under bfloat16 autocast its
    :func:`bf16_linear_copy`, made again whenever the model's weights have changed (an optimizer step between
    rollouts, ``load_state_dict``), so the sampler never runs stale weights."""

    def __init__(self, model: Any, bf16: bool):
        self.source = model
        self.bf16 = bf16
        self._copy: Any = None
        self._version: int | None = None

    def model(self) -> Any:
        if not self.bf16:
            return self.source
        version = weights_version(self.source)
        if self._copy is None or version != self._version:
            self._copy = None  # the old copy's memory is free before the new one is made
            self._copy, self._version = bf16_linear_copy(self.source), version
        return self._copy


_SHARED: weakref.WeakKeyDictionary[Any, SamplingWeights] = weakref.WeakKeyDictionary()


def sampling_weights(model: Any, bf16: bool) -> SamplingWeights:
    """The :class:`SamplingWeights` of ``model``: under bf16 one per model in the process, so the policies of several
    sampling settings over one model (a :class:`~muarl.models.local_chat.LocalChatClient` serving users, a server's
    requests) share one bfloat16 copy instead of holding one each."""
    if not bf16:
        return SamplingWeights(model, False)
    weights = _SHARED.get(model)
    if weights is None:
        weights = _SHARED[model] = SamplingWeights(model, True)
    return weights
