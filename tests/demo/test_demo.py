"""`muarl demo` end to end on the tiny random model: every stage runs through the library's real paths and is
scored, the control trains for GRPO's minutes on demonstrations the cold start did not see, the results are
well formed, and a resumed run skips the stages that finished."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.config import ConfigError
from muarl.demo import run as demo_run
from muarl.demo import stages
from muarl.demo.config import PILOT, DemoConfig, form_config
from muarl.demo.report import results_markdown
from muarl.models import hf_loading
from muarl.reward import RewardSpec
from muarl.train.config import GRPOConfig, SFTConfig
from muarl.train.trainer import task_kind


def pilot_config(out, **changes) -> DemoConfig:
    return form_config("full", out=str(out), **{**PILOT, **changes})


def test_every_stage_runs_and_resume_skips_them(tmp_path, monkeypatch):
    cfg = pilot_config(tmp_path / "demo")
    results = demo_run.run_demo(cfg, progress=False)

    saved = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert saved["form"] == "full" and saved["eval_tasks"]["n"] == 3 and len(saved["eval_tasks"]["base_ids"]) == 2
    assert set(saved["eval_tasks"]["base_ids"]) <= set(saved["eval_tasks"]["ids"])
    assert set(saved["stages"]) == {"floor", "base", "sft", "control", "rl", "ceiling"}
    for name, row in saved["stages"].items():
        assert 0.0 <= row["success"] <= 1.0 and row["n_errored"] == 0, name
        assert set(row["per_task"]) == set(saved["eval_tasks"]["base_ids" if name == "base" else "ids"]), name
    assert saved["stages"]["floor"]["success"] == 0.0  # every clinic-lite task needs a write
    assert saved["stages"]["ceiling"]["success"] == 1.0  # the demo's loop lets a perfect agent succeed
    # how each model behaved: the oracle confirms every (revised) value before writing and stops when done
    assert saved["stages"]["ceiling"]["confirmed_before_write"] == 1.0 and saved["stages"]["ceiling"]["turns_after_completion"] <= 1
    assert saved["stages"]["floor"]["confirmed_before_write"] is None  # it never writes
    assert {"rl_minus_sft", "rl_minus_control", "control_minus_sft", "sft_minus_base"} == set(saved["deltas"])
    assert saved["deltas"]["rl_minus_sft"]["n_tasks"] == 3 and saved["deltas"]["sft_minus_base"]["n_tasks"] == 2

    train = saved["training"]
    synth = train["synth"]
    assert synth["sft_demos"] == 3 and synth["control_demos"] >= 1
    sft_tasks = {json.loads(line)["task_id"] for line in (tmp_path / "demo" / "synth" / stages.SFT_DEMOS).read_text().splitlines()}
    control_tasks = {json.loads(line)["task_id"] for line in (tmp_path / "demo" / "synth" / stages.CONTROL_DEMOS).read_text().splitlines()}
    assert sft_tasks == set(synth["sft_task_ids"]) and not sft_tasks & control_tasks
    assert not sft_tasks & set(synth["grpo_task_ids"])  # RL trains on tasks the cold start never saw
    # the demonstrations are held with the cooperative user (final wishes up front: no change of mind), GRPO's
    # rollouts with the scripted user, who changes its mind where the task says so
    synth_run = json.loads((tmp_path / "demo" / "synth" / "synth" / "run.json").read_text())
    assert synth_run["config"]["user"] == "scripted:cooperative"
    assert GRPOConfig.load(tmp_path / "demo" / "grpo" / "config.yaml").user == "scripted"
    grpo_episodes = [json.loads(line) for line in (tmp_path / "demo" / "grpo" / "rollouts" / "step-000001.jsonl").read_text().splitlines()]
    assert len(grpo_episodes) == 2 and {e["task_id"] for e in grpo_episodes} <= set(synth["grpo_task_ids"])
    assert train["grpo"]["steps"] == 1 and train["grpo"]["episodes"] == 2 and 0.0 <= train["grpo"]["sft_pass_at_n"] <= 1.0
    # RL hands on the better of the cold start and step 1 on 2 held-out train tasks, validated outside the box
    grpo = train["grpo"]
    assert [r["step"] for r in grpo["validation"]] == [0, 1] and grpo["val_tasks"] == 2 and grpo["validation_minutes"] > 0
    assert grpo["chosen_step"] in (0, 1) and grpo["select_on"] == "success"
    assert grpo["model"] == (train["sft"]["model"] if grpo["chosen_step"] == 0 else str((tmp_path / "demo" / "grpo" / "checkpoints" / "step-000001" / "model").resolve()))
    assert saved["stages"]["rl"]["model"] == grpo["model"] and "best greedy success on 2 held-out train tasks (start " in (tmp_path / "demo" / "results.md").read_text()
    # compute-matched by the process's CPU time, both stages recording wall and CPU minutes
    assert train["control"]["cpu_time_limit_minutes"] == pytest.approx(train["grpo"]["cpu_minutes"])
    for stage in ("sft", "grpo", "control"):
        assert train[stage]["minutes"] > 0 and train[stage]["cpu_minutes"] > 0, stage
    assert "CPU min (matched to GRPO's" in (tmp_path / "demo" / "results.md").read_text()
    # a control reused from another GRPO run of the same cold start says so, with both budgets
    reused = {**saved, "training": {**train, "control": {**train["control"], "cpu_time_limit_minutes": 1.25 * train["grpo"]["cpu_minutes"]}}}
    assert "NOT matched: its budget was" in results_markdown(reused) and "matched to GRPO's" not in results_markdown(reused)
    # and one trained on a host busier than GRPO's (its CPU time bought other compute) says that too
    assert train["grpo"]["others_cpus"] is not None and train["control"]["others_cpus"] is not None
    busy = {**saved, "training": {**train, "grpo": {**train["grpo"], "others_cpus": 0.0}, "control": {**train["control"], "others_cpus": 1.1}}}
    assert "NOT matched: other processes kept 1.1 CPUs busy during the control and 0.0 during GRPO" in results_markdown(busy)
    assert train["control"]["steps"] >= 1
    # a step whose validation fell past rollback_below is named, with the candidate the run went back to
    assert train["grpo"]["rolled_back"] == []  # the pilot's validation (0 of 2 at every candidate) never fell
    fell = {**saved, "training": {**train, "grpo": {**train["grpo"], "rolled_back": [{"step": 1, "to": 0}]}}}
    assert "step 1 fell, not built on: the next started from the cold start" in results_markdown(fell)
    lost = {**saved, "training": {**train, "grpo": {**train["grpo"], "rolled_back": [{"step": 2, "to": 1, "lost": ["difficulty=2,changes_mind=False"]}]}}}
    assert "step 2 lost difficulty=2,changes_mind=False, not built on: the next started from step 1" in results_markdown(lost)
    # the control's model is chosen as GRPO's was, on the same tasks: the cold start (GRPO's own record of it) or
    # its last weights (GRPO validated one step); the pilot's 0 of 2 everywhere keeps the earlier, the cold start
    control = train["control"]
    assert [r["step"] for r in control["validation"]] == [0, 1] and control["validation"][0] == {**grpo["validation"][0], "seconds": 0.0, "cpu_seconds": 0.0}
    assert control["candidates"] == {"1": control["last_model"]} and control["last_model"].startswith(str(tmp_path / "demo" / "control"))
    assert control["model"] == (train["sft"]["model"] if control["chosen_step"] == 0 else control["last_model"])
    assert saved["stages"]["control"]["model"] == control["model"] and "- control model: " in (tmp_path / "demo" / "results.md").read_text()
    for figure in ("success.png", "grpo/training_dynamics.png"):
        assert (tmp_path / "demo" / figure).stat().st_size > 1000
    groups = saved["by_group"]
    assert sum(g["n"] for g in groups.values()) == 3 and all(set(g) >= {"n", "sft", "rl", "control"} for g in groups.values())
    md = (tmp_path / "demo" / "results.md").read_text()
    assert "PILOT" in md and "RL - control" in md and "McNemar" in md and "| confirmed before write | turns after completion |" in md
    assert saved["precision"] == saved["sft_precision"] == "fp32" and "precision fp32, seed 0" in md
    assert "precision bf16 (SFT fp32), seed 0" in results_markdown({**saved, "precision": "bf16"})  # protocol 12 on a bf16 machine

    def refuse(*args, **kwargs):
        raise AssertionError("a finished stage ran again")

    for name in ("stage_synth", "stage_eval_base", "stage_sft", "evaluate_model", "stage_grpo", "stage_control"):
        monkeypatch.setattr(stages, name, refuse)
    again = demo_run.run_demo(cfg, resume=True, progress=False)
    assert again["stages"]["rl"]["success"] == results["stages"]["rl"]["success"]


def test_revising_demos_are_held_with_the_user_who_changes_their_mind_and_re_confirm(tmp_path):
    """The A/B's calibration knob: the first ``sft_revising_demos`` tasks of the seeded order meet the scripted
    user, so where the patient changes their mind the demonstration confirms the revised value again before the
    write; every other demonstration is held with the cooperative user, as before."""
    cfg = pilot_config(tmp_path / "demo", sft_demos=8, sft_revising_demos=5, control=False)
    out = stages.stage_synth(cfg, tmp_path / "synth", resume=False)
    assert json.loads((tmp_path / "synth" / "synth" / "run.json").read_text())["config"]["user"] == "scripted:cooperative"
    assert json.loads((tmp_path / "synth" / "synth-revising" / "run.json").read_text())["config"]["user"] == "scripted"
    tasks = {t.id: t for t in stages.domain(cfg.domain).tasks("train")}
    demos = [json.loads(line) for line in (tmp_path / "synth" / stages.SFT_DEMOS).read_text().splitlines()]
    assert out["sft_demos"] == len(demos) == 8 and out["revising_demos"] == 5
    revised_seen = 0
    for demo in demos:
        task, messages = tasks[demo["task_id"]], demo["messages"]
        revision = task.user.requests[0].revision
        said = [m["content"] or "" for m in messages if m["role"] == "user"]
        confirmations = [k for k, m in enumerate(messages) if m["role"] == "assistant" and (m["content"] or "").startswith("To confirm")]
        write = next(k for k, m in enumerate(messages) if any(c["function"]["name"] == "update_contact_info" for c in m.get("tool_calls") or []))
        shows_revision = revision is not None and any(revision.text in u or any(v in u for v in revision.variants) for u in said)
        if shows_revision:
            revised_seen += 1
            (value,) = revision.facts.values()
            assert len(confirmations) == 2 and value in messages[confirmations[1]]["content"] and confirmations[1] < write, demo["task_id"]
            assert value in messages[write]["tool_calls"][0]["function"]["arguments"]
        else:
            assert len(confirmations) == 1 and confirmations[0] < write, demo["task_id"]
    assert revised_seen == out["revising_demos_changing_mind"] >= 1
    with pytest.raises(ConfigError, match=r"sft_revising_demos \(4\) cannot exceed sft_demos \(3\)"):
        pilot_config(tmp_path / "bad", sft_revising_demos=4)


def test_out_dir_is_not_overwritten_and_resume_must_match(tmp_path):
    cfg = pilot_config(tmp_path / "demo")
    demo_run.check_out_dir(cfg, resume=False)
    with pytest.raises(ConfigError, match="--resume"):
        demo_run.check_out_dir(cfg, resume=False)
    with pytest.raises(ConfigError, match="eval_tasks"):
        demo_run.check_out_dir(pilot_config(tmp_path / "demo", eval_tasks=4), resume=True)
    demo_run.check_out_dir(cfg.model_copy(update={"grpo_minutes": 3.0}), resume=True)  # the GRPO budget may change
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("")
    with pytest.raises(ConfigError, match="no learning demo"):
        demo_run.check_out_dir(pilot_config(tmp_path / "other"), resume=True)


def test_eval_tasks_are_seeded_held_out_and_the_base_share_is_a_subset(tmp_path):
    a = stages.eval_tasks(pilot_config(tmp_path, eval_tasks=20))
    assert [t.id for t in a] == [t.id for t in stages.eval_tasks(pilot_config(tmp_path, eval_tasks=20))]
    assert len(a) == 20 and all(t.split == "test" for t in a) and {t.difficulty for t in a} == {1, 2}
    assert [t.id for t in stages.eval_tasks(pilot_config(tmp_path, eval_tasks=20, seed=1))] != [t.id for t in a]
    base = stages.base_eval_tasks(pilot_config(tmp_path, eval_tasks=20, base_eval_tasks=5))
    assert len(base) == 5 and {t.id for t in base} <= {t.id for t in a}


def test_forms_and_their_guards(tmp_path):
    quick, full = form_config("quick", out="q"), form_config("full", out="f")
    assert quick.form == "quick" and not quick.control and quick.grpo["tasks_per_step"] == 2
    assert full.eval_tasks >= 150 and full.control and full.grpo_fields["group_size"] == 8
    assert full.grpo_fields["temperature"] == 1.0 and full.grpo_fields["dynamic_sampling"]
    assert full.grpo_fields["stratify_by"] == ["difficulty", "changes_mind"]  # every step covers every kind of task
    kinds = {task_kind(t, full.grpo_fields["stratify_by"]) for t in stages._pool(full, "train")}
    assert len(kinds) == 4 and full.grpo_fields["tasks_per_step"] == 6  # a step holds each kind, 2 of two of them
    assert full.grpo_fields["rollback_below"] == 0.1  # a step that fell 7 of 64 validation tasks is not built on
    assert full.grpo_fields["kind_fall_limit"] == 0.25  # nor one that lost 5 of a kind's 16 the cold start solved
    assert form_config("quick", out="q", grpo={"lr": 1e-5}).grpo == {"tasks_per_step": 2, "max_sampling_rounds": 1, "lr": 1e-5}
    with pytest.raises(ValueError, match="split"):
        form_config("full", out="f", grpo={"split": "test"})
    with pytest.raises(ValueError, match="base_eval_tasks"):
        form_config("full", out="f", eval_tasks=10)
    with pytest.raises(ValueError, match="unknown form"):
        form_config("medium", out="m")


def test_the_grpo_reward_is_a_demo_option_checked_before_anything_runs(tmp_path):
    cfg = form_config("quick", out="q", reward={"name": "process", "options": {"violation_reward": 0.25}})
    grpo = stages.grpo_config(cfg, tmp_path, "model-dir", ["t1"])
    assert grpo.reward == RewardSpec(name="process", options={"violation_reward": 0.25}) and grpo.user == "scripted"
    assert stages.grpo_config(form_config("quick", out="q"), tmp_path, "m", ["t1"]).reward == "outcome"  # MUA-RL's, by default
    with pytest.raises(ConfigError, match=r"^reward 'process' has no option 'nope'; its options are"):
        form_config("quick", out="q", reward={"name": "process", "options": {"nope": 1}})
    with pytest.raises(ValueError, match="may not set"):
        form_config("quick", out="q", grpo={"reward": "process"})  # one place names it
    refused = CliRunner().invoke(main, ["demo", "--out", str(tmp_path / "x"), "--reward", "proces", "--quiet"])
    assert refused.exit_code == 2 and "unknown reward 'proces'" in refused.output and "Traceback" not in refused.output
    assert not (tmp_path / "x").exists()


def test_an_anchor_weight_anchors_grpo_on_the_cold_starts_own_demonstrations(tmp_path):
    cfg = form_config("full", out=str(tmp_path / "run"), grpo={"anchor_coef": 0.1})
    assert stages.grpo_config(cfg, tmp_path, "m", ["t1"]).anchor_data == str(tmp_path / "run" / "synth" / stages.SFT_DEMOS)
    elsewhere = tmp_path / "other" / "sft_demos.jsonl"  # bench/grpo_box.py: another run's cold start
    assert stages.grpo_config(cfg, tmp_path, "m", ["t1"], demos=elsewhere).anchor_data == str(elsewhere)
    full = stages.grpo_config(form_config("full", out=str(tmp_path / "f")), tmp_path, "m", ["t1"])
    assert full.anchor_coef == 3.0 and full.lr == 1e-5 and full.warmup_steps == 0  # protocol 10
    assert full.rollback_lr_factor == 0.5 and full.rollback_lr_recovery  # protocol 11
    assert full.anchor_data == str(tmp_path / "f" / "synth" / stages.SFT_DEMOS)
    assert stages.grpo_config(form_config("quick", out="q"), tmp_path, "m", ["t1"]).anchor_data is None  # the quick form's is off
    # weighed by its gradient's ratio instead of a fixed weight, the anchor comes from the same demonstrations
    ratio = form_config("full", out=str(tmp_path / "r"), grpo={"anchor_coef": 0.0, "anchor_grad_ratio": 0.7})
    assert stages.grpo_config(ratio, tmp_path, "m", ["t1"]).anchor_data == str(tmp_path / "r" / "synth" / stages.SFT_DEMOS)


def test_grpo_model_settings_reach_the_policy_but_not_what_the_demo_fixes(tmp_path):
    cfg = form_config("full", out="f", grpo={"model": {"train_top_layers": 8}})
    model = stages.grpo_config(cfg, tmp_path, "cold-start-dir", ["t1"]).model
    assert (model.train_top_layers, model.name, model.finetune) == (8, "cold-start-dir", "full")
    assert stages.grpo_config(form_config("full", out="f"), tmp_path, "m", ["t1"]).model.train_top_layers is None
    for fixed in ({"finetune": "lora"}, {"name": "other"}, {"precision": "fp32"}):
        with pytest.raises(ValueError, match="grpo.model may set ModelConfig fields other than"):
            form_config("full", out="f", grpo={"model": fixed})
    with pytest.raises(ValueError, match=r"grpo.model must be a mapping of ModelConfig fields, got int: 8"):
        form_config("full", out="f", grpo={"model": 8})
    with pytest.raises(ConfigError, match="invalid GRPO settings: .*train_top_layers"):
        stages.grpo_config(form_config("full", out="f", grpo={"model": {"train_top_layers": 0}}), tmp_path, "m", ["t1"])


def test_grpo_settings_that_cannot_run_are_refused_before_the_cold_start_spends_its_minutes(tmp_path):
    # deeper than the tiny model's 2 blocks, or refused by GRPOConfig: at once, in one line, nothing written
    with pytest.raises(ConfigError, match=r"^grpo.model.train_top_layers: 3 blocks asked for, tiny-random has 2$"):
        demo_run.run_demo(pilot_config(tmp_path / "deep", grpo={"model": {"train_top_layers": 3}}), progress=False)
    with pytest.raises(ConfigError, match="invalid GRPO settings: .*train_top_layers"):
        demo_run.run_demo(pilot_config(tmp_path / "zero", grpo={"model": {"train_top_layers": 0}}), progress=False)
    assert not any((tmp_path / name).exists() for name in ("deep", "zero"))
    # where no config can be read here (no model at all), nothing is refused early: loading the model says why
    assert hf_loading.block_count(str(tmp_path / "no-model")) is None
    assert hf_loading.block_count("tiny-random") == 2


def test_an_embedded_model_that_cannot_be_had_is_one_line_not_a_traceback(tmp_path):
    # no cached conversion and the wheel it would be converted from is not there
    env = {"MUARL_CACHE": str(tmp_path / "cache"), "MUARL_SMOLLM2_WHEEL": str(tmp_path / "gone.whl")}
    result = CliRunner(env=env).invoke(main, ["demo", "--out", str(tmp_path / "d"), "--quiet"])
    assert result.exit_code == 2, result.output  # a usage error, not the exception's exit code 1
    assert "gone.whl is not a file" in result.output and "Traceback" not in result.output


def test_the_command_refuses_a_used_directory_in_one_line(tmp_path):
    out = tmp_path / "demo"
    demo_run.check_out_dir(pilot_config(out), resume=False)
    result = CliRunner().invoke(main, ["demo", "--out", str(out), "--model", "tiny-random", "--quiet"])
    assert result.exit_code == 2
    assert "already holds a learning demo" in result.output and "Traceback" not in result.output


def test_the_base_share_can_be_set_from_the_command_line_below_the_forms(tmp_path):
    """--eval-tasks below the form's base share is refused in one line that names the flag that fixes it."""
    refused = CliRunner().invoke(main, ["demo", "--out", str(tmp_path / "a"), "--model", "tiny-random", "--eval-tasks", "2", "--quiet"])
    assert refused.exit_code == 2 and "--base-eval-tasks" in refused.output and "Traceback" not in refused.output
    assert form_config("quick", out="q", eval_tasks=2, base_eval_tasks=1).base_eval_tasks == 1


