"""Fuzzing the episode loop with random and adversarial assistant output.

Specification: whatever a policy says (empty or huge or exotic text, calls to unknown tools, arguments that
are not JSON, not objects, the wrong shape or types, deeply nested, many calls per turn, a terminal tool
called wrongly) the loop returns an Episode and never errors because of it; every tool call is answered by
exactly one tool message with its id, right after the call; ``malformed_calls`` counts exactly the
executed calls that were unparsable, to unknown tools or with misfitting arguments; every trajectory check
and the failure attribution judge it without raising; the Episode survives the JSON-lines round trip unchanged.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muarl.domains import DOMAINS, load_domain
from muarl.domains.base import ArgumentError, Domain
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.store import EpisodeWriter, read_episodes
from muarl.types import Episode, Message, Task, ToolCall
from domain_data import load_or_skip
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

ADVERSARIAL_ARGUMENTS = [
    "", "   ", "{", "}", "{'patient_id': 'P1'}", '{"a": 1,}', "null", "[]", '["x"]', '"just a string"', "42", "true",
    '{"expression": NaN}', '{"amount": Infinity}', '{"thought": "\\ud800"}', '{"x": "\\udfff tail"}', '{"thought": "\\ud83d\\ude00"}',
    "[" * 5000 + "]" * 5000, '{"a":' * 100 + "1" + "}" * 100, '{"amount": 1' + "0" * 5000 + "}",
    '{"expression": "__import__(\'os\').system(\'true\')"}', '{"expression": "1/0"}', '{"expression": "9**9**9"}',
    '{"summary": 5}', '{"summary": null}', '{}', '{"patient_id": true}', '{"amount": "12"}',
    '{"thought": "' + "x" * 20000 + '"}', '{"thought": "ünï©ødé ✓ 日本語 \\u0000"}',
]
arguments = st.one_of(argument_objects, st.sampled_from(ADVERSARIAL_ARGUMENTS), st.text(max_size=60))
names = st.one_of(st.sampled_from(TOOL_NAMES), st.sampled_from(TOOL_NAMES).map(str.upper), st.text(max_size=20))
tool_calls = st.builds(ToolCall, id=st.text(max_size=12), name=names, arguments=arguments)
contents = st.one_of(st.none(), st.just(""), st.text(max_size=200), st.just("y" * 50000), st.just("###STOP### from the agent"))
assistant_messages = st.one_of(
    st.builds(lambda c: Message(role="assistant", content=c), contents),
    st.builds(lambda c, k: Message(role="assistant", content=c, tool_calls=k), contents, st.lists(tool_calls, min_size=1, max_size=6)),
    st.builds(lambda c: Message(role="assistant", content=c, tool_calls=[]), contents),
)


def answered_calls(episode: Episode) -> list[ToolCall]:
    """The episode's tool calls, checking that every one is answered, in order, right after the message that made it."""
    msgs = episode.messages
    answered = []
    for i, m in enumerate(msgs):
        if m.role == "assistant" and m.tool_calls:
            replies = msgs[i + 1 : i + 1 + len(m.tool_calls)]
            assert [r.role for r in replies] == ["tool"] * len(m.tool_calls)
            assert [r.tool_call_id for r in replies] == [c.id for c in m.tool_calls]
            answered += m.tool_calls
    assert sum(m.role == "tool" for m in msgs) == len(answered) == len(episode.tool_executions)
    return answered


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

    answered = answered_calls(episode)

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

    assert_judged(episode)
    assert Episode.model_validate_json(episode.model_dump_json()) == episode


def assert_judged(episode: Episode) -> None:
    """Every check gave a verdict without raising, and a failed episode got a label the rules decided."""
    assert episode.checks, "the loop ran no checks"
    assert [v for v in episode.checks if v.status == "error"] == []
    assert (episode.attribution is None) == bool(episode.reward and episode.reward.success)
    assert episode.attribution is None or episode.attribution.label != "undecided", episode.attribution


# ---------------------------------------------------------------- volume: every registered domain
# Hypothesis explores the clinic's edge cases above; below, a seeded generator runs the loop over many more
# messages on every domain, with arguments that fit each tool's schema, use ids from its seed data, or are the
# gold calls of its tasks (as they are or with one argument changed), so that tools really run, and write,
# on plausible input as well as on junk.

MESSAGES_PER_DOMAIN = 10_000
EXOTIC = [None, "", " ", 0, -1, 10**30, 1.5, True, [], {}, "ünï©ødé ✓ 日本語", "\x00", "###STOP###", "y" * 5000, "#W0000000"]
CONTENTS = [None, "", "Let me check that for you.", "###STOP### from the agent", "ünï©ødé ✓ 日本語 \u0000", "z" * 20000]


def seed_values(domain: Domain, rng: random.Random, per_table: int = 40) -> list:
    """Record keys and scalars found in a sample of each table's records: ids a tool will recognise."""
    values: list = []

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            values.append(value)

    for rows in domain.base.tables.values():
        keys = sorted(rows)
        for key in rng.sample(keys, min(per_table, len(keys))):
            values.append(key)
            walk(rows[key])
    return values


