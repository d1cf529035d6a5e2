"""The checks and labels summed over a run: ``muarl eval --checks`` (table, --json, --per-task), recomputation for
episodes written before the checks, and the training step's scalars."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.evals.conduct import conduct, conduct_scalars, wilson
from muarl.rollout.store import read_episodes
from muarl.train.metrics import episode_metrics


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "faulty"
    result = invoke("rollout", "--domain", "clinic-lite", "--user", "scripted:faulty:0.5:stop", "--out", str(out), "--limit", "12",
                    "--trials", "2", "--quiet")
    assert result.exit_code == 0, result.output
    episodes, _ = read_episodes(out / "episodes.jsonl")
    return out, episodes


def test_wilson_interval_by_hand():
    lo, hi = wilson(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0


def test_eval_checks_json_counts_labels_and_pass_hat_k_without_user_faults(faulty_run):
    out, episodes = faulty_run
    failed = [ep for ep in episodes if not ep.reward.success]
    assert failed and all(ep.attribution.label == "user" for ep in failed)  # the oracle fails only when its user stops
    result = invoke("eval", str(out), "--checks", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))["conduct"]
    assert report["attribution"]["counts"]["user"] == len(failed) == report["attribution"]["failed_or_errored"]
    assert report["pass_hat_k_without_user_faults"]["1"] == 1.0
    assert report["pass_hat_k_as_scored"]["1"] == pytest.approx(1 - len(failed) / len(episodes))
    confirmed = next(c for c in report["checks"] if c["check"] == "confirmed_before_write")
    assert confirmed["passed"] == confirmed["applicable"] > 0 and confirmed["ci95"][1] == 1.0
    assert len(report["failures"]) == len(failed) and report["failures"][0]["evidence"].startswith("#")


def test_episodes_written_before_the_checks_are_rechecked(faulty_run, tmp_path):
    out, episodes = faulty_run
    old = tmp_path / "episodes.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in ep.model_dump(mode="json").items() if k not in ("checks", "attribution")}) + "\n"
                           for ep in episodes))
    assert all(ep.checks is None for ep in read_episodes(old)[0])
    fresh, again = (json.loads(invoke("eval", str(path), "--checks", "--json").output)["conduct"] for path in (out, old))
    assert again == fresh and again["unjudged"] == 0


def test_episodes_judged_before_a_check_existed_get_every_check(faulty_run, tmp_path):
    """An episode written when ``grounded_writes`` did not exist carries the other verdicts: reading it must not
    report the new check as applying nowhere (0/0), but judge the episode again."""
    out, episodes = faulty_run
    old = tmp_path / "episodes.jsonl"
    lines = []
    for ep in episodes:
        record = ep.model_dump(mode="json")
        record["checks"] = [v for v in record["checks"] if v["check"] != "grounded_writes"]
        lines.append(json.dumps(record) + "\n")
    old.write_text("".join(lines))
    fresh, again = (json.loads(invoke("eval", str(path), "--checks", "--json").output)["conduct"] for path in (out, old))
    writes = next(c for c in again["checks"] if c["check"] == "grounded_writes")
    assert writes["applicable"] > 0 and again == fresh


def test_eval_checks_table_and_per_task(faulty_run):
    out, episodes = faulty_run
    text = invoke("eval", str(out), "--checks", "--per-task").output
    assert "confirmed_before_write" in text and "pass^k as scored / without user-fault episodes" in text
    failed = next(ep for ep in episodes if not ep.reward.success)
    row = next(line for line in text.splitlines() if line.startswith(failed.task_id) and " user " in line)
    assert "stop:" in row and "###STOP###" in row


def test_training_step_scalars(faulty_run):
    _, episodes = faulty_run
    scalars = conduct_scalars(episodes)
    failed = sum(not ep.reward.success for ep in episodes)
    assert scalars["user_fault_rate"] == pytest.approx(failed / len(episodes))
    assert scalars["check_violation/confirmed_before_write"] == 0.0 and scalars["grounded_claim_failure_rate"] == 0.0
    assert {k: v for k, v in episode_metrics(episodes).items() if k in scalars} == scalars
    assert conduct(episodes).labels["user"] == failed


def test_suite_tables_carry_the_checks_and_user_faults(faulty_run):
    from muarl.domains import load_domain
    from muarl.evals.suite import CategoryResult, SuiteEntry, SuiteReport, report_tables, score_category

    _, episodes = faulty_run
    tasks = load_domain("clinic-lite").tasks("test")[:12]
    result = CategoryResult("demo", "clinic-lite", "clinic-lite", "test", "ran")
    score_category(result, SuiteEntry(category="clinic-lite", domain="clinic-lite"), tasks, episodes, bootstrap=0)
    failed = sum(not ep.reward.success for ep in episodes)
    assert result.user_faults == failed > 0 and result.checks["confirmed_before_write"] == 1.0
    header, row = report_tables(SuiteReport(categories=[result]))["demo"]
    assert dict(zip(header, row))["confirmed %"] == "100.0" and dict(zip(header, row))["user faults"] == str(failed)
