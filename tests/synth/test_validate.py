"""The double validation: known-bad dialogues are rejected for the right reason; the judge runs over a
real (loopback) OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json

import pytest

from muarl.models.loopback_server import LoopbackServer
from muarl.models.openai_client import ChatClient
from muarl.rollout.episode import run_episode
from muarl.synth.validate import DialogueVerdict, LLMJudge, RuleConfig, StageVerdict, check_rules, is_affirmative, looks_like_id
from shop_world import ListUser, PlanAgent, call, load, say

RULES = RuleConfig(identification_tools=["find_user_id_by_email"])
OPEN = "Hi, please cancel my order #W1, my email is ann@example.com."
IDENTIFY = call("find_user_id_by_email", {"email": "ann@example.com"})
CANCEL = call("cancel_order", {"order_id": "#W1", "reason": "no longer needed"})
ASK = say("Order #W1 (lamp) is pending. Shall I cancel it?")


def episode(plan, user_lines):
    domain = load()
    return asyncio.run(run_episode(domain, domain.task("cancel_w1"), PlanAgent(plan), ListUser(user_lines)))


def reasons(ep) -> list[str]:
    domain = load()
    return sorted({r.reason for r in check_rules(ep, domain, domain.task("cancel_w1"), RULES).rejections})


def test_a_proper_dialogue_passes():
    ep = episode([IDENTIFY, call("get_order", {"order_id": "#W1"}), ASK, CANCEL, say("Done.")], [OPEN, "Yes, please.", "###STOP###"])
    assert ep.reward.reward == 1.0
    assert reasons(ep) == []


def test_unconfirmed_write_is_rejected_even_when_the_outcome_is_right():
    ep = episode([IDENTIFY, CANCEL, say("Done.")], [OPEN, "###STOP###"])
    assert ep.reward.reward == 1.0
    assert reasons(ep) == ["unconfirmed_write"]


def test_invented_order_id_is_rejected():
    # the user never names the order and no tool output shows it: '#W1' comes from nowhere
    ep = episode([IDENTIFY, say("I found a lamp order. Cancel it?"), CANCEL, say("Done.")],
                 ["Hi, cancel my lamp order please, email ann@example.com.", "Yes.", "###STOP###"])
    assert reasons(ep) == ["invented_id"]


def test_malformed_call_is_rejected():
    ep = episode([IDENTIFY, call("get_order", '{"order_id": "#W1"'), ASK, CANCEL, say("Done.")], [OPEN, "Yes.", "###STOP###"])
    assert ep.malformed_calls == 1
    assert reasons(ep) == ["malformed_call"]


def test_write_before_identification_and_wrong_outcome_are_rejected():
    wrong = call("cancel_order", {"order_id": "#W1", "reason": "changed mind"})
    ep = episode([ASK, wrong, say("Done.")], [OPEN, "Yes, go ahead.", "###STOP###"])
    assert reasons(ep) == ["reward_below_1", "write_before_identification"]


def test_errored_episode_is_rejected_as_such():
    ep = episode([IDENTIFY], [OPEN, "###STOP###"]).model_copy(update={"termination": "error", "error": "ModelError: down", "reward": None})
    assert reasons(ep) == ["episode_error"]


@pytest.mark.parametrize("text,expected", [
    ("Yes, please go ahead.", True), ("Correct, please do it.", True), ("ok", True), ("Sure!", True),
    ("No, don't do that.", False), ("Wait, is it refundable? Yes or no?", False), ("What is my balance?", False),
])
def test_affirmative_rule(text, expected):
    assert is_affirmative(text) is expected


@pytest.mark.parametrize("value,expected", [("#W1", True), ("P14056", True), ("card_5044", True), ("2026-03-06", False),
                                            ("09:00", False), ("lamp", False), ("ab", False), ("two words 12", False)])
def test_what_counts_as_an_id(value, expected):
    assert looks_like_id(value) is expected


def _judge_policy(request):
    """A judge server: fails 'user_treated_well' when the agent was rude, answers garbage for 'GARBAGE'."""
    system, body = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "goal_met" in system and "POLICY:" in body and "DIALOGUE:" in body
    if "GARBAGE" in body:
        return {"content": "I think it is fine."}
    rude = "stupid" in body
    verdict = {c: {"pass": True, "reason": "ok"} for c in ("goal_met", "policy_followed", "no_invented_facts")}
    verdict["user_treated_well"] = {"pass": not rude, "reason": "called the user stupid" if rude else "polite"}
    return {"content": "Here is my verdict:\n```json\n" + json.dumps(verdict) + "\n```"}


def test_judge_verdicts_and_reasons_over_http():
    domain = load()
    task = domain.task("cancel_w1")
    polite = episode([IDENTIFY, ASK, CANCEL, say("Done.")], [OPEN, "Yes.", "###STOP###"])
    rude = episode([IDENTIFY, say("That was a stupid order. Cancel it?"), CANCEL, say("Done.")], [OPEN, "Yes.", "###STOP###"])
    garbage = episode([say("GARBAGE")], ["hi", "###STOP###"])

    async def go():
        client = ChatClient(server.base_url, "judge", max_retries=0)
        judge = LLMJudge(client)
        try:
            return [await judge.judge(ep, domain, task) for ep in (polite, rude, garbage)]
        finally:
            await client.aclose()

    with LoopbackServer(_judge_policy) as server:
        ok, bad, unparsable = asyncio.run(go())
    assert ok.status == "pass" and ok.notes["user_treated_well"] == "polite"
    assert bad.status == "fail" and [(r.reason, r.detail) for r in bad.rejections] == [("judge:user_treated_well", "called the user stupid")]
    assert unparsable.status == "error" and unparsable.rejections[0].reason == "judge_unparsable"


def test_human_decision_overrides_and_reasons_are_listed_once():
    passed = StageVerdict(status="pass")
    v = DialogueVerdict(task_id="t", trial=0, rules=passed, judge=StageVerdict(status="skipped"))
    assert v.accepted and v.reasons() == []
    v.human = "reject"
    assert not v.accepted and v.reasons() == ["human_reject"]
