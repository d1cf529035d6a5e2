"""The episode loop (``muarl.rollout.episode.run_episode``).

Specification: the agent's view starts with the system prompt (the domain policy), then the greeting if the
domain has one, then the user's opening; text turns go to the user, tool-call turns to the tools (only the
first call unless ``parallel_tool_calls``; skipped calls are answered with a ``not_executed`` error); the
user sees no tool traffic. It ends on a user stop token (one termination per token), a terminal tool that
succeeded, ``max_turns`` agent turns, or a turn over the token budget; a failing model or user server ends
it as ``error`` with its message and no reward.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from muarl.domains import load_domain
from muarl.models.base import ContextFull, ModelError
from muarl.rollout.backends import LocalToolBackend
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Usage
from muarl.users.base import OUT_OF_SCOPE, STOP, TRANSFER, UserError, stop_reason
from scripted_parties import LineUser, ScriptAgent, calls, say


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


@pytest.fixture(scope="module")
def task(clinic):
    return clinic.tasks("test")[0]


def run(clinic, task, agent, user, **loop):
    return asyncio.run(run_episode(clinic, task, agent, user, config=LoopConfig(**loop)))


def test_views_of_agent_and_user(clinic, task):
    agent = ScriptAgent([say("Who are you?"), calls(("think", '{"thought": "hmm"}')), say("Done.")])
    user = LineUser(["Hello.", "I am Ann.", "Bye " + STOP])
    ep = run(clinic, task, agent, user)
    assert [m.role for m in ep.messages] == ["system", "user", "assistant", "user", "assistant", "tool", "assistant", "user"]
    assert ep.messages[0].content == clinic.system_prompt(task)
    assert agent.tools == clinic.tools.specs()
    # the user never sees tool calls or tool results
    assert [(m.role, m.content) for m in user.histories[-1]] == [
        ("user", "Hello."), ("assistant", "Who are you?"), ("user", "I am Ann."), ("assistant", "Done.")]
    assert ep.termination == "user_stop" and ep.agent_turns == 3 and len(ep.timings) == 3
    assert ep.reward is not None and ep.reward.reward == 0.0  # nothing was changed


def test_greeting_comes_first_when_the_domain_has_one(clinic, task):
    greeting_domain = dataclasses.replace(clinic, greeting="Hi! How can I help you today?", _gold_hashes={}, _tasks={})
    user = LineUser([STOP])
    ep = run(greeting_domain, task, ScriptAgent([]), user)
    assert [(m.role, m.content) for m in ep.messages[1:3]] == [("assistant", "Hi! How can I help you today?"), ("user", STOP)]
    assert [(m.role, m.content) for m in user.histories[0]] == [("assistant", "Hi! How can I help you today?")]
    assert ep.agent_turns == 0 and ep.termination == "user_stop"


@pytest.mark.parametrize(("token", "termination"), [(STOP, "user_stop"), (TRANSFER, "user_transfer"), (OUT_OF_SCOPE, "user_out_of_scope")])
def test_user_stop_tokens_map_to_terminations(clinic, task, token, termination):
    assert stop_reason(f"thanks {token}") == termination
    ep = run(clinic, task, ScriptAgent([say("Hello.")]), LineUser(["Hi.", f"ok {token}"]))
    assert ep.termination == termination and ep.agent_turns == 1


def test_text_without_stop_token_does_not_end():
    assert stop_reason("please stop, STOP, ##STOP##") is None


def test_max_turns_cuts_an_agent_that_never_talks(clinic, task):
    agent = ScriptAgent([calls(("think", '{"thought": "again"}'))] * 50)
    ep = run(clinic, task, agent, LineUser(["Hi."]), max_turns=7)
    assert ep.termination == "max_turns" and ep.agent_turns == 7 and len(ep.tool_executions) == 7


def test_token_budget_cuts_after_a_turn_over_budget(clinic, task):
    agent = ScriptAgent([say("a")] * 5, usage=Usage(prompt_tokens=90, completion_tokens=20, requests=1))
    within = run(clinic, task, agent, LineUser(["Hi.", "Go on.", STOP]), token_budget=110)
    assert within.termination == "user_stop" and within.agent_turns == 2
    over = run(clinic, task, agent, LineUser(["Hi.", "Go on.", STOP]), token_budget=109)
    assert over.termination == "token_budget" and over.agent_turns == 1
    assert over.usage == Usage(prompt_tokens=90, completion_tokens=20, requests=1)


def test_only_the_first_call_of_a_turn_runs_by_default(clinic, task):
    turn = calls(("calculate", '{"expression": "1+1"}'), ("calculate", '{"expression": "2+2"}'), ("nope", "{}"))
    ep = run(clinic, task, ScriptAgent([turn]), LineUser(["Hi.", STOP]))
    kinds = [(e.call_id, e.error_kind) for e in ep.tool_executions]
    assert kinds == [("call_0", None), ("call_1", "not_executed"), ("call_2", "not_executed")]
    assert [m.content for m in ep.messages if m.role == "tool"][0] == "2"
    skipped = [m.content for m in ep.messages if m.role == "tool"][1:]
    assert len(skipped) == 2 and all(c.startswith("Error: only one tool call per turn") for c in skipped)
    assert ep.malformed_calls == 0  # skipped calls are not malformed


def test_parallel_tool_calls_runs_every_call(clinic, task):
    turn = calls(("calculate", '{"expression": "1+1"}'), ("calculate", '{"expression": "2+2"}'), ("nope", "{}"))
    ep = run(clinic, task, ScriptAgent([turn]), LineUser(["Hi.", STOP]), parallel_tool_calls=True)
    assert [m.content for m in ep.messages if m.role == "tool"][:2] == ["2", "4"]
    assert [e.error_kind for e in ep.tool_executions] == [None, None, "unknown_tool"]
    assert ep.malformed_calls == 1


def test_bad_output_is_shown_to_the_agent_and_counted(clinic, task):
    turns = [
        calls(("calculate", "{not json")),
        calls(("calculate", '["1+1"]')),
        calls(("calculate", '{"expression": 5}')),
        calls(("calculate", '{"expr": "1"}')),
        calls(("cancel_appointment", '{"appointment_id": "A0"}')),
        calls(("launch_rockets", "{}")),
    ]
    ep = run(clinic, task, ScriptAgent(turns), LineUser(["Hi.", STOP]))
    kinds = [e.error_kind for e in ep.tool_executions]
    assert kinds == ["malformed", "malformed", "bad_arguments", "bad_arguments", "tool", "unknown_tool"]
    assert ep.malformed_calls == 5  # a tool's own refusal is not malformed
    outputs = [m.content for m in ep.messages if m.role == "tool"]
    assert "not valid JSON" in outputs[0] and "must be a JSON object" in outputs[1]
    assert "appointment A0 not found" in outputs[4] and "available tools" in outputs[5]
    assert ep.termination == "user_stop"


def test_terminal_tool_ends_only_when_it_succeeds(clinic, task):
    bad = calls(("transfer_to_human_agents", '{"summary": 3}'))
    good = calls(("transfer_to_human_agents", '{"summary": "needs a nurse"}'))
    ep = run(clinic, task, ScriptAgent([bad, good, say("never said")]), LineUser(["Hi."]))
    assert ep.termination == "terminal_tool" and ep.agent_turns == 2
    assert ep.messages[-1].role == "tool" and ep.messages[-1].content == "Transfer successful"


def test_agent_server_failure_is_an_errored_episode(clinic, task):
    agent = ScriptAgent([say("Hello.")], fail_at=1, error=ModelError("http://m/v1/chat/completions failed after 4 attempt(s): HTTP 503"))
    ep = run(clinic, task, agent, LineUser(["Hi.", "Ok."]))
    assert ep.termination == "error" and ep.errored and ep.reward is None
    assert ep.error.startswith("ModelError:") and "HTTP 503" in ep.error
    assert ep.agent_turns == 1 and ep.tokens is None


def test_user_server_failure_is_an_errored_episode(clinic, task):
    user = LineUser(["Hi.", "Ok."], fail_at=1, error=UserError("user simulator failed: HTTP 500"))
    ep = run(clinic, task, ScriptAgent([say("Hello.")]), user)
    assert ep.termination == "error" and ep.reward is None and "user simulator failed" in ep.error


def test_the_opening_failing_is_an_errored_episode_too(clinic, task):
    ep = run(clinic, task, ScriptAgent([]), LineUser(["x"], fail_at=0))
    assert ep.termination == "error" and ep.agent_turns == 0 and ep.reward is None


def test_a_tool_backend_failing_to_close_errors_the_episode_instead_of_raising(clinic, task):
    class UnclosableBackend(LocalToolBackend):
        async def aclose(self) -> None:
            raise RuntimeError("the tools server is gone")

    ep = asyncio.run(run_episode(clinic, task, ScriptAgent([say("Hello.")]), LineUser(["Hi.", STOP]), backend_factory=UnclosableBackend))
    assert ep.termination == "error" and ep.reward is None
    assert ep.error == "closing UnclosableBackend failed: RuntimeError: the tools server is gone"


def test_episode_records_identity_and_seed(clinic, task):
    ep = asyncio.run(run_episode(clinic, task, ScriptAgent([]), LineUser([STOP]), trial=4, seed=99))
    assert (ep.task_id, ep.domain, ep.split, ep.trial, ep.seed, ep.agent, ep.user) == (task.id, "clinic", "test", 4, 99, "script", "lines")
    assert ep.key == (task.id, 4) and ep.seconds >= 0


def test_a_policy_that_outgrows_its_context_fails_the_episode_but_is_scored(clinic, task):
    """Overflow is the policy's doing (it rambled or looped): scored like a cut episode, never 'errored'."""
    agent = ScriptAgent([say("Hello.")], fail_at=1, error=ContextFull("episode context is full (4096 of max_context=4096 tokens)"))
    ep = run(clinic, task, agent, LineUser(["Hi.", "Ok."]))
    assert ep.termination == "context_full" and not ep.errored and ep.error is None
    assert ep.reward is not None and ep.reward.reward == 0.0 and ep.reward.success is False
    assert ep.agent_turns == 1


