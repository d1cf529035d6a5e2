"""The scripted user (``muarl.users.scripted``).

Specification: it opens with its first request; asked to identify, it gives its email (else name and date of
birth); asked to confirm, it says yes; asked for details of the current request, it gives only those; told
the request is done, refused or answered, it moves to the next and says ###STOP### after the last; it
restates a request it gets no progress on and gives up after ``patience`` restatements; its wording depends
only on (task, seed). A request with a revision is a change of mind: the first request to confirm it gets
the revision instead of yes, and the revised details hold from then on; the cooperative user words it with
the revised details from the start and just confirms. Without structured requests it opens with its
instruction and confirms.
"""

from __future__ import annotations

import asyncio

import pytest

from muarl.types import Absent, Message, Revision, Task, UserRequest, UserScenario
from muarl.users.base import STOP
from muarl.users.scripted import ScriptedUser


def make_task(requests, known=None) -> Task:
    known = known or {"name": "Ann Lee", "date_of_birth": "1980-02-03", "email": "ann.lee@example.com"}
    return Task(id="t", domain="clinic", split="test", user=UserScenario(instruction="You are Ann.", known_info=known, requests=requests))


BOOK = UserRequest(text="I'd like to book a checkup.", facts={"doctor": "Dr. Xu", "time": "Monday at 10:00"})
BALANCE = UserRequest(text="What is my balance?", outcome="answered", answer="1,200")
REFILL = UserRequest(text="Refill my inhaler.", facts={"medication": "albuterol inhaler"}, outcome="refused")


MOVE = UserRequest(text="Please move my visit to Monday at 10:00.", variants=["I'd like my visit on Monday at 10:00."],
                   facts={"time": "Monday at 10:00"},
                   revision=Revision(text="Actually, make it Tuesday at 9:00.", facts={"time": "Tuesday at 9:00"}))


class Talk:
    """One scripted-user session and the conversation as it sees it."""

    def __init__(self, task: Task, seed: int = 0, **options):
        self.session = ScriptedUser(**options).new_session(task, seed)
        self.history: list[Message] = []

    def user(self, agent_says: str | None = None):
        if agent_says is not None:
            self.history.append(Message(role="assistant", content=agent_says))
        turn = asyncio.run(self.session.reply(list(self.history)))
        self.history.append(Message(role="user", content=turn.text))
        return turn


def test_a_full_conversation():
    talk = Talk(make_task([BOOK, BALANCE, REFILL]))
    opening = talk.user()
    assert BOOK.text in opening.text and opening.done is None
    assert "ann.lee@example.com" in talk.user("Could you give me your email to verify your identity?").text
    details = talk.user("Which doctor, and what time would you like?").text
    assert "Dr. Xu" in details and "Monday at 10:00" in details
    assert talk.user("To confirm, I will book Dr. Xu on Monday at 10:00. Shall I proceed?").text.startswith(("Yes", "Correct"))
    assert BALANCE.text in talk.user("Your appointment has been booked.").text
    assert REFILL.text in talk.user("Your balance is $1200.").text  # the answer, with or without its comma
    bye = talk.user("Unfortunately that cannot be done.")
    assert bye.done == "user_stop" and STOP in bye.text


def test_name_and_birth_date_when_no_email_is_known():
    talk = Talk(make_task([BOOK], known={"name": "Ann Lee", "date_of_birth": "1980-02-03"}))
    talk.user()
    text = talk.user("Please verify your identity: full name and date of birth?").text
    assert "Ann Lee" in text and "1980-02-03" in text


def test_only_the_asked_details_are_given():
    talk = Talk(make_task([BOOK]))
    talk.user()
    text = talk.user("What time works for you?").text
    assert "Monday at 10:00" in text and "Dr. Xu" not in text


def test_a_wrong_answer_does_not_advance_and_patience_runs_out():
    talk = Talk(make_task([BALANCE, BOOK]), patience=2)
    talk.user()
    first = talk.user("Your balance is $50.").text
    assert first.startswith("Let me repeat") and BALANCE.text in first
    assert talk.user("Hmm.").text.startswith("Let me repeat")
    gave_up = talk.user("Hmm.").text
    assert gave_up.startswith("Never mind that.") and BOOK.text in gave_up


