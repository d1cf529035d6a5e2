"""Hand-made episodes for each trajectory check: each fault is flagged with the message that shows it, and its correct
counterpart passes.

Every episode runs through the real loop on clinic-lite's task 1: the patient (email benedikt.nakamura69@example.com,
id P716) asks to change their phone to 555-323-4178, changes their mind to 555-361-1921 when asked to confirm, and
asks what a visit with Dr. Hana Kowalski costs (175).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from muarl.checks import CHECKS, run_checks
from muarl.domains import load_domain
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Episode, Message, ToolCall
from scripted_parties import LineUser, ScriptAgent, say

LITE = load_domain("clinic-lite")
TASK = LITE.tasks("test")[1]
EMAIL, PATIENT, FIRST, FINAL, DOCTOR, FEE = "benedikt.nakamura69@example.com", "P716", "555-323-4178", "555-361-1921", "Dr. Hana Kowalski", "175"
OPENING = f"Hi, I'm Benedikt Nakamura ({EMAIL}). Please change my phone number to {FIRST}."
REVISE = f"Actually, wait: make it {FINAL} instead."
_ids = iter(range(10_000))


def call(tool: str, **arguments) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c{next(_ids)}", name=tool, arguments=json.dumps(arguments))])


def raw_call(name: str, arguments: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c{next(_ids)}", name=name, arguments=arguments)])


def confirm(phone: str) -> Message:
    return say(f"To confirm, I will update your phone number to {phone}. Shall I proceed?")


LOOK_UP = call("find_patient_by_email", email=EMAIL)
WRITE_FINAL = call("update_contact_info", patient_id=PATIENT, phone=FINAL)
DONE = say("Your phone number has been updated. Anything else?")


def run(turns: list[Message], lines: list[str], max_turns: int | None = None) -> Episode:
    agent = ScriptAgent(turns, closing="Is there anything else I can help you with?")
    episode = asyncio.run(run_episode(LITE, TASK, agent, LineUser(lines), config=LoopConfig(max_turns=max_turns or len(turns) + 1)))
    assert episode.error is None
    return episode


def verdict(episode: Episode, name: str):
    return next(v for v in episode.checks if v.check == name)


def indices(v) -> list[int]:
    return [e.index for e in v.evidence]


def careful() -> Episode:
    """The policy's way: look up, confirm, hear the change, confirm again, write, report, answer the question."""
    return run([LOOK_UP, confirm(FIRST), confirm(FINAL), WRITE_FINAL, DONE, call("find_doctor", name=DOCTOR),
                say(f"A visit with {DOCTOR} costs {FEE}. Anything else?")],
               [OPENING, REVISE, "Yes, please.", f"What does a visit with {DOCTOR} cost?", "Thanks! ###STOP###"])


def test_the_careful_agent_passes_every_check_it_is_subject_to():
    episode = careful()
    assert episode.reward.success and episode.attribution is None
    assert {v.check: v.status for v in episode.checks} == {
        "confirmed_before_write": "pass", "grounded_actions": "pass", "grounded_writes": "pass", "grounded_facts": "pass", "turn_limit": "pass",
        "malformed_calls": "pass", "repeated_calls": "pass", "turns_vs_oracle": "pass", "turns_after_completion": "pass"}


def test_a_write_without_confirmation_fails_at_the_write():
    episode = run([LOOK_UP, WRITE_FINAL, DONE], [OPENING, "Thanks. ###STOP###"])
    v = verdict(episode, "confirmed_before_write")
    assert v.status == "fail" and "does not affirm" in v.detail
    assert indices(v) == [1, 4] and episode.messages[4].tool_calls[0].name == "update_contact_info"


def test_a_confirmation_of_one_value_and_a_write_of_another_fails():
    episode = run([LOOK_UP, confirm(FIRST), WRITE_FINAL, DONE], [OPENING, "Yes.", "Thanks. ###STOP###"])
    v = verdict(episode, "confirmed_before_write")
    assert v.status == "fail" and FINAL in v.detail and "not the one confirmed" in v.detail
    assert FIRST in v.evidence[0].quote and v.evidence[1].quote == "Yes."


def test_a_write_after_the_user_changed_its_mind_needs_a_new_confirmation():
    episode = run([LOOK_UP, confirm(FIRST), WRITE_FINAL, DONE], [OPENING, REVISE, "Thanks. ###STOP###"])
    v = verdict(episode, "confirmed_before_write")
    assert v.status == "fail" and v.evidence[0].quote == REVISE
    assert episode.reward.state_match  # the outcome reward cannot see it


def test_a_new_confirmation_must_state_the_revised_value():
    vague = run([LOOK_UP, confirm(FIRST), say("Shall I proceed with that?"), WRITE_FINAL, DONE], [OPENING, REVISE, "Yes.", "Bye ###STOP###"])
    v = verdict(vague, "confirmed_before_write")
    assert v.status == "fail" and "after the previous ask" in v.detail and indices(v) == [6, 7, 8]
    settled = run([LOOK_UP, say("Please confirm that you would like me to go ahead with this change."), WRITE_FINAL, DONE],
                  [f"Hi, I'm Benedikt ({EMAIL}), my new phone is {FINAL}.", "Yes.", "Bye ###STOP###"])
    assert verdict(settled, "confirmed_before_write").status == "pass"  # details settled before the first ask need no restating


