"""The sampler's bfloat16 copies of the linear weights give autocast's exact results, and follow the weights."""

from __future__ import annotations

import torch

from muarl.models.kv_cache import growing_cache
from muarl.models.logits import cache_argument, last_token_logits
from muarl.models.sampling_weights import SamplingWeights, bf16_linear_copy, sampling_weights
from muarl.models.tiny import tiny_random_lm


def test_linear_weights_cast_once_give_autocasts_logits_bit_for_bit():
    model, _ = tiny_random_lm(seed=3)
    copy = bf16_linear_copy(model)
    ids = torch.randint(3, 300, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = last_token_logits(model, True, input_ids=ids, **{cache_argument(model.model): growing_cache(torch.bfloat16)}, use_cache=True)
        got = last_token_logits(copy, True, input_ids=ids, **{cache_argument(model.model): growing_cache(torch.bfloat16)}, use_cache=True)
    assert torch.equal(got, expected)
    # only the decoder's linear layers were copied; the tied float32 head and embeddings, the norms are the model's
    assert copy.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert copy.lm_head.weight is model.lm_head.weight and copy.model.embed_tokens.weight is model.model.embed_tokens.weight
    assert copy.model.norm.weight is model.model.norm.weight
    # the layers' norms hand their readers bfloat16 (cast once, not once per projection); the final norm does not
    hidden = torch.randn(1, 3, model.config.hidden_size)
    assert copy.model.layers[0].input_layernorm(hidden).dtype == torch.bfloat16
    assert copy.model.layers[1].post_attention_layernorm(hidden).dtype == torch.bfloat16
    assert copy.model.norm(hidden).dtype == torch.float32 and model.model.layers[0].input_layernorm(hidden).dtype == torch.float32


def test_the_copy_is_made_again_when_the_weights_change_and_not_otherwise():
    model, _ = tiny_random_lm(seed=3)
    weights = SamplingWeights(model, bf16=True)
    first = weights.model()
    assert weights.model() is first
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(1.0)  # an optimizer step, in place
    second = weights.model()
    assert second is not first
    assert torch.equal(second.model.layers[0].mlp.up_proj.weight, model.model.layers[0].mlp.up_proj.weight.to(torch.bfloat16))
    assert SamplingWeights(model, bf16=False).model() is model  # float32: the model itself


def test_policies_over_one_model_share_one_bf16_copy():
    from muarl.models.local_engine import LocalPolicy, SamplingConfig

    model, tok = tiny_random_lm(seed=3)
    greedy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=0.0, bf16=True))
    sampled = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, bf16=True))
    assert greedy.weights is sampled.weights and greedy.weights.model() is sampled.weights.model()
    other, _ = tiny_random_lm(seed=4)
    assert sampling_weights(other, True) is not greedy.weights
