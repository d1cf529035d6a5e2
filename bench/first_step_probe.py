"""A GRPO run's first update replayed under other settings, then validated: which update keeps what the cold start
could do (issue 21).

In runs 5 and 6 of the learning spread the first update took validation success down (68.8% -> 57.8%, 75.0% ->
60.9%), level-2 tasks without a change of mind most (run 6: 15/16 -> 8/16). Step 1's episodes were sampled from the
cold start, so they are the same whatever the update's settings: replaying them (their token traces, their rewards,
the run's own advantages) under another learning rate or optimizer setting and validating the result separates the
update from the sampling, at about a third of a real run's cost per variant. A variant with no changes must land on
the run's recorded step-1 validation: that checks the replay. ``--random-control SEED`` adds the control for the
update's direction: the cold start moved as far as a first AdamW step moves a weight, in random signs.

    python bench/first_step_probe.py runs/spread3/bf16/seed-2/grpo --variant base={} --variant 'lr1e-5={lr: 1.0e-5}' \
        --random-control 0
    python bench/first_step_probe.py RUN/grpo --variant 'anchor={anchor_coef: 0.1, anchor_data: RUN/synth/sft_demos.jsonl}'

Prints one JSON record: per variant its settings, the update's diagnostics (KL, update size, trained tokens) and
its greedy validation success overall and by kind and a digest of its validation conversations, beside the run's own
candidates at steps 0 and 1 (the run's settings replayed must give step 1's digest), and each random control's.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Callable

import torch
import yaml

from muarl.demo.stages import solved_by_group, task_group
from muarl.evals.paired import success_rates
from muarl.rollout.store import latest_per_key, read_episodes
from muarl.train.config import GRPOConfig
from muarl.train.metrics import update_size
from muarl.train.selection import Selection
from muarl.train.trainer import GRPOTrainer


def first_step_groups(run: Path) -> list[list]:
    """Step 1's groups as the run formed them: its rounds in order, one group per task."""
    groups: dict[str, list] = defaultdict(list)
    for path in sorted((run / "rollouts").glob("step-000001*.jsonl")):
        for episode in latest_per_key(read_episodes(path)[0]):
            groups[episode.task_id].append(episode)
    if not groups:
        raise SystemExit(f"{run / 'rollouts'} holds no step-1 episodes (the run kept no rollouts?)")
    return list(groups.values())


def transcripts(episodes: list) -> str:
    """A digest of the validation conversations (every message, in task order): equal digests, equal episodes."""
    h = hashlib.sha256()
    for e in sorted(episodes, key=lambda e: e.task_id):
        h.update(json.dumps([e.task_id, [m.model_dump(mode="json") for m in e.messages]], sort_keys=True).encode())
    return h.hexdigest()[:16]


def probe(cfg: GRPOConfig, groups: list[list], changes: dict) -> tuple[dict, dict[str, str]]:
    """One variant: the cold start, one update on step 1's groups under ``changes``, then validation; its record
    and the kind of each validation task."""
    def update(trainer: GRPOTrainer) -> dict:
        samples, stats = trainer.training_samples(groups)
        losses = trainer.update(samples)
        return {"changes": changes, "trained_episodes": len(samples), "groups": stats["groups"],
                **{k: losses[k] for k in ("kl", "update_size", "grad_norm", "trained_tokens", "anchor_nll") if k in losses}}
    return validated_after(GRPOConfig(**{**cfg.model_dump(), **changes}), update)


def random_control(cfg: GRPOConfig, seed: int) -> tuple[dict, dict[str, str]]:
    """The control for a first update's direction: every trainable weight of the cold start moved by the run's
    first-step learning rate in a seeded random sign, the most a first AdamW step moves any weight (m / sqrt(v) is
    sign(g) where |g| is far above eps), then validated. A kind of task the real update loses and this keeps was
    lost to what the update learned, not to a step of that size."""
    def move(trainer: GRPOTrainer) -> dict:
        rate = trainer.optimizer.param_groups[0]["lr"]  # the first step's, as the trainer's scheduler set it (warmup)
        before = [p.detach().clone() for p in trainer.params]
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in trainer.params:
                p.add_(torch.randn(p.shape, generator=generator).sign().to(p.dtype), alpha=rate)
        trainer.policy_is_reference = False
        return {"random_seed": seed, "rate": rate, "update_size": update_size(before, trainer.params)}
    return validated_after(cfg, move)


def validated_after(cfg: GRPOConfig, change: Callable[[GRPOTrainer], dict]) -> tuple[dict, dict[str, str]]:
    """The cold start under ``cfg``, changed once by ``change`` (which returns its part of the record), then
    validated greedily as the run validated step 1; the record and the kind of each validation task."""
    with tempfile.TemporaryDirectory() as scratch:
        trainer = GRPOTrainer(cfg.model_copy(update={"out": scratch, "plot": False, "keep_rollouts": False}), progress=False)
        try:
            row = change(trainer)
            trainer.step = 1
            episodes = trainer.validation_episodes()
        finally:
            trainer.close()
        kinds = {t.id: task_group(t) for t in trainer.val_tasks}
        scored = [e for e in episodes if e.reward is not None]
        row.update({"val_success": sum(e.succeeded for e in scored) / len(scored),
                    "val_by_kind": solved_by_group(success_rates(scored), kinds), "val_transcripts": transcripts(episodes)})
    del trainer
    gc.collect()  # one model, its reference and its optimizer at a time
    return row, kinds


def recorded(run: Path, kinds: dict[str, str]) -> list[dict]:
    """The run's own validation at steps 0 and 1, by kind when its episodes were kept."""
    rows = []
    for r in Selection.load(run).history:
        if r["step"] > 1:
            continue
        path = run / "validation" / f"step-{r['step']:06d}.jsonl"
        episodes = latest_per_key(read_episodes(path)[0]) if path.is_file() else None
        rows.append({"step": r["step"], "val_success": r["success"], "val_by_kind": episodes and solved_by_group(success_rates(episodes), kinds),
                     "val_transcripts": episodes and transcripts(episodes)})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a GRPO run directory that kept its rollouts and validated (config.yaml, rollouts/)")
    p.add_argument("--variant", action="append", required=True,
                   help="LABEL=YAML mapping of GRPO settings to change, e.g. 'lr1e-5={lr: 1.0e-5}' (repeat; 'base={}' is the run's own)")
    p.add_argument("--random-control", type=int, action="append", default=[], metavar="SEED",
                   help="also validate the cold start moved by the first step's rate in random signs (repeat for more seeds)")
    args = p.parse_args()
    cfg = GRPOConfig.load(args.run / "config.yaml")
    variants = {}
    for spec in args.variant:
        label, _, text = spec.partition("=")
        changes = yaml.safe_load(text) or {}
        if not label or not isinstance(changes, dict):
            raise SystemExit(f"--variant {spec!r}: expected LABEL=YAML mapping")
        variants[label] = changes
    groups = first_step_groups(args.run)
    out = {"run": str(args.run), "model": cfg.model.name, "precision": cfg.model.precision, "variants": {}}
    for label, changes in variants.items():
        out["variants"][label], kinds = probe(cfg, groups, changes)
        print(json.dumps({label: out["variants"][label]}), file=sys.stderr, flush=True)  # as it ends: a variant takes minutes
    for seed in args.random_control:
        row, kinds = random_control(cfg, seed)
        out.setdefault("random_controls", []).append(row)
        print(json.dumps({"random_control": row}), file=sys.stderr, flush=True)
    out["recorded"] = recorded(args.run, kinds)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
