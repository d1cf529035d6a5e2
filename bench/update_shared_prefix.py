"""GRPO update time with and without encoding the shared prompt prefix once (``GRPOConfig.share_prefix``).

The batch has the shape of a clinic GRPO step: n episodes that all open with the *real* clinic system turn
(policy text and the 17 tool schemas rendered by the chat format, tokenized by SmolLM2: ~2,500 tokens),
followed by each episode's own dialogue (the synthetic layout of ``update_throughput_vs_trl.py``: user
opening, policy turns with loss mask 1, observations with mask 0; random ids, since cost depends on lengths and
masks only). Two copies of muarl's trainer ``update`` start from the same weights, one with ``share_prefix``
off and one with it on; timing is interleaved (the arm going first alternates) after one untimed warm-up each,
and the figure is the median. The two arms must also agree: the script reports the largest weight difference
after the warm-up update and the relative difference of the losses.

    OMP_WAIT_POLICY=PASSIVE python bench/update_shared_prefix.py [--sequences 8] [--repeats 3] [--tiny]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import copy
import json
import platform
import statistics
import time
from typing import Any, Callable

import torch
from update_throughput_vs_trl import (
    _UpdateOnlyTrainer,
    group_rewards,
    load_bench_model,
    synthetic_episodes,
    update_bench_parser,
)

from muarl.domains import load_domain
from muarl.models.chat_formats import get_chat_format
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.grpo import group_advantages
from muarl.types import Episode, TokenTrace


def system_ids(tokenizer: Any, domain: str = "clinic") -> list[int]:
    """The token ids every episode of ``domain`` starts with: the system turn with the tool schemas."""
    world = load_domain(domain)
    text = get_chat_format("chatml-hermes").system_text(world.system_prompt(), world.tools.specs())
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def samples(prefix: list[int], n: int, vocab: int, end_of_turn: int, seed: int) -> list[tuple[Episode, float]]:
    rows = synthetic_episodes(n, vocab, end_of_turn, seed)
    advantages = group_advantages(group_rewards(n, seed))[0].tolist()
    return [
        (Episode(task_id=f"bench-{i}", domain="bench", split="train", termination="user_stop",
                 tokens=TokenTrace(input_ids=prefix + ids, loss_mask=[0] * len(prefix) + mask,
                                   logprobs=[0.0] * (len(prefix) + len(ids)))), adv)
        for i, ((ids, mask), adv) in enumerate(zip(rows, advantages))
    ]


def arm(model: Any, tokenizer: Any, model_name: str, share: bool, micro_batch: int, bf16: bool) -> _UpdateOnlyTrainer:
    cfg = GRPOConfig(model=ModelConfig(name=model_name, precision="bf16" if bf16 else "fp32"), lr=1e-6, micro_batch_size=micro_batch,
                     share_prefix=share, kl_coef=0.001, kl_estimator="k3", tasks_per_step=1, group_size=2)
    return _UpdateOnlyTrainer(cfg, model, tokenizer)


def weight_gap(first: Any, second: Any) -> float:
    """The largest difference between two trainers' weights (arms that must agree after the same update)."""
    a, b = dict(first.model.named_parameters()), dict(second.model.named_parameters())
    return max(float((a[k] - b[k]).detach().abs().max()) for k in a)


def interleaved_seconds(run: Callable[[str], Any], names: list[str], repeats: int) -> dict[str, list[float]]:
    """Seconds of ``run(name)`` for each arm, ``repeats`` times, the arm that goes first alternating (a host that
    slows down mid-run then costs both arms alike)."""
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            t0 = time.perf_counter()
            run(name)
            seconds[name].append(time.perf_counter() - t0)
    return seconds


def main() -> None:
    args = update_bench_parser(__doc__.splitlines()[0]).parse_args()
    model_name, base, tokenizer, bf16 = load_bench_model(args)
    prefix = system_ids(tokenizer)
    batch = samples(prefix, args.sequences, base.config.vocab_size, tokenizer.convert_tokens_to_ids("<|im_end|>"), args.seed)
    arms = {name: arm(copy.deepcopy(base), tokenizer, model_name, share, args.micro_batch, bf16)
            for name, share in (("full_sequences", False), ("shared_prefix", True))}
    del base

    warm = {name: trainer.update(batch) for name, trainer in arms.items()}  # untimed; the arms must agree
    gap = weight_gap(*arms.values())
    seconds = interleaved_seconds(lambda name: arms[name].update(batch), list(arms), args.repeats)

    total = sum(len(e.tokens.input_ids) for e, _ in batch)
    report: dict[str, Any] = {
        "model": model_name, "sequences": args.sequences, "micro_batch": args.micro_batch, "bf16": bf16,
        "threads": args.threads, "repeats": args.repeats, "shared_prefix_tokens": len(prefix), "sequence_tokens": total,
        "loss_tokens": int(warm["full_sequences"]["trained_tokens"]),
        "max_weight_difference_after_one_update": gap,
        "policy_loss": {k: v["policy_loss"] for k, v in warm.items()}, "kl": {k: v["kl"] for k, v in warm.items()},
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
    }
    for name, times in seconds.items():
        median = statistics.median(times)
        report[name] = {"seconds": [round(t, 3) for t in times], "median_seconds": round(median, 3),
                        "tokens_per_s": round(total / median, 1)}
    report["speedup"] = round(statistics.median(seconds["full_sequences"]) / statistics.median(seconds["shared_prefix"]), 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
