"""ACEBench's verdicts as its checker gives them (its rules, including the lenient ones), on answers written as
text or as tool calls; answer text is parsed, never run."""

from __future__ import annotations

import json

import pytest

from muarl.domains.acebench.checker import AnswerSyntaxError, check_normal, check_special, parse_answer, special_answer
from muarl.types import Message, ToolCall

FUNCTIONS = [{"name": "book_table", "description": "Book a table.", "parameters": {"type": "dict", "required": ["city"], "properties": {
    "city": {"type": "string"}, "people": {"type": "integer"}, "dishes": {"type": "array", "items": {"type": "string"}},
    "when": {"type": "object", "properties": {"day": {"type": "string"}}}}}}]
POSSIBLE = {"book_table": {"city": "New York", "people": 4, "dishes": ["Pad Thai"], "when": {"day": "Friday"}}}


def text(answer: str) -> Message:
    return Message(role="assistant", content=answer)


def calls(*pairs: tuple[str, dict]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=json.dumps(a)) for i, (n, a) in enumerate(pairs)])


def test_a_correct_answer_passes_as_text_and_as_tool_calls():
    assert check_normal(FUNCTIONS, text("[book_table(city='new york', people=4, dishes=['Pad Thai'], when={'day': 'Friday'})]"), POSSIBLE).valid
    assert check_normal(FUNCTIONS, calls(("book_table", POSSIBLE["book_table"])), POSSIBLE).valid


@pytest.mark.parametrize("args, why", [
    ({"city": "Boston", "people": 4, "dishes": ["Pad Thai"], "when": {"day": "Friday"}}, "wrong value for city"),
    ({"city": "New York", "people": 4, "dishes": ["Pad Thai", "Soup"], "when": {"day": "Friday"}}, "wrong value for dishes"),
    ({"city": "New York", "people": 4, "dishes": ["Pad Thai"], "when": {"day": "Monday"}}, "wrong value for when"),
    ({"people": 4}, "missing required argument city"),
    ({"city": "New York", "budget": 3}, "unexpected argument budget"),
    ({"city": "New York", "people": "four"}, "wrong type for people"),
])
def test_wrong_arguments_fail_with_the_reason(args, why):
    verdict = check_normal(FUNCTIONS, calls(("book_table", args)), POSSIBLE)
    assert not verdict.valid and verdict.error == why


def test_acebench_compares_neither_numbers_nor_optional_absent_arguments():
    """Its checker's leniency, kept so that scores are comparable: an integer of the right type is not compared."""
    assert check_normal(FUNCTIONS, calls(("book_table", {"city": "New York", "people": 9})), POSSIBLE).valid


def test_whitespace_is_removed_before_parsing_as_acebench_does():
    """So a multi-word string inside a list of an object can never match (upstream fails its own answer there)."""
    functions = [{"name": "f", "parameters": {"type": "dict", "properties": {"o": {"type": "dict", "properties": {"m": {"type": "array"}}}}}}]
    for words, valid in ((["time savings"], False), (["savings"], True)):
        possible = {"f": {"o": {"m": words}}}
        assert check_normal(functions, calls(("f", possible["f"])), possible).valid is valid


def test_repeated_calls_and_their_count():
    possible = {"book_table_1": {"city": "Paris"}, "book_table_2": {"city": "Rome"}}
    assert check_normal(FUNCTIONS, calls(("book_table", {"city": "Rome"}), ("book_table", {"city": "Paris"})), possible).valid
    assert not check_normal(FUNCTIONS, calls(("book_table", {"city": "Rome"})), possible).valid
    assert not check_normal(FUNCTIONS, calls(("book_table", {"city": "Rome"}), ("book_table", {"city": "Rome"})), possible).valid


def test_answers_that_are_not_calls_fail():
    for answer in ["I booked it.", "book_table(city='New York')", "[book_table(city=lambda: 1)]", "['Missing necessary parameters']"]:
        verdict = check_normal(FUNCTIONS, text(answer), POSSIBLE)
        assert not verdict.valid and verdict.error.startswith("wrong output format")
    assert not check_normal(FUNCTIONS, None, POSSIBLE).valid


def test_answer_text_is_parsed_never_executed(tmp_path):
    target = tmp_path / "made"
    calls_ = parse_answer(f"[book_table(city=open('{target}', 'w'), people=2*3)]")
    assert not target.exists()
    assert calls_ == [{"book_table": {"city": {"open": {}}, "people": 6}}]
    with pytest.raises(AnswerSyntaxError):
        parse_answer("[f(a=f'{x}')]")


def test_special_phrase_checks():
    incomplete = {"book_table": ["city", "people"]}
    assert check_special("incomplete", "Missing necessary parameters (city, people) for the api (book_table)", incomplete).valid
    assert not check_special("incomplete", "Missing necessary parameters (city) for the api (book_table)", incomplete).valid
    assert not check_special("incomplete", "Missing necessary parameters (city, people)", incomplete).valid
    wrong = {"city": ["Nwe Yrok"]}
    assert check_special("error_param", "There is incorrect value (Nwe Yrok) for the parameters (city) in the conversation history.", wrong).valid
    assert not check_special("error_param", "There is incorrect value for city", wrong).valid
    assert check_special("irrelevant", "Due to the limitations of the function, I cannot solve this problem.", "").valid
    assert not check_special("irrelevant", "[book_table(city='x')]", "").valid
    for kind, possible in (("incomplete", {"api": ["a ", " b"]}), ("error_param", wrong), ("irrelevant", "")):
        assert check_special(kind, special_answer(kind, possible), possible).valid


def test_agent_end_state_compares_only_what_the_possible_answer_lists():
    from muarl.domains.acebench.checker import check_agent

    expected = [{"BaseApi": {"wifi": True, "logged_in": True}}, {"MessageApi": {"inbox": {"1": {"message": "hi"}}}}]
    final = [{"BaseApi": {"wifi": True, "logged_in": True}}, {"MessageApi": {"inbox": {"1": {"message": "hi"}, "9": {"message": "extra"}}}}]
    assert check_agent(final, expected).valid  # a message the answer does not list is not compared
    assert not check_agent([final[0], {"MessageApi": {"inbox": {"1": {"message": "bye"}}}}], expected).valid
    assert not check_agent([{"BaseApi": {"wifi": False, "logged_in": True}}, final[1]], expected).valid
    assert not check_agent([], expected).valid  # the agent never made a call
    assert not check_agent([{"BaseApi": {"wifi": True, "logged_in": True, "other": 1}}, final[1]], expected).valid


def test_process_accuracy_finds_the_milestones_in_order():
    from muarl.domains.acebench.checker import milestone_text, process_accuracy

    step = milestone_text(calls(("send_message", {"sender_name": "Eve", "message": "Domino's"})))
    assert step == "[send_message(sender_name='Eve', message='Domino's')]"  # written as ACEBench's milestones are
    assert process_accuracy(["[a()]", "[x()]", "[b()]"], ["[a()]", "[b()]"]) == 1.0
    assert process_accuracy(["[b()]", "[a()]"], ["[a()]", "[b()]"]) == 0.5
    assert process_accuracy(["[c()]"], [["[a()]"], ["[c()]", "[d()]"]]) == 0.5
    assert process_accuracy(["[a()]"], ["[a()]", "[b()]", "[c()]"]) == 1 / 3  # one path: not rounded, as in ACEBench
    assert process_accuracy(["[a()]"], [["[a()]", "[b()]", "[c()]"]]) == 0.333
    assert process_accuracy([], []) == 1.0
