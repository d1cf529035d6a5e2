"""Under bfloat16 autocast the sampler and the trainer compute the log-probabilities of the weights' own
distribution, not of its logits rounded to bfloat16 (issue 21).

SmolLM2's logits reach 15-30, where bfloat16 values are 0.06-0.125 apart. The tiny random model's logits are
tiny, so its output embedding (tied to the input one) is scaled until they have SmolLM2's spread."""

from __future__ import annotations

import asyncio

import pytest
import torch
from booking_world import ListUser

from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.models.tiny import tiny_random_lm
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.train.sequences import pad_sequences, supervised_logprobs


def smollm2_sized_logits(seed: int) -> tuple[torch.nn.Module, object]:
    model, tok = tiny_random_lm(seed=seed)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(100.0)
    model.eval()
    return model, tok


def test_logits_spread_like_smollm2s():
    model, _ = smollm2_sized_logits(seed=2)
    with torch.no_grad():
        logits = model(input_ids=torch.randint(0, model.config.vocab_size, (1, 64))).logits
    assert 10 < float(logits.std()) < 30


def test_trainer_logprobs_under_bf16_are_those_of_the_float32_distribution():
    """Before the fix the trainer's bf16 log-probs were off by 0.19 on average here (the head's output rounded
    to bfloat16); with the head in float32 only the decoder's rounding is left (~0.002)."""
    model, _ = smollm2_sized_logits(seed=2)
    ids = torch.randint(0, model.config.vocab_size, (1, 200), generator=torch.Generator().manual_seed(0)).tolist()
    batch = pad_sequences(ids, [[0] * 50 + [1] * 150], 0)
    with torch.no_grad():
        exact, exact_entropy = supervised_logprobs(model, batch, bf16=False, with_entropy=True)
        bf16, bf16_entropy = supervised_logprobs(model, batch, bf16=True, with_entropy=True)
    assert float((bf16 - exact).abs().mean()) < 0.02
    assert float((bf16_entropy - exact_entropy).abs().mean()) < 0.02


@pytest.mark.parametrize("batch", [False, True], ids=["sequential", "batched-generator"])
def test_sampler_and_trainer_agree_under_bf16(domain, batch):
    """The sampler's recorded log-prob of each sampled token is the trainer's, to the decoder's rounding."""
    model, tok = smollm2_sized_logits(seed=4)
    policy = LocalPolicy(model, tok, sampling=SamplingConfig(temperature=1.0, max_new_tokens=24, bf16=True), batch=batch)
    user = ListUser(["Please book mon-9 for Ann Lee.", "Yes.", "Thanks! ###STOP###"])
    episode = asyncio.run(run_episode(domain, domain.tasks("train")[0], policy, user, seed=7, config=LoopConfig(max_turns=3)))
    trace = episode.tokens
    padded = pad_sequences([trace.input_ids], [trace.loss_mask], 0)
    with torch.no_grad():
        trainer, _ = supervised_logprobs(model, padded, bf16=True)
    sampler = torch.tensor([lp for lp, m in zip(trace.logprobs[1:], trace.loss_mask[1:]) if m])
    assert sampler.numel() >= 24
    assert float((trainer - sampler).abs().mean()) < 0.02


def test_the_kv_cache_goes_in_under_the_keyword_the_decoder_takes():
    """transformers 5 renamed the decoder's ``past_key_values`` to ``cache``; the verl extra pins a release with
    only the old name. (pyproject turns the old name's deprecation warning into an error for every test.)"""
    from muarl.models.logits import cache_argument, causal_lm_parts, returned_cache

    class OldDecoder:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...

    class Output:  # an old release's output: the cache under its old name only
        past_key_values = "kv"

    class Wrapper:  # passes everything on to a decoder of the installed transformers
        def forward(self, input_ids=None, **kwargs): ...

    assert cache_argument(OldDecoder()) == "past_key_values" and returned_cache(Output()) == "kv"
    assert cache_argument(Wrapper()) == cache_argument(causal_lm_parts(tiny_random_lm()[0])[0])
    from transformers import DynamicCache

    model, _ = tiny_random_lm()
    decoder = causal_lm_parts(model)[0]
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = decoder(input_ids=torch.tensor([[1, 5, 7]]), use_cache=True, **{cache_argument(decoder): cache})
    assert cache.get_seq_length() == 3 and returned_cache(out) is cache  # the decoder filled the cache it was given
    assert returned_cache(type("Bare", (), {})()) is None
