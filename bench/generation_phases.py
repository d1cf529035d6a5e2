"""Where batched rollout time goes: concurrent clinic episodes through ``LocalPolicy``'s batched generator, timed by
phase; with ``--compare`` two engines side by side.

Runs the first ``--episodes`` test tasks of ``--domain`` (of difficulty 1 unless ``--any-difficulty``) concurrently
(greedy, scripted user, bf16 autocast unless ``--fp32``, ``--max-turns`` agent turns) and reports the wall time and
the seconds spent in each phase of
``muarl.models.batched_generation.BatchedGenerator``: ``_admit`` (prefilling each waiting row's new ids on its
own cache, which includes ``RowBatch.add``), ``_decode_step`` (one batched forward per token), ``RowBatch.remove``
and sampling (``_take_rows``), with call counts and the generator's own statistics. Greedy decoding makes the
trajectories, and so the counts of decode steps and rows, repeatable: two engines that report the same counts
did the same work, and their times compare directly.

``--compare OLD_SRC`` (a ``src`` folder exported by ``git archive``) runs the engine of that tree and this one in
child processes, alternating ``--rounds`` times on the same machine, and prints each run, the ratio of the medians
and whether every episode's token ids (and log-probabilities, bit for bit) were the same in both (greedy: they
must be, when both engines run the same forwards on the same numbers).

    OMP_WAIT_POLICY=PASSIVE python bench/generation_phases.py --model runs/learning-demo-3/sft/model [--max-turns 4]
    git archive main src | tar -x -C /tmp/old && \\
      python bench/generation_phases.py --compare /tmp/old/src --domain clinic-lite --episodes 16 --any-difficulty
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

import engine_arms
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


def run(args: argparse.Namespace) -> dict:
    """One rollout of the engine importable here, timed by phase."""
    timed(batched_generation.BatchedGenerator, "_admit", "admit (prefill + RowBatch.add)")
    timed(batched_generation.BatchedGenerator, "_decode_step", "decode steps")
    # the rows' draws: one call per step since the draws are batched; older trees drew row by row (``_take``)
    draws = "_take_rows" if hasattr(batched_generation.BatchedGenerator, "_take_rows") else "_take"
    timed(batched_generation.BatchedGenerator, draws, "sampling")
    timed(kv_cache.RowBatch, "add", "RowBatch.add")
    timed(kv_cache.RowBatch, "remove", "RowBatch.remove")
    model, tokenizer = load_causal_lm(args.model)
    model.eval()
    domain = load_domain(args.domain)
    tasks = [t for t in domain.tasks("test") if args.any_difficulty or (t.difficulty or 0) <= 1][: args.episodes]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, max_context=6144, bf16=not args.fp32)
    policy = LocalPolicy(model, tokenizer, "chatml-hermes", sampling)
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = asyncio.run(run_many(domain, tasks, policy, ScriptedUser(), trials=1, concurrency=args.episodes, out=None, seed=0,
                                    config=LoopConfig(max_turns=args.max_turns, token_budget=6144 - args.max_new_tokens),
                                    progress=False))
    stats = policy.generator.stats
    return {
        "engine": kv_cache.__file__, "model": args.model, "domain": args.domain, "episodes": len(tasks),
        "max_turns": args.max_turns, "dtype": "float32" if args.fp32 else "bfloat16 autocast",
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": round(time.process_time() - cpu0, 1),  # on a shared machine, the steadier measure of work
        "phases": {label: {"seconds": round(s, 1), "calls": calls[label]} for label, s in seconds.items()},
        "generator": {"decode_steps": stats.decode_steps, "decoded_rows": stats.decoded_rows, "max_rows": stats.max_rows,
                      "prefills": stats.prefills},
        "errored": result.errored,
        "traces": {e.task_id: [e.tokens.input_ids, e.tokens.logprobs] for e in result.episodes},
    }


def compare(args: argparse.Namespace, argv: list[str]) -> dict:
    """Run the engine of ``args.compare`` (old) and of this tree (new) in turn, ``args.rounds`` times each."""
    trees = engine_arms.compare_trees(args.compare)
    runs = engine_arms.alternate(__file__, engine_arms.without_options(argv, "--compare"), trees, args.rounds,
                                 show=lambda arm, result: print(json.dumps({arm: {k: v for k, v in result.items() if k != "traces"}}), flush=True))
    median = engine_arms.medians(runs, ("wall_seconds", "cpu_seconds"))
    traces = [r["traces"] for rs in runs.values() for r in rs]  # per run: task id -> [token ids, log-probabilities]
    ids = [{task: trace[0] for task, trace in t.items()} for t in traces]
    return {
        "rounds": args.rounds, "trees": trees, "median": median,
        "old_over_new": {measure: round(m["old"] / m["new"], 3) for measure, m in median.items()},
        "same_work": len({json.dumps(r["generator"]) for rs in runs.values() for r in rs}) == 1,
        "same_token_ids_in_every_run": all(i == ids[0] for i in ids),
        "same_logprobs_in_every_run": all(t == traces[0] for t in traces),  # bit for bit
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--domain", default="clinic")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--any-difficulty", action="store_true", help="the first test tasks, not only those of difficulty 1")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--fp32", action="store_true", help="float32 generation (default: bfloat16 autocast)")
    engine_arms.add_options(p, rounds=2)
    engine_arms.dispatch(p.parse_args(), compare, run, shown=lambda result: {k: v for k, v in result.items() if k != "traces"})

if __name__ == "__main__":
    main()
