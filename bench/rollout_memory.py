"""Resident memory of batched local-engine rollouts over time (the regression behind the allocator fix).

Runs 8 clinic test episodes (difficulty 1) concurrently with `LocalPolicy` (shared prefix, batched decoding,
greedy) against the scripted user, printing the process's RSS every 15 s and its peak. Compare the allocator
settings in separate processes, e.g. `MUARL_GLIBC_DEFAULT=1` keeps glibc's default mmap threshold.

    python bench/rollout_memory.py --model runs/learning-demo/sft/model --seconds 150
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time

import torch

from muarl.domains import load_domain
from muarl.models import allocator
from muarl.models.hf_loading import load_causal_lm
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.rollout.episode import LoopConfig
from muarl.rollout.runner import run_many
from muarl.users.scripted import ScriptedUser


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--seconds", type=float, default=150)
    args = parser.parse_args()
    if os.environ.get("MUARL_GLIBC_DEFAULT"):
        allocator.large_tensors_from_mmap = lambda threshold=0: False  # keep glibc's default for the comparison
    torch.set_num_threads(2)
    peak = [0.0]

    def monitor() -> None:
        start = time.time()
        while True:
            peak[0] = max(peak[0], rss_gb())
            print(f"t={time.time() - start:5.0f}s rss={rss_gb():.2f}GB", flush=True)
            time.sleep(15)

    threading.Thread(target=monitor, daemon=True).start()
    model, tokenizer = load_causal_lm(args.model)
    model.eval()
    policy = LocalPolicy(model, tokenizer, "chatml-hermes", SamplingConfig(temperature=0.0, max_new_tokens=128, max_context=6144, bf16=True))
    domain = load_domain("clinic")
    tasks = [t for t in domain.tasks("test") if t.difficulty == 1][:8]

    async def go() -> None:
        run = run_many(domain, tasks, policy, ScriptedUser(), concurrency=8, progress=False,
                       config=LoopConfig(max_turns=16, token_budget=6144 - 128))
        try:
            await asyncio.wait_for(run, timeout=args.seconds)
        except asyncio.TimeoutError:
            pass

    asyncio.run(go())
    print(f"peak {peak[0]:.2f} GB")


if __name__ == "__main__":
    main()
