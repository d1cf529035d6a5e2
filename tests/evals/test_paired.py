"""Paired statistics for comparing two runs on the same tasks (``muarl.evals.paired``) and ``muarl eval --compare``.

Specification: the exact two-sided McNemar p-value is min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)]) from
the discordant counts, 1.0 with none; the paired bootstrap CI of the difference of success rates is seeded,
brackets the point estimate and is a single point when every task moves the same way; the comparison uses only
tasks both runs finished, gives McNemar only when every task has one pass/fail per run; the CLI prints both
pass^1, the difference, its CI and p (one JSON object with --json) and refuses runs with no task in common.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.evals.paired import compare, compare_runs, mcnemar_exact, paired_bootstrap_ci
from muarl.rollout.store import EPISODES_FILE
from muarl.types import Episode, RewardInfo


def test_mcnemar_by_hand():
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)  # 2 * (1/2)^6
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)
    assert mcnemar_exact(3, 0) == pytest.approx(0.25)  # 2 * (1/2)^3
    assert mcnemar_exact(4, 4) == mcnemar_exact(1, 1) == mcnemar_exact(0, 0) == 1.0
    # b=10, c=2: 2 * (C(12,0) + C(12,1) + C(12,2)) / 2^12 = 2 * (1 + 12 + 66) / 4096
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096)
    # b=20, c=5: 2 * (1 + 25 + 300 + 2300 + 12650 + 53130) / 2^25 = 2 * 68406 / 33554432 ≈ 0.00408
    assert mcnemar_exact(20, 5) == pytest.approx(2 * 68406 / 2**25)
    assert mcnemar_exact(300, 0) == pytest.approx(2 / 2**300)  # large counts stay exact
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 2)


def test_bootstrap_interval():
    diffs = [1.0] * 30 + [0.0] * 60 + [-1.0] * 10  # +20 points
    lo, hi = paired_bootstrap_ci(diffs, draws=1000, seed=3)
    assert -1.0 < lo < 0.2 < hi < 1.0
    assert paired_bootstrap_ci(diffs, draws=1000, seed=3) == (lo, hi)
    assert paired_bootstrap_ci([1.0, 1.0, 1.0], draws=100) == (1.0, 1.0)


def test_bootstrap_interval_matches_the_normal_approximation_by_hand():
    # 100 tasks, +20 points: E[d^2] = 0.4, var = 0.4 - 0.2^2 = 0.36, se = sqrt(0.36 / 100) = 0.06, so the
    # normal 95% interval is 0.2 -+ 1.96 * 0.06 = [0.0824, 0.3176]; the percentile bootstrap lands within
    # Monte Carlo and discreteness error (steps of 0.01) of it.
    diffs = [1.0] * 30 + [0.0] * 60 + [-1.0] * 10
    lo, hi = paired_bootstrap_ci(diffs, draws=4000, seed=0)
    assert lo == pytest.approx(0.0824, abs=0.015) and hi == pytest.approx(0.3176, abs=0.015)


def test_compare_pairs_shared_tasks_only():
    a = {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 1.0, "only_a": 1.0}
    b = {"t1": 0.0, "t2": 1.0, "t3": 1.0, "t4": 0.0, "only_b": 0.0}
    c = compare(a, b, draws=500, seed=1)
    assert (c.n_tasks, c.success_a, c.success_b, c.delta) == (4, 0.75, 0.5, 0.25)
    assert (c.only_a, c.only_b) == (2, 1) and c.p_mcnemar == pytest.approx(1.0)  # 2 * (1 + 3) / 8 = 1
    assert c.ci95[0] <= 0.25 <= c.ci95[1]
    assert compare(a, b, draws=0).ci95 is None
    assert compare({"x": 1.0}, {"y": 1.0}).n_tasks == 0


def test_mcnemar_needs_one_pass_fail_per_task():
    c = compare({"t1": 0.5, "t2": 1.0}, {"t1": 0.0, "t2": 1.0}, draws=0)
    assert c.delta == 0.25 and c.only_a is None and c.p_mcnemar is None


def ep(task: str, ok: bool | None, trial: int = 0) -> Episode:
    if ok is None:
        return Episode(task_id=task, domain="d", split="test", trial=trial, termination="error", error="boom")
    reward = RewardInfo(reward=float(ok), state_match=ok, final_hash="f", gold_hash="g")
    return Episode(task_id=task, domain="d", split="test", trial=trial, termination="user_stop", reward=reward)


def test_errored_episodes_leave_their_task_out():
    c = compare_runs([ep("a", True), ep("b", None), ep("c", True)], [ep("a", False), ep("b", True), ep("c", True)], draws=0)
    assert c.n_tasks == 2 and (c.only_a, c.only_b) == (1, 0)


def write_run(path, outcomes):
    path.mkdir()
    (path / EPISODES_FILE).write_text("".join(ep(t, ok).model_dump_json() + "\n" for t, ok in outcomes.items()))
    return str(path)


def test_cli_compare(tmp_path):
    after = write_run(tmp_path / "rl", {f"t{i}": i < 8 for i in range(10)})  # 8/10
    before = write_run(tmp_path / "sft", {f"t{i}": i < 2 for i in range(10)} | {"extra": True})  # 2/10 on the shared ten
    result = CliRunner().invoke(main, ["eval", after, "--compare", before, "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    assert "paired over 10 tasks" in result.output and "pass^1 0.800" in result.output and "pass^1 0.200" in result.output
    assert "A - B: +60.0 points" in result.output and "A alone passed 6, B alone passed 0, two-sided p = 0.0312" in result.output
    data = json.loads(CliRunner().invoke(main, ["eval", after, "--compare", before, "--json", "--bootstrap", "0"]).stdout)
    assert data["n_tasks"] == 10 and data["delta"] == pytest.approx(0.6) and data["p_mcnemar"] == pytest.approx(0.03125)


def test_cli_compare_refuses_runs_without_shared_tasks(tmp_path):
    a = write_run(tmp_path / "a", {"t1": True})
    b = write_run(tmp_path / "b", {"t2": True})
    result = CliRunner().invoke(main, ["eval", a, "--compare", b])
    assert result.exit_code == 2 and "share no finished task" in result.output
    result = CliRunner().invoke(main, ["eval", a, "--compare", a, "--per-task"])
    assert result.exit_code == 2 and "do not apply to --compare" in result.output


def test_cli_compare_with_a_run_that_only_errored_exits_3(tmp_path):
    scored = write_run(tmp_path / "a", {"t1": True})
    errored = write_run(tmp_path / "b", {"t1": None})
    result = CliRunner().invoke(main, ["eval", scored, "--compare", errored])
    assert result.exit_code == 3 and "was scored" in result.output
