"""The issue-24 benches run end to end on the tiny random model with tiny shapes (they measure nothing here: the
figures are in docs/benchmarks.md). Each runs as its users run it, ``python bench/X.py``, with this tree's src."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from muarl.reward import reward_from_setting

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")


def bench(name: str, *args: str, stderr: list[str] | None = None) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if stderr is not None:
        stderr.append(proc.stderr)
    return json.loads(proc.stdout)


@pytest.mark.slow  # three processes that each import torch: ~10 s on an idle machine
def test_roofline_compares_two_engines_on_a_tiny_step():
    out = bench("roofline.py", "--model", "tiny-random", "--rows", "3", "--prefix", "24", "--suffix", "4,6", "--steps", "2",
                "--stream-mb", "4", "--repeats", "1", "--min-seconds", "0.001", "--peak-size", "32", "--precision", "fp32",
                "--compare", SRC)
    assert out["shape"] == {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "intermediate": 128, "vocab": 384}
    assert set(out["bandwidth_gb_s"]) == {"copy", "triad", "read"} and all(v > 0 for v in out["bandwidth_gb_s"].values())
    assert set(out["peak_gflop_s"]) == {"bf16", "fp32"}
    shared, per_row = out["floors"]["shared"], out["floors"]["per_row"]
    assert "attention: shared prefix" in shared["parts"] and "attention: shared prefix" not in per_row["parts"]
    assert 0 < shared["bound_seconds"] and 0 < shared["floor_seconds"]
    for arm in ("old", "new"):
        (run,) = out["engines"][arm]
        assert run["engine"] == SRC
        assert run["prefills"] == 3 and run["decode_steps"] == 1 + 2 + 1  # warm-up, timed, the step rows leave in
        assert len(run["timed_steps"]) == 2
        assert out["fraction_of_floor"][arm] == round(shared["floor_seconds"] / out["median_step_seconds"][arm], 3)


@pytest.mark.slow
def test_roofline_profiles_the_timed_steps_on_request():
    err: list[str] = []
    out = bench("roofline.py", "--model", "tiny-random", "--rows", "2", "--prefix", "16", "--suffix", "4", "--steps", "2",
                "--stream-mb", "4", "--repeats", "1", "--min-seconds", "0.001", "--peak-size", "32", "--precision", "fp32",
                "--profile", stderr=err)
    assert len(out["engines"]["this"][0]["timed_steps"]) == 2
    assert "torch profile of 2 decode steps" in err[0] and "aten::mm" in err[0]


def test_grpo_rollouts_runs_the_trainers_first_step():
    out = bench("grpo_rollouts.py", "--model", "tiny-random", "--tasks", "2", "--group", "2", "--max-turns", "1", "--rows", "3")
    assert out["episodes"] == 4 and out["group_size"] == 2 and len(out["tasks"]) == 2
    assert out["tasks"][0].startswith("clinic-lite-train-")
    assert out["max_turns"] == 1 and out["rollout_batch_rows"] == 3 and out["max_rows"] == 3
    assert out["prefills"] >= 4 and out["decode_steps"] > 0 and 1 <= out["mean_rows_per_decode_step"] <= 3
    assert out["generated_tokens"] > 0
    assert out["generated_tokens_per_s"] == pytest.approx(out["generated_tokens"] / out["wall_seconds"], rel=0.05)


@pytest.mark.slow  # a process that imports torch and runs four updates of a tiny model: ~10 s
def test_update_shared_prefix_times_both_arms_and_they_agree():
    # the bench builds its trainer config without a domain (no max_turns): a token-mean update must not need one
    out = bench("update_shared_prefix.py", "--tiny", "--repeats", "1", "--sequences", "3")
    assert out["sequences"] == 3 and out["loss_tokens"] > 0
    assert len(out["full_sequences"]["seconds"]) == len(out["shared_prefix"]["seconds"]) == 1
    assert out["max_weight_difference_after_one_update"] < 1e-3


@pytest.mark.slow  # a process that imports torch and runs four updates of a tiny model: ~10 s
def test_update_at_reference_times_both_arms_and_they_land_on_the_same_weights():
    out = bench("update_at_reference.py", "--tiny", "--repeats", "1", "--sequences", "3")
    assert out["domain"] == "clinic-lite" and out["loss_tokens"] > 0
    assert len(out["reference_forward"]["seconds"]) == len(out["skipped"]["seconds"]) == 1
    # the skip's KL is exactly 0; the reference's second forward of the same weights gives 0 up to round-off (seen: a KL
    # of 1.6e-10 and weights 1.9e-6 apart in 1 of 8 runs)
    assert out["kl"]["skipped"] == 0.0 and out["kl"]["reference_forward"] < 1e-8
    assert out["max_weight_difference_after_one_update"] < 1e-4


@pytest.mark.slow  # a pilot demo on the tiny model, then its GRPO stage again in the bench's process: ~20 s
def test_grpo_box_runs_the_demos_grpo_stage_again_from_a_finished_cold_start(tmp_path):
    from muarl.demo.config import form_config
    from muarl.demo.run import run_demo

    pilot = {"model": "tiny-random", "precision": "fp32", "pilot": True, "eval_tasks": 2, "base_eval_tasks": 1, "eval_concurrency": 2,
             "max_turns": 4, "max_new_tokens": 8, "sft_demos": 2, "sft_epochs": 1.0, "sft_max_steps": 1, "grpo_steps": 1,
             "control": False, "grpo": {"tasks_per_step": 1, "group_size": 2, "max_sampling_rounds": 1}}
    run_demo(form_config("full", out=str(tmp_path / "run"), **pilot), progress=False)
    out = bench("grpo_box.py", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "box"), "--minutes", "10")
    assert out["muarl"] == SRC and out["box_minutes"] == 10 and out["steps"] == 1
    (step,) = out["per_step"]
    assert step["step"] == 1 and step["episodes"] == 2 and step["rollout_seconds"] > 0
    assert (tmp_path / "box" / "checkpoints").is_dir()  # the stage ran into --out, not into the run it read
    with pytest.raises(AssertionError, match="not empty"):
        bench("grpo_box.py", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "box"))
    variant = bench("grpo_box.py", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "variant"), "--grpo", "{mini_batches: 2}")
    assert variant["grpo"] == {**out["grpo"], "mini_batches": 2}
    assert "mini_batches" not in out["grpo"]  # the run's own settings when --grpo is not given
    handed_on = Path(variant["model"])  # the cold start (step 0) or the variant's own step, as its validation chose
    assert handed_on.is_dir() and (tmp_path / ("run" if variant["chosen_step"] == 0 else "variant")) in handed_on.parents
    assert "mini_batches: 2" in (tmp_path / "variant" / "config.yaml").read_text()  # the trainer ran with it
    assert "seed: 0" in (tmp_path / "box" / "config.yaml").read_text().splitlines()  # the run's own seed by default
    repeat = bench("grpo_box.py", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "repeat"), "--seed", "7")
    assert repeat["seed"] == 7 and repeat["grpo"] == out["grpo"]
    assert "seed: 7" in (tmp_path / "repeat" / "config.yaml").read_text().splitlines()  # GRPO drew with its own seed
    anchored = bench("grpo_box.py", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "anchored"), "--minutes", "100",
                     "--steps", "2", "--grpo", "{anchor_coef: 1.0}")
    # the tiny model's groups carry no signal here, so no update runs (nor its anchor): the anchored update is
    # tests/train/test_anchor.py's; this checks the box's --steps and where its anchor comes from
    assert anchored["steps"] == 2 and [step["step"] for step in anchored["per_step"]] == [1, 2]
    saved = yaml.safe_load((tmp_path / "anchored" / "config.yaml").read_text())
    assert Path(saved["anchor_data"]) == (tmp_path / "run" / "synth" / "sft_demos.jsonl").resolve()  # the cold start's own demos


def test_validate_checkpoint_scores_a_model_on_a_runs_validation_tasks(tmp_path):
    """Issue 21: what a run's choice on validation would have made of another run's model, on the same tasks."""
    from muarl.train.config import GRPOConfig, ModelConfig
    from muarl.train.trainer import GRPOTrainer

    cfg = GRPOConfig(out=str(tmp_path / "run"), domain="clinic-lite", model=ModelConfig(name="tiny-random", precision="fp32"),
                     steps=1, tasks_per_step=1, group_size=2, max_turns=2, max_new_tokens=4, max_context=1024, plot=False,
                     val_holdout=3, val_every=1, select_checkpoint="best_val", stratify_by=["difficulty", "changes_mind"])
    trainer = GRPOTrainer(cfg, progress=False)
    trainer.start()
    trainer.train()
    out = bench("validate_checkpoint.py", str(tmp_path / "run"), "tiny-random")
    assert out["model"] == "tiny-random" and out["val_tasks"] == 3 and len(out["by_kind"]) == 3
    assert [c["step"] for c in out["the run's candidates"]] == [0, 1]
    assert out["success"] == out["the run's candidates"][0]["success"]  # the run's own start, scored again: the same verdicts


def parity_reward(domain, task, final_hash, trajectory, agent_turns):
    """A reward the tiny random model earns about half the time (the outcome bit it never earns): an even count of
    characters said. Groups then carry signal, so a first update moves the weights."""
    won = sum(len(m.content or "") for m in trajectory if m.role == "assistant") % 2 == 0
    info = reward_from_setting("outcome")(domain, task, final_hash, trajectory, agent_turns)
    return info.model_copy(update={"reward": float(won), "success": won})


def test_first_step_probe_replays_a_runs_first_update_and_lands_on_its_recorded_validation(tmp_path):
    """Issue 21: step 1's update replayed from the kept rollouts; the run's own settings must reproduce its step-1
    validation conversation for conversation, another learning rate must move the weights by another amount, and
    one too small to change a greedy token must give back the start's; the random control moves every weight by the
    rate, as far as the first update moves any."""
    from muarl.rollout.store import read_episodes
    from muarl.train.config import GRPOConfig, ModelConfig
    from muarl.train.trainer import GRPOTrainer

    cfg = GRPOConfig(out=str(tmp_path / "run"), domain="clinic-lite", model=ModelConfig(name="tiny-random", precision="fp32"),
                     steps=1, tasks_per_step=2, group_size=4, max_turns=2, max_new_tokens=6, max_context=4096, plot=False,
                     lr=1e-2, val_holdout=4, val_every=1, select_checkpoint="best_val", stratify_by=["difficulty", "changes_mind"])
    trainer = GRPOTrainer(cfg, reward_fn=parity_reward, progress=False)
    trainer.start()
    trainer.train()
    out = bench("first_step_probe.py", str(tmp_path / "run"), "--variant", "base={}", "--variant", "slow={lr: 1.0e-4}",
                "--variant", "still={lr: 1.0e-9}", "--random-control", "0", "--random-control", "1")
    base, slow, still = (out["variants"][k] for k in ("base", "slow", "still"))
    recorded = {r["step"]: r["val_transcripts"] for r in out["recorded"]}
    assert sorted(recorded) == [0, 1] and recorded[0] != recorded[1]  # the run's first update changed what it says
    assert base["val_transcripts"] == recorded[1] and still["val_transcripts"] == recorded[0]
    assert base["update_size"] > slow["update_size"] > still["update_size"] > 0
    assert base["trained_episodes"] == slow["trained_episodes"] > 0
    assert base["trained_episodes"] <= len(read_episodes(tmp_path / "run" / "rollouts" / "step-000001.jsonl")[0])
    one, two = out["random_controls"]
    assert one["rate"] == two["rate"] == 1e-2 and one["val_transcripts"] != recorded[1]
    assert one["update_size"] == pytest.approx(two["update_size"], rel=1e-6)  # every weight moved by the rate, either sign
    assert 0 < base["update_size"] <= one["update_size"]  # AdamW's first step moves no weight further than the rate


def test_score_on_test_evaluates_a_model_as_the_demo_did(tmp_path):
    """A model scored on a demo run's test tasks: the run's own cold start, scored again by the bench, must give back
    the run's evaluation task for task (nothing gained, nothing lost)."""
    from muarl.demo import stages
    from muarl.demo.config import form_config
    from muarl.demo.run import CONFIG_FILE

    cfg = form_config("full", out=str(tmp_path / "run"), model="tiny-random", precision="fp32", pilot=True, eval_tasks=4, base_eval_tasks=2,
                      eval_concurrency=4, max_turns=4, max_new_tokens=8)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / CONFIG_FILE).write_text(cfg.model_dump_json())
    (tmp_path / "run" / "eval_sft").mkdir()
    before = stages.evaluate_model("tiny-random", stages.eval_tasks(cfg), cfg, tmp_path / "run" / "eval_sft", False, False, "eval")
    out = bench("score_on_test.py", str(tmp_path / "run"), "tiny-random", "--out", str(tmp_path / "again"), "--quiet")
    assert out["tasks"] == 4 and out["success"] == before["success"] and sum(int(v.split("/")[1]) for v in out["by_kind"].values()) == 4
    again = out["against"]["cold start"]
    assert list(out["against"]) == ["cold start"] and again["n_tasks"] == 4 and again["delta"] == 0.0
    assert again["only_a"] == again["only_b"] == 0 and again["by_kind"] == out["by_kind"]
    assert (tmp_path / "again" / "episodes.jsonl").is_file()


