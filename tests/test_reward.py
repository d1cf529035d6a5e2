"""Trajectory rewards (``muarl.reward``).

Specification: the outcome reward is 1.0 exactly when the final state's hash equals the gold state's and every
required output was said to the user (case-insensitive, commas ignored; text inside tool-call turns does not
count); variants keep the binary verdict visible in ``components``; unknown reward names are refused.
"""

from __future__ import annotations

import pytest

from muarl.domains import load_domain
from muarl.reward import REWARDS, make_reward, outcome_reward, said_to_user, turn_penalised
from muarl.types import Message, ToolCall


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


@pytest.fixture(scope="module")
def answered(clinic):
    """A test task with one required output, and its gold hash."""
    task = next(t for t in clinic.tasks("test") if len(t.outputs) == 1)
    return task, clinic.gold_hash(task)


def say(text):
    return Message(role="assistant", content=text)


def test_gold_state_and_told_output_score_one(clinic, answered):
    task, gold = answered
    answer = task.outputs[0]
    info = outcome_reward(clinic, task, gold, [say(f"The answer is {answer.upper()}.")])
    assert (info.reward, info.state_match, info.outputs_found) == (1.0, True, {answer: True})
    assert info.final_hash == info.gold_hash == gold


def test_commas_and_case_are_ignored(clinic, answered):
    task, gold = answered
    spaced = task.model_copy(update={"outputs": ["1,234.5 Dollars"]})
    assert outcome_reward(clinic, spaced, gold, [say("it is 1234.5 dollars")]).reward == 1.0
    assert outcome_reward(clinic, spaced, gold, [say("it is 1,234.5 DOLLARS")]).reward == 1.0
    assert outcome_reward(clinic, spaced, gold, [say("it is 1 234.5 dollars")]).reward == 0.0


def test_only_texts_sent_to_the_user_count(clinic, answered):
    task, gold = answered
    answer = task.outputs[0]
    hidden = [
        Message(role="assistant", content=f"thinking: {answer}", tool_calls=[ToolCall(id="c", name="think", arguments="{}")]),
        Message(role="tool", content=answer, tool_call_id="c"),
        Message(role="user", content=answer),
        Message(role="system", content=answer),
    ]
    info = outcome_reward(clinic, task, gold, hidden)
    assert info.reward == 0.0 and info.state_match and info.outputs_found == {answer: False}
    assert said_to_user(hidden + [say("hi"), say(None)]) == ["hi"]


def test_state_mismatch_scores_zero_even_with_outputs(clinic, answered):
    task, _ = answered
    info = outcome_reward(clinic, task, clinic.new_state().hash(), [say(task.outputs[0])])
    assert info.reward == 0.0 and not info.state_match and all(info.outputs_found.values())


def test_turn_penalised_costs_turns_on_successes_only(clinic, answered):
    task, gold = answered
    fn = turn_penalised(penalty=0.05, floor=0.2)
    win = fn(clinic, task, gold, [say(task.outputs[0])], 4)
    assert win.reward == pytest.approx(0.8) and win.components == {"outcome": 1.0, "turn_penalty": pytest.approx(-0.2)}
    assert win.success  # shaping the reward does not change what counts as solved
    assert fn(clinic, task, gold, [say(task.outputs[0])], 40).reward == 0.2  # never below the floor
    loss = fn(clinic, task, "wrong", [say(task.outputs[0])], 4)
    assert loss.reward == 0.0 and loss.components == {} and not loss.success


def test_make_reward_by_name():
    assert make_reward("outcome") is outcome_reward
    assert make_reward("turn_penalised", penalty=0.1) is not None
    assert {"outcome", "turn_penalised"} <= set(REWARDS)
    with pytest.raises(ValueError, match="unknown reward 'bogus'; choose one of"):
        make_reward("bogus")
