"""Harness CPU overhead per agent turn against a loopback OpenAI-compatible server that answers instantly.

The server runs in its own process and plays the oracle (so turns are a realistic mix of tool calls and
text); the measured process runs the real client (HTTP, JSON, retries machinery), the episode loop, the
tools, the scripted user and the reward. CPU time of that process divided by agent turns is the harness's
cost per turn; the same episodes with the in-process oracle (no HTTP) are measured in the same run for
comparison.

    python bench/harness_overhead.py [--tasks 100] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import time

from muarl.domains import load_domain
from muarl.models.loopback_server import LoopbackServer
from muarl.models.openai_client import ChatClient, OpenAIAgent
from muarl.models.oracle import OracleAgent, OracleSession
from muarl.rollout.runner import run_many
from muarl.seeds import episode_seed, user_seed
from muarl.users.scripted import ScriptedUser, ScriptedUserSession


def _openings(tasks):  # noqa: ANN001, ANN202
    """The scripted user's first line for each task (trial 0, run seed 0), kept only where it is unique."""
    seen: dict[str, list] = {}
    for task in tasks:
        session = ScriptedUserSession(task, user_seed(episode_seed(0, task.id, 0)))
        text = asyncio.run(session.reply([])).text
        seen.setdefault(text, []).append(task)
    return {text: ts[0] for text, ts in seen.items() if len(ts) == 1}


def _serve(port_queue, n_tasks: int) -> None:  # noqa: ANN001
    domain = load_domain("clinic")
    by_opening = _openings(domain.tasks("test")[:n_tasks])
    tools = domain.tools.specs()

    def policy(request: dict) -> dict:
        messages = request["messages"]
        opening = next(m["content"] for m in messages if m["role"] == "user")
        step = sum(m["role"] == "assistant" for m in messages)
        plan = OracleSession(by_opening[opening], tools).steps
        return plan[step].to_openai() if step < len(plan) else {"content": "Is there anything else I can help you with?"}

    server = LoopbackServer(policy)
    port_queue.put(server.base_url)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    domain = load_domain("clinic")
    tasks = list(_openings(domain.tasks("test")[: args.tasks]).values())
    for task in tasks:
        domain.gold_hash(task)
    queue: mp.Queue = mp.Queue()
    server = mp.get_context("fork").Process(target=_serve, args=(queue, args.tasks), daemon=True)
    server.start()
    base_url = queue.get(timeout=60)

    def measure(make_agent) -> dict:  # noqa: ANN001
        async def go():  # noqa: ANN202
            agent = make_agent()
            try:
                return await run_many(domain, tasks, agent, ScriptedUser(), concurrency=args.concurrency, progress=False)
            finally:
                await agent.aclose()

        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = asyncio.run(go())
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        turns = sum(ep.agent_turns for ep in result.episodes)
        success = sum(bool(ep.reward and ep.reward.reward == 1.0) for ep in result.episodes) / len(result.episodes)
        return {"episodes": len(result.episodes), "agent_turns": turns, "success": success,
                "cpu_ms_per_turn": cpu * 1000 / turns, "wall_s": round(wall, 3)}

    try:
        measure(lambda: OpenAIAgent(ChatClient(base_url, "oracle", concurrency=args.concurrency)))  # warm-up (imports, pools)
        http = measure(lambda: OpenAIAgent(ChatClient(base_url, "oracle", concurrency=args.concurrency)))
        local = measure(OracleAgent)
    finally:
        server.terminate()
    print(json.dumps({"http_loopback": http, "in_process": local,
                      "http_overhead_cpu_ms_per_turn": http["cpu_ms_per_turn"] - local["cpu_ms_per_turn"]}, indent=2))


if __name__ == "__main__":
    main()
