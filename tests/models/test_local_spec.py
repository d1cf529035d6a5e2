"""``local:PATH`` (``muarl.models.local_spec``): every place trained weights live resolves to a ready local
model with the chat format it was trained with, and agents and users are built from it by name.

Checkpoints and SFT outputs are written by the real saving code (``save_checkpoint``, ``save_full_model``)
over the tiny random model.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from booking_world import toy_domain
from saved_runs import grpo_run
from scripted_parties import ScriptAgent, say

from muarl.models.factory import make_agent
from muarl.errors import InputError
from muarl.models.hf_loading import load_causal_lm
from muarl.models.local_chat import LocalChatClient
from muarl.models.local_engine import LocalPolicy
from muarl.models.local_spec import load_local_model, local_policy, resolve_local_model
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.runner import run_many
from muarl.train.config import ModelConfig, SFTConfig
from muarl.train.model_setup import load_trainable
from muarl.train.sft import save_full_model
from muarl.types import Message
from muarl.users.factory import make_user
from muarl.users.llm import LLMUser


def logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_aliases_and_bad_paths(tmp_path):
    assert resolve_local_model("smollm2").weights == resolve_local_model("smollm2-135m-instruct").weights == "smollm2-135m-instruct"
    assert resolve_local_model("tiny-random").spec == "local:tiny-random"
    with pytest.raises(InputError, match="no such directory"):
        resolve_local_model(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no config.json or adapter_config.json"):
        resolve_local_model(str(tmp_path / "empty"))
    with pytest.raises(InputError, match="no such directory"):
        make_agent(f"local:{tmp_path / 'nowhere'}")


def test_full_checkpoint_run_and_step_resolve_to_the_trained_weights(tmp_path):
    run = grpo_run(tmp_path / "run", "full", chat_format="qwen3", steps=(10, 20))
    step20 = run / "checkpoints" / "step-000020"
    for path in (run, step20, step20 / "model"):
        model = resolve_local_model(str(path))
        assert model.source == str(step20 / "model") and model.adapter is None and model.chat_format == "qwen3"
    lm, _, fmt = load_local_model(resolve_local_model(str(run)))
    saved, _ = load_causal_lm(str(step20 / "model"))
    initial, _ = load_causal_lm("tiny-random", seed=3)
    assert fmt == "qwen3" and not lm.training and not any(p.requires_grad for p in lm.parameters())
    assert torch.equal(logits(lm, [5, 6, 7]), logits(saved, [5, 6, 7]))
    assert not torch.allclose(logits(lm, [5, 6, 7]), logits(initial, [5, 6, 7]))


def test_lora_checkpoint_names_a_loadable_base_and_loads_merged(tmp_path):
    run = grpo_run(tmp_path / "run", "lora", seed=3)
    adapter = run / "checkpoints" / "step-000010" / "model"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny-random"
    model = resolve_local_model(str(run))
    assert (model.weights, model.adapter, model.seed) == ("tiny-random", str(adapter), 3)
    merged, _, fmt = load_local_model(model)
    assert fmt == "chatml-hermes" and not hasattr(merged, "peft_config")  # merged into plain weights
    from peft import PeftModel

    reference = PeftModel.from_pretrained(load_causal_lm("tiny-random", seed=3)[0], str(adapter)).eval()
    assert torch.allclose(logits(merged, [5, 6, 7]), logits(reference, [5, 6, 7]), atol=1e-5)
    base = load_causal_lm("tiny-random", seed=3)[0]
    assert not torch.allclose(logits(merged, [5, 6, 7]), logits(base, [5, 6, 7]), atol=1e-4)


def test_sft_output_and_a_plain_model_directory(tmp_path):
    out = tmp_path / "sft"
    out.mkdir()
    (out / "config.yaml").write_text(SFTConfig(data="x.jsonl", out=str(out), model=ModelConfig(name="tiny-random", chat_format="qwen3")).dump_yaml())
    model, tokenizer = load_trainable(ModelConfig(name="tiny-random", finetune="lora"))
    save_full_model(model, tokenizer, out / "model")
    for path in (out, out / "model"):
        assert resolve_local_model(str(path)) == resolve_local_model(str(out / "model"))
        assert resolve_local_model(str(path)).chat_format == "qwen3"
    plain = tmp_path / "plain"
    lm, tok = load_causal_lm("tiny-random")
    lm.save_pretrained(plain)
    tok.save_pretrained(plain)
    assert load_local_model(resolve_local_model(str(plain)))[2] == "chatml-hermes"  # nothing recorded: the default


def test_make_agent_local_builds_a_named_batched_policy(tmp_path):
    run = grpo_run(tmp_path / "run", "full")
    agent = make_agent(f"local:{run}", temperature=0.5, max_tokens=7, precision="fp32", max_context=900)
    assert isinstance(agent, LocalPolicy) and agent.generator is not None
    assert agent.name == f"local:{run / 'checkpoints' / 'step-000010' / 'model'}"
    s = agent.sampling
    assert (s.temperature, s.max_new_tokens, s.max_context, s.bf16) == (0.5, 7, 900, False)
    assert local_policy("tiny-random").sampling.max_context == 4096  # the model's own context length


def test_local_chat_client_opens_with_an_empty_system_turn_and_samples_like_the_engine():
    policy = local_policy("tiny-random", temperature=0.0, max_new_tokens=6, precision="fp32")
    client = LocalChatClient(policy)
    convo = [Message(role="user", content="Hello!")]
    done = asyncio.run(client.generate(convo))
    fmt = policy.chat_format
    assert done.prompt_ids == policy.encode(fmt.system_text("", []) + fmt.render_delta(convo) + fmt.generation_prompt)
    session = policy.new_session(None, [], seed=0)
    turn = asyncio.run(session.act([Message(role="system", content=""), *convo]))
    assert done.completion_ids == session.token_trace().input_ids[len(done.prompt_ids):] and done.message == turn.message
    assert done.finish_reason == "length" and len(done.completion_ids) == 6
    with pytest.raises(ValueError, match="temperature"):
        asyncio.run(client.generate(convo, temperature=-1.0))


def test_local_user_plays_the_customer_in_process_frozen(tmp_path):
    domain = toy_domain()
    task = domain.tasks("train")[0]
    user = make_user("local:tiny-random", temperature=1.0, max_tokens=5, precision="fp32")
    assert isinstance(user, LLMUser) and isinstance(user.client, LocalChatClient) and user.name == "local:tiny-random"
    weights = [p.detach().clone() for p in user.client.policy.model.parameters()]
    agent = ScriptAgent([say("Hello! Your name?"), say("Thanks.")])
    ep = asyncio.run(run_episode(domain, task, agent, user, config=LoopConfig(max_turns=2)))
    assert ep.termination != "error" and ep.user == "local:tiny-random"
    assert ep.user_usage.requests == 3 and ep.user_usage.completion_tokens <= 15
    said = [m.content for m in ep.messages if m.role == "user"]
    assert len(said) == 3  # the user opened, then answered each agent turn
    assert all(torch.equal(a, b) for a, b in zip(weights, user.client.policy.model.parameters()))
    # the user's lines follow from the episode seed: the same again with it, others with another
    def lines(seed: int) -> list[str]:
        again = asyncio.run(run_episode(domain, task, ScriptAgent([say("Hello! Your name?"), say("Thanks.")]), user, seed=seed,
                                        config=LoopConfig(max_turns=2)))
        return [m.content for m in again.messages if m.role == "user"]

    assert lines(0) == said and lines(5) != said
    reflecting = make_user("local:tiny-random", strategy="reflection")
    assert reflecting.name == "local:tiny-random+reflection"


def test_local_users_of_concurrent_episodes_decode_together(tmp_path):
    domain = toy_domain()
    user = make_user("local:tiny-random", max_tokens=4, precision="fp32")
    agent = ScriptAgent([say("Hello!")])
    result = asyncio.run(run_many(domain, domain.tasks("train"), agent, user, trials=4, concurrency=4,
                                  config=LoopConfig(max_turns=1), progress=False))
    assert len(result.episodes) == 4 and not result.errored
    (policy,) = user.client._policies.values()
    assert policy.generator.stats.max_rows > 1


def test_rollout_cli_with_local_agent_and_user(tmp_path):
    from click.testing import CliRunner

    from muarl.cli import main

    config = tmp_path / "rollout.yaml"
    config.write_text("max_context: 16000\nmax_tokens: 4\n")
    out = tmp_path / "out"
    run = grpo_run(tmp_path / "run", "full")
    result = CliRunner().invoke(main, ["rollout", "--config", str(config), "--agent", f"local:{run}", "--user", "local:tiny-random",
                                       "--limit", "1", "--max-turns", "1", "--precision", "fp32", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    weights = f"local:{run / 'checkpoints' / 'step-000010' / 'model'}"
    assert f"agent {weights} · user local:tiny-random" in result.output
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["precision"] == "fp32" and (info["agent"], info["user"]) == (weights, "local:tiny-random")
    episode = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert (episode["agent"], episode["user"]) == (weights, "local:tiny-random") and episode["termination"] != "error"
    bad = CliRunner().invoke(main, ["rollout", "--agent", f"local:{tmp_path / 'nowhere'}", "--out", str(tmp_path / "o2")])
    assert bad.exit_code == 2 and "no such directory" in bad.output


def test_a_local_user_out_of_context_errors_the_episode_not_scores_it():
    domain = toy_domain()
    user = make_user("local:tiny-random", max_context=64, precision="fp32")
    ep = asyncio.run(run_episode(domain, domain.tasks("train")[0], ScriptAgent([say("Hello!")]), user))
    assert ep.termination == "error" and ep.reward is None
    assert ep.error.startswith("UserError: user simulator failed: episode context is full")
