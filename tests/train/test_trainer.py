"""The GRPO trainer end to end on a tiny random model: updates move log-probabilities the right way, and a
resumed run lands on the same weights as an uninterrupted one."""

from __future__ import annotations

import json

import pytest
import torch

from muarl.domains import DOMAINS
from muarl.rollout.config import ConfigError
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.trainer import GRPOTrainer
from muarl.types import RewardInfo


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(DOMAINS, "toy", "booking_world:load")


def parity_reward(domain, task, final_hash, messages, agent_turns=0):
    """1 when the policy's first reply has an odd length: arbitrary, but it varies within a group."""
    first = next(m for m in messages if m.role == "assistant")
    r = float(len(first.content or "") % 2)
    return RewardInfo(reward=r, state_match=r > 0, final_hash=final_hash, gold_hash="")


def config(out, **changes) -> GRPOConfig:
    base = {"out": str(out), "domain": "toy", "model": ModelConfig(name="tiny-random", bf16=False), "steps": 2,
            "tasks_per_step": 1, "group_size": 4, "max_turns": 2, "max_new_tokens": 8, "max_context": 1024,
            "micro_batch_size": 2, "lr": 1e-3, "plot": False, "save_every": 1}
    return GRPOConfig(**{**base, **changes})


def weights(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def mean_logprob(trainer, ep):
    batch = pad_sequences([ep.tokens.input_ids], [ep.tokens.loss_mask], 2)
    with torch.no_grad():
        return float(supervised_logprobs(trainer.model, batch)[0].mean())


def test_update_raises_logprobs_of_positive_advantage_and_lowers_negative(tmp_path):
    trainer = GRPOTrainer(config(tmp_path / "run", lr=3e-3, kl_coef=0.0), progress=False)
    group = trainer.rollout(trainer.next_tasks())[0]
    good, bad = group[0], group[1]
    before = mean_logprob(trainer, good), mean_logprob(trainer, bad)
    stats = trainer.update([(good, 1.0), (bad, -1.0)])
    after = mean_logprob(trainer, good), mean_logprob(trainer, bad)
    assert after[0] > before[0] and after[1] < before[1]
    assert stats["grad_norm"] > 0 and stats["clip_fraction"] == 0.0  # on-policy: ratio 1, nothing clipped
    assert stats["sampler_logprob_gap"] < 1e-4  # the engine's logprobs are the trainer's


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_two_steps_equal_one_step_save_resume_one_step(tmp_path, finetune):
    model = ModelConfig(name="tiny-random", bf16=False, finetune=finetune, lora_r=4)
    straight = GRPOTrainer(config(tmp_path / "a", model=model), reward_fn=parity_reward, progress=False)
    straight.start()
    straight.train()

    first = GRPOTrainer(config(tmp_path / "b", model=model, steps=1), reward_fn=parity_reward, progress=False)
    first.start()
    first.train()
    resumed = GRPOTrainer(config(tmp_path / "b", model=model), reward_fn=parity_reward, progress=False)
    resumed.start(resume=True)
    assert resumed.step == 1 and resumed.position == 1
    resumed.train()

    a, b = weights(straight), weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(v, w) for v, w in zip(a.values(), weights(GRPOTrainer(config(tmp_path / "c", model=model), progress=False)).values()))
    rows_a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows_b] == [1, 2]
    assert [r["reward_mean"] for r in rows_a] == [r["reward_mean"] for r in rows_b]
    assert any(0 < r["reward_mean"] < 1 and r["grad_norm"] > 0 for r in rows_a)  # some group had signal


def test_run_directory_guards(tmp_path):
    first = GRPOTrainer(config(tmp_path / "r", steps=1), progress=False)
    first.start()
    first.train()
    assert (tmp_path / "r" / "config.yaml").is_file() and (tmp_path / "r" / "checkpoints" / "latest").is_file()
    with pytest.raises(ConfigError, match="already holds a run"):
        GRPOTrainer(config(tmp_path / "r", steps=2), progress=False).start()
    with pytest.raises(ConfigError, match="only steps may change"):
        GRPOTrainer(config(tmp_path / "r", steps=2, lr=0.5), progress=False).start(resume=True)


def test_config_refuses_the_test_split_and_reads_yaml(tmp_path):
    with pytest.raises(ValueError, match="leak the evaluation set"):
        GRPOConfig(split="test")
    assert GRPOConfig(split="test", allow_test_split=True).split == "test"
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\nmodel:\n  name: tiny-random\n  finetune: lora\n")
    cfg = GRPOConfig.load(path, out="x")
    assert (cfg.steps, cfg.model.finetune, cfg.out, cfg.group_size, cfg.kl_coef) == (3, "lora", "x", 8, 0.001)
    path.write_text("stepz: 3\n")
    with pytest.raises(ConfigError, match="stepz"):
        GRPOConfig.load(path)