def test_a_resumed_grpo_stage_counts_the_minutes_of_its_checkpointed_steps(tmp_path):
    """The control is matched to GRPO's minutes, so a GRPO stage stopped and resumed must report the steps it ran
    before as well, not only the wall time of its last attempt."""
    # no synth stage ran here, so no demonstrations to anchor on: the anchor is off (its own test is above)
    cfg = pilot_config(tmp_path / "demo", grpo_steps=1, grpo={**PILOT["grpo"], "anchor_coef": 0.0})
    ids = [t.id for t in stages._pool(cfg, "train")[:4]]
    first = stages.stage_grpo(cfg, tmp_path / "grpo", "tiny-random", ids, progress=False)
    step_one = json.loads((tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()[0])
    before = (step_one["rollout_seconds"] + step_one["update_seconds"]) / 60
    assert first["steps"] == 1 and first["resumed_after_minutes"] is None and first["minutes"] >= before
    resumed = stages.stage_grpo(cfg.model_copy(update={"grpo_steps": 2}), tmp_path / "grpo", "tiny-random", ids, progress=False)
    assert resumed["steps"] == 2 and resumed["resumed_after_minutes"] == pytest.approx(before)
    step_two = json.loads((tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()[1])
    assert resumed["minutes"] >= before + (step_two["rollout_seconds"] + step_two["update_seconds"]) / 60
    # the CPU minutes the control is matched to count the earlier attempt's steps too
    assert step_one["cpu_seconds"] > 0 and resumed["cpu_minutes"] >= (step_one["cpu_seconds"] + step_two["cpu_seconds"]) / 60


def test_a_resumed_grpo_stage_reports_the_host_load_of_every_step_not_its_last_attempts(tmp_path):
    """The control is matched to GRPO only on an equally busy host, so a GRPO stage resumed on an idle host after an
    attempt that shared the CPU must report the load its earlier steps ran under (issue 21, thirty-second session: an
    adopted time box was judged by the host load of its 8-second resume alone)."""
    cfg = pilot_config(tmp_path / "demo", grpo_steps=1, grpo={**PILOT["grpo"], "anchor_coef": 0.0})
    ids = [t.id for t in stages._pool(cfg, "train")[:4]]
    stages.stage_grpo(cfg, tmp_path / "grpo", "tiny-random", ids, progress=False)
    metrics = tmp_path / "grpo" / "metrics.jsonl"
    step_one = json.loads(metrics.read_text().splitlines()[0])
    assert step_one["others_cpus"] >= 0.0  # every step records the load it ran under
    metrics.write_text(json.dumps({**step_one, "others_cpus": 1.5}) + "\n")  # as if it had run beside a 1.5-CPU job
    resumed = stages.stage_grpo(cfg.model_copy(update={"grpo_steps": 2}), tmp_path / "grpo", "tiny-random", ids, progress=False)
    step_two = json.loads(metrics.read_text().splitlines()[1])
    one, two = (r["rollout_seconds"] + r["update_seconds"] for r in (step_one, step_two))
    assert resumed["others_cpus"] == pytest.approx((1.5 * one + step_two["others_cpus"] * two) / (one + two))
    # the stage runner keeps the figure the stage measured rather than its own over the last attempt
    kept = demo_run.run_stage(tmp_path / "demo", "grpo", lambda d: {"others_cpus": 1.25, "minutes": 1.0})
    assert kept["others_cpus"] == 1.25


def test_a_grpo_stage_resumed_after_its_box_ran_out_trains_no_further_step(tmp_path):
    """A run stopped after its time box's last step but before the stage was recorded (killed while it saved or
    plotted) must resume to the same steps: another step would hand RL, and the control matched to it, more
    compute than the box allows."""
    cfg = pilot_config(tmp_path / "demo", grpo_steps=5, grpo_minutes=0.001, grpo={**PILOT["grpo"], "anchor_coef": 0.0})
    ids = [t.id for t in stages._pool(cfg, "train")[:4]]
    first = stages.stage_grpo(cfg, tmp_path / "grpo", "tiny-random", ids, progress=False)
    assert first["steps"] == 1  # the box holds no step, and at least one runs
    resumed = stages.stage_grpo(cfg, tmp_path / "grpo", "tiny-random", ids, progress=False)
    assert resumed["steps"] == 1 and len((tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()) == 1
    assert resumed["model"] == first["model"]


def test_the_controls_candidates_sit_at_the_cpu_time_grpo_had_spent_by_each_validated_step():
    rows = [{"step": 1, "cpu_seconds": 60.0}, {"step": 2, "cpu_seconds": 120.0}, {"step": 3, "cpu_seconds": 30.0}]
    assert stages.control_marks(rows, [1, 3]) == {1: 1.0, 3: 3.5}


def test_the_control_is_matched_by_cpu_time_not_by_wall_minutes():
    """A GRPO stage on a busy machine spends many wall minutes and few CPU minutes; the control gets the CPU
    minutes. A GRPO stage recorded without CPU time is refused in one line, never matched by a guess."""
    assert stages.grpo_cpu_minutes({"minutes": 30.0, "cpu_minutes": 12.5}) == 12.5
    with pytest.raises(ConfigError, match="predates CPU-time matching"):
        stages.grpo_cpu_minutes({"minutes": 30.0})


def test_the_cold_start_and_the_control_train_in_their_own_precision(tmp_path):
    """The full form's cold start trains in float32 whatever GRPO runs in: on the bf16 machine its bf16 SFT ended at
    a worse fit (loss ~0.0105 against ~0.0070 after the same 18 steps) and GRPO lost level 2 from it, where bf16
    GRPO from the float32 cold start of the same demonstrations kept it (issue 21, thirty-first session)."""
    assert form_config("full", out="f").sft_precision == "fp32" and form_config("quick", out="q").sft_precision is None
    cfg = pilot_config(tmp_path / "run", precision="bf16", sft_precision="fp32")
    (tmp_path / "run").mkdir()
    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."}]}) + "\n")
    stages.stage_sft(cfg, tmp_path / "run" / "sft", demos, progress=False)
    assert SFTConfig.load(tmp_path / "run" / "sft" / "run" / "config.yaml").model.precision == "fp32"
    assert stages.grpo_config(cfg, tmp_path, "m", ["t1"]).model.precision == "bf16"  # GRPO runs in the run's precision
    quick = form_config("quick", **{**PILOT, "out": str(tmp_path / "run"), "precision": "bf16"})
    stages.stage_sft(quick, tmp_path / "run" / "sft", demos, progress=False)
    assert SFTConfig.load(tmp_path / "run" / "sft" / "run" / "config.yaml").model.precision == "bf16"  # unset: the run's
