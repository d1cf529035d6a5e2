"""The learning claim over seeds: one table of every run's differences, their mean and range, and the kinds of
held-out task a run lost ground on (issue 21)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_demo import pilot_config

from muarl.cli import main
from muarl.demo import run as demo_run
from muarl.demo.spread import spread, spread_markdown


def fake_run(seed: int, precision: str, rl_sft: tuple[float, int, int, float], rl_control: float, kinds: dict) -> dict:
    delta, gained, lost, p = rl_sft
    return {
        "config": {"seed": seed, "precision": "auto", "out": f"runs/seed-{seed}"}, "precision": precision, "pilot": False,
        "deltas": {"rl_minus_sft": {"delta": delta, "gained": gained, "lost": lost, "p_mcnemar": p, "ci95": [delta - 0.08, delta + 0.08],
                                    "n_tasks": 150},
                   "rl_minus_control": {"delta": rl_control, "gained": 10, "lost": 7, "p_mcnemar": 0.6, "ci95": None, "n_tasks": 150}},
        "by_group": {kind: {"n": 10, "sft": sft, "rl": rl, "control": 0.5} for kind, (sft, rl) in kinds.items()},
    }


def test_mean_range_and_the_kinds_that_fell_are_computed_by_hand():
    a = fake_run(0, "fp32", (0.333, 52, 2, 1.6e-13), 0.087, {"level 1": (1.0, 1.0), "level 2": (1.0, 0.923)})
    b = fake_run(1, "bf16", (0.100, 32, 17, 0.044), -0.020, {"level 1": (1.0, 0.964), "level 2": (0.923, 0.385)})
    summary = spread([a, b])
    assert summary["deltas"]["rl_minus_sft"] == pytest.approx({"mean": 0.2165, "min": 0.100, "max": 0.333, "n_runs": 2})
    assert summary["deltas"]["rl_minus_control"]["mean"] == pytest.approx(0.0335)
    level2 = {r["label"]: r for r in summary["kinds"]["level 2"]["runs"]}
    assert not level2["seed 0, fp32"]["flagged"]  # 100 -> 92.3: 7.7 points, under the 10-point flag
    assert level2["seed 1, bf16"]["flagged"] and level2["seed 1, bf16"]["change"] == pytest.approx(-0.538)
    # run 1 misses +15 points at p < 0.01 and loses level 2; the mean RL - control is still positive
    assert summary["criteria"] == {"every_run_rl_minus_sft": False, "mean_rl_minus_control_positive": True, "no_kind_drops": False}
    md = spread_markdown(summary)
    assert "mean +21.7, range [+10.0, +33.3]" in md and "fell > 10 points" in md and "| seed 1, bf16 |" in md
    assert "+33.3 (52/2, p = 1.6e-13) [+25.3, +41.3]" in md

    # each seed draws its own 150 held-out tasks, so a kind's n is each run's own
    b["by_group"]["level 2"]["n"] = 13
    assert "| level 2 | 10 | seed 0, fp32 |" in spread_markdown(spread([a, b])) and "| level 2 | 13 | seed 1, bf16 |" in spread_markdown(spread([a, b]))

    # a run whose control trained on a busier host than its GRPO (run 14) is shown but left out of the mean
    c = fake_run(2, "bf16", (0.100, 17, 2, 0.00073), 0.053, {"level 1": (1.0, 1.0)})
    c["training"] = {"grpo": {"others_cpus": 0.02}, "control": {"others_cpus": 1.0}}
    uneven = spread([a, b, c])
    assert [r["control_load_matched"] for r in uneven["runs"]] == [True, True, False]
    assert uneven["deltas"]["rl_minus_control"] == pytest.approx({"mean": 0.0335, "min": -0.020, "max": 0.087, "n_runs": 2})
    assert uneven["deltas"]["rl_minus_sft"]["n_runs"] == 3
    md = spread_markdown(uneven)
    assert "(control NOT matched: other host load; not in the mean)" in md and "range [-2.0, +8.7] over 2 runs" in md
    alone = spread([c])
    assert alone["criteria"]["mean_rl_minus_control_positive"] is None and "n/a (no matched control)" in spread_markdown(alone)

    good = spread([a])
    assert good["criteria"] == {"every_run_rl_minus_sft": True, "mean_rl_minus_control_positive": True, "no_kind_drops": True}


def test_pilot_seeds_run_each_in_its_own_directory_and_write_one_table(tmp_path):
    cfg = pilot_config(tmp_path / "spread", control=False)
    summary = demo_run.run_seeds(cfg, [0, 1], progress=False)
    assert [r["label"].split(",")[0] for r in summary["runs"]] == ["seed 0", "seed 1"]
    for seed in (0, 1):
        results = json.loads((tmp_path / "spread" / f"seed-{seed}" / "results.json").read_text())
        assert results["config"]["seed"] == seed and results["precision"] == "fp32"
    assert summary["deltas"]["rl_minus_sft"]["n_runs"] == 2 and "rl_minus_control" not in summary["deltas"]
    md = (tmp_path / "spread" / "spread.md").read_text()
    assert md.startswith("PILOT") and "n/a (no matched control)" in md
    assert json.loads((tmp_path / "spread" / "spread.json").read_text())["criteria"] == summary["criteria"]
    with pytest.raises(Exception, match="distinct seeds"):
        demo_run.run_seeds(cfg, [0, 0], progress=False)


def test_seed_records_are_checked_before_any_run_and_kept_as_each_run_ends(tmp_path, monkeypatch):
    """A full-form run takes ~100 minutes: a --records directory keeping another experiment under a seed's name
    refuses before the first run starts, and a seed's record is kept as soon as its run ends (a later crash loses none)."""
    from muarl.config import ConfigError
    from muarl.demo.report import run_identity

    cfg = pilot_config(tmp_path / "spread", control=False).model_copy(update={"pilot": False})
    ran = []

    def fake_demo(seed_cfg, resume, progress):
        if seed_cfg.seed == 2:
            raise RuntimeError("seed 2 crashed")
        ran.append(seed_cfg.seed)
        return {**run_identity(seed_cfg), "deltas": {}, "by_group": {}}

    monkeypatch.setattr(demo_run, "run_demo", fake_demo)
    with pytest.raises(ConfigError, match="pilot run measures nothing"):
        demo_run.run_seeds(cfg.model_copy(update={"pilot": True}), [0], progress=False, records=tmp_path / "kept")
    (seed_1,) = demo_run.check_records(cfg.model_copy(update={"max_turns": 3}), [1], tmp_path / "kept")
    seed_1.parent.mkdir()
    seed_1.write_text(json.dumps(run_identity(cfg.model_copy(update={"max_turns": 3, "seed": 1}))))
    with pytest.raises(ConfigError, match=r"differs in \['max_turns'\]"):
        demo_run.run_seeds(cfg, [0, 1], progress=False, records=tmp_path / "kept")
    assert ran == []  # seed 0 did not run either
    seed_1.unlink()
    with pytest.raises(RuntimeError, match="seed 2 crashed"):
        demo_run.run_seeds(cfg, [0, 1, 2], progress=False, records=tmp_path / "kept")
    assert ran == [0, 1] and sorted(p.name for p in (tmp_path / "kept").iterdir()) == [seed_1.name.replace("seed-1", "seed-0"), seed_1.name]
    assert json.loads(seed_1.read_text())["config"]["out"] == str(tmp_path / "spread" / "seed-1")