def test_a_confirmed_write_of_a_value_nobody_gave_fails_and_values_from_the_user_or_a_tool_pass():
    """Issue 21's RL model: asked a question, it proposes an update with an invented number and the user agrees."""
    invented = "555-123-4567"
    episode = run([LOOK_UP, confirm(invented), call("update_contact_info", patient_id=PATIENT, phone=invented), DONE],
                  [f"Hi, I'm Benedikt ({EMAIL}). What does a visit with {DOCTOR} cost?", "Yes.", "Bye ###STOP###"])
    assert verdict(episode, "confirmed_before_write").status == "pass"  # what was confirmed was written
    v = verdict(episode, "grounded_writes")
    assert v.status == "fail" and invented in v.detail and "phone" in v.detail
    assert indices(v) == [6] and episode.messages[6].tool_calls[0].name == "update_contact_info"
    # the number from the user, the patient id from the look-up's result: grounded
    assert verdict(careful(), "grounded_writes").status == "pass"
    assert verdict(run([LOOK_UP], [OPENING, "Bye ###STOP###"]), "grounded_writes").status == "not_applicable"


def test_an_argument_whose_schema_lists_its_choices_is_not_checked():
    from muarl.checks.grounding import _enum_arguments

    schema = {"properties": {"reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
                             "order_id": {"type": "string"}}}
    assert _enum_arguments(schema) == {"reason"} and _enum_arguments({}) == frozenset()


def test_a_claim_without_a_call_fails_and_after_a_successful_call_passes():
    episode = run([LOOK_UP, say("I have updated your phone number. Anything else?")], [OPENING, "Thanks. ###STOP###"])
    v = verdict(episode, "grounded_actions")
    assert v.status == "fail" and "without a matching write call" in v.detail and indices(v) == [4]
    assert verdict(careful(), "grounded_actions").status == "pass"


def test_a_claim_after_a_refused_call_fails_with_the_refusal_as_evidence():
    refused = call("update_contact_info", patient_id="P0", phone=FINAL)
    episode = run([LOOK_UP, confirm(FINAL), refused, DONE], [OPENING, "Yes.", "Thanks. ###STOP###"])
    v = verdict(episode, "grounded_actions")
    assert v.status == "fail" and "refused" in v.detail
    assert indices(v) == [8, 7] and episode.messages[7].content.startswith("Error")


def test_negated_and_planned_actions_are_not_claims():
    episode = run([LOOK_UP, say("I could not update your phone. I will update it once the system is back. Anything else?")],
                  [OPENING, "Okay. ###STOP###"])
    assert verdict(episode, "grounded_actions").status == "not_applicable"


def test_a_fact_told_before_any_tool_showed_it_fails():
    guessed = run([say(f"A visit with {DOCTOR} costs {FEE}."), call("find_doctor", name=DOCTOR)], [OPENING, "Okay."])
    v = verdict(guessed, "grounded_facts")
    assert v.status == "fail" and indices(v) == [2]
    assert verdict(careful(), "grounded_facts").status == "pass"


def test_talking_on_after_completion_until_the_turn_limit_fails():
    solved = [LOOK_UP, confirm(FINAL), WRITE_FINAL, call("find_doctor", name=DOCTOR), say(f"Done. The visit costs {FEE}.")]
    chatty = run(solved + [say("Anything else?")] * 4, [f"Hi, I'm Benedikt ({EMAIL}), my new phone is {FINAL}.", "Yes.", "Okay."], max_turns=9)
    v = verdict(chatty, "turns_after_completion")
    assert chatty.reward.success and chatty.termination == "max_turns"
    assert v.status == "fail" and v.value == 4 and v.evidence[0].index == 10  # the message that told the fee
    assert verdict(chatty, "turn_limit").status == "fail"
    ends = run(solved, [f"Hi, I'm Benedikt ({EMAIL}), my new phone is {FINAL}.", "Yes.", "Thanks! ###STOP###"])
    assert verdict(ends, "turns_after_completion").status == "pass" and verdict(ends, "turn_limit").status == "pass"


def test_malformed_and_repeated_calls_fail_and_clean_calls_pass():
    episode = run([raw_call("find_patient_by_email", "{"), raw_call("no_such_tool", "{}"), LOOK_UP, LOOK_UP], [OPENING, "Okay."])
    bad = verdict(episode, "malformed_calls")
    assert bad.status == "fail" and bad.value == 2 and indices(bad) == [2, 4]
    repeated = verdict(episode, "repeated_calls")
    assert repeated.status == "fail" and indices(repeated) == [8]
    clean = careful()
    assert verdict(clean, "malformed_calls").status == "pass" and verdict(clean, "repeated_calls").status == "pass"


def test_many_more_turns_than_the_oracle_fail():
    slow = run([say("Let me think.")] * 14, [OPENING] + ["Okay."] * 14, max_turns=14)
    v = verdict(slow, "turns_vs_oracle")
    assert v.status == "fail" and v.value == pytest.approx(14 / 7, abs=0.01)  # the oracle plans 7 turns
    assert verdict(careful(), "turns_vs_oracle").status == "pass"


def test_every_check_is_registered_and_an_errored_episode_is_not_judged():
    episode = careful()
    assert [v.check for v in run_checks(LITE, TASK, episode)] == list(CHECKS)
    assert run_checks(LITE, TASK, episode.model_copy(update={"termination": "error", "error": "server died"})) == []
