"""The LLM user (``muarl.users.llm``) against a real OpenAI-compatible server on loopback.

Specification: the user model gets the task's instruction in its system prompt and the conversation with
roles flipped (the agent speaks as ``user``, the customer as ``assistant``; tool traffic never shown); its
stop tokens end the episode; a failing user server ends the episode as errored.
"""

from __future__ import annotations

import asyncio

import pytest

from muarl.domains import load_domain
from muarl.models.loopback_server import HTTPFailure, LoopbackServer
from muarl.models.openai_client import ChatClient
from muarl.rollout.episode import run_episode
from muarl.seeds import user_seed
from muarl.types import Message
from muarl.users.base import STOP, TRANSFER
from muarl.users.llm import OPEN_PROMPT, LLMUser, flip_roles
from scripted_parties import ScriptAgent, calls, say


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


def episode(clinic, policy, agent, task=None):
    task = task or clinic.tasks("test")[0]

    async def go():
        with LoopbackServer(policy) as server:
            user = LLMUser(ChatClient(server.base_url, "user-model", api_key="k", max_retries=1, backoff=0.001), temperature=0.0)
            try:
                return await run_episode(clinic, task, agent, user)
            finally:
                await user.aclose()

    return task, asyncio.run(go())


def test_prompt_roles_and_stop(clinic):
    requests = []
    lines = iter(["Hi, I need to move an appointment.", "It's ann@example.com.", f"Thanks, bye! {STOP}"])

    def policy(request):
        requests.append(request)
        return {"content": next(lines)}

    agent = ScriptAgent([say("Hello! Your email?"), calls(("think", '{"thought": "secret"}')), say("Found you. Anything else?")])
    task, ep = episode(clinic, policy, agent)
    assert ep.termination == "user_stop" and ep.user == "llm:user-model"
    assert ep.user_usage.requests == 3 and ep.user_usage.prompt_tokens > 0
    first, last = requests[0], requests[-1]
    assert first["model"] == "user-model" and first["temperature"] == 0.0 and "tools" not in first
    assert len({r["seed"] for r in requests}) == 3  # a seed per request, derived from the episode seed
    assert first["messages"][0]["role"] == "system" and task.user.instruction in first["messages"][0]["content"]
    assert STOP in first["messages"][0]["content"]
    assert first["messages"][1:] == [{"role": "user", "content": OPEN_PROMPT}]
    assert [(m["role"], m["content"]) for m in last["messages"][1:]] == [
        ("assistant", "Hi, I need to move an appointment."), ("user", "Hello! Your email?"),
        ("assistant", "It's ann@example.com."), ("user", "Found you. Anything else?"),
    ]


def test_a_tasks_own_rules_join_the_users_prompt(clinic):
    """A world whose users behave in a way of their own (ACEBench's: a round trip said up front) gives it as rules."""
    requests = []

    def policy(request):
        requests.append(request)
        return {"content": STOP}

    base = clinic.tasks("test")[0]
    task = base.model_copy(update={"user": base.user.model_copy(update={"rules": ["Say you want a round trip first."]})})
    episode(clinic, policy, ScriptAgent([say("Hello!")]), task)
    system = requests[0]["messages"][0]["content"]
    assert system.endswith("- Say you want a round trip first.") and task.user.instruction in system


def test_transfer_token(clinic):
    lines = iter(["Hi.", f"{TRANSFER}"])
    _, ep = episode(clinic, lambda r: {"content": next(lines)}, ScriptAgent([say("Let me transfer you.")]))
    assert ep.termination == "user_transfer"


def test_a_failing_user_server_errors_the_episode(clinic):
    def policy(request):
        raise HTTPFailure(503, "user model overloaded")

    _, ep = episode(clinic, policy, ScriptAgent([]))
    assert ep.termination == "error" and ep.reward is None
    assert ep.error.startswith("UserError: user simulator failed") and "overloaded" in ep.error


def test_flip_roles_drops_tool_traffic():
    history = [Message(role="user", content="hi"), Message(role="assistant", content=None), Message(role="assistant", content="yo")]
    assert flip_roles(history) == [Message(role="assistant", content="hi"), Message(role="user", content="yo")]


def _one_reply(policy, strategy):
    task = load_domain("clinic").tasks("test")[0]
    seen = []

    def recording(request):
        seen.append(request["messages"])
        return policy(request, len(seen))

    async def go():
        with LoopbackServer(recording) as server:
            user = LLMUser(ChatClient(server.base_url, "user-model", api_key="k", max_retries=0), strategy=strategy)
            try:
                return await user.new_session(task, 0).reply([Message(role="assistant", content="Hi! How can I help you today?")])
            finally:
                await user.aclose()

    return asyncio.run(go()), seen


def test_react_sends_only_the_response_after_the_thought():
    turn, seen = _one_reply(lambda req, n: {"content": "Thought: ask about the move.\nUser Response: I need to move an appointment."}, "react")
    assert turn.text == "I need to move an appointment."
    assert "User Response:" in seen[0][0]["content"]  # the system prompt asks for the two-part answer


def test_verify_regenerates_until_the_check_says_yes():
    def policy(req, n):
        if "proposed next line" in req["messages"][-1]["content"]:
            return {"content": "no" if n == 2 else "yes"}
        return {"content": f"draft {n}"}

    turn, seen = _one_reply(policy, "verify")
    assert turn.text == "draft 3" and len(seen) == 4 and turn.usage.requests == 4


def test_reflection_rewrites_a_line_that_breaks_character_and_keeps_a_good_one():
    def rewrite(req, n):
        return {"content": "As an AI model I cannot..."} if n == 1 else {"content": f"Hi, I'd like to reschedule. {STOP}"}

    turn, _ = _one_reply(rewrite, "reflection")
    assert turn.text.startswith("Hi, I'd like to reschedule") and turn.done == "user_stop"
    kept, _ = _one_reply(lambda req, n: {"content": "Hello there."} if n == 1 else {"content": "OK"}, "reflection")
    assert kept.text == "Hello there."


def test_an_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="unknown user strategy"):
        LLMUser(ChatClient("http://127.0.0.1:9", "m"), strategy="psychic")


def test_every_request_carries_a_seed_from_the_episode_so_a_rerun_replays_the_customer(clinic):
    task = clinic.tasks("test")[0]
    seen: list[int] = []

    def policy(request):
        seen.append(request["seed"])
        return {"content": f"Bye {STOP}" if len(seen) % 2 == 0 else "Hello."}

    async def go(seed):
        with LoopbackServer(policy) as server:
            user = LLMUser(ChatClient(server.base_url, "user-model", api_key="k", max_retries=0))
            try:
                return await run_episode(clinic, task, ScriptAgent([say("Hi!")]), user, seed=seed)
            finally:
                await user.aclose()

    asyncio.run(go(7))
    asyncio.run(go(7))
    asyncio.run(go(8))
    first, other = user_seed(7), user_seed(8)  # the user's own seed, never the agent's (muarl.seeds)
    assert seen[:2] == seen[2:4] == [first, first + 1] and seen[4:] == [other, other + 1]
