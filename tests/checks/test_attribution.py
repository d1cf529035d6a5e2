"""Hand-made failed episodes for each attribution label and each user-fault kind, each with a correct counterpart.

Same world as test_checks.py: clinic-lite's task 1 (phone change with a change of mind, then a fee question).
"""

from __future__ import annotations

import asyncio

from muarl.checks.attribution import attribute, user_faults
from muarl.models.oracle import DoNothingAgent
from muarl.rollout.episode import run_episode
from muarl.types import Action
from muarl.users.scripted import ScriptedUser
from scripted_parties import LineUser, ScriptAgent, say
from test_checks import DOCTOR, EMAIL, FINAL, FIRST, LITE, LOOK_UP, OPENING, TASK, WRITE_FINAL, confirm, run


def faults(episode):
    return [(f.kind, f.index) for f in user_faults(LITE, TASK, episode)]


def test_an_errored_episode_is_infra():
    agent = ScriptAgent([LOOK_UP], fail_at=1, error=ConnectionError("model server refused the connection"))
    episode = asyncio.run(run_episode(LITE, TASK, agent, LineUser([OPENING, "Okay."])))
    assert episode.errored
    assert episode.attribution.label == "infra" and "refused the connection" in episode.attribution.reason


def test_a_task_whose_gold_actions_fail_is_the_task_s_fault():
    broken = TASK.model_copy(update={"id": "broken", "actions": [Action(name="update_contact_info", kwargs={"patient_id": "P0", "phone": FINAL})]})
    episode = run([LOOK_UP], [OPENING, "Bye ###STOP###"])
    label = attribute(LITE, broken, episode)
    assert label.label == "task" and "gold action 0" in label.reason


def test_the_do_nothing_agent_is_at_fault_and_the_user_is_not():
    episode = asyncio.run(run_episode(LITE, TASK, DoNothingAgent(), ScriptedUser(), seed=3))
    assert not episode.reward.success and episode.attribution.label == "agent"
    assert faults(episode) == []
    assert episode.attribution.reason == "the final state differs from the gold one"


def test_a_user_who_stops_at_a_confirmation_is_at_fault():
    episode = run([LOOK_UP, confirm(FINAL)], [OPENING, "Bye. ###STOP###"])
    assert episode.attribution.label == "user" and faults(episode) == [("stop", 5)]
    assert episode.attribution.evidence[0].index == 5


def test_a_user_who_stops_before_stating_every_request_is_at_fault_and_one_who_stated_them_is_not():
    solved_first = [LOOK_UP, confirm(FINAL), WRITE_FINAL, say("Your phone number has been updated. Anything else?")]
    early = run(solved_first, [f"Hi, I'm Benedikt ({EMAIL}), my new phone is {FINAL}.", "Yes.", "Bye. ###STOP###"])
    assert early.attribution.label == "user" and "request 2" in early.attribution.reason
    stated = run(solved_first, [f"Hi, I'm Benedikt ({EMAIL}), my new phone is {FINAL}.", "Yes.",
                                f"What would I pay for a visit with {DOCTOR}? Never mind, bye. ###STOP###"])
    assert stated.attribution.label == "agent" and faults(stated) == []


def test_a_user_who_withholds_a_detail_it_holds_is_at_fault():
    ask = say("Could you give me your email address?")
    episode = run([ask, say("I cannot help without it. Goodbye.")], [f"Hi, please change my phone number to {FIRST}.", "I'd rather not say.", "Bye ###STOP###"])
    assert faults(episode)[0] == ("withhold", 3) and episode.attribution.label == "user"
    answered = run([ask, say("I cannot help today. Goodbye.")], [f"Hi, please change my phone number to {FIRST}.", f"It is {EMAIL}.", "Bye ###STOP###"])
    assert "withhold" not in [k for k, _ in faults(answered)]


def test_a_user_who_states_a_value_its_instruction_does_not_hold_is_at_fault():
    wrong = run([LOOK_UP, confirm("555-000-1111")], [OPENING.replace(FIRST, "555-000-1111"), "Bye ###STOP###"])
    assert faults(wrong)[0] == ("wrong_value", 1)
    echoed = run([say("Is your number perhaps 555-000-1111?")], [OPENING, "No, 555-000-1111 is not mine. Bye ###STOP###"])
    assert [k for k, _ in faults(echoed)] != ["wrong_value"]  # a value the agent said first is the agent's, not invented


def test_a_user_who_asks_for_an_action_its_instruction_never_mentions_is_at_fault():
    invented = run([LOOK_UP], [OPENING + " Also, please cancel my appointment tomorrow.", "Bye ###STOP###"])
    assert faults(invented)[0] == ("invent", 1)
    within = run([LOOK_UP], [OPENING + " Can you update it today?", "Bye ###STOP###"])
    assert "invent" not in [k for k, _ in faults(within)]


def test_a_user_who_ignores_a_confirmation_is_at_fault_and_one_who_answers_it_is_not():
    ignored = run([LOOK_UP, confirm(FINAL), say("Goodbye.")], [OPENING, "Tell me more about your services first.", "Bye ###STOP###"])
    assert ("ignore_confirmation", 5) in faults(ignored) and ignored.attribution.label == "user"
    for answer in ("Yes.", "No, don't.", f"Actually, use {FINAL} instead."):
        answered = run([LOOK_UP, confirm(FIRST), say("Goodbye.")], [OPENING + f" And what does {DOCTOR} charge?", answer, "Bye ###STOP###"])
        assert faults(answered) == [], answer


def test_an_agent_failure_is_labelled_with_its_first_failed_check():
    episode = run([LOOK_UP, WRITE_FINAL, say("Your phone number has been updated. Anything else?")],
                  [OPENING + f" Also, what would I pay for a visit with {DOCTOR}?", "Bye ###STOP###"])
    label = attribute(LITE, TASK, episode)
    assert label.label == "agent" and label.reason.startswith("confirmed_before_write")
    assert [e.index for e in label.evidence] == [1, 4]


def test_nouns_ordinals_and_parts_of_a_value_are_not_user_faults():
    """What real LLM users say (τ-bench's recorded gpt-4o runs): an action named as a noun, a date as an ordinal,
    part of a value its instruction holds."""
    for line in (OPENING + " Thanks for the update, and for the return of my call.", OPENING.replace("Hi,", "Hi on March 2nd,"),
                 OPENING + " I was born in 1968."):
        episode = run([LOOK_UP], [line, "Bye ###STOP###"])
        assert [k for k, _ in faults(episode) if k in ("invent", "wrong_value")] == [], line
