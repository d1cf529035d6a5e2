"""The reward A/B (``bench/reward_ab.py``, :mod:`muarl.demo.reward_ab`) end to end on the tiny random model: one
shared cold start, GRPO per arm with that arm's reward, every model scored on the same held-out tasks, one table;
a resumed run skips what finished and may add an arm. Arms are refused in one line when they cannot run."""

from __future__ import annotations

import json

import pytest

from muarl.config import ConfigError
from muarl.demo import stages
from muarl.demo.config import PILOT, form_config
from muarl.demo.reward_ab import (Arm, above_floor, confirmation_violations, criteria, late_delta, oracle_late_per_task,
                                  parse_arm, run_reward_ab, with_oracle_floor, write_ab)
from muarl.demo.spread import load_records, save_record
from muarl.evals.conduct import check_mean_value, check_values_per_task
from muarl.reward import RewardSpec
from muarl.train.config import GRPOConfig
from muarl.types import CheckVerdict, Episode

PILOT_AB = {**PILOT, "control": False}


def test_every_arm_trains_from_one_cold_start_and_lands_in_one_table(tmp_path, monkeypatch):
    cfg = form_config("full", out=str(tmp_path / "ab"), **PILOT_AB, grpo_user="scripted:faulty:0.5")
    arms = [parse_arm("outcome"), parse_arm("{label: strict, reward: {name: process, options: {violation_reward: 0.1}}, "
                                            "grpo: {quarantine_user_faults: true}}")]
    records = run_reward_ab(cfg, arms, [0], progress=False)
    seed = tmp_path / "ab" / "seed-0"
    (record,) = records
    assert set(record["models"]) == {"sft", "outcome", "strict"} and set(record["deltas"]) == {"strict"}
    assert record["deltas"]["strict"]["n_tasks"] == 3
    for row in record["models"].values():
        assert set(row["per_task"]) == set(json.loads((seed / "eval_sft" / "stage.json").read_text())["per_task"])
        assert set(row["cbw_change_of_mind"]) == {"judged", "violated", "rate", "ci95"}
    # both arms started from the one cold start, each trained with its own reward
    model = json.loads((seed / "sft" / "stage.json").read_text())["model"]
    outcome, strict = (GRPOConfig.load(seed / f"grpo-{a}" / "config.yaml") for a in ("outcome", "strict"))
    assert outcome.model.name == strict.model.name == model and outcome.task_ids == strict.task_ids
    assert outcome.reward == "outcome" and strict.reward == RewardSpec(name="process", options={"violation_reward": 0.1})
    assert record["training"]["strict"]["reward"] == "process (violation_reward=0.1)"
    # GRPO faced the fault-injecting user (evaluations the scripted one); the quarantine arm left out every episode labelled user
    assert outcome.user == strict.user == "scripted:faulty:0.5" and not outcome.quarantine_user_faults and strict.quarantine_user_faults
    faults = {a: record["training"][a]["user_faults"] for a in ("outcome", "strict")}
    assert faults["outcome"]["quarantined"] == 0 and faults["strict"]["quarantined"] == faults["strict"]["labelled_user"]
    assert all(f["episodes"] == 2 for f in faults.values())
    assert set(record["violations_per_step"]["outcome"]) >= {"confirmed_before_write", "turns_after_completion"}
    assert (seed / "violations_per_step.png").stat().st_size > 1000
    md = (tmp_path / "ab" / "reward_ab.md").read_text()
    assert md.startswith("PILOT") and "strict (process (violation_reward=0.1))" in md and "vs outcome" in md
    assert "ci_low_above_-5" in md and "violations_halved" in md
    assert record["oracle_late_per_task"] == oracle_late_per_task(cfg.model_copy(update={"seed": 0})) and "ended later than the oracle" in md

    def refuse(*args, **kwargs):
        raise AssertionError("a finished stage ran again")

    for name in ("stage_synth", "stage_sft", "evaluate_model", "stage_grpo"):
        monkeypatch.setattr(stages, name, refuse)
    again = run_reward_ab(cfg, arms, [0], resume=True, progress=False)
    assert again[0]["models"] == json.loads(json.dumps(record["models"]))
    with pytest.raises(ConfigError, match="arm 'strict' differs from the one recorded"):
        run_reward_ab(cfg, [arms[0], parse_arm("strict=process")], [0], resume=True, progress=False)


