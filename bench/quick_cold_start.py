"""Calibrate the quick form's cold start: how sampled success on GRPO's tasks grows with SFT steps.

The README's main command (``muarl demo``, the quick form) shows RL helping only if GRPO's first step samples
some successes: a group of 8 episodes that all fail carries no advantage (learning-demo design note: aim for
25-50% sampled success at temperature 1). In the eighteenth session its 3-step cold start sampled 0 of 16, so
GRPO changed nothing. This pilot trains the quick form's cold start once, for the longest candidate, keeping its
weights at each candidate step (a constant learning rate and a seeded row order make step N's weights an N-step
cold start's), and for each candidate measures what the demo would meet:

- sampled success at temperature 1 on the first ``--sampled-tasks`` of GRPO's task order (the quick form's first
  step takes the first 2), ``group_size`` episodes each, through the trainer's own rollout code; the groups that
  carry signal (some but not all succeed); success by kind of task;
- greedy success on the quick form's held-out tasks (its "+ cold-start SFT" row).

    python bench/quick_cold_start.py --out /tmp/quick-cal --steps 3,6,9

Resumable per stage (synth and the SFT run are skipped when done); prints one JSON record and writes it to
``OUT/calibration.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import yaml

from muarl.demo import stages as st
from muarl.demo.config import form_config
from muarl.demo.run import check_out_dir, run_stage
from muarl.rollout.store import atomic_write_text
from muarl.train.plot import read_metrics
from muarl.train.trainer import GRPOTrainer, has_signal


def candidate_model(sft_run: Path, step: int, last: int) -> Path:
    return sft_run / ("model" if step == last else f"model-step-{step:06d}")


def sampled(cfg, model: Path, task_ids: list[str], n_tasks: int, scratch: Path) -> dict:
    """The candidate sampled as GRPO's first step samples the cold start: the trainer's task order, group size,
    temperature and step seed."""
    settings = st.grpo_config(cfg, scratch, str(model), task_ids)
    settings = settings.model_copy(update={"kl_coef": 0.0, "keep_rollouts": False, "plot": False})
    t0 = time.perf_counter()
    trainer = GRPOTrainer(settings, progress=False)
    try:
        groups = trainer.rollout(trainer.next_tasks(n_tasks))
    finally:
        trainer.close()
    episodes = [e for g in groups for e in g if e.reward is not None]
    kinds = {t.id: st.task_group(t) for t in trainer.tasks}
    by_kind, sizes = Counter(kinds[e.task_id] for e in episodes if e.succeeded), Counter(kinds[e.task_id] for e in episodes)
    return {"episodes": len(episodes), "success": sum(e.succeeded for e in episodes) / max(1, len(episodes)),
            "per_task": [sum(e.succeeded for e in g) for g in groups],
            "groups_with_signal": sum(has_signal(g) for g in groups), "groups": len(groups),
            "first_step_groups_with_signal": sum(has_signal(g) for g in groups[:cfg.grpo_fields["tasks_per_step"]]),
            "by_kind": {k: f"{by_kind[k]}/{sizes[k]}" for k in sorted(sizes)},
            "errored": sum(e.errored for g in groups for e in g),
            "minutes": (time.perf_counter() - t0) / 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", default="3,6,9", help="candidate cold-start lengths, in SFT steps")
    parser.add_argument("--lr", type=float, default=None, help="cold-start learning rate (default: the quick form's)")
    parser.add_argument("--sampled-tasks", type=int, default=8, help="GRPO tasks sampled per candidate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=YAML",
                        help="another demo setting over the quick form's (e.g. model=tiny-random, 'grpo={group_size: 2}')")
    args = parser.parse_args()
    steps = sorted({int(s) for s in args.steps.split(",")})
    fields = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    cfg = form_config("quick", **fields, out=args.out, seed=args.seed, sft_lr=args.lr, sft_max_steps=steps[-1], sft_epochs=1000.0)
    out = check_out_dir(cfg, resume=True)
    synth = run_stage(out, "synth", lambda d: st.stage_synth(cfg, d, True))
    sft = run_stage(out, "sft", lambda d: st.stage_sft(cfg, d, out / "synth" / st.SFT_DEMOS, True, save_every=1))
    sft_run = Path(sft["model"]).parent
    losses = [row["loss"] for row in read_metrics(sft_run)]
    rows = []
    for step in steps:
        model = candidate_model(sft_run, step, sft["steps"])
        greedy = run_stage(out, f"eval-step-{step}", lambda d: st.evaluate_model(str(model), st.eval_tasks(cfg), cfg, d, True, True,
                                                                                f"greedy, {step} steps"))
        draws = run_stage(out, f"sampled-step-{step}", lambda d: sampled(cfg, model, synth["grpo_task_ids"], args.sampled_tasks, d / "grpo"))
        rows.append({"sft_steps": step, "loss": losses[step - 1], "greedy_success": greedy["success"],
                     "greedy_by_task": greedy["per_task"], "sampled": {k: v for k, v in draws.items() if k != "others_cpus"}})
    record = {"config": {"model": cfg.model, "precision": cfg.precision, "lr": cfg.sft_lr, "demos": cfg.sft_demos,
                         "sampled_tasks": args.sampled_tasks, "group_size": cfg.grpo_fields["group_size"], "seed": args.seed},
              "sft_cpu_minutes": sft["cpu_minutes"], "sft_minutes": sft["minutes"], "candidates": rows}
    atomic_write_text(out / "calibration.json", json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
