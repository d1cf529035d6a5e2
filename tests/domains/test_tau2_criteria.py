"""τ²'s criteria: each check on its own, the product over the reward basis, and the NL judge over real HTTP."""

from __future__ import annotations

import json

import pytest
from tau_oracle import oracle_messages, run_actions

from muarl.domains.tau.tau2_criteria import (
    JudgeConfig,
    JudgeError,
    action_matches,
    evaluate_tau2,
)
from muarl.models.loopback_server import LoopbackServer
from muarl.reward import make_reward
from muarl.types import Message


def test_action_matching_follows_tau2():
    gold = {"name": "get_user_details", "arguments": {"user_id": "a", "extra": 1}, "compare_args": None}
    assert action_matches(gold, "get_user_details", {"user_id": "a"})  # only the call's own arguments are compared
    assert not action_matches(gold, "get_user_details", {"user_id": "b"})
    assert not action_matches(gold, "get_order_details", {"user_id": "a"})
    assert action_matches({**gold, "compare_args": []}, "get_user_details", {"user_id": "zzz"})


def test_communicate_and_action_checks(tau2_airline):
    task = next(t for t in tau2_airline.tasks("train") + tau2_airline.tasks("test") if t.metadata["tau2"]["communicate_info"])
    final = run_actions(tau2_airline, task.actions)
    info = task.metadata["tau2"]["communicate_info"][0]
    assert evaluate_tau2(tau2_airline, task, final, oracle_messages(task, say=f"The amount is {info}.")).reward == 1.0
    missing = evaluate_tau2(tau2_airline, task, final, oracle_messages(task, say="I cannot say."))
    assert missing.reward == 0.0 and missing.outputs_found == {info: False}
    # ACTION is computed (not in this task's basis, so it does not count) from the calls made
    no_calls = evaluate_tau2(tau2_airline, task, final, [Message(role="assistant", content=info)])
    assert no_calls.details["checks"]["ACTION"] == (0.0 if task.actions else 1.0) and no_calls.reward == 1.0


def test_episode_cut_short_scores_zero(tau2_airline):
    task = tau2_airline.tasks("test")[0]
    final = run_actions(tau2_airline, task.actions)
    msgs = oracle_messages(task, say="; ".join(task.metadata["tau2"]["communicate_info"]))
    assert evaluate_tau2(tau2_airline, task, final, msgs, termination="user_stop").reward == 1.0
    assert evaluate_tau2(tau2_airline, task, final, msgs, termination="max_turns").reward == 0.0


def _nl_task(domain):
    return next(t for t in domain.tasks("train") if t.metadata["tau2"]["nl_assertions"])


def _judge(verdict):
    """A judge server that grades every assertion it is sent with ``verdict`` (or answers junk)."""
    seen = []

    def policy(request):
        seen.append(request)
        if verdict is None:
            return {"content": "I think so."}
        text = request["messages"][1]["content"]
        outcomes = json.loads(text.split("Expected outcomes:\n", 1)[1])
        results = [{"expectedOutcome": o, "reasoning": "checked", "metExpectation": verdict} for o in outcomes]
        return {"content": "```json\n" + json.dumps({"results": results}) + "\n```"}

    return LoopbackServer(policy), seen


@pytest.mark.parametrize("verdict,reward", [(True, 1.0), (False, 0.0)])
def test_nl_assertions_are_graded_by_the_configured_judge(tau2_retail, verdict, reward):
    task = _nl_task(tau2_retail)
    final = run_actions(tau2_retail, task.actions)
    server, seen = _judge(verdict)
    with server:
        fn = make_reward("tau2", judge_base_url=server.base_url, judge_model="judge-x")
        info = fn(tau2_retail, task, final, oracle_messages(task, say="There are 10 options."), 0)
    assert info.reward == reward and info.details["nl_judged"] is True
    assert info.components["NL_ASSERTION"] == reward and info.components["DB"] == 1.0
    assert seen[0]["model"] == "judge-x" and "There are 10 options." in seen[0]["messages"][1]["content"]


def test_without_a_judge_nl_assertions_are_reported_ungraded(tau2_retail):
    task = _nl_task(tau2_retail)
    info = make_reward("tau2")(tau2_retail, task, run_actions(tau2_retail, task.actions), oracle_messages(task), 0)
    assert info.reward == 1.0 and info.details["nl_judged"] is False and "NL_ASSERTION" not in info.components


def test_a_judge_reply_that_is_not_json_is_an_error(tau2_retail):
    task = _nl_task(tau2_retail)
    server, _ = _judge(None)
    with server, pytest.raises(JudgeError, match="not the JSON"):
        evaluate_tau2(tau2_retail, task, run_actions(tau2_retail, task.actions), oracle_messages(task),
                      judge=JudgeConfig(base_url=server.base_url, model="m", max_retries=0))


def test_judge_options_must_come_together():
    with pytest.raises(ValueError, match="both"):
        make_reward("tau2", judge_model="m")


def test_v1_tasks_have_no_tau2_criteria(retail):
    with pytest.raises(ValueError, match="no τ² criteria"):
        evaluate_tau2(retail, retail.tasks("dev")[0], "", [])
