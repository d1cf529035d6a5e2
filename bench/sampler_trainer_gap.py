"""How far the sampler's log-probabilities are from the trainer's, per precision, on real clinic-lite episodes.

GRPO samples with the KV-cache decoder (``muarl.models.local_engine``) and learns from a full-sequence forward
(``muarl.train.sequences.supervised_logprobs``). Both are meant to compute one distribution; any difference is
an off-policy error the update does not correct. This script samples episodes of the trainer's own world
(scripted user who changes their mind, train tasks the cold start did not see, 2 of each kind: level x change of
mind) at temperature 1 in each precision, then scores every policy token with the trainer's forward in that
precision and in float32 (the weights' exact distribution), and reports:

- |sampler - trainer| per token (mean, p99, max) and the share of tokens whose ratio exp(trainer - sampler)
  leaves [0.8, 1.2] (what PPO's clip would see if the sampler's log-probs were the "old" ones);
- |trainer - fp32| and |sampler - fp32|: each side's own rounding against the exact distribution;
- the mean entropy the trainer reports in that precision and in float32.

    OMP_WAIT_POLICY=PASSIVE python bench/sampler_trainer_gap.py --model runs/demo/sft/run/model \
        --grpo-tasks runs/demo/synth/stage.json --precisions fp32,bf16 --out /tmp/gap.json

``--model`` is a cold start (an SFT model directory); ``--grpo-tasks`` a demo's synth stage.json (its
``grpo_task_ids``: train tasks the cold start did not see), or omitted for every train task.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import torch

from muarl.demo import stages as st
from muarl.demo.config import DemoConfig
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.trainer import GRPOTrainer
from muarl.types import Episode, Task


def stratified(tasks: list[Task], per_kind: int, seed: int) -> list[Task]:
    """``per_kind`` tasks of each kind (level x change of mind), a seeded choice, in a stable order."""
    kinds: dict[str, list[Task]] = {}
    for task in tasks:
        kinds.setdefault(st.task_group(task), []).append(task)
    rng = random.Random(f"{seed}/gap-tasks")
    return [t for kind in sorted(kinds) for t in rng.sample(kinds[kind], min(per_kind, len(kinds[kind])))]


def token_logprobs_of(trainer: GRPOTrainer, episodes: list[Episode], bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropies) of every policy token of ``episodes`` under the trainer's forward."""
    logprobs, entropies = [], []
    with torch.no_grad():
        for e in episodes:
            batch = pad_sequences([e.tokens.input_ids], [e.tokens.loss_mask], trainer.tokenizer.pad_token_id)
            lp, ent = supervised_logprobs(trainer.model, batch, bf16=bf16, with_entropy=True, temperature=trainer.cfg.temperature)
            logprobs.append(lp)
            entropies.append(ent)
    return torch.cat(logprobs), torch.cat(entropies)


def gap_stats(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    gap = (a - b).abs()
    ratio = torch.exp(a - b)
    return {"mean_abs": float(gap.mean()), "p99_abs": float(torch.quantile(gap, 0.99)), "max_abs": float(gap.max()),
            "ratio_outside_0.8_1.2": float(((ratio < 0.8) | (ratio > 1.2)).float().mean())}


def measure(model: str, task_ids: list[str] | None, precision: str, per_kind: int, trials: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = DemoConfig(out=tmp, precision=precision, seed=seed)
        pool = [t.id for t in st._pool(cfg, "train")] if task_ids is None else task_ids
        trainer = GRPOTrainer(st.grpo_config(cfg, Path(tmp), model, pool), progress=False)
        try:
            tasks = stratified(trainer.tasks, per_kind, seed)
            episodes = [e for e in trainer.run_episodes(tasks, trials, trainer.cfg.temperature, seed, "sampling") if e.tokens]
        finally:
            trainer.close()
        sampler = torch.tensor([lp for e in episodes for lp, m in zip(e.tokens.logprobs[1:], e.tokens.loss_mask[1:]) if m])
        own, own_entropy = token_logprobs_of(trainer, episodes, trainer.cfg.model.bf16)
        exact, exact_entropy = token_logprobs_of(trainer, episodes, False)
    return {
        "precision": trainer.cfg.model.precision, "episodes": len(episodes), "policy_tokens": int(sampler.numel()),
        "success": sum(e.reward.reward > 0 for e in episodes if e.reward) / max(1, len(episodes)),
        "sampler_vs_trainer": gap_stats(own, sampler), "trainer_vs_fp32": gap_stats(own, exact),
        "sampler_vs_fp32": gap_stats(sampler, exact),
        "entropy_trainer": float(own_entropy.mean()), "entropy_fp32": float(exact_entropy.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="cold-start model directory")
    parser.add_argument("--grpo-tasks", type=Path, help="a demo's synth/stage.json (or the synth summary): its grpo_task_ids")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--per-kind", type=int, default=2, help="tasks of each kind (level x change of mind)")
    parser.add_argument("--trials", type=int, default=2, help="episodes per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the figures here as JSON too")
    args = parser.parse_args()
    ids = json.loads(args.grpo_tasks.read_text())["grpo_task_ids"] if args.grpo_tasks else None
    results = [measure(args.model, ids, p, args.per_kind, args.trials, args.seed) for p in args.precisions.split(",")]
    print("| precision | episodes | policy tokens | success | mean abs sampler-trainer | p99 | ratio outside [0.8, 1.2] "
          "| mean abs trainer-fp32 | mean abs sampler-fp32 | entropy: trainer / fp32 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        g, t, s = r["sampler_vs_trainer"], r["trainer_vs_fp32"], r["sampler_vs_fp32"]
        print(f"| {r['precision']} | {r['episodes']} | {r['policy_tokens']} | {100 * r['success']:.0f}% | {g['mean_abs']:.4f} | "
              f"{g['p99_abs']:.3f} | {100 * g['ratio_outside_0.8_1.2']:.2f}% | {t['mean_abs']:.4f} | {s['mean_abs']:.4f} | "
              f"{r['entropy_trainer']:.4f} / {r['entropy_fp32']:.4f} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
