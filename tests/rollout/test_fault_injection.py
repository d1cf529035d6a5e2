"""Fault injection: ``run_many`` against a real OpenAI-compatible server on loopback that misbehaves at random.

Specification: whatever the agent's server does (HTTP errors, hangs past the client's timeout, bodies that are
not JSON or are cut short, lone surrogates in ids and text, malformed tool calls, replies of the wrong shape),
the run completes and every one of its episodes is on disk exactly once and readable: either scored (a reward,
no error) or errored (reward None, termination "error", the cause recorded), never lost and never scored 0 for
a server's failure. Retries turn passing faults into scored episodes.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter

import pytest

from muarl.domains import load_domain
from muarl.models.loopback_server import HTTPFailure, LoopbackServer, RawReply
from muarl.models.openai_client import ChatClient, OpenAIAgent
from muarl.rollout.runner import run_many
from muarl.rollout.store import read_episodes
from muarl.users.scripted import ScriptedUser
from oracle_http import oracle_policy

N_TASKS, TRIALS = 50, 4  # 200 episodes
TIMEOUT = 1.0  # the client's per-request timeout; a hang outlasts it
FAULT_RATE = 0.08  # of requests

FAULTS = {
    "http 500": lambda reply: HTTPFailure(500, "injected crash"),
    "http 429": lambda reply: HTTPFailure(429, "injected rate limit"),
    "http 400": lambda reply: HTTPFailure(400, "injected bad request"),  # not retried: the episode errors
    "truncated body": lambda reply: RawReply(b'{"id": "c", "object": "chat.completion", "choices": [{"index": 0, "mess'),
    "not json": lambda reply: RawReply(b"<html><body>502 Bad Gateway</body></html>"),
    "wrong shape": lambda reply: {"content": ["not", "text"], "tool_calls": "call everything"},
    "malformed tool calls": lambda reply: {"content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_patient_details", "arguments": '{"patient_id": '}},
        {"type": "function", "function": {"name": "no_such_tool", "arguments": {"x": [1, {"y": None}]}}},
        {"id": "c3", "function": {"name": "think", "arguments": "[1, 2]"}},
    ]},
    "lone surrogates": lambda reply: {
        **reply, "content": (reply.get("content") or "") + " \ud800",
        **({"tool_calls": [{**c, "id": c["id"] + "\udc00"} for c in reply["tool_calls"]]} if reply.get("tool_calls") else {}),
    },
    "hang": None,  # answers correctly, but only after the client has given up
}


def faulty(policy, seed: int):
    """``policy`` behind a server that injects one of FAULTS into a random FAULT_RATE of the requests."""
    rng, lock, injected = random.Random(seed), threading.Lock(), Counter()

    def serve(request):
        with lock:
            fault = rng.choice(sorted(FAULTS)) if rng.random() < FAULT_RATE else None
            injected[fault] += 1
        reply = policy(request)
        if fault == "hang":
            time.sleep(2 * TIMEOUT)
        elif fault is not None:
            outcome = FAULTS[fault](reply)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return reply

    return serve, injected


@pytest.mark.slow
def test_every_episode_of_a_run_against_a_faulty_server_is_scored_or_errored_and_none_is_lost(tmp_path):
    clinic = load_domain("clinic")
    tasks = clinic.tasks("test")[:N_TASKS]
    serve, injected = faulty(oracle_policy(tasks, clinic.tools.specs()), seed=11)
    path = tmp_path / "episodes.jsonl"

    async def go(url):
        agent = OpenAIAgent(ChatClient(url, "flaky", api_key="k", timeout=TIMEOUT, max_retries=2, backoff=0.01, concurrency=16))
        try:
            return await run_many(clinic, tasks, agent, ScriptedUser(), trials=TRIALS, concurrency=16, out=path,
                                  progress=False, keep_episodes=False)
        finally:
            await agent.aclose()

    started = time.monotonic()
    with LoopbackServer(serve) as server:
        result = asyncio.run(go(server.base_url))
    seconds = time.monotonic() - started

    episodes, bad = read_episodes(path)
    keys = [ep.key for ep in episodes]
    assert bad == 0 and result.ran == len(episodes) == N_TASKS * TRIALS
    assert set(keys) == {(t.id, k) for t in tasks for k in range(TRIALS)} and len(set(keys)) == len(keys)
    errored = [ep for ep in episodes if ep.errored]
    scored = [ep for ep in episodes if not ep.errored]
    assert all(ep.reward is None and ep.error and "ModelError" in ep.error for ep in errored)
    assert all(ep.reward is not None and ep.error is None for ep in scored)
    assert result.errored == len(errored) > 0 and len(scored) > len(errored)
    assert sum(ep.reward.reward == 1.0 for ep in scored) > N_TASKS  # retries absorbed most faults
    assert all(injected[f] > 0 for f in FAULTS), injected  # every kind of fault happened
    assert any("\ufffd" in (m.content or "") for ep in scored for m in ep.messages)  # surrogates replaced, episode kept
    assert any(ep.malformed_calls for ep in scored)  # malformed calls became observations, not errors
    print(f"{len(episodes)} episodes in {seconds:.1f}s: {len(scored)} scored, {len(errored)} errored; faults {dict(injected)}")
