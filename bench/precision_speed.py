"""bf16 autocast against float32 for SmolLM2 on this machine, side by side: which precision ``auto`` should pick.

Two workloads, the shapes of a short-horizon rollout and of its update:

- **decode**: ``--rows`` episodes (a GRPO group) decoding ``--steps`` tokens one at a time on a KV cache that
  already holds ``--context`` tokens (the local engine's batched decode step);
- **update**: one forward + backward over ``--rows`` sequences of ``--context`` tokens (the trainer's update,
  full fine-tuning, logits on every position).

Three arms: ``fp32``; ``bf16``, autocast with the vocabulary projection in float32 (what muarl runs since issue
21, ``muarl.models.logits``); ``bf16-head``, autocast over the whole model, the projection included (what it ran
before). The arms alternate ``--rounds`` times in one process (the first round is a warm-up and not counted), so
machine noise hits all alike; the figure is each arm's median and the ratio to fp32 of the times (> 1: slower). The CPU's model name and its bf16-relevant flags are printed with the result, since the answer
depends on them: ``muarl.models.precision.use_bf16("auto")`` picks bf16 only with avx512_bf16 or amx_bf16.

    OMP_WAIT_POLICY=PASSIVE python bench/precision_speed.py [--rows 4] [--context 512] [--steps 16] [--rounds 3] [--tiny]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time

import torch

from muarl.models.hf_loading import EMBEDDED_MODEL, TINY_MODEL, load_causal_lm
from muarl.models.kv_cache import growing_cache
from muarl.models.logits import cache_argument, causal_lm_parts, float32_logits, last_token_logits
from muarl.models.precision import FAST_BF16_CPU_FLAGS, cpu_flags, use_bf16


def autocast(bf16: bool) -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


ARMS = {"fp32": (False, True), "bf16": (True, True), "bf16-head": (True, False)}  # (autocast, projection in float32)


def next_logits(model: torch.nn.Module, bf16: bool, head32: bool, **forward) -> torch.Tensor:
    if head32:
        return last_token_logits(model, bf16, **forward)  # the engine's path
    with autocast(bf16):
        return model(**forward, logits_to_keep=1).logits[:, -1]


def decode_seconds(model: torch.nn.Module, ids: torch.Tensor, bf16: bool, head32: bool, steps: int) -> float:
    """Seconds per decode step after prefilling ``ids`` ([rows, context]) into a growing cache."""
    cache = growing_cache(torch.bfloat16 if bf16 else None)
    with torch.no_grad():
        feed = next_logits(model, bf16, head32, input_ids=ids, **{cache_argument(model): cache}, use_cache=True).argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(steps):
            feed = next_logits(model, bf16, head32, input_ids=feed, **{cache_argument(model): cache}, use_cache=True).argmax(-1, keepdim=True)
    return (time.perf_counter() - t0) / steps


def update_seconds(model: torch.nn.Module, ids: torch.Tensor, bf16: bool, head32: bool) -> float:
    """Seconds for one forward + backward of the next-token loss over ``ids``."""
    model.zero_grad(set_to_none=True)
    decoder, head = causal_lm_parts(model)
    t0 = time.perf_counter()
    with autocast(bf16):
        hidden = decoder(input_ids=ids).last_hidden_state[:, :-1]
        logits = head(hidden) if not head32 else None
    if head32:
        logits = float32_logits(head, hidden)
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=4, help="sequences at once")
    p.add_argument("--context", type=int, default=512, help="tokens per sequence (a short-horizon episode)")
    p.add_argument("--steps", type=int, default=16, help="decode steps timed per round")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per arm, after one warm-up round")
    p.add_argument("--tiny", action="store_true", help="the tiny random model (a smoke run, not a measurement)")
    args = p.parse_args()

    model, _ = load_causal_lm(TINY_MODEL if args.tiny else EMBEDDED_MODEL)
    model.config.use_cache = True
    ids = torch.randint(10, min(1000, model.config.vocab_size), (args.rows, args.context), generator=torch.Generator().manual_seed(0))
    times: dict[str, dict[str, list[float]]] = {arm: {"decode": [], "update": []} for arm in ARMS}
    for round_ in range(args.rounds + 1):
        for arm, (bf16, head32) in ARMS.items():
            decode = decode_seconds(model, ids, bf16, head32, args.steps)
            update = update_seconds(model, ids, bf16, head32)
            print(f"round {round_} {arm}: decode {decode:.3f} s/step, update {update:.2f} s", file=sys.stderr, flush=True)
            if round_:  # round 0 warms both arms up
                times[arm]["decode"].append(decode)
                times[arm]["update"].append(update)
    flags = cpu_flags()
    median = {arm: {k: statistics.median(v) for k, v in work.items()} for arm, work in times.items()}
    result = {
        "model": TINY_MODEL if args.tiny else EMBEDDED_MODEL, "rows": args.rows, "context": args.context,
        "median_seconds": median,  # decode: per step; update: per forward + backward
        "over_fp32": {arm: {k: median[arm][k] / median["fp32"][k] for k in ("decode", "update")} for arm in ARMS if arm != "fp32"},
        "auto_picks": "bf16" if use_bf16("auto") else "fp32",
        "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor()),
        "cpu_bf16_flags": sorted(f for f in flags if f in FAST_BF16_CPU_FLAGS or f.startswith("avx512") or f in ("avx2", "fma")),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
