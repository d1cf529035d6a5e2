"""MCP both ways: a muarl domain served by a real ``muarl serve-mcp`` subprocess (stdio and streamable
HTTP on loopback) and consumed back by the episode loop gives the same observations and reward as the
in-process tools."""

from __future__ import annotations

import asyncio
import shlex
import sys

import pytest

pytest.importorskip("mcp")

from muarl.domains.base import ArgumentError, ToolError  # noqa: E402
from muarl.integrations.mcp_client import MCPTarget, MCPToolBackend, backend_factory_from_spec, list_tool_specs  # noqa: E402
from muarl.rollout.backends import BackendError, LocalToolBackend  # noqa: E402
from muarl.rollout.episode import run_episode  # noqa: E402
from servers import free_port, http_server, stdio_spec  # noqa: E402
from shop_world import ListUser, PlanAgent, call, load, say  # noqa: E402


@pytest.fixture(scope="module")
def http_url():
    with http_server() as (_, url):
        yield url


PLAN = [
    call("find_user_id_by_email", {"email": "ann@example.com"}),
    call("get_order", {"order_id": "#W1"}),
    call("cancel_order", {"order_id": "#W1", "reason": 5}),  # wrong type -> bad_arguments
    call("cancel_order", {"order_id": "#W9", "reason": "x"}),  # tool refusal
    call("get_order", "{not json"),  # malformed, never reaches the server
    say("Order #W1 (lamp) is pending. Shall I cancel it?"),
    call("cancel_order", {"order_id": "#W1", "reason": "no longer needed"}),
    say("Done: #W1 is cancelled."),
]
USER = ["Hi, I want to cancel order #W1, my email is ann@example.com.", "Yes, please do.", "Thanks ###STOP###"]


def run(factory):
    domain = load()
    task = domain.task("cancel_w1")
    return asyncio.run(run_episode(domain, task, PlanAgent(PLAN), ListUser(USER), backend_factory=factory))


def test_remote_episodes_match_in_process(http_url):
    local = run(LocalToolBackend)
    assert local.reward.reward == 1.0 and local.malformed_calls == 2
    for spec in (stdio_spec(), "mcp:" + http_url):
        remote = run(backend_factory_from_spec(spec))
        assert remote.termination == local.termination == "user_stop", remote.error
        assert [(e.output, e.error_kind) for e in remote.tool_executions] == [(e.output, e.error_kind) for e in local.tool_executions]
        assert remote.reward.final_hash == local.reward.final_hash
        assert remote.reward.reward == 1.0 and remote.malformed_calls == 2


def test_a_wrong_plan_scores_zero_remotely_too(http_url):
    domain = load()
    task = domain.task("cancel_w1")
    plan = [call("cancel_order", {"order_id": "#W1", "reason": "wrong reason"}), say("Done.")]
    results = [
        asyncio.run(run_episode(domain, task, PlanAgent(plan), ListUser(USER), backend_factory=f))
        for f in (LocalToolBackend, backend_factory_from_spec("mcp:" + http_url))
    ]
    assert [r.reward.reward for r in results] == [0.0, 0.0]
    assert results[0].reward.final_hash == results[1].reward.final_hash != results[0].reward.gold_hash


def test_each_session_gets_a_fresh_state(http_url):
    async def scenario():
        first, second = MCPToolBackend(MCPTarget.parse("mcp:" + http_url)), MCPToolBackend(MCPTarget.parse("mcp:" + http_url))
        try:
            fresh = await second.state_hash()
            await first.call("cancel_order", {"order_id": "#W1", "reason": "r"})
            assert await first.state_hash() != fresh
            assert await second.state_hash() == fresh
            assert '"status": "pending"' in await second.call("get_order", {"order_id": "#W1"})
            with pytest.raises(ToolError, match="order is cancelled"):
                await first.call("cancel_order", {"order_id": "#W1", "reason": "r"})
            with pytest.raises(ArgumentError, match="missing required argument"):
                await first.call("cancel_order", {"order_id": "#W1"})
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(scenario())


def test_tools_are_listed_with_schemas_and_kinds(http_url):
    specs, instructions = asyncio.run(list_tool_specs(MCPTarget.parse("mcp:" + http_url)))
    local = {s.name: s for s in load().tools.specs()}
    assert {s.name: s for s in specs} == local
    assert "Identify the user" in instructions


def test_unreachable_server_errors_the_episode_instead_of_blaming_the_agent():
    episode = run(backend_factory_from_spec(f"mcp:http://127.0.0.1:{free_port()}/mcp", max_retries=0))
    assert episode.termination == "error" and episode.reward is None
    assert "cannot open an MCP session" in episode.error


def test_bad_targets_are_refused_with_the_forms_to_use():
    with pytest.raises(ValueError, match="mcp:COMMAND"):
        backend_factory_from_spec("mcp:")
    with pytest.raises(ValueError, match="mcp:COMMAND"):
        MCPTarget.parse("http://x")
    assert MCPTarget.parse("mcp:muarl serve-mcp --domain clinic").command == ("muarl", "serve-mcp", "--domain", "clinic")
    assert backend_factory_from_spec("local") is LocalToolBackend
    assert isinstance(BackendError("x"), RuntimeError)


def test_clinic_oracle_over_stdio_matches_in_process():
    from muarl.domains import load_domain
    from muarl.models.oracle import OracleAgent
    from muarl.rollout.runner import run_many
    from muarl.users.scripted import ScriptedUser

    domain = load_domain("clinic")
    tasks = domain.tasks("test")[:3]
    serve = "mcp:" + shlex.join([sys.executable, "-c", "from muarl.cli import main; main()", "serve-mcp", "--domain", "clinic"])

    def verdicts(factory):
        result = asyncio.run(run_many(domain, tasks, OracleAgent(), ScriptedUser(), backend_factory=factory, progress=False))
        return sorted((e.task_id, e.termination, e.reward.reward, e.reward.final_hash, [x.output for x in e.tool_executions]) for e in result.episodes)

    local = verdicts(LocalToolBackend)
    assert [v[2] for v in local] == [1.0, 1.0, 1.0]
    assert verdicts(backend_factory_from_spec(serve)) == local


def test_any_mcp_server_as_a_domain_without_code(http_url):
    from muarl.integrations.mcp_client import remote_domain
    from muarl.synth.generate import unscored_reward
    from muarl.types import Task, UserScenario

    specs, policy = asyncio.run(list_tool_specs(MCPTarget.parse("mcp:" + http_url)))
    task = Task(id="s1", domain="remote", split="train", user=UserScenario(instruction="cancel #W1"))
    domain = remote_domain("remote", specs, policy, [task])
    assert domain.tools["cancel_order"].kind == "write" and domain.tasks("train") == [task]
    episode = asyncio.run(run_episode(domain, task, PlanAgent(PLAN), ListUser(USER), reward_fn=unscored_reward,
                                      backend_factory=backend_factory_from_spec("mcp:" + http_url)))
    assert episode.reward.details == {"unscored": True} and episode.malformed_calls == 2
    assert '"status": "cancelled"' in episode.tool_executions[-1].output