class RandomAgentOutput:
    """Seeded assistant messages for one domain: text, or 1-4 tool calls to its tools (now and then unknown ones),
    with arguments that fit the schema, use seed-data values, come from gold actions, or are junk."""

    def __init__(self, domain: Domain, tasks: list[Task], seed: int):
        self.rng = random.Random(seed)
        self.specs = [s for t in tasks[:50] for s in domain.task_tools(t).specs()]  # a task may bring its own tools (ACEBench, BFCL)
        # gold values too: a world without seed tables (ACEBench, BFCL: their states are per task) has no others
        self.values = seed_values(domain, self.rng) + [v for t in tasks[:50] for a in t.actions for v in a.kwargs.values()] + EXOTIC
        self.gold = [a for t in tasks for a in t.actions]
        self.calls = 0

    def value(self, schema: dict, depth: int = 0):
        rng = self.rng
        roll = rng.random()
        if roll < 0.15 or depth > 3:
            return rng.choice(EXOTIC)
        if roll < 0.35:
            return rng.choice(self.values)
        if "enum" in schema:
            return rng.choice(schema["enum"])
        kind = schema.get("type") or rng.choice(["string", "integer", "array", "object"])
        if kind == "string":
            found = [v for v in rng.sample(self.values, 5) if isinstance(v, str)]
            return found[0] if found else rng.choice(EXOTIC)
        if kind in ("integer", "number"):
            return rng.choice([0, 1, 2, rng.randint(-5, 5000), rng.uniform(0, 3000)])
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "array":
            return [self.value(schema.get("items", {}), depth + 1) for _ in range(rng.randint(0, 4))]
        return {k: self.value(s, depth + 1) for k, s in schema.get("properties", {"k": {}}).items()}

    def arguments(self, spec) -> str:
        rng = self.rng
        if rng.random() < 0.1:
            return rng.choice(ADVERSARIAL_ARGUMENTS)
        props = spec.parameters.get("properties", {})
        args = {k: self.value(s) for k, s in props.items() if rng.random() < 0.9}
        if rng.random() < 0.05:
            args[rng.choice(["extra", "id", ""])] = rng.choice(EXOTIC)
        return json.dumps(args)

    def gold_call(self) -> ToolCall:
        action = self.rng.choice(self.gold)
        kwargs = dict(action.kwargs)
        if kwargs and self.rng.random() < 0.5:
            kwargs[self.rng.choice(sorted(kwargs))] = self.rng.choice(self.values + EXOTIC)
        self.calls += 1
        return ToolCall(id=f"call_{self.calls}", name=action.name, arguments=json.dumps(kwargs))

    def call(self) -> ToolCall:
        rng = self.rng
        if self.gold and rng.random() < 0.2:
            return self.gold_call()
        spec = rng.choice(self.specs)
        name = spec.name if rng.random() < 0.9 else rng.choice([spec.name.upper(), "", "rm -rf /", spec.name + " "])
        self.calls += 1
        return ToolCall(id=f"call_{self.calls}", name=name, arguments=self.arguments(spec))

    def message(self) -> Message:
        rng = self.rng
        content = rng.choice(CONTENTS)
        if rng.random() < 0.25:
            return Message(role="assistant", content=content)
        return Message(role="assistant", content=content, tool_calls=[self.call() for _ in range(rng.choices([1, 2, 4], [6, 2, 1])[0])])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_ten_thousand_random_messages_per_domain_never_break_the_loop_or_the_seed_data(name, tmp_path):
    """Every episode is written as a run writes it and read back from disk at the end, and no tool's code leaves
    Python's integer-string limit changed (a lifted one lets a later huge integer into the file, unreadable then)."""
    domain = load_or_skip(name)
    tasks = domain.tasks(domain.splits[-1])
    output = RandomAgentOutput(domain, tasks, seed=zlib.crc32(name.encode()))
    limit = sys.get_int_max_str_digits()
    written = tmp_path / "episodes.jsonl"

    async def fuzz() -> int:
        messages = episodes = 0
        with EpisodeWriter(written) as writer:
            while messages < MESSAGES_PER_DOMAIN:
                episode = await fuzz_episode(episodes)
                assert sys.get_int_max_str_digits() == limit, "a tool left the integer-string limit changed"
                writer.write(episode)
                messages += episode.agent_turns
                episodes += 1
        return messages

    async def fuzz_episode(episodes: int) -> Episode:
        turns = [output.message() for _ in range(output.rng.randint(1, 20))]
        agent, user = ScriptAgent(turns), LineUser(["Hi, I need help.", "Okay.", "Sure, go ahead."])
        config = LoopConfig(max_turns=len(turns), parallel_tool_calls=output.rng.random() < 0.5)
        episode = await run_episode(domain, tasks[episodes % len(tasks)], agent, user, seed=episodes, config=config)
        assert episode.error is None and episode.reward is not None, episode.error
        assert episode.termination in {"max_turns", "terminal_tool"}
        answered_calls(episode)
        assert_judged(episode)
        assert Episode.model_validate_json(episode.model_dump_json()) == episode
        return episode

    assert asyncio.run(fuzz()) >= MESSAGES_PER_DOMAIN
    read, unreadable = read_episodes(written)
    assert unreadable == 0 and all(e.error is None for e in read)
    assert domain.base.recompute_digest() == domain.base.digest  # no tool wrote through to the shared seed data
