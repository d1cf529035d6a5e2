"""The reference policies (``muarl.models.oracle``) on the clinic with the scripted user.

Specification: the oracle solves every embedded task, train and test (pass^1 = 1.0), conversing as the policy
demands (identify first, confirm before each write, one call per turn); the do-nothing agent solves none; and
running them all never changes the shared seed database.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from muarl.domains import load_domain
from muarl.evals.passk import summarise
from muarl.models.oracle import ASK_IDENTITY, DoNothingAgent, OracleAgent, _Plan
from muarl.rollout.runner import run_many
from muarl.types import Action, Task, ToolSpec, UserRequest, UserScenario
from muarl.users.scripted import ScriptedUser


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


def run_all(clinic, agent, split):
    return asyncio.run(run_many(clinic, clinic.tasks(split), agent, ScriptedUser(), concurrency=16, progress=False)).episodes


@pytest.mark.parametrize("split", ["test", "train"])
def test_oracle_solves_every_task(clinic, split):
    episodes = run_all(clinic, OracleAgent(), split)
    assert len(episodes) == len(clinic.tasks(split))
    failed = [(e.task_id, e.termination, e.reward.details) for e in episodes if e.reward is None or e.reward.reward != 1.0]
    assert not failed
    summary = summarise(episodes, bootstrap=0)
    assert summary.pass_hat_k == {1: 1.0} and summary.n_errored == 0
    assert all(e.malformed_calls == 0 for e in episodes)
    assert {e.termination for e in episodes} <= {"user_stop", "terminal_tool"}
    assert clinic.base.recompute_digest() == clinic.base.digest  # no episode wrote through to the seed data


@pytest.mark.parametrize("split", ["test", "train"])
def test_do_nothing_agent_solves_nothing(clinic, split):
    episodes = run_all(clinic, DoNothingAgent(), split)
    assert summarise(episodes, bootstrap=0).pass_hat_k[1] < 0.05
    assert all(e.reward.reward == 0.0 and not e.tool_executions for e in episodes)


def test_oracle_identifies_first_and_confirms_every_write(clinic):
    task = next(t for t in clinic.tasks("test") if sum(clinic.tools[a.name].kind == "write" for a in t.actions) >= 2)
    steps = [step() for step in _Plan(task, clinic.tools.specs()).steps]
    assert steps[0].content == ASK_IDENTITY
    assert steps[1].tool_calls[0].name == task.actions[0].name
    for i, step in enumerate(steps):
        if step.tool_calls:
            assert len(step.tool_calls) == 1
            if clinic.tools[step.tool_calls[0].name].kind == "write":
                assert "Shall I proceed?" in steps[i - 1].content
    called = [(s.tool_calls[0].name, json.loads(s.tool_calls[0].arguments)) for s in steps if s.tool_calls]
    gold = iter([(a.name, a.kwargs) for a in task.actions])
    expected = next(gold)
    for call in called:  # the gold actions, in order; anything in between only reads
        if call == expected:
            expected = next(gold, None)
        else:
            assert clinic.tools[call[0]].kind == "read", call
    assert expected is None, f"gold action {expected} never called"


def test_oracle_without_structured_requests_runs_gold_actions_and_tells_outputs():
    task = Task(id="g", domain="x", split="test", user=UserScenario(instruction="do it"), outputs=["42", "blue"],
                actions=[Action(name="lookup", kwargs={"q": 1}), Action(name="change", kwargs={"v": 2})])
    tools = [ToolSpec(name="lookup", description="", parameters={}, kind="read"),
             ToolSpec(name="change", description="", parameters={}, kind="write")]
    steps = [step() for step in _Plan(task, tools).steps]
    assert [bool(s.tool_calls) for s in steps] == [True, False, True, False]
    assert "change" in steps[1].content and "42; blue" in steps[3].content


def test_oracle_does_not_ask_for_an_identity_every_opening_wording_gives():
    said = "I'm Ann (ann@x.org). Change my phone to 555-111-2222."
    task = Task(id="t", domain="x", split="test", user=UserScenario(instruction="i", requests=[
        UserRequest(text=said, variants=["Ann here, ann@x.org: my phone is now 555-111-2222."], facts={"phone": "555-111-2222"})]),
        actions=[Action(name="find", kwargs={"email": "ann@x.org"}), Action(name="change", kwargs={"phone": "555-111-2222"}, request=0)])
    tools = [ToolSpec(name="find", description="", parameters={}, kind="read"), ToolSpec(name="change", description="", parameters={}, kind="write")]
    steps = [step() for step in _Plan(task, tools).steps]
    assert steps[0].tool_calls[0].name == "find" and len(steps) == 4  # find, confirm, change, report
    one_without = task.model_copy(deep=True)
    one_without.user.requests[0].variants.append("Change my phone to 555-111-2222.")
    assert _Plan(one_without, tools).steps[0]().content == ASK_IDENTITY
