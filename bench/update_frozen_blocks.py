"""GRPO update time when only the top N decoder blocks train (``ModelConfig.train_top_layers``) against every block.

Why: in the learning demo's 30-minute GRPO box (issue 21) an update costs as much as the step's rollouts, and
the backward is most of an update. With the blocks below the top N frozen, autograd records nothing under them,
so the backward shrinks to about N / L of its full cost; the forward stays whole, and the KL reference runs its
top N blocks only, from the hidden states the policy's frozen trunk handed on (``muarl.train.frozen_trunk``; the
arm ``top-N-whole-reference`` runs the reference's whole forward instead, to show what that part buys). This
measures it on this machine. The batch has the shape of a demo GRPO step (as in
``update_at_reference.py``): n episodes opening with the real clinic-lite system turn, then each episode's own
synthetic dialogue. Every arm starts each timed update from the same weights with the policy away from its
reference (so the reference's forward runs, as at every step after a run's first), alternating which arm goes
first, after one untimed update each.

    OMP_WAIT_POLICY=PASSIVE python bench/update_frozen_blocks.py [--top 8 --top 15] [--sequences 8] [--repeats 3] [--tiny]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import copy
import json
import platform
import statistics
from typing import Any

import torch
from update_shared_prefix import arm, interleaved_seconds, samples, system_ids
from update_throughput_vs_trl import load_bench_model, update_bench_parser

from muarl.train.model_setup import freeze_below_top


def main() -> None:
    parser = update_bench_parser(__doc__.splitlines()[0])
    parser.add_argument("--domain", default="clinic-lite", help="whose system turn opens every episode")
    parser.add_argument("--top", type=int, action="append", help="arms training the top N blocks, with and without the trunk tap (repeatable; default 8)")
    args = parser.parse_args()
    model_name, base, tokenizer, bf16 = load_bench_model(args)
    blocks = base.config.num_hidden_layers
    tops = [n for n in (args.top or [8]) if n < blocks] or [max(1, blocks // 2)]
    start = copy.deepcopy(base.state_dict())
    prefix = system_ids(tokenizer, args.domain)
    batch = samples(prefix, args.sequences, base.config.vocab_size, tokenizer.convert_tokens_to_ids("<|im_end|>"), args.seed)
    arms: dict[str, Any] = {}
    arms[f"top-{blocks}"] = arm(copy.deepcopy(base), tokenizer, model_name, True, args.micro_batch, bf16)
    for n in tops:
        for name in (f"top-{n}", f"top-{n}-whole-reference"):
            model = copy.deepcopy(base)
            freeze_below_top(model, n)
            arms[name] = arm(model, tokenizer, model_name, True, args.micro_batch, bf16)
        arms[f"top-{n}-whole-reference"]._trunk_tap = lambda: None
    del base

    def update(name: str) -> dict[str, float]:
        trainer = arms[name]
        trainer.model.load_state_dict(start)
        trainer.policy_is_reference = False  # the reference's forward runs, as at every step after the first
        return trainer.update(batch)

    warm = {name: update(name) for name in arms}  # untimed
    seconds = interleaved_seconds(update, list(arms), args.repeats)
    full = f"top-{blocks}"
    report: dict[str, Any] = {
        "model": model_name, "blocks": blocks, "domain": args.domain, "sequences": args.sequences,
        "micro_batch": args.micro_batch, "bf16": bf16, "threads": args.threads, "repeats": args.repeats,
        "sequence_tokens": sum(len(e.tokens.input_ids) for e, _ in batch), "shared_prefix_tokens": len(prefix),
        "loss_tokens": int(warm[full]["trained_tokens"]),
        "trainable_parameters": {name: sum(p.numel() for p in t.params) for name, t in arms.items()},
        "policy_loss": {name: w["policy_loss"] for name, w in warm.items()},  # equal: the same forward
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
    }
    for name, times in seconds.items():
        report[name] = {"seconds": [round(t, 3) for t in times], "median_seconds": round(statistics.median(times), 3),
                        "speedup": round(statistics.median(seconds[full]) / statistics.median(times), 3)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
