"""ChatClient and OpenAIAgent over real HTTP (a LoopbackServer on 127.0.0.1).

Specification: the client speaks the OpenAI chat-completions format (tools offered, tool calls read back with
their raw argument text), retries what is worth retrying (5xx, 429, dropped connections) with backoff and
never retries other 4xx; a server that keeps failing becomes an errored episode (no reward, never a 0);
driven by the oracle's plan over HTTP, episodes score exactly as the in-process oracle does.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.domains import load_domain
from muarl.models.base import ContextFull, ModelError
from muarl.models.loopback_server import HTTPFailure, LoopbackServer
from muarl.models.openai_client import ChatClient, OpenAIAgent
from muarl.models.oracle import OracleAgent
from muarl.rollout.episode import run_episode
from muarl.rollout.runner import run_many
from muarl.rollout.store import read_episodes
from muarl.types import Message, ToolCall
from muarl.users.scripted import ScriptedUser
from oracle_http import oracle_policy
from servers import json_server


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


def _client(server: LoopbackServer, **kw) -> ChatClient:
    return ChatClient(server.base_url, "test-model", api_key="k", backoff=0.001, **kw)


async def say_hi(server: LoopbackServer, **kw) -> None:
    client = _client(server, **kw)
    try:
        await client.complete([Message(role="user", content="hi")])
    finally:
        await client.aclose()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_request_carries_messages_tools_and_sampling_and_reply_keeps_raw_arguments(clinic):
    seen = []

    def policy(request):
        seen.append(request)
        return {"content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1+"'}},
            {"id": "c2", "type": "function", "function": {"name": "think", "arguments": {"thought": "dict, not text"}}},
        ]}

    async def go():
        with LoopbackServer(policy) as server:
            client = _client(server)
            try:
                turn = await client.complete([Message(role="system", content="S"), Message(role="user", content="hi")],
                                             clinic.tools.specs(), temperature=0.3)
            finally:
                await client.aclose()
            return turn

    turn = asyncio.run(go())
    body = seen[0]
    assert body["model"] == "test-model" and body["temperature"] == 0.3
    assert body["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    assert [t["function"]["name"] for t in body["tools"]] == clinic.tools.names()
    assert turn.message.tool_calls == [
        ToolCall(id="c1", name="calculate", arguments='{"expression": "1+"'),  # kept verbatim, even broken
        ToolCall(id="c2", name="think", arguments='{"thought": "dict, not text"}'),  # objects become JSON text
    ]
    assert turn.usage.requests == 1 and turn.usage.prompt_tokens > 0 and turn.usage.completion_tokens > 0


def test_oracle_plan_over_http_scores_like_the_in_process_oracle(clinic):
    tasks = clinic.tasks("test")[:6]
    policy = oracle_policy(tasks, clinic.tools.specs())

    async def go():
        with LoopbackServer(policy) as server:
            agent = OpenAIAgent(_client(server))
            try:
                remote = [await run_episode(clinic, t, agent, ScriptedUser(), seed=3) for t in tasks]
            finally:
                await agent.aclose()
        local = [await run_episode(clinic, t, OracleAgent(), ScriptedUser(), seed=3) for t in tasks]
        return remote, local

    remote, local = asyncio.run(go())
    assert [e.reward.reward for e in remote] == [1.0] * len(tasks)
    assert [e.termination for e in remote] == [e.termination for e in local]
    assert [[m.content for m in e.messages] for e in remote] == [[m.content for m in e.messages] for e in local]
    assert all(e.usage.requests == e.agent_turns > 0 for e in remote)


@pytest.mark.parametrize("status", [500, 429, 503])
def test_transient_failures_are_retried_until_success(status):
    calls = []
    lock = threading.Lock()

    def policy(request):
        with lock:
            calls.append(1)
            if len(calls) <= 2:
                raise HTTPFailure(status)
        return {"content": "hello"}

    async def go():
        with LoopbackServer(policy) as server:
            client = _client(server, max_retries=3)
            try:
                return await client.complete([Message(role="user", content="hi")])
            finally:
                await client.aclose()

    assert asyncio.run(go()).message.content == "hello"
    assert len(calls) == 3


def test_client_errors_are_not_retried():
    def policy(request):
        raise HTTPFailure(400, "bad request: unknown field")

    with LoopbackServer(policy) as server:
        with pytest.raises(ModelError, match="400.*unknown field"):
            asyncio.run(say_hi(server, max_retries=5))
        assert server.requests == 1


@pytest.mark.parametrize("says", [
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",  # vLLM
    "The input (5000 tokens) is longer than the model's context length (4096 tokens).",  # SGLang
    '{"code": "context_length_exceeded"}',  # OpenAI
])
def test_a_prompt_over_the_context_is_the_policys_failure_not_the_servers(clinic, tmp_path, says):
    """HTTP 400 'context length' raises ContextFull (not retried); the episode ends context_full and is scored."""
    def policy(request):
        raise HTTPFailure(400, says)

    with LoopbackServer(policy) as server:
        with pytest.raises(ContextFull):
            asyncio.run(say_hi(server, max_retries=5))
        assert server.requests == 1

        async def episode_over_http():
            agent = OpenAIAgent(_client(server, max_retries=0))
            try:
                return await run_episode(clinic, clinic.tasks("test")[0], agent, ScriptedUser())
            finally:
                await agent.aclose()

        episode = asyncio.run(episode_over_http())
    assert episode.termination == "context_full" and episode.reward is not None and not episode.reward.success


def test_retries_give_up_with_model_error_after_max_retries():
    def policy(request):
        raise HTTPFailure(502)

    with LoopbackServer(policy) as server:
        with pytest.raises(ModelError, match=r"3 attempt\(s\).*502"):
            asyncio.run(say_hi(server, max_retries=2))
        assert server.requests == 3


def complete_once(base_url: str, max_retries: int = 2) -> None:
    async def go():
        client = ChatClient(base_url, "test-model", api_key="k", backoff=0.001, max_retries=max_retries)
        try:
            await client.complete([Message(role="user", content="hi")])
        finally:
            await client.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("tool_calls", [["get_user"], "get_user", [{"id": "c1", "function": "get_user"}]])
def test_tool_calls_that_are_not_call_objects_are_retried_then_a_model_error(tool_calls):
    with LoopbackServer(lambda request: {"content": None, "tool_calls": tool_calls}) as server:
        with pytest.raises(ModelError, match=r"3 attempt\(s\): response is not a chat completion \(tool_calls"):
            complete_once(server.base_url)
        assert server.requests == 3


def test_a_body_without_choices_is_retried_then_a_model_error():
    with json_server({"id": "x", "choices": []}) as url:
        with pytest.raises(ModelError, match=r"2 attempt\(s\): response is not a chat completion"):
            complete_once(url, max_retries=1)


def test_string_tool_calls_give_an_errored_episode(clinic):
    async def go(url):
        agent = OpenAIAgent(ChatClient(url, "m", api_key="k", max_retries=1, backoff=0.001))
        try:
            return await run_episode(clinic, clinic.tasks("test")[0], agent, ScriptedUser())
        finally:
            await agent.aclose()

    with LoopbackServer(lambda request: {"content": None, "tool_calls": "find_patient"}) as server:
        episode = asyncio.run(go(server.base_url))
    assert episode.termination == "error" and episode.reward is None
    assert episode.error.startswith("ModelError:") and "tool_calls must be a list" in episode.error


@pytest.mark.parametrize("where", ["failing server", "closed port"])
def test_a_server_that_keeps_failing_gives_errored_episodes_never_zero_rewards(clinic, where, tmp_path):
    tasks = clinic.tasks("test")[:3]

    def policy(request):
        raise HTTPFailure(500, "model crashed")

    async def go(url):
        agent = OpenAIAgent(ChatClient(url, "m", api_key="k", max_retries=1, backoff=0.001))
        try:
            return await run_many(clinic, tasks, agent, ScriptedUser(), trials=2, out=tmp_path / "episodes.jsonl", progress=False)
        finally:
            await agent.aclose()

    if where == "failing server":
        with LoopbackServer(policy) as server:
            result = asyncio.run(go(server.base_url))
    else:
        result = asyncio.run(go(_closed_port_url()))
    assert len(result.episodes) == 6 and result.errored == 6
    for ep in result.episodes:
        assert ep.termination == "error" and ep.reward is None
        assert "failed after 2 attempt(s)" in ep.error
        assert ("500" in ep.error) if where == "failing server" else ("Connect" in ep.error)

    out = CliRunner().invoke(main, ["eval", str(tmp_path), "--json", "--bootstrap", "0"])
    assert out.exit_code == 3 and "was scored: all 6 errored" in out.stderr  # nothing to report is not a result
    summary = json.loads(out.stdout, parse_constant=lambda name: pytest.fail(f"eval --json printed {name}"))
    assert summary["n_errored"] == 6 and summary["n_tasks"] == 0


def test_lone_surrogates_anywhere_in_a_reply_are_replaced_so_every_episode_is_written(clinic, tmp_path):
    """A server's JSON can carry lone surrogates as \\ud800 escapes: in a tool-call id they once stopped the whole run
    (the episode could not be written). Every string of the reply is now made writable, the rest of it kept."""
    tasks = clinic.tasks("test")[:4]

    def policy(request):
        if sum(m["role"] == "assistant" for m in request["messages"]):
            return {"content": "Bye \udfff now"}
        return {"content": "x\ud800y", "tool_calls": [
            {"id": "call_\ud800", "type": "function", "function": {"name": "get_patient_details\udc00", "arguments": '{"patient_id": "P\ud800"}'}},
        ]}

    async def go(server):
        agent = OpenAIAgent(_client(server))
        try:
            return await run_many(clinic, tasks, agent, ScriptedUser(), out=tmp_path / "episodes.jsonl", progress=False)
        finally:
            await agent.aclose()

    with LoopbackServer(policy) as server:
        result = asyncio.run(go(server))
    episodes, bad = read_episodes(tmp_path / "episodes.jsonl")
    assert result.ran == len(episodes) == len(tasks) and bad == 0 and result.errored == 0
    for ep in episodes:
        call = ep.messages[2].tool_calls[0]
        assert (call.id, call.name, call.arguments) == ("call_\ufffd", "get_patient_details\ufffd", '{"patient_id": "P\ufffd"}')
        assert ep.messages[2].content == "x\ufffdy" and ep.messages[3].tool_call_id == "call_\ufffd"
        assert ep.tool_executions[0].call_id == "call_\ufffd" and ep.tool_executions[0].error_kind == "unknown_tool"
        assert ep.messages[4].content == "Bye \ufffd now"
