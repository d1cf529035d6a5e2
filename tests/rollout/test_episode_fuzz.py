"""Fuzzing the episode loop with random and adversarial assistant output.

Specification: whatever a policy says (empty or huge or exotic text, calls to unknown tools, arguments that
are not JSON, not objects, the wrong shape or types, deeply nested, many calls per turn, a terminal tool
called wrongly) the loop returns an Episode and never errors because of it; every tool call is answered by
exactly one tool message with its id, right after the call; ``malformed_calls`` counts exactly the
executed calls that were unparsable, to unknown tools or with misfitting arguments; the Episode survives
the JSON-lines round trip unchanged.
"""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muarl.domains import load_domain
from muarl.domains.base import ArgumentError
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Episode, Message, ToolCall
from scripted_parties import LineUser, ScriptAgent

CLINIC = load_domain("clinic")
TASK = CLINIC.tasks("test")[0]
PATIENT = TASK.metadata["patient_id"]
TOOL_NAMES = CLINIC.tools.names()

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40), st.sampled_from([PATIENT, "A200011", "RX5003", "D1007", "2026-03-09 10:00", "card_0000"]),
)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)

known_keys = st.sampled_from(["patient_id", "email", "rx_id", "appointment_id", "time", "new_time", "doctor_id", "reason",
                              "amount", "payment_method_id", "expression", "thought", "summary", "zip", "street", "city", "specialty"])
argument_objects = st.dictionaries(known_keys | st.text(max_size=10), json_values, max_size=5).map(json.dumps)

adversarial_arguments = st.sampled_from([
    "", "   ", "{", "}", "{'patient_id': 'P1'}", '{"a": 1,}', "null", "[]", '["x"]', '"just a string"', "42", "true",
    '{"expression": NaN}', '{"amount": Infinity}', '{"thought": "\\ud800"}', '{"x": "\\udfff tail"}', '{"thought": "\\ud83d\\ude00"}',
    "[" * 5000 + "]" * 5000, '{"a":' * 100 + "1" + "}" * 100, '{"amount": 1' + "0" * 5000 + "}",
    '{"expression": "__import__(\'os\').system(\'true\')"}', '{"expression": "1/0"}', '{"expression": "9**9**9"}',
    '{"summary": 5}', '{"summary": null}', '{}', '{"patient_id": true}', '{"amount": "12"}',
    '{"thought": "' + "x" * 20000 + '"}', '{"thought": "ünï©ødé ✓ 日本語 \\u0000"}',
])
arguments = st.one_of(argument_objects, adversarial_arguments, st.text(max_size=60))
names = st.one_of(st.sampled_from(TOOL_NAMES), st.sampled_from(TOOL_NAMES).map(str.upper), st.text(max_size=20))
tool_calls = st.builds(ToolCall, id=st.text(max_size=12), name=names, arguments=arguments)
contents = st.one_of(st.none(), st.just(""), st.text(max_size=200), st.just("y" * 50000), st.just("###STOP### from the agent"))
assistant_messages = st.one_of(
    st.builds(lambda c: Message(role="assistant", content=c), contents),
    st.builds(lambda c, k: Message(role="assistant", content=c, tool_calls=k), contents, st.lists(tool_calls, min_size=1, max_size=6)),
    st.builds(lambda c: Message(role="assistant", content=c, tool_calls=[]), contents),
)


def expected_error_kind(call: ToolCall) -> str | None:
    """How the loop must classify one executed call, judged independently of its code where possible."""
    try:
        value = call.parsed_arguments()
    except ValueError:
        return "malformed"
    if call.name not in TOOL_NAMES:
        return "unknown_tool"
    try:
        CLINIC.tools[call.name].validate(value)
    except ArgumentError:
        return "bad_arguments"
    return None


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(turns=st.lists(assistant_messages, min_size=1, max_size=8), parallel=st.booleans())
def test_any_assistant_output_gives_a_valid_episode(turns, parallel):
    agent = ScriptAgent(turns, closing="Anything else?")
    user = LineUser(["Hi, I need help.", "Okay.", "Sure."])
    episode = asyncio.run(run_episode(CLINIC, TASK, agent, user, config=LoopConfig(max_turns=len(turns) + 1, parallel_tool_calls=parallel)))

    assert isinstance(episode, Episode)
    assert episode.termination in {"user_stop", "terminal_tool", "max_turns"}, episode.error
    assert episode.error is None and episode.reward is not None

    # every call is answered, in order, right after the message that made it
    msgs = episode.messages
    answered = []
    for i, m in enumerate(msgs):
        if m.role == "assistant" and m.tool_calls:
            replies = msgs[i + 1 : i + 1 + len(m.tool_calls)]
            assert [r.role for r in replies] == ["tool"] * len(m.tool_calls)
            assert [r.tool_call_id for r in replies] == [c.id for c in m.tool_calls]
            answered += m.tool_calls
    assert sum(m.role == "tool" for m in msgs) == len(answered) == len(episode.tool_executions)

    # classification of each call, and the malformed count
    executed = []
    for call, ex in zip(answered, episode.tool_executions):
        assert ex.call_id == call.id and ex.name == call.name
        if ex.error_kind == "not_executed":
            assert not parallel
            continue
        executed.append(call)
        assert ex.error_kind == expected_error_kind(call) or (ex.error_kind == "tool" and expected_error_kind(call) is None)
        assert (ex.error is None) == (not ex.output.startswith("Error:"))
    assert episode.malformed_calls == sum(expected_error_kind(c) in ("malformed", "unknown_tool", "bad_arguments") for c in executed)
    if episode.termination == "terminal_tool":
        assert any(e.name == "transfer_to_human_agents" and e.error is None for e in episode.tool_executions)

    assert Episode.model_validate_json(episode.model_dump_json()) == episode
