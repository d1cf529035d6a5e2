"""bench/learning_demo.py end to end with the tiny random model: every stage runs and is scored, the results
are well formed, and a resumed run skips the stages that finished."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from muarl.config import ConfigError

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "learning_demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("learning_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_demo"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("learning_demo", None)


def pilot_config(demo, out, **changes):
    # 14 turns: the oracle needs 6 to 13 on difficulty-1 tasks, so the ceiling row checks the scoring
    fields = {**demo.PILOT, "out": str(out), "model": "tiny-random", "bf16": False, "pilot": True, "max_turns": 14,
              "max_new_tokens": 8, **changes}
    return demo.DemoConfig(**fields)


def test_pilot_runs_every_stage_and_resume_skips_them(tmp_path, demo, monkeypatch):
    cfg = pilot_config(demo, tmp_path / "demo")
    results = demo.run_demo(cfg, progress=False)

    saved = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert saved["pilot"] is True and saved["eval_tasks"]["n"] == 2
    assert set(saved["stages"]) == {"floor", "base", "sft", "rl", "ceiling"}
    for name, row in saved["stages"].items():
        assert 0.0 <= row["success"] <= 1.0, name
        assert 0.0 <= row["mean_reward"] <= 1.0, name
        assert row["n_tasks"] == 2 and row["n_errored"] == 0, name
        assert set(row["per_task"]) == set(saved["eval_tasks"]["ids"])
    assert saved["stages"]["floor"]["success"] == 0.0  # every clinic task needs a write
    assert saved["stages"]["ceiling"]["success"] == 1.0  # the demo's loop lets a perfect agent succeed
    assert saved["training"]["sft"]["steps"] == 1 and saved["training"]["grpo"]["steps"] == 1
    assert saved["training"]["grpo"]["episodes"] == 2  # 1 task x 2 episodes
    assert saved["training"]["synth"]["demos"] == 4
    assert len((tmp_path / "demo" / "synth" / "demos.jsonl").read_text().splitlines()) == 4
    for figure in ("success.png", "grpo/training_dynamics.png"):
        assert (tmp_path / "demo" / figure).stat().st_size > 1000
    assert "PILOT" in (tmp_path / "demo" / "results.md").read_text()
    assert results["stages"]["rl"]["model"].endswith("model")

    # a resumed run re-runs nothing: every stage function would fail if called
    def refuse(*args, **kwargs):
        raise AssertionError("a finished stage ran again")

    for stage in ("stage_synth", "stage_eval_base", "stage_sft", "evaluate_model", "stage_grpo"):
        monkeypatch.setattr(demo, stage, refuse)
    again = demo.run_demo(cfg, resume=True, progress=False)
    assert again["stages"]["rl"]["success"] == results["stages"]["rl"]["success"]


def test_out_dir_is_not_overwritten_and_resume_must_match(tmp_path, demo):
    cfg = pilot_config(demo, tmp_path / "demo")
    demo.check_out_dir(cfg, resume=False)
    with pytest.raises(ConfigError, match="--resume"):
        demo.check_out_dir(cfg, resume=False)
    with pytest.raises(ConfigError, match="eval_tasks"):
        demo.check_out_dir(pilot_config(demo, tmp_path / "demo", eval_tasks=3), resume=True)
    demo.check_out_dir(cfg.model_copy(update={"budget_minutes": 30.0}), resume=True)  # budgets may change


def test_eval_subset_is_seeded_filtered_and_held_out(demo, tmp_path):
    a = demo.eval_task_subset(pilot_config(demo, tmp_path, eval_tasks=5, max_difficulty=2))
    b = demo.eval_task_subset(pilot_config(demo, tmp_path, eval_tasks=5, max_difficulty=2))
    assert [t.id for t in a] == [t.id for t in b] and len(a) == 5
    assert all(t.split == "test" and t.difficulty <= 2 for t in a)
    other = demo.eval_task_subset(pilot_config(demo, tmp_path, eval_tasks=5, max_difficulty=2, seed=1))
    assert [t.id for t in other] != [t.id for t in a]


def test_grpo_overrides_may_not_redirect_training(demo, tmp_path):
    with pytest.raises(ValueError, match="split"):
        pilot_config(demo, tmp_path, grpo={"split": "test"})


def test_sft_time_limit_stops_after_the_step_that_crosses_it(tmp_path):
    from muarl.train.config import ModelConfig, SFTConfig
    from muarl.train.plot import read_metrics
    from muarl.train.sft import run_sft

    tools = [{"type": "function", "function": {"name": "lookup", "description": "Look up.", "parameters": {"type": "object", "properties": {}}}}]
    line = json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
                                    {"role": "assistant", "content": "Hello."}], "tools": tools})
    data = tmp_path / "d.jsonl"
    data.write_text((line + "\n") * 4)
    # rows of 400 tokens hold one conversation (334 tiny tokens) each: 4 rows an epoch
    base = {"data": str(data), "epochs": 5, "pack_length": 400, "model": ModelConfig(name="tiny-random", precision="fp32")}
    run_sft(SFTConfig(**base, out=str(tmp_path / "capped"), max_steps=3), progress=False)
    assert len(read_metrics(tmp_path / "capped")) == 3
    run_sft(SFTConfig(**base, out=str(tmp_path / "timed"), time_limit_minutes=1e-9), progress=False)
    assert len(read_metrics(tmp_path / "timed")) == 1 and (tmp_path / "timed" / "model" / "config.json").is_file()


def test_paired_delta_and_its_interval(demo):
    d = demo.paired_delta({"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0}, {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0, "e": 1.0})
    assert d["n_tasks"] == 4 and d["delta"] == pytest.approx(0.5)
    assert 0.0 <= d["ci95"][0] <= 0.5 <= d["ci95"][1] <= 1.0