def test_wording_depends_only_on_task_and_seed():
    task = make_task([BOOK, BALANCE])

    def script(seed):
        talk = Talk(task, seed)
        return [talk.user().text, talk.user("Shall I proceed?").text, talk.user("It has been booked.").text]

    assert script(1) == script(1)
    assert len({tuple(script(s)) for s in range(8)}) > 1


def test_runs_out_of_turns_with_a_stop():
    talk = Talk(make_task([BOOK]), max_turns=3)
    talk.user()
    talk.user("Hmm.")
    last = talk.user("Hmm.")
    assert last.done == "user_stop" and STOP in last.text


def test_without_structured_requests_it_is_the_confirming_user():
    talk = Talk(make_task([]))
    assert talk.user().text == "You are Ann."
    assert talk.user("Do you want me to go ahead?").text == "Yes."
    end = talk.user("It is done.")
    assert end.done == "user_stop"


@pytest.mark.parametrize("said", ["All set, it's done.", "I'm sorry, I can't do that."])
def test_done_or_refused_advances_a_request_that_expects_no_answer(said):
    talk = Talk(make_task([BOOK, REFILL]))
    talk.user()
    assert REFILL.text in talk.user(said).text


def test_a_refusal_that_names_the_topic_is_a_report_not_a_question():
    talk = Talk(make_task([REFILL, BOOK]))
    talk.user()
    talk.user("Could you give me your email?")
    assert BOOK.text in talk.user("That prescription cannot be refilled: it has no refills left. Anything else?").text


def test_a_closing_question_about_a_detail_is_answered_even_after_an_apology():
    talk = Talk(make_task([REFILL, BOOK]))
    talk.user()
    talk.user("Could you give me your email?")
    assert "albuterol inhaler" in talk.user("Sorry, I cannot find it. Which medication do you mean?").text


def test_being_asked_again_for_given_details_runs_out_of_patience():
    talk = Talk(make_task([BOOK, BALANCE]), patience=2)
    talk.user()
    talk.user("Could you give me your email?")
    assert "Dr. Xu" in talk.user("Which doctor?").text  # first time: answered
    assert "Dr. Xu" in talk.user("Which doctor?").text  # again: answered, and counted
    assert "Dr. Xu" in talk.user("Which doctor?").text
    assert BALANCE.text in talk.user("Which doctor?").text  # patience spent: it gives up and moves on


def test_each_episode_picks_one_wording_of_a_request_and_keeps_it():
    worded = UserRequest(text="Change my phone to 555-111-2222.", variants=["My new phone is 555-111-2222.", "Use 555-111-2222 as my phone."],
                         facts={"phone": "555-111-2222"})
    task = make_task([BALANCE, worded])
    seen = set()
    for seed in range(12):
        talk = Talk(task, seed, patience=1)
        talk.user()
        asked = talk.user("Your balance is $1200.").text  # the second request, in this episode's wording
        wording = next(w for w in (worded.text, *worded.variants) if w in asked)
        assert wording in talk.user("Hmm.").text  # restated in the same words
        seen.add(wording)
    assert seen == {worded.text, *worded.variants}


def test_a_user_who_opens_with_its_email_is_identified():
    new_email = UserRequest(text="I'm Ann (ann.lee@example.com). Please change my email to ann@new.org.", facts={"email": "ann@new.org"})
    talk = Talk(make_task([new_email]))
    talk.user()
    # the email in the confirmation is the new one, not a request to identify
    assert talk.user('To confirm, I will update contact info (email="ann@new.org"). Shall I proceed?').text.startswith(("Yes", "Correct"))


def test_with_a_script_it_says_each_line_whatever_the_agent_said_then_stops():
    task = Task(id="t", domain="bfcl-mt-base", split="test",
                user=UserScenario(instruction="both", script=["Move the report.", "Now sort it."]))
    talk = Talk(task)
    assert talk.user().text == "Move the report."
    first = talk.user("Do you want me to go ahead?")  # a question gets the next scripted turn, not a "yes"
    assert (first.text, first.done) == ("Now sort it.", None)
    end = talk.user("Sorted.")
    assert end.done == "user_stop" and STOP in end.text


