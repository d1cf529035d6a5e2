"""pass^k, pass@k and their companions (``muarl.evals.passk``), against hand-computed numbers.

Specification: per task with n finished trials of which c succeeded, pass^k = C(c,k)/C(n,k) and
pass@k = 1 − C(n−c,k)/C(n,k), averaged over tasks with at least k trials; errored episodes are counted apart
and enter no metric; the flip rate is the share of tasks with both successes and failures; bootstrap CIs
bracket the point estimate; ``ks`` defaults to 1..(fewest finished trials).
"""

from __future__ import annotations

import math
import random

import pytest

from muarl.evals.passk import pass_at_k, pass_hat_k, per_task, summarise
from muarl.types import Episode, RewardInfo


def ep(task: str, trial: int, ok: bool | None, outputs_ok: bool = True) -> Episode:
    if ok is None:
        return Episode(task_id=task, domain="d", split="test", trial=trial, termination="error", error="boom")
    info = RewardInfo(reward=1.0 if ok and outputs_ok else 0.0, state_match=ok, outputs_found={"x": outputs_ok}, final_hash="f", gold_hash="g")
    return Episode(task_id=task, domain="d", split="test", trial=trial, termination="user_stop", reward=info)


def test_formulas_by_hand():
    assert pass_hat_k(2, 4, 2) == pytest.approx(1 / 6)
    assert pass_at_k(2, 4, 2) == pytest.approx(5 / 6)
    assert pass_hat_k(3, 4, 1) == pass_at_k(3, 4, 1) == 0.75
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(3, 4, 4) == 0.0
    assert pass_at_k(1, 4, 4) == 1.0 and pass_at_k(0, 4, 4) == 0.0
    with pytest.raises(ValueError, match="0 < k <= n"):
        pass_hat_k(1, 2, 3)
    with pytest.raises(ValueError, match="0 < k <= n"):
        pass_at_k(1, 2, 0)


def test_summary_of_a_run():
    episodes = [ep("a", t, ok) for t, ok in enumerate([True, True, False, False])]  # c=2, n=4
    episodes += [ep("b", t, True) for t in range(4)]  # c=4
    episodes += [ep("c", t, False) for t in range(4)] + [ep("c", 4, None)]  # c=0, one errored
    s = summarise(episodes, bootstrap=0)
    assert (s.n_tasks, s.n_trials, s.n_errored) == (3, 4, 1)
    assert list(s.pass_hat_k) == [1, 2, 3, 4]  # default ks
    assert s.pass_hat_k[1] == pytest.approx(6 / 12)
    assert s.pass_hat_k[2] == pytest.approx((1 / 6 + 1 + 0) / 3)
    assert s.pass_at_k[2] == pytest.approx((5 / 6 + 1 + 0) / 3)
    assert s.pass_hat_k[4] == pytest.approx(1 / 3) and s.pass_at_k[4] == pytest.approx(2 / 3)
    assert s.mean_reward == pytest.approx(6 / 12)
    assert s.flip_rate == pytest.approx(1 / 3)
    assert s.ci95 == {}
    assert {t.task_id: (t.n, t.c, t.errored) for t in s.tasks} == {"a": (4, 2, 0), "b": (4, 4, 0), "c": (4, 0, 1)}
    assert set(s.to_json()) >= {"pass_hat_k", "pass_at_k", "mean_reward", "n_tasks", "n_trials", "n_errored", "flip_rate", "ci95"}


def test_success_needs_state_and_every_output():
    assert ep("a", 0, True).succeeded and not ep("a", 0, True, outputs_ok=False).succeeded
    assert not ep("a", 0, False).succeeded and not ep("a", 0, None).succeeded


def test_tasks_with_fewer_trials_are_left_out_of_larger_k():
    episodes = [ep("a", 0, True), ep("a", 1, True), ep("b", 0, False)]
    s = summarise(episodes, ks=[1, 2], bootstrap=0)
    assert s.n_trials == 1
    assert s.pass_hat_k == {1: pytest.approx((1 + 0) / 2), 2: 1.0}


def test_only_errored_episodes_give_no_metric():
    s = summarise([ep("a", 0, None), ep("a", 1, None)], bootstrap=10)
    assert s.n_tasks == 0 and s.n_errored == 2 and s.pass_hat_k == {} and math.isnan(s.mean_reward)
    assert per_task([ep("a", 0, None)])[0].n == 0


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible():
    rng = random.Random(0)
    skill = [rng.random() for _ in range(30)]  # tasks of varied difficulty
    episodes = [ep(f"t{i}", t, rng.random() < skill[i]) for i in range(30) for t in range(3)]
    s = summarise(episodes, bootstrap=500, seed=1)
    for k in (1, 2, 3):
        lo, hi = s.ci95[f"pass^{k}"]
        assert 0.0 <= lo <= s.pass_hat_k[k] <= hi <= 1.0 and lo < hi
    assert summarise(episodes, bootstrap=500, seed=1).ci95 == s.ci95


def test_success_is_the_reward_functions_verdict_and_old_files_get_the_old_one():
    shaped = RewardInfo(reward=0.93, success=True, state_match=True, final_hash="f", gold_hash="f")
    episode = Episode(task_id="a", domain="d", split="test", termination="user_stop", reward=shaped)
    assert episode.succeeded and summarise([episode]).pass_hat_k[1] == 1.0
    judged_out = RewardInfo(reward=0.0, success=False, state_match=True, outputs_found={"x": True}, final_hash="f", gold_hash="f")
    assert not Episode(task_id="a", domain="d", split="test", termination="user_stop", reward=judged_out).succeeded
    legacy = RewardInfo.model_validate_json('{"reward": 1.0, "state_match": true, "outputs_found": {"x": false}, "final_hash": "f", "gold_hash": "f"}')
    assert legacy.success is False  # what pass^k counted before the field existed: state and outputs
