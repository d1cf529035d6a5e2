"""Rollout throughput of the local engine: one GRPO group (8 episodes of one clinic task) three ways.

- sequential: each episode prefills its whole context, system prompt included, one episode at a time
  (``share_prefix=False, batch=False``: the engine before the KV-cache work);
- shared-prefix: one at a time, every session starting from one cached KV of the system turn;
- shared+batched: the 8 episodes run concurrently and their turns are decoded together.

The same model, task, scripted user and seeds in every mode, in one process, so the ratios compare like
with like. Printed as JSON: wall seconds, seconds per episode, generated (sampled) tokens per second,
speed-up over sequential, and whether each episode's token ids equal the sequential run's (they can differ
under bfloat16, where padded batched attention rounds differently; every trace is still exactly what its
own row was conditioned on).

    python bench/rollout_throughput.py [--episodes 8] [--max-turns 3] [--max-new-tokens 48] [--fp32]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: 2 busy-waiting threads collapse on a shared CPU

import argparse
import asyncio
import json
import platform
import time

import torch

from muarl.domains import load_domain
from muarl.models.hf_loading import EMBEDDED_MODEL, load_causal_lm
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Episode
from muarl.users.scripted import ScriptedUser

MODES = {  # name: (share_prefix, batch)
    "sequential": (False, False),
    "shared-prefix": (True, False),
    "shared+batched": (True, True),
}


def run_group(policy: LocalPolicy, domain, task, seeds: list[int], loop: LoopConfig, concurrent: bool) -> list[Episode]:
    user = ScriptedUser()

    async def one(seed: int) -> Episode:
        return await run_episode(domain, task, policy, user, seed=seed, config=loop)

    async def run_all() -> list[Episode]:
        if concurrent:
            return list(await asyncio.gather(*[one(s) for s in seeds]))
        return [await one(s) for s in seeds]

    return asyncio.run(run_all())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=8, help="episodes of the task (one GRPO group)")
    parser.add_argument("--task", type=int, default=0, help="index of the clinic train task")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--fp32", action="store_true", help="float32 generation (default: bfloat16 autocast, as the trainer)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    domain = load_domain("clinic")
    task = domain.tasks("train")[args.task]
    model, tokenizer = load_causal_lm(args.model)
    model.eval()
    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens, max_context=8192, bf16=not args.fp32)
    loop = LoopConfig(max_turns=args.max_turns)
    seeds = list(range(args.episodes))

    results: dict[str, dict] = {}
    reference: list[Episode] | None = None
    for name, (share, batch) in MODES.items():
        policy = LocalPolicy(model, tokenizer, "chatml-hermes", sampling, share_prefix=share, batch=batch)
        start = time.perf_counter()
        episodes = run_group(policy, domain, task, seeds, loop, concurrent=batch)
        seconds = time.perf_counter() - start
        errors = [e.error for e in episodes if e.error]
        if errors:
            raise SystemExit(f"{name}: {len(errors)} episodes errored, first: {errors[0]}")
        generated = sum(e.usage.completion_tokens for e in episodes)
        context = sum(len(e.tokens.input_ids) for e in episodes)
        row = {
            "seconds": round(seconds, 1),
            "seconds_per_episode": round(seconds / len(episodes), 2),
            "generated_tokens": generated,
            "generated_tokens_per_s": round(generated / seconds, 1),
            "trace_tokens": context,
            "agent_turns": sum(e.agent_turns for e in episodes),
        }
        if reference is None:
            reference = episodes
        else:
            row["same_ids_as_sequential"] = sum(a.tokens.input_ids == b.tokens.input_ids for a, b in zip(episodes, reference))
            row["speedup_vs_sequential"] = round(results["sequential"]["seconds"] / seconds, 2)
        if policy.generator is not None:
            stats = policy.generator.stats
            row["mean_decode_batch"] = round(stats.decoded_rows / max(1, stats.decode_steps), 2)
            row["max_decode_batch"] = stats.max_rows
        results[name] = row
        print(json.dumps({name: row}), flush=True)

    system_tokens = len(policy.encode(policy.chat_format.system_text(domain.system_prompt(task), domain.tools.specs())))
    print(json.dumps({
        "model": args.model, "task": task.id, "episodes": args.episodes, "max_turns": args.max_turns,
        "max_new_tokens": args.max_new_tokens, "dtype": "float32" if args.fp32 else "bfloat16 autocast",
        "threads": args.threads, "system_prompt_tokens": system_tokens, "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__, "results": results,
    }, indent=1))


if __name__ == "__main__":
    main()
