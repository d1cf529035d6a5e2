"""One batched decode step of SmolLM2 under bfloat16 autocast: transformers' ``DynamicCache`` against muarl's
growing cache (``muarl.models.kv_cache.GrowingLayer``), side by side.

The shape is a clinic rollout's: ``--rows`` episodes (8, a GRPO group) each with ``--context`` tokens already
cached (~4,000: the 2,539-token system turn and a dozen turns of dialogue), one row left-padded, as in
``RowBatch``. Each arm starts from the same cached keys and values and runs ``--steps`` decode steps, feeding one
token per row with the attention mask and position ids the batched generator passes:

- **dynamic**: ``DynamicLayer`` storage as before this change: float32 keys and values (what the model
  produces after the rotary embedding), grown by ``torch.cat`` every step and cast to bfloat16 by every
  attention call;
- **growing**: bfloat16 storage with spare capacity, new tokens written in place.

The arms alternate ``--rounds`` times (the first step of each round is a warm-up); the figure is the median step
time. Both arms must also agree: the script reports the largest difference of their last logits.

    OMP_WAIT_POLICY=PASSIVE python bench/decode_step_cache.py [--rows 8] [--context 4000] [--steps 8] [--rounds 3]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import json
import platform
import statistics
import time

import torch

from muarl.models.hf_loading import EMBEDDED_MODEL, TINY_MODEL, load_causal_lm
from muarl.models.kv_cache import cache_layers, make_cache
from muarl.models.logits import cache_argument, returned_cache


def decode(model: object, layers: list, growing: bool, args: argparse.Namespace) -> tuple[list[float], torch.Tensor]:
    """Step times (s) and the last logits of ``args.steps`` decode steps from a cache holding ``layers``."""
    dtype = torch.bfloat16 if growing else torch.float32
    cache = make_cache([(k.to(dtype), v.to(dtype)) for k, v in layers], growing=growing)
    mask = torch.ones(args.rows, args.context + 1, dtype=torch.long)
    mask[0, : args.context // 4] = 0  # one row is shorter: left padding, as in RowBatch
    positions = torch.full((args.rows, 1), args.context)
    positions[0] -= args.context // 4
    feed = torch.full((args.rows, 1), 42)
    times = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(args.steps):
            t0 = time.perf_counter()
            out = model(input_ids=feed, **{cache_argument(model): cache}, use_cache=True, logits_to_keep=1,
                        attention_mask=mask, position_ids=positions)
            times.append(time.perf_counter() - t0)
            mask = torch.cat([mask, torch.ones(args.rows, 1, dtype=torch.long)], dim=1)
            positions = positions + 1
    return times, out.logits[:, -1].float()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--context", type=int, default=4000)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tiny", action="store_true", help="the tiny random model (a smoke run; measures nothing)")
    args = p.parse_args()
    model, _ = load_causal_lm(TINY_MODEL if args.tiny else EMBEDDED_MODEL)
    model.eval()
    ids = torch.randint(5, min(10_000, model.config.vocab_size), (1, args.context), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        one = cache_layers(returned_cache(model(input_ids=ids, use_cache=True)))
    layers = [(k.float().expand(args.rows, -1, -1, -1).contiguous(), v.float().expand(args.rows, -1, -1, -1).contiguous()) for k, v in one]
    times: dict[str, list[float]] = {"dynamic": [], "growing": []}
    logits = {}
    for r in range(args.rounds):
        for arm in ("dynamic", "growing") if r % 2 == 0 else ("growing", "dynamic"):
            steps, logits[arm] = decode(model, layers, arm == "growing", args)
            times[arm] += steps[1:]
    median = {arm: statistics.median(t) for arm, t in times.items()}
    print(json.dumps({
        "model": "tiny-random" if args.tiny else "smollm2-135m-instruct (bf16 autocast)",
        "rows": args.rows, "context": args.context, "steps": args.steps, "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "step_seconds": {arm: [round(t, 4) for t in ts] for arm, ts in times.items()},
        "median_step_seconds": median,
        "speedup": median["dynamic"] / median["growing"],
        "max_abs_logit_difference": float((logits["dynamic"] - logits["growing"]).abs().max()),
    }, indent=1))


if __name__ == "__main__":
    main()
