"""LLM-simulated tools over a real loopback OpenAI-compatible server: the tool LLM sees the seed data and
the earlier calls of the dialogue, and its answers become observations or errors."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from muarl.domains.base import ArgumentError, ToolError
from muarl.models.loopback_server import LoopbackServer
from muarl.models.openai_client import ChatClient
from muarl.rollout.backends import BackendError
from muarl.synth.scenario import Scenario
from muarl.synth.simulated_tools import SimulatedToolBackend

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "bookstore" / "scenario.yaml"


def tool_llm(request):
    """Plays the bookstore's backend from what the prompt shows it (seed DB, earlier calls)."""
    system, body = request["messages"][0]["content"], request["messages"][1]["content"]
    seed = json.loads(system.split("(JSON):\n", 1)[1].split("\n\nRules:", 1)[0])
    name, args = re.search(r"Now answer: (\w+)\((.*)\)$", body, re.S).groups()
    args = json.loads(args)
    if name == "get_order" and args["order_id"] == "BK-0000":
        return {"content": "sorry, I am confused"}  # never the requested JSON
    if name == "get_order":
        order = seed["orders"].get(args["order_id"])
        if order is None:
            return {"content": json.dumps({"error": "order not found"})}
        if f'cancel_order({{"order_id": "{args["order_id"]}"' in body.split("Earlier calls", 1)[1]:
            order = {**order, "status": "cancelled"}
        return {"content": json.dumps({"result": order})}
    if name == "cancel_order":
        return {"content": json.dumps({"result": {**seed["orders"][args["order_id"]], "status": "cancelled"}})}
    return {"content": json.dumps({"error": f"unexpected {name}"})}


def test_simulated_backend_is_consistent_with_seed_and_earlier_calls():
    domain = Scenario.load(SCENARIO).domain()

    async def go():
        client = ChatClient(server.base_url, "tool-llm", max_retries=0)
        backend = SimulatedToolBackend(domain, client)
        try:
            before = json.loads(await backend.call("get_order", {"order_id": "BK-1002"}))
            fresh_hash = await backend.state_hash()
            await backend.call("cancel_order", {"order_id": "BK-1002", "reason": "ordered by mistake"})
            after = json.loads(await backend.call("get_order", {"order_id": "BK-1002"}))
            with pytest.raises(ToolError, match="order not found"):
                await backend.call("get_order", {"order_id": "BK-9999"})
            with pytest.raises(ArgumentError, match="not one of"):
                await backend.call("cancel_order", {"order_id": "BK-1002", "reason": "bored"})
            with pytest.raises(BackendError, match="after 2 tries"):
                await backend.call("get_order", {"order_id": "BK-0000"})
            return before, after, fresh_hash, await backend.state_hash()
        finally:
            await client.aclose()

    with LoopbackServer(tool_llm) as server:
        before, after, fresh_hash, final_hash = asyncio.run(go())
        requests = server.requests
    assert before["status"] == "processing" and before["books"] == ["The Left Hand of Darkness"]
    assert after["status"] == "cancelled"  # the LLM saw the earlier cancel
    assert fresh_hash != final_hash  # a successful write changes the simulated state hash
    assert requests == 6  # the schema misfit never reached the tool LLM; the garbage answer was retried once


def test_scenario_errors_name_the_problem(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("name: x\npolicy: p\ntools: [{name: a, description: d}]\nidentification_tools: [b]\ntasks: [{id: t, instruction: i}]\n")
    with pytest.raises(ValueError, match=r"identification_tools \['b'\] are not among the tools"):
        Scenario.load(bad)
    bad.write_text("name: x\npolicy: p\ntools: []\nseed_db: missing.json\ntasks: [{id: t, instruction: i}]\n")
    with pytest.raises(ValueError, match="cannot read seed_db"):
        Scenario.load(bad)
