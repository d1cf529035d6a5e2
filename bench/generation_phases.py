"""Where batched rollout time goes: 8 clinic episodes through ``LocalPolicy``'s batched generator, timed by phase.

Runs the first ``--episodes`` difficulty-1 clinic test tasks concurrently (greedy, scripted user, bf16 autocast,
``--max-turns`` agent turns) and reports the wall time and the seconds spent in each phase of
``muarl.models.batched_generation.BatchedGenerator``: ``_admit`` (prefilling each waiting row's new ids on its
own cache, which includes ``RowBatch.add``), ``_decode_step`` (one batched forward per token), ``RowBatch.remove``
and sampling (``_take``), with call counts and the generator's own statistics. Greedy decoding makes the
trajectories, and so the counts of decode steps and rows, repeatable: two engines that report the same counts
did the same work, and their times compare directly. Run it at two commits for a before/after figure.

    OMP_WAIT_POLICY=PASSIVE python bench/generation_phases.py --model runs/learning-demo-3/sft/model [--max-turns 4]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import asyncio
import collections
import json
import time
from typing import Any

from muarl.domains import load_domain
from muarl.models import batched_generation, kv_cache
from muarl.models.hf_loading import load_causal_lm
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.rollout.episode import LoopConfig
from muarl.rollout.runner import run_many
from muarl.users.scripted import ScriptedUser

seconds: collections.Counter = collections.Counter()
calls: collections.Counter = collections.Counter()


def timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper adding its wall time and calls under ``label``."""
    inner = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - t0
            calls[label] += 1

    setattr(owner, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=128)
    args = p.parse_args()
    timed(batched_generation.BatchedGenerator, "_admit", "admit (prefill + RowBatch.add)")
    timed(batched_generation.BatchedGenerator, "_decode_step", "decode steps")
    timed(batched_generation.BatchedGenerator, "_take", "sampling")
    timed(kv_cache.RowBatch, "add", "RowBatch.add")
    timed(kv_cache.RowBatch, "remove", "RowBatch.remove")
    model, tokenizer = load_causal_lm(args.model)
    model.eval()
    clinic = load_domain("clinic")
    tasks = [t for t in clinic.tasks("test") if (t.difficulty or 0) <= 1][: args.episodes]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, max_context=6144, bf16=True)
    policy = LocalPolicy(model, tokenizer, "chatml-hermes", sampling)
    t0 = time.perf_counter()
    asyncio.run(run_many(clinic, tasks, policy, ScriptedUser(), trials=1, concurrency=args.episodes, out=None, seed=0,
                         config=LoopConfig(max_turns=args.max_turns, token_budget=6144 - args.max_new_tokens), progress=False))
    stats = policy.generator.stats
    print(json.dumps({
        "model": args.model, "episodes": len(tasks), "max_turns": args.max_turns, "wall_seconds": round(time.perf_counter() - t0, 1),
        "phases": {label: {"seconds": round(s, 1), "calls": calls[label]} for label, s in seconds.items()},
        "generator": {"decode_steps": stats.decode_steps, "decoded_rows": stats.decoded_rows, "max_rows": stats.max_rows,
                      "prefills": stats.prefills},
    }, indent=1))


if __name__ == "__main__":
    main()
