"""Median CPU milliseconds per oracle episode on the embedded clinic domain.

Two measurements per test task, side by side in one run:
- env: reset + every gold action through the tools + reward (state hash compare + outputs check), i.e. what
  τ-bench's own environment does per oracle episode (anchor, from ../shared/README.md, same machine class:
  285 ms retail, 623 ms airline);
- loop: the whole episode loop with the oracle agent and the scripted user (conversation included).
The gold hash is cached per task (as in training, where each task is rolled out n times); the cold cost of
computing it once is the `env` figure itself.

    python bench/clinic_env_speed.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from muarl.domains import load_domain
from muarl.models.oracle import OracleAgent
from muarl.reward import outcome_reward
from muarl.rollout.episode import run_episode
from muarl.users.scripted import ScriptedUser

TAU_BENCH_ANCHOR_MS = {"retail": 285.0, "airline": 623.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    domain = load_domain("clinic")
    tasks = domain.tasks("test")
    for task in tasks:
        domain.gold_hash(task)
    env_ms, loop_ms = [], []
    agent, user = OracleAgent(), ScriptedUser()

    async def loop_once(task):  # noqa: ANN001, ANN202
        return await run_episode(domain, task, agent, user)

    for _ in range(args.repeats):
        for task in tasks:
            t0 = time.process_time()
            state = domain.new_state()
            for action in task.actions:
                domain.run_tool(state, action.name, action.kwargs)
            info = outcome_reward(domain, task, state.hash(), [], 0)
            env_ms.append((time.process_time() - t0) * 1000)
            assert info.state_match
            t0 = time.process_time()
            episode = asyncio.run(loop_once(task))
            loop_ms.append((time.process_time() - t0) * 1000)
            assert episode.reward and episode.reward.reward == 1.0
    result = {
        "episodes": len(env_ms),
        "env_median_ms": statistics.median(env_ms),
        "loop_median_ms": statistics.median(loop_ms),
        "speedup_vs_tau_retail_env": TAU_BENCH_ANCHOR_MS["retail"] / statistics.median(env_ms),
        "speedup_vs_tau_airline_env": TAU_BENCH_ANCHOR_MS["airline"] / statistics.median(env_ms),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