@pytest.mark.parametrize(("args", "message"), [(["--seed", "1", "--seeds", "0,1"], "not both"),
                                                (["--seeds", "0,x"], "comma-separated integers")])
def test_the_command_refuses_bad_seeds_in_one_line(tmp_path, args, message):
    result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path / "d"), "--model", "tiny-random", "--quiet", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_records_from_several_machines_add_up_to_one_table(tmp_path):
    from muarl.demo.spread import load_records, record_name, run_label, save_record

    a = fake_run(0, "bf16", (0.2, 40, 10, 1e-5), 0.05, {"level 1": (1.0, 1.0)})
    b = {**fake_run(0, "bf16", (0.1, 30, 15, 0.03), -0.01, {"level 1": (1.0, 0.9)}), "machine": {"cpu_model": "Intel(R) Xeon(R) 8480+"}}
    c = {**fake_run(1, "fp32", (0.3, 50, 5, 1e-9), 0.1, {"level 1": (1.0, 1.0)}), "machine": {"cpu_model": "AMD EPYC"}}
    assert record_name(b) == "bf16-seed-0-intel-r-xeon-r-8480.json" and record_name(a) == "bf16-seed-0-unknown-cpu.json"
    # a run whose cold start trained in float32 on a bf16 machine (protocol 12) is its own record and row
    d = {**c, "precision": "bf16", "sft_precision": "fp32"}
    assert record_name(d) == "bf16-sft-fp32-seed-1-amd-epyc.json" and record_name({**c, "sft_precision": "fp32"}) == "fp32-seed-1-amd-epyc.json"
    assert run_label(d) == "seed 1, bf16-sft-fp32, AMD EPYC"
    for run in (c, b, a):
        save_record(run, tmp_path / "records")
    save_record(c, tmp_path / "records")  # the same run kept again replaces its record
    save_record({**c, "config": {**c["config"], "out": "/elsewhere"}}, tmp_path / "records")  # and a rerun elsewhere too
    # a field added since the record was kept, at its default, is the same experiment
    save_record({**c, "config": {**c["config"], "sft_revising_demos": 0}}, tmp_path / "records")
    # another experiment of the same precision, seed and CPU is refused, the kept record left as it was
    other = {**c, "config": {**c["config"], "grpo_user": "scripted:faulty:0.2"}}
    with pytest.raises(ValueError, match=r"fp32-seed-1-amd-epyc.json keeps another experiment's run \(it differs in \['grpo_user'\]\)"):
        save_record(other, tmp_path / "records")
    assert "grpo_user" not in json.loads((tmp_path / "records" / "fp32-seed-1-amd-epyc.json").read_text())["config"]
    ab = {**c, "arms": [{"label": "outcome"}, {"label": "process"}]}
    (tmp_path / "ab").mkdir()
    save_record(ab, tmp_path / "ab")
    save_record({**ab, "arms": [*ab["arms"], {"label": "checklist"}]}, tmp_path / "ab")  # a resumed A/B seed gained an arm
    with pytest.raises(ValueError, match=r"differs in \['arms'\]"):
        save_record({**ab, "arms": [{"label": "plain"}, {"label": "quarantined"}]}, tmp_path / "ab")
    runs = load_records(tmp_path / "records")
    summary = spread(runs)
    assert [r["label"] for r in summary["runs"]] == ["seed 0, bf16", "seed 0, bf16, Intel(R) Xeon(R) 8480+", "seed 1, fp32, AMD EPYC"]
    assert summary["deltas"]["rl_minus_sft"]["n_runs"] == 3
    with pytest.raises(ValueError, match="pilot"):
        save_record({**a, "pilot": True}, tmp_path / "records")
    with pytest.raises(ValueError, match="no run records"):
        load_records(tmp_path / "empty")
