"""A GRPO update while the policy is still its reference (the first step, or the first after a roll back to the start),
with the reference's forward skipped against run as before.

At those updates the reference's log-probabilities are the policy's own, so ``GRPOTrainer.update`` takes them from the
policy's forward (``policy_is_reference``) instead of running the frozen copy over the batch. In the demo's 30-minute
GRPO box (issue 21) that is step 1 of every run and every step after a roll back to the cold start. The batch has the
demo's shape: n episodes opening with the real clinic-lite system turn (593 SmolLM2 tokens) and each episode's own
synthetic dialogue (``update_throughput_vs_trl.synthetic_episodes``). Both arms start every timed update from the same
starting weights (so the skip is exact each time), alternating which goes first, after one untimed update each
whose weights must agree (up to the round-off a second forward of the same weights can add).

    OMP_WAIT_POLICY=PASSIVE python bench/update_at_reference.py [--sequences 8] [--repeats 3] [--tiny]
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
from update_shared_prefix import arm, interleaved_seconds, samples, system_ids, weight_gap
from update_throughput_vs_trl import load_bench_model, update_bench_parser


def main() -> None:
    parser = update_bench_parser(__doc__.splitlines()[0])
    parser.add_argument("--domain", default="clinic-lite", help="whose system turn opens every episode")
    args = parser.parse_args()
    model_name, base, tokenizer, bf16 = load_bench_model(args)
    start = copy.deepcopy(base.state_dict())
    prefix = system_ids(tokenizer, args.domain)
    batch = samples(prefix, args.sequences, base.config.vocab_size, tokenizer.convert_tokens_to_ids("<|im_end|>"), args.seed)
    arms = {name: arm(copy.deepcopy(base), tokenizer, model_name, True, args.micro_batch, bf16)
            for name in ("reference_forward", "skipped")}
    del base

    def update(name: str) -> dict[str, float]:
        trainer = arms[name]
        trainer.model.load_state_dict(start)  # at the reference again: the skip is exact every time
        trainer.policy_is_reference = name == "skipped"
        return trainer.update(batch)

    warm = {name: update(name) for name in arms}  # untimed; the arms must agree
    gap = weight_gap(*arms.values())
    seconds = interleaved_seconds(update, list(arms), args.repeats)

    report: dict[str, Any] = {
        "model": model_name, "domain": args.domain, "sequences": args.sequences, "micro_batch": args.micro_batch,
        "bf16": bf16, "threads": args.threads, "repeats": args.repeats, "shared_prefix_tokens": len(prefix),
        "sequence_tokens": sum(len(e.tokens.input_ids) for e, _ in batch),
        "loss_tokens": int(warm["skipped"]["trained_tokens"]),
        "max_weight_difference_after_one_update": gap, "kl": {k: v["kl"] for k, v in warm.items()},
        "policy_loss": {k: v["policy_loss"] for k, v in warm.items()},
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
    }
    for name, times in seconds.items():
        report[name] = {"seconds": [round(t, 3) for t in times], "median_seconds": round(statistics.median(times), 3)}
    report["speedup"] = round(statistics.median(seconds["reference_forward"]) / statistics.median(seconds["skipped"]), 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
