"""MUA-RL's defining setting: GRPO with an LLM user simulator in the rollout, over real HTTP.

Specification: a training step whose world names ``user: llm:MODEL`` at an OpenAI-compatible endpoint (here
``muarl serve``'s server over the tiny model, on loopback) runs its episodes against that user; the user's
words enter the policy's sequence as rendered context (loss mask 0), the policy's trace is exactly what the
engine was fed and sampled, every episode names the user model, and the update trains on the policy's
tokens only.
"""

from __future__ import annotations

import json

import pytest

from muarl.domains import DOMAINS
from muarl.models.chat_formats import get_chat_format
from muarl.models.local_chat import LocalChatClient
from muarl.models.local_spec import local_policy
from muarl.models.openai_server import LocalModelServer
from muarl.rollout.store import read_episodes
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.trainer import GRPOTrainer
from token_traces import mask_runs


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(DOMAINS, "toy", "booking_world:load")


def rendered_as_sampled(trainer: GRPOTrainer, ep) -> bool:
    """The trace is the conversation as the engine renders it, with the sampled runs (loss mask 1) kept as
    sampled: system turn, then for each agent turn the delta since the last one (user replies, tool results)
    rendered and tokenised as context, then that turn's sampled ids."""
    fmt, tok = get_chat_format(trainer.cfg.model.chat_format), trainer.tokenizer
    trace, msgs = ep.tokens, ep.messages

    def enc(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    runs = mask_runs(trace.loss_mask)
    turns = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    expected = enc(fmt.system_text(msgs[0].content, trainer.domain.tools.specs()))
    seen, closing = 1, ""
    for (a, b), i in zip(runs, turns):
        expected += enc(closing + (fmt.after_end if seen > 1 else "") + fmt.render_delta(msgs[seen:i]) + fmt.generation_prompt)
        assert expected == trace.input_ids[:a], "context tokens differ from the rendered conversation"
        expected += trace.input_ids[a:b]
        closing = "" if trace.input_ids[b - 1] == tok.convert_tokens_to_ids(fmt.end_of_turn) else fmt.end_of_turn
        seen = i + 1
    return len(runs) == ep.agent_turns and expected == trace.input_ids


def test_one_grpo_step_against_an_llm_user_served_over_http(tmp_path):
    user_model = LocalChatClient(local_policy("tiny-random", precision="fp32", max_new_tokens=6, max_context=4096))
    with LocalModelServer(user_model) as server:
        url = server.base_url
        cfg = GRPOConfig(out=str(tmp_path / "run"), domain="toy", user="llm:served-user", user_base_url=url,
                         user_temperature=1.0, user_max_tokens=6, timeout=60, max_retries=0,
                         model=ModelConfig(name="tiny-random", precision="fp32"), steps=1, tasks_per_step=1, group_size=4,
                         max_turns=2, max_new_tokens=8, max_context=2048, lr=1e-3, plot=False, save_every=1)
        trainer = GRPOTrainer(cfg, progress=False)
        trainer.start()
        trainer.train()
    episodes, torn = read_episodes(tmp_path / "run" / "rollouts" / "step-000001.jsonl")
    assert torn == 0 and len(episodes) == 4
    for ep in episodes:
        assert not ep.errored and ep.user == "llm:served-user" and ep.user_usage.requests >= 2
        user_lines = [m.content for m in ep.messages if m.role == "user"]
        assert len(user_lines) >= 2  # the user opened and answered the policy
        assert rendered_as_sampled(trainer, ep)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["user"] == "llm:served-user" and run["user_settings"]["user_base_url"] == url
    assert run["user_settings"]["user_temperature"] == 1.0 and run["precision"] == "fp32"
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["user_turns_per_episode"] >= 2 and metrics[0]["user_tokens_per_episode"] > 0
    assert metrics[0]["user_errors"] == 0 and metrics[0]["trained_tokens"] == sum(sum(e.tokens.loss_mask[1:]) for e in episodes)