def test_seeds_kept_as_records_on_different_days_make_one_table(tmp_path):
    """A seed's A/B takes most of a session here: each finished seed is kept as a record (named by precision, seed and
    CPU, as the learning claim's runs are), and the table is made over the records, each arm over the seeds that ran it."""
    cfg = form_config("full", out=str(tmp_path / "ab"), **PILOT_AB)
    (record,) = run_reward_ab(cfg, [parse_arm("outcome"), parse_arm("process")], [0], progress=False)
    assert record["config"]["seed"] == 0 and record["precision"] in ("fp32", "bf16") and record["machine"]["cpus"] >= 1
    with pytest.raises(ValueError, match="pilot run measures nothing"):
        save_record(record, tmp_path / "kept")
    measured = {**record, "pilot": False}
    # a later seed that also ran a third arm
    later = json.loads(json.dumps({**measured, "seed": 1, "config": {**measured["config"], "seed": 1}}))
    later["arms"].append({**later["arms"][1], "label": "checklist", "reward": "checklist"})
    later["deltas"]["checklist"] = {**later["deltas"]["process"], "delta": 0.5}
    later["late_deltas"]["checklist"] = later["late_deltas"]["process"]
    later["models"]["checklist"], later["training"]["checklist"] = later["models"]["process"], later["training"]["process"]
    names = [save_record(r, tmp_path / "kept").name for r in (measured, later)]
    assert names[0].startswith(f"{record['precision']}-seed-0-") and names[1].startswith(f"{record['precision']}-seed-1-")
    table = write_ab(tmp_path / "table", load_records(tmp_path / "kept"))
    assert (tmp_path / "table" / "reward_ab.md").read_text() == table and not table.startswith("PILOT")
    assert "- process vs outcome over 2 seed(s)" in table and "- checklist vs outcome over 1 seed(s): mean +50.0 points" in table
    assert f"| seed 1, {record['precision']}" in table  # each row says which run it came from
    with pytest.raises(ValueError, match="baselines differ"):
        write_ab(tmp_path / "table", [measured, {**later, "baseline": "process"}])


def test_arms_are_parsed_and_refused_in_one_line():
    assert parse_arm("process") == Arm(label="process", reward="process")
    assert parse_arm("plain={name: outcome}").reward == RewardSpec(name="outcome")
    assert parse_arm("{label: quarantined, reward: outcome, grpo: {quarantine_user_faults: true}}").grpo == {"quarantine_user_faults": True}
    for text, message in (("bogus", "unknown reward 'bogus'"), ("x={name: process, options: {nope: 1}}", "has no option 'nope'"),
                          ("{label: q, grpo: {user: llm:x}}", "may not override"), ("sft=outcome", "labelled sft"),
                          ("a/b=outcome", "label")):
        with pytest.raises(ConfigError, match=message) as err:
            parse_arm(text)
        assert "\n" not in str(err.value)
    cfg = form_config("full", out="unused", **PILOT_AB)
    with pytest.raises(ConfigError, match="at least two arms"):
        run_reward_ab(cfg, [parse_arm("outcome")], [0])


def judged(task_id, status):
    return Episode(task_id=task_id, domain="clinic-lite", split="test", termination="user_stop",
                   checks=[CheckVerdict(check="confirmed_before_write", status=status)])


def test_violations_are_counted_over_the_change_of_mind_tasks_and_the_bar_reads_them():
    episodes = [judged("a", "fail"), judged("b", "fail"), judged("c", "pass"), judged("d", "not_applicable"), judged("e", "fail")]
    v = confirmation_violations(episodes, {"a", "b", "c", "d"})
    assert (v["judged"], v["violated"], v["rate"]) == (3, 2, pytest.approx(2 / 3)) and 0 < v["ci95"][0] < 2 / 3 < v["ci95"][1]
    assert confirmation_violations(episodes, {"d"})["rate"] is None
    row = lambda rate, late: {"cbw_change_of_mind": {"rate": rate}, "turns_after_completion": late}  # noqa: E731
    record = {"baseline": "outcome", "models": {"outcome": row(1.0, 2.0), "process": row(0.5, 1.0)},
              "deltas": {"process": {"delta": -0.02, "ci95": [-0.06, 0.02]}},
              "late_deltas": {"process": {"delta": -1.0, "ci95": [-1.4, -0.6], "n_tasks": 40}}}
    assert criteria(record, "process") == {"ci_low_above_-5": False, "violations_halved": True, "fewer_turns_after_completion": True}
    record["models"]["process"] = row(0.6, 2.0)
    record["deltas"]["process"]["ci95"] = [-0.04, 0.02]
    record["late_deltas"]["process"] = {"delta": 0.0, "ci95": [-0.2, 0.2], "n_tasks": 40}
    assert criteria(record, "process") == {"ci_low_above_-5": True, "violations_halved": False, "fewer_turns_after_completion": False}