def test_quick_cold_start_scores_each_candidate_length_from_one_sft_run(tmp_path):
    out = bench("quick_cold_start.py", "--out", str(tmp_path / "cal"), "--steps", "1,2", "--sampled-tasks", "2",
                "--set", "model=tiny-random", "--set", "precision=fp32", "--set", "sft_demos=3", "--set", "eval_tasks=2",
                "--set", "base_eval_tasks=1", "--set", "max_new_tokens=8", "--set", "grpo={tasks_per_step: 1, group_size: 2}")
    assert [c["sft_steps"] for c in out["candidates"]] == [1, 2]
    assert out["config"]["model"] == "tiny-random" and out["config"]["group_size"] == 2
    for c in out["candidates"]:
        sampled = c["sampled"]
        assert sampled["episodes"] + sampled["errored"] == 4 and sampled["groups"] == 2 and len(sampled["per_task"]) == 2
        assert 0.0 <= sampled["success"] <= 1.0 and len(c["greedy_by_task"]) == 2
    assert (tmp_path / "cal" / "sft" / "run" / "model-step-000001").is_dir()  # the shorter candidate's weights
    assert json.loads((tmp_path / "cal" / "calibration.json").read_text()) == out


@pytest.mark.slow  # a process that imports torch and takes six tiny gradients: ~10 s
def test_bf16_gradient_compares_sft_gradients_and_their_first_adamw_steps(tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps({"messages": [
        {"role": "system", "content": "You are the clinic's contact desk."},
        {"role": "user", "content": f"What is doctor {n}'s fee?"},
        {"role": "assistant", "content": f"Doctor {n}'s fee is {40 + n} dollars."}]}) + "\n" for n in range(4)))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bf16_gradient.py"), "--model", "tiny-random", "--demos", str(demos),
                           "--conversations", "2"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("2 demonstrations,") and lines[0].endswith("2 held out")
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")[1:] for line in lines if line.startswith("| fp32")}
    assert set(rows) == {"fp32 (A) vs bf16 autocast (B), all the data", "fp32, first half of the data (A) vs second half (B)"}
    cosine, _, _, _, agree, agree_large = (float(v) for v in rows["fp32 (A) vs bf16 autocast (B), all the data"])
    assert 0.5 < cosine <= 1.0 and 0.5 < agree <= 1.0 and 0.5 < agree_large <= 1.0  # the same data: close, not opposed
    before, from_fp32, from_bf16 = (float(v) for v in re.findall(r"\d+\.\d{4}", lines[-1]))
    assert before > 0 and from_fp32 > 0 and from_bf16 > 0


@pytest.mark.slow  # a process that imports torch and scores two tiny models: ~10 s
def test_cold_start_fit_scores_each_model_in_both_arithmetics_and_counts_what_moved(tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Fee of doctor {n}?"},
                                                      {"role": "assistant", "content": f"It is {40 + n} dollars."}]}) + "\n" for n in range(3)))
    out = bench("cold_start_fit.py", "--base", "tiny-random", "--model", "same=tiny-random", "--demos", str(demos), "--conversations", "2")
    base, same = out["models"]["base"], out["models"]["same"]
    assert out["conversations"] == 2 and "float32_moved" not in base
    assert same["float32_moved"] == same["bf16_moved"] == 0.0  # the base itself: nothing moved
    nll = same["nll"][str(demos)]
    assert nll == base["nll"][str(demos)] and nll["fp32"] > 0 and nll["bf16"] == pytest.approx(nll["fp32"], rel=0.05)