def test_revised_request_swaps_every_wording_and_fact():
    revised = MOVE.revised()
    assert revised.text == "Please move my visit to Tuesday at 9:00." and revised.variants == ["I'd like my visit on Tuesday at 9:00."]
    assert revised.facts == {"time": "Tuesday at 9:00"} and revised.revision is None
    assert BOOK.revised() is BOOK


def test_asked_to_confirm_it_changes_its_mind_once_and_then_gives_the_revised_details():
    talk = Talk(make_task([MOVE, BALANCE]))
    assert "Monday at 10:00" in talk.user().text
    assert "ann.lee@example.com" in talk.user("Could you give me your email?").text
    assert talk.user("To confirm, I will move it to Monday at 10:00. Shall I proceed?").text == "Actually, make it Tuesday at 9:00."
    assert talk.user("What time would you like?").text == "The time is Tuesday at 9:00."
    restated = talk.user("Okay.").text  # no progress: the request restated, as revised
    assert restated.startswith("Let me repeat: ") and restated.endswith("Tuesday at 9:00. The time is Tuesday at 9:00.")
    assert "Monday" not in restated
    assert talk.user("To confirm, I will move it to Tuesday at 9:00. Shall I proceed?").text.startswith(("Yes", "Correct"))
    assert BALANCE.text in talk.user("Your visit has been moved.").text


def test_the_cooperative_user_states_the_revised_details_up_front_and_just_confirms():
    for seed in range(4):
        talk = Talk(make_task([MOVE]), seed=seed, cooperative=True)
        opening = talk.user().text
        assert "Tuesday at 9:00" in opening and "Monday" not in opening
        assert talk.user("To confirm, I will move it to Tuesday at 9:00. Shall I proceed?").text.startswith(("Yes", "Correct"))


def test_an_absent_user_answers_every_message_with_its_line_until_the_end_phrase():
    task = Task(id="t", domain="acebench-agent", split="multi_step",
                user=UserScenario(instruction="Order me a pizza.", absent=Absent(reply="Carry on alone.", end="finish conversation")))
    talk = Talk(task)
    assert talk.user().text == "Order me a pizza."
    assert talk.user("Which size would you like? Shall I proceed?").text == "Carry on alone."  # no yes: nobody is there
    assert talk.user("All done.").text == "Carry on alone."
    bye = talk.user("The order is placed. finish conversation")
    assert bye.done == "user_stop" and bye.text == STOP


def test_asked_to_confirm_a_change_while_asking_a_question_it_declines_and_repeats_the_question():
    # the person it plays asked about a balance: a proposed change it never asked for gets a no, never a yes
    talk = Talk(make_task([BALANCE, BOOK]))
    talk.user()
    declined = talk.user("To confirm, I will update your phone number to 555-123-4567. Shall I proceed?").text
    assert declined.startswith("No") and BALANCE.text in declined
    assert BOOK.text in talk.user("Your balance is $1200.").text  # the question is still the one it waits on


def test_a_declined_change_counts_against_patience():
    talk = Talk(make_task([BALANCE, BOOK]), patience=1)
    talk.user()
    assert talk.user("Shall I update your address? Please confirm.").text.startswith("No")
    assert talk.user("Should I change your phone number?").text.startswith("Never mind that.")


def test_an_answer_that_also_offers_a_change_moves_on_without_a_yes():
    talk = Talk(make_task([BALANCE, BOOK]))
    talk.user()
    text = talk.user("Your balance is $1200. Would you like me to update your contact details?").text
    assert BOOK.text in text and not text.startswith(("Yes", "Correct"))


def test_a_confirmation_that_changes_nothing_still_gets_a_yes_while_asking():
    talk = Talk(make_task([BALANCE]))
    talk.user()
    assert talk.user("You would like to know your balance, is that correct?").text.startswith(("Yes", "Correct"))