def late(task_id, value):
    return Episode(task_id=task_id, domain="clinic-lite", split="test", termination="user_stop",
                   checks=[CheckVerdict(check="turns_after_completion", status="pass" if value == 0 else "fail", value=value)])


def test_fewer_turns_after_completion_needs_a_paired_fall_not_a_lower_mean():
    """Seed 2's process25 had 0.750 turns after completion against outcome's 0.755; a lower mean is not a fall.
    The verdict pairs the tasks both models solved and asks the bootstrap interval of the difference to sit below 0."""
    base = [late(f"t{i}", 1.0 if i % 4 == 0 else 0.0) for i in range(40)] + [late("only-base", 3.0)]
    noisy = [late(f"t{i}", 1.0 if i % 4 == 1 else 0.0) for i in range(39)] + [late("t39", 0.0)]
    quiet = [late(f"t{i}", 0.0) for i in range(40)]
    per_task = {name: check_values_per_task(eps, "turns_after_completion") for name, eps in (("base", base), ("quiet", quiet))}
    assert per_task["base"]["only-base"] == 3.0 and "t0" in per_task["quiet"]
    rows = {name: {"cbw_change_of_mind": {"rate": None}, "turns_after_completion": check_mean_value(eps, "turns_after_completion"),
                   "late_per_task": check_values_per_task(eps, "turns_after_completion")} for name, eps in
            {"outcome": base, "noisy": noisy, "quiet": quiet}.items()}
    record = {"baseline": "outcome", "models": rows, "deltas": {k: {"delta": 0.0, "ci95": None} for k in ("noisy", "quiet")},
              "late_deltas": {k: late_delta(rows[k], rows["outcome"], seed=0) for k in ("noisy", "quiet")}}
    assert rows["noisy"]["turns_after_completion"] < rows["outcome"]["turns_after_completion"]  # a lower mean ...
    assert record["late_deltas"]["noisy"]["n_tasks"] == 40 and record["late_deltas"]["noisy"]["delta"] == pytest.approx(0.0)
    assert criteria(record, "noisy")["fewer_turns_after_completion"] is False  # ... over the same tasks, no fall
    assert record["late_deltas"]["quiet"]["ci95"][1] < 0 and criteria(record, "quiet")["fewer_turns_after_completion"] is True
    record["late_deltas"]["quiet"] = late_delta(rows["quiet"], {"late_per_task": {}}, seed=0)
    assert record["late_deltas"]["quiet"]["n_tasks"] == 0 and criteria(record, "quiet")["fewer_turns_after_completion"] is None


def test_a_baseline_at_the_oracles_floor_has_no_turns_after_completion_to_remove():
    """Every model of every A/B so far ended each solved task when the oracle did (its closing report): a fall
    would be a report dropped. The bar calls that not measurable, and counts the tasks above the floor."""
    floor = {f"t{i}": 1.0 if i % 4 else 0.0 for i in range(40)}  # the oracle: 1 after a last write, 0 after a last fact
    base = [late(f"t{i}", floor[f"t{i}"]) for i in range(38)]  # solved 38, each at the floor
    quiet = [late(f"t{i}", 0.0) for i in range(40)]  # reports dropped: below the floor, not better
    rows = {name: {"cbw_change_of_mind": {"rate": None}, "turns_after_completion": check_mean_value(eps, "turns_after_completion"),
                   "late_per_task": check_values_per_task(eps, "turns_after_completion")} for name, eps in
            {"outcome": base, "quiet": quiet}.items()}
    record = {"seed": 0, "baseline": "outcome", "models": rows, "deltas": {"quiet": {"delta": 0.0, "ci95": None}},
              "late_deltas": {"quiet": late_delta(rows["quiet"], rows["outcome"], seed=0)}, "oracle_late_per_task": floor}
    assert above_floor(rows["outcome"], floor) == {"solved": 38, "above": 0} and above_floor(rows["quiet"], floor)["above"] == 0
    assert record["late_deltas"]["quiet"]["ci95"][1] < 0  # a paired "fall" ...
    assert criteria(record, "quiet")["fewer_turns_after_completion"] is None  # ... from a baseline with nothing to remove
    # one task the baseline talked on after (3 turns where the oracle took 1): the bar reads the paired fall again
    rows["outcome"]["late_per_task"]["t1"] = 3.0
    assert above_floor(rows["outcome"], floor) == {"solved": 38, "above": 1}
    record["late_deltas"]["quiet"] = late_delta(rows["quiet"], rows["outcome"], seed=0)
    assert criteria(record, "quiet")["fewer_turns_after_completion"] is True
    # a record kept without the floor reads as before: the paired interval alone
    del record["oracle_late_per_task"]
    rows["outcome"]["late_per_task"]["t1"] = 1.0
    assert criteria(record, "quiet")["fewer_turns_after_completion"] is True


