"""The shared vocabulary (``muarl.types``).

Specification: messages convert to and from the OpenAI format (tool-call arguments stay raw text; objects
given as dicts become JSON text); ``parsed_arguments`` accepts only a JSON object that an episode file can
hold, and says why otherwise; every model round-trips through JSON.
"""

from __future__ import annotations

import json

import pytest

from muarl.types import MAX_ARGUMENT_NESTING, Episode, Message, RewardInfo, ToolCall, ToolExecution, TurnTiming, Usage


def test_message_openai_round_trip():
    m = Message(role="assistant", content=None, tool_calls=[ToolCall(id="c1", name="f", arguments='{"a": 1}')])
    wire = m.to_openai()
    assert wire == {"role": "assistant", "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    assert Message.from_openai(wire) == m
    tool = Message(role="tool", content="ok", tool_call_id="c1", name="f")
    assert Message.from_openai(tool.to_openai()) == tool
    assert "name" not in Message(role="user", content="hi", name="x").to_openai()


def test_from_openai_fills_missing_ids_and_serialises_object_arguments():
    m = Message.from_openai({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1]}}}, {"name": "g"}]})
    assert m.tool_calls == [ToolCall(id="call_0", name="f", arguments='{"a": [1]}'), ToolCall(id="call_1", name="g", arguments="{}")]


@pytest.mark.parametrize(("raw", "value"), [("", {}), ("  ", {}), ('{"a": 1, "b": [true, null]}', {"a": 1, "b": [True, None]}),
                                            ('{"e": "\\ud83d\\ude00"}', {"e": "😀"})])
def test_parsed_arguments_accepts_json_objects(raw, value):
    assert ToolCall(id="c", name="f", arguments=raw).parsed_arguments() == value


@pytest.mark.parametrize(("raw", "reason"), [
    ("{", "not valid JSON"),
    ("{'a': 1}", "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got list"),
    ('"text"', "must be a JSON object, got str"),
    ('{"a": NaN}', "NaN is not a JSON value"),
    ('{"a": -Infinity}', "-Infinity is not a JSON value"),
    ('{"a": "\\ud800"}', "unpaired UTF-16 surrogate"),
    ('{"a": ' + "[" * (MAX_ARGUMENT_NESTING + 1) + "]" * (MAX_ARGUMENT_NESTING + 1) + "}", "nest deeper than"),
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    ('{"a": 1' + "0" * 5000 + "}", "not valid JSON"),
])
def test_parsed_arguments_refuses_what_an_episode_file_could_not_hold(raw, reason):
    with pytest.raises(ValueError, match=reason):
        ToolCall(id="c", name="f", arguments=raw).parsed_arguments()


def test_nesting_at_the_limit_is_fine():
    depth = MAX_ARGUMENT_NESTING - 1
    raw = '{"a": ' + "[" * depth + "]" * depth + "}"
    assert ToolCall(id="c", name="f", arguments=raw).parsed_arguments()["a"] is not None


def test_episode_json_round_trip_and_properties():
    ep = Episode(
        task_id="t", domain="d", split="test", trial=2, termination="user_stop",
        messages=[Message(role="system", content="s"), Message(role="assistant", tool_calls=[ToolCall(id="c", name="f")])],
        tool_executions=[ToolExecution(turn=0, call_id="c", name="f", arguments={"x": [1, {"y": "ü"}]}, output="o")],
        timings=[TurnTiming(turn=0, agent_seconds=0.5)],
        reward=RewardInfo(reward=1.0, state_match=True, outputs_found={"a": True}, final_hash="h", gold_hash="h"),
        usage=Usage(prompt_tokens=3, completion_tokens=4, requests=1),
    )
    assert Episode.model_validate_json(ep.model_dump_json()) == ep
    assert ep.key == ("t", 2) and not ep.errored
    assert Episode(task_id="t", domain="d", split="s", termination="error").errored


def test_episode_files_hold_openai_messages_without_nulls_and_older_flat_ones_still_read():
    ep = Episode(task_id="t", domain="d", split="test", termination="user_stop", messages=[
        Message(role="user", content="hi"),
        Message(role="assistant", tool_calls=[ToolCall(id="c", name="f", arguments='{"a": 1}')]),
        Message(role="tool", content="ok", tool_call_id="c", name="f"),
    ])
    written = json.loads(ep.model_dump_json())["messages"]
    assert written == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c", "name": "f"},
    ]
    flat = [  # as episode files were written before: muarl's flat tool calls, every field present
        {"role": "user", "content": "hi", "tool_calls": None, "tool_call_id": None, "name": None},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "f", "arguments": '{"a": 1}'}], "tool_call_id": None, "name": None},
        {"role": "tool", "content": "ok", "tool_calls": None, "tool_call_id": "c", "name": "f"},
    ]
    old = json.loads(ep.model_dump_json()) | {"messages": flat}
    assert Episode.model_validate(old) == Episode.model_validate_json(json.dumps(old)) == ep


def test_unknown_fields_are_refused():
    with pytest.raises(ValueError):
        Message(role="user", content="x", colour="red")
    with pytest.raises(ValueError):
        Episode(task_id="t", domain="d", split="s", termination="finished")


def test_usage_adds_up():
    u = Usage(prompt_tokens=1, completion_tokens=2, requests=1)
    u.add(Usage(prompt_tokens=10, completion_tokens=20, requests=1))
    assert u == Usage(prompt_tokens=11, completion_tokens=22, requests=2)


def test_lone_surrogates_from_a_model_are_replaced_so_the_episode_can_be_written():
    call = ToolCall(id="c1", name="bad\udfff", arguments='{"a": "x\ud800"}')
    message = Message(role="assistant", content="hi \ud800", tool_calls=[call])
    text = message.model_dump_json()
    assert "\ufffd" in message.content and call.name == "bad\ufffd"
    assert Message.model_validate_json(text) == message
