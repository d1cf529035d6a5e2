"""``muarl serve`` (``muarl.models.openai_server``) over real HTTP on loopback, with our own ChatClient as the
client: tool calls round-trip, concurrent requests decode together, the returned token ids are the engine's,
and bad requests get a 400 with a JSON error."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
from booking_world import toy_domain
from click.testing import CliRunner
from scripted_parties import ScriptAgent, say
from test_local_engine import ScriptedLM

from muarl.cli import main
from muarl.models.local_chat import LocalChatClient
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.models.local_spec import local_policy
from muarl.models.openai_client import ChatClient
from muarl.models.openai_server import LocalModelServer
from muarl.models.tiny import tiny_random_lm
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Message, ToolSpec
from muarl.users.factory import make_user

LOOKUP = ToolSpec(name="lookup", description="Look up a key.", parameters={"type": "object", "properties": {"key": {"type": "string"}}})
MUARL = [sys.executable, "-c", "from muarl.cli import main; main()"]
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>'


def tiny_client(**sampling) -> LocalChatClient:
    return LocalChatClient(local_policy("tiny-random", precision="fp32", **sampling))


def chat(server: LocalModelServer) -> ChatClient:
    return ChatClient(server.base_url, "tiny", api_key="", max_retries=0)


def post(server: LocalModelServer, body) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", content=body if isinstance(body, bytes) else json.dumps(body), timeout=60)


def test_tool_calls_round_trip_through_our_client():
    model, tok = tiny_random_lm(seed=1)
    # the model is pushed to write a tool call (one scripted token per forward: no shared-prefix forward)
    script = tok(CALL, add_special_tokens=False)["input_ids"] + [2]
    policy = LocalPolicy(ScriptedLM(model, list(script)), tok, "chatml-hermes", SamplingConfig(max_new_tokens=64), share_prefix=False)
    convo = [Message(role="system", content="Be brief."), Message(role="user", content="Find a.")]

    async def go():
        with LocalModelServer(LocalChatClient(policy)) as server:
            client = chat(server)
            try:
                first = await client.complete(convo, [LOOKUP], temperature=1.0)
                follow = [*convo, first.message, Message(role="tool", content='{"value": 1}', tool_call_id=first.message.tool_calls[0].id)]
                fed = len(policy.model.fed)
                policy.model.script.extend(tok("It is 1.", add_special_tokens=False)["input_ids"] + [2])
                second = await client.complete(follow, [LOOKUP])
                return first, second, follow, fed
            finally:
                await client.aclose()

    first, second, follow, fed = asyncio.run(go())
    (call,) = first.message.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("lookup", {"key": "a"}) and not first.message.content
    assert first.usage.completion_tokens == len(script)
    assert second.message.content == "It is 1."
    # the follow-up request, tool call and tool result included, was rendered as the engine renders it
    fmt = policy.chat_format
    expected = policy.encode(fmt.system_text("Be brief.", [LOOKUP]) + fmt.render_delta(follow[1:]) + fmt.generation_prompt)
    assert policy.model.fed[fed:fed + len(expected)] == expected


def test_returned_token_ids_are_what_the_engine_sampled():
    client = tiny_client(max_new_tokens=12)
    convo = [{"role": "system", "content": "Hi."}, {"role": "user", "content": "Say something."}]
    with LocalModelServer(client) as server:
        response = post(server, {"model": "x", "messages": convo, "temperature": 1.0, "seed": 7, "return_token_ids": True})
        plain = post(server, {"messages": convo, "temperature": 1.0, "seed": 7})
    assert response.status_code == 200, response.text
    data = response.json()
    direct = asyncio.run(tiny_client(max_new_tokens=12).generate([Message.from_openai(m) for m in convo], temperature=1.0, seed=7))
    assert data["prompt_token_ids"] == direct.prompt_ids and data["choices"][0]["token_ids"] == direct.completion_ids
    assert data["choices"][0]["message"]["content"] == direct.message.content
    assert data["usage"] == {"prompt_tokens": len(direct.prompt_ids), "completion_tokens": len(direct.completion_ids),
                             "total_tokens": len(direct.prompt_ids) + len(direct.completion_ids)}
    assert data["choices"][0]["finish_reason"] == direct.finish_reason and data["model"] == "local:tiny-random"
    assert "prompt_token_ids" not in plain.json() and plain.json()["choices"][0]["message"] == data["choices"][0]["message"]


def test_concurrent_requests_are_decoded_together():
    client = tiny_client(max_new_tokens=6)

    async def go(server):
        chat_client = ChatClient(server.base_url, "tiny", api_key="", max_retries=0, concurrency=6)
        try:
            return await asyncio.gather(*(chat_client.complete([Message(role="user", content=f"Hello {i}")], temperature=1.0, seed=i)
                                          for i in range(6)))
        finally:
            await chat_client.aclose()

    with LocalModelServer(client) as server:
        turns = asyncio.run(go(server))
    assert len(turns) == 6 and all(t.usage.completion_tokens >= 1 for t in turns)
    assert client.policy_for(temperature=1.0).generator.stats.max_rows > 1


def test_an_llm_user_served_over_http_plays_an_episode():
    domain = toy_domain()

    async def go(server):
        user = make_user("llm:tiny", base_url=server.base_url, max_retries=0, temperature=1.0)
        try:
            return await run_episode(domain, domain.tasks("train")[0], ScriptAgent([say("Hello! Your name?")]), user,
                                     config=LoopConfig(max_turns=2))
        finally:
            await user.aclose()

    with LocalModelServer(tiny_client(max_new_tokens=5)) as server:
        ep = asyncio.run(go(server))
    assert ep.termination != "error" and ep.user == "llm:tiny" and ep.user_usage.requests == 3
    assert 3 <= ep.user_usage.completion_tokens <= 15


def test_models_route_and_bad_requests_get_json_400s():
    with LocalModelServer(tiny_client(max_context=200)) as server:
        models = httpx.get(f"{server.base_url}/models").json()
        assert [m["id"] for m in models["data"]] == ["local:tiny-random"]
        user = [{"role": "user", "content": "hi"}]
        for body, message in [
            (b"{not json", "not JSON"),
            ([1, 2], "JSON object"),
            ({"messages": []}, "non-empty list"),
            ({"messages": [{"content": "no role"}]}, "messages"),
            ({"messages": [{"role": "developer", "content": "x"}]}, "messages"),
            ({"messages": user, "tools": [{"type": "function"}]}, "tools"),
            ({"messages": user, "temperature": "hot"}, "temperature must be a number"),
            ({"messages": user, "temperature": -1}, "temperature"),
            ({"messages": user, "max_tokens": 0}, "max_tokens"),
            ({"messages": user, "stream": True}, "streaming"),
            ({"messages": user, "n": 2}, "n=1"),
            ({"messages": [{"role": "user", "content": "long " * 300}]}, "maximum context length"),
        ]:
            response = post(server, body)
            assert response.status_code == 400, (body, response.text)
            assert message in response.json()["error"]["message"], (body, response.text)
        missing = httpx.get(f"{server.base_url}/nowhere")
        assert missing.status_code == 404 and "error" in missing.json()


def serve(*args: str) -> tuple[subprocess.Popen, str]:
    """``muarl serve ARGS --port 0`` in a subprocess, and its base URL once it answers."""
    proc = subprocess.Popen([*MUARL, "serve", *args, "--port", "0"], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    assert line.startswith("serving local:") and " at http://127.0.0.1:" in line, line
    base_url = line.split(" at ")[1].split()[0]
    deadline = time.time() + 30
    while True:
        try:
            httpx.get(f"{base_url}/models")
            return proc, base_url
        except httpx.ConnectError:
            assert time.time() < deadline
            time.sleep(0.2)


def test_muarl_serve_command_serves_on_loopback(tmp_path):
    proc, base_url = serve("tiny-random")
    try:
        reply = httpx.post(f"{base_url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 3
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_an_agent_served_by_muarl_serve_that_outgrows_its_context_ends_context_full(tmp_path):
    """Server and client agree on one wording (OpenAI's code): the episode is the policy's failure, scored, not errored."""
    proc, base_url = serve("tiny-random", "--max-context", "80")
    try:
        result = CliRunner().invoke(main, ["rollout", "--agent", "openai:m", "--agent-base-url", base_url, "--limit", "1",
                                           "--max-retries", "0", "--out", str(tmp_path / "run"), "--quiet"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert result.exit_code == 0, result.output
    [episode] = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert (episode["termination"], episode["error"], episode["reward"]["reward"]) == ("context_full", None, 0.0)


def test_serve_rejects_a_bad_path():
    proc = subprocess.run([*MUARL, "serve", "/no/such/model"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no such directory" in proc.stderr