def test_the_oracle_floor_is_the_oracles_turns_after_completion_on_the_seeds_held_out_tasks(tmp_path):
    cfg = form_config("full", out=str(tmp_path / "ab"), **PILOT_AB)
    floor = oracle_late_per_task(cfg)
    assert set(floor) == {t.id for t in stages.eval_tasks(cfg)}  # the oracle solves every task
    assert set(floor.values()) <= {0.0, 1.0} and 1.0 in floor.values()  # its closing report after a last write
    kept = {"seed": 0, "config": cfg.model_dump(mode="json")}
    assert with_oracle_floor(kept)["oracle_late_per_task"] == floor  # a record kept before the floor gets it from its config
    assert with_oracle_floor({**kept, "oracle_late_per_task": {"x": 5.0}})["oracle_late_per_task"] == {"x": 5.0}


def test_records_are_checked_before_the_first_stage_and_each_seed_kept_when_it_finishes(tmp_path, monkeypatch):
    """A seed takes most of a session here: a --records directory keeping another experiment's run under a seed's
    name is refused before any stage runs (not after the last), and a seed finished is kept before the next starts,
    so a later seed's crash loses no record."""
    from muarl.demo import reward_ab

    arms = [parse_arm("outcome"), parse_arm("process")]
    cfg = form_config("full", out=str(tmp_path / "ab"), **{**PILOT_AB, "pilot": False})

    def refuse(*args, **kwargs):
        raise AssertionError("a stage ran")

    for name in ("stage_synth", "stage_sft", "evaluate_model", "stage_grpo"):
        monkeypatch.setattr(stages, name, refuse)
    with pytest.raises(ConfigError, match="pilot run measures nothing"):
        run_reward_ab(cfg.model_copy(update={"pilot": True}), arms, [0], progress=False, records=tmp_path / "kept")
    faulty_cfg = cfg.model_copy(update={"grpo_user": "scripted:faulty:0.2"})
    (faulty,) = reward_ab.check_records(faulty_cfg, arms, [0], tmp_path / "kept")
    faulty.parent.mkdir()
    faulty.write_text(json.dumps(reward_ab.seed_identity(reward_ab.seed_config(faulty_cfg, 0), arms)))
    with pytest.raises(ConfigError, match=r"keeps another experiment's run \(it differs in \['grpo_user'\]\)"):
        run_reward_ab(cfg, arms, [1, 0], progress=False, records=tmp_path / "kept")
    assert not (tmp_path / "ab").exists()  # seed 1 did not start either
    # the same experiment kept from another directory with fewer arms passes: a rerun replaces it, a seed may gain arms
    elsewhere = reward_ab.seed_config(cfg.model_copy(update={"out": "/elsewhere"}), 0)
    faulty.write_text(json.dumps(reward_ab.seed_identity(elsewhere, arms[:1])))
    seed_1 = faulty.with_name(faulty.name.replace("seed-0", "seed-1"))
    assert reward_ab.check_records(cfg, arms, [0, 1], tmp_path / "kept") == [faulty, seed_1]

    finished = []

    def fake_seed(seed_cfg, arms, resume, progress):
        if seed_cfg.seed == 2:
            raise RuntimeError("seed 2 crashed")
        finished.append(seed_cfg.seed)
        return reward_ab.seed_identity(seed_cfg, arms)

    monkeypatch.setattr(reward_ab, "run_seed", fake_seed)
    with pytest.raises(RuntimeError, match="seed 2 crashed"):
        run_reward_ab(cfg, arms, [1, 2], progress=False, records=tmp_path / "kept")
    assert finished == [1] and sorted(p.name.split("-seed-")[1][0] for p in (tmp_path / "kept").glob("*.json")) == ["0", "1"]
    kept = json.loads(seed_1.read_text())
    assert kept["out"].endswith("seed-1") and [a["label"] for a in kept["arms"]] == ["outcome", "process"]