def test_lone_surrogates_from_an_in_process_agent_are_cleaned_so_the_run_writes_every_episode(clinic, task, tmp_path):
    """A plugin agent is not behind the HTTP client that cleans server replies: a lone surrogate in its tool-call id
    (set when the call is made, or written into the object after) once stopped the whole run as it wrote the episode."""
    from muarl.rollout.runner import run_many
    from muarl.rollout.store import read_episodes
    from muarl.types import ToolCall

    made = calls(("get_patient_details", '{"patient_id": "x"}'))
    made.tool_calls = [ToolCall(id="call\ud800", name="get_patient_details", arguments="{}")]
    edited = calls(("get_patient_details", '{"patient_id": "x"}'), content="hm")
    edited.tool_calls[0].id = "late\udfff"  # no validation runs on assignment
    edited.content = "text \ud800 edited"
    out = tmp_path / "episodes.jsonl"
    result = asyncio.run(run_many(clinic, [task], ScriptAgent([made, edited, say("done \udc00")]), LineUser(["hi", "ok", STOP]),
                                  out=out, concurrency=1))
    assert result.errored == 0
    [episode], _ = read_episodes(out)
    ids = [c.id for m in episode.messages for c in m.tool_calls or []]
    assert ids == ["call\ufffd", "late\ufffd"]
    assert [m.tool_call_id for m in episode.messages if m.role == "tool"] == ids
    assert "text \ufffd edited" in [m.content for m in episode.messages]
