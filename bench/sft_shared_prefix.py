"""Cold-start SFT throughput with and without running the shared system turn once per step
(``SFTConfig.share_prefix``).

The data are real clinic demonstrations: the oracle agent talking to the scripted user on the first
``--conversations`` clinic train tasks of difficulty <= ``--max-difficulty`` (``muarl synth``, validated): with the
defaults, the 90 dialogues the learning demo's cold start trains on. Both arms run ``run_sft`` from the same weights on the same conversations with the same
``pack_length``:

- **packed** (``share_prefix: false``): conversations concatenated into rows of ``pack_length`` tokens, one row
  per step, each conversation carrying its own copy of the ~2,500-token system turn;
- **shared** (``share_prefix: true``, the default): the system turn runs once per step and each conversation
  trains in its own row after it, up to ``pack_length`` unshared tokens per step.

The figure is conversation tokens trained per second (a shared system turn counted once per conversation, so
both arms count the same tokens for the same conversations), median over the steps after the first of each
arm; the arms alternate over ``--rounds`` so that machine noise hits both.

    OMP_WAIT_POLICY=PASSIVE python bench/sft_shared_prefix.py [--conversations 90] [--steps 3] [--rounds 1] [--tiny]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from muarl.domains import load_domain
from muarl.models.hf_loading import EMBEDDED_MODEL, TINY_MODEL
from muarl.synth.generate import SynthConfig, synthesize
from muarl.train.config import ModelConfig, SFTConfig
from muarl.train.plot import read_metrics
from muarl.train.sft import run_sft


def demonstrations(n: int, max_difficulty: int, out: Path) -> Path:
    """Validated oracle dialogues on the first ``n`` clinic train tasks up to a difficulty, as SFT chat JSONL."""
    ids = [t.id for t in load_domain("clinic").tasks("train") if (t.difficulty or 0) <= max_difficulty][:n]
    asyncio.run(synthesize(SynthConfig(domain="clinic", split="train", task_ids=ids, out=str(out), seed=0,
                                       validation_fraction=0.0, parquet=False), progress=False))
    return out / "sft_train.jsonl"


def run_arm(data: Path, out: Path, share: bool, args: argparse.Namespace) -> list[dict[str, Any]]:
    cfg = SFTConfig(data=str(data), out=str(out), seed=0, epochs=100.0, lr=2e-5, pack_length=args.pack_length,
                    max_steps=args.steps, share_prefix=share,
                    model=ModelConfig(name=TINY_MODEL if args.tiny else EMBEDDED_MODEL, precision="bf16" if not args.tiny else "fp32", finetune="full"))
    run_sft(cfg, progress=False)
    return read_metrics(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=90, help="clinic train tasks demonstrated")
    p.add_argument("--max-difficulty", type=int, default=1, help="difficulty of the demonstrated tasks")
    p.add_argument("--steps", type=int, default=3, help="SFT steps per arm and round (the first is a warm-up)")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds of the two arms")
    p.add_argument("--pack-length", type=int, default=8192)
    p.add_argument("--tiny", action="store_true", help="the tiny random model (a smoke run; measures nothing)")
    args = p.parse_args()
    if args.steps < 2:
        p.error("--steps must be at least 2: the first step of each arm is a warm-up")
    rates: dict[str, list[float]] = {"packed": [], "shared": []}
    rows: dict[str, list[float]] = {"packed": [], "shared": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = demonstrations(args.conversations, args.max_difficulty, Path(tmp) / "synth")
        for r in range(args.rounds):
            arms = ("packed", "shared") if r % 2 == 0 else ("shared", "packed")
            for arm in arms:
                metrics = run_arm(data, Path(tmp) / f"{arm}-{r}", arm == "shared", args)
                rates[arm] += [m["tokens_per_s"] for m in metrics[1:]]
                rows[arm] += [m["rows"] for m in metrics[1:]]
    result = {
        "model": "tiny-random" if args.tiny else "smollm2-135m-instruct (bf16)",
        "conversations": args.conversations, "max_difficulty": args.max_difficulty, "pack_length": args.pack_length, "steps": args.steps, "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        **{f"{arm}_tokens_per_s": rates[arm] for arm in rates},
        **{f"{arm}_rows_per_step": rows[arm] for arm in rows},
        **{f"{arm}_median_tokens_per_s": statistics.median(rates[arm]) for arm in rates},
        "speedup": statistics.median(rates["shared"]) / statistics.median(rates["packed"]),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
