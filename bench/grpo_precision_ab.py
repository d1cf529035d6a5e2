"""A fixed number of GRPO steps from one cold start and one seed, in each precision: what differs step by step.

The demo's GRPO settings (``muarl.demo.config.GRPO_DEFAULTS``) on the demo's world and GRPO task pool, run for
``--steps`` steps (a step count, not a time box: on a shared CPU a box would give each arm a different number of
steps), once per precision. Per step it reports which train tasks the step drew (by kind: level x change of mind),
how many groups carried signal, the sampled success, the update size (relative parameter change), the entropy, the
KL to the cold start, the sampler/trainer log-prob gap and the process CPU seconds.

    OMP_WAIT_POLICY=PASSIVE python bench/grpo_precision_ab.py --model runs/demo/sft/run/model \
        --grpo-tasks runs/demo/synth/stage.json --steps 2 --tasks-per-step 4 --out /tmp/ab

Each arm's run directory (metrics.jsonl, rollouts/step-*.jsonl) is kept under ``--out``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from muarl.demo import stages as st
from muarl.demo.config import DemoConfig
from muarl.rollout.store import read_episodes
from muarl.train.plot import read_metrics
from muarl.train.trainer import GRPOTrainer

COLUMNS = ("success_rate", "groups", "uniform_ratio", "update_size", "grad_norm", "entropy", "kl", "sampler_logprob_gap",
           "cpu_seconds")


def kinds_drawn(run: Path, step: int, kind_of: dict[str, str]) -> str:
    """The kinds of the tasks a step rolled out (every round), e.g. ``level 1: 2, level 2, changes mind: 1``."""
    ids = {e.task_id for f in sorted((run / "rollouts").glob(f"step-{step:06d}*.jsonl")) for e in read_episodes(f)[0]}
    return ", ".join(f"{k}: {n}" for k, n in sorted(Counter(kind_of[i] for i in ids).items()))


def run_arm(model: str, task_ids: list[str] | None, precision: str, steps: int, grpo: dict, seed: int, out: Path) -> list[dict]:
    cfg = DemoConfig(out=str(out), precision=precision, seed=seed, grpo_steps=steps, grpo=grpo)
    pool = st._pool(cfg, "train")
    ids = [t.id for t in pool] if task_ids is None else task_ids
    trainer = GRPOTrainer(st.grpo_config(cfg, out, model, ids), progress=False)
    try:
        trainer.start(resume=True)
        trainer.train()
    finally:
        trainer.close()
    kind_of = {t.id: st.task_group(t) for t in pool}
    return [{"precision": trainer.cfg.model.precision, "step": r["step"], "drawn": kinds_drawn(out, r["step"], kind_of),
             **{k: r.get(k) for k in COLUMNS}} for r in read_metrics(out)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="cold-start model directory")
    parser.add_argument("--grpo-tasks", type=Path, help="a demo's synth/stage.json: its grpo_task_ids (default: every train task)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tasks-per-step", type=int, help="override the demo's tasks per step (8)")
    parser.add_argument("--rounds", type=int, help="override the demo's dynamic-sampling rounds (2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ids = json.loads(args.grpo_tasks.read_text())["grpo_task_ids"] if args.grpo_tasks else None
    grpo = {k: v for k, v in (("tasks_per_step", args.tasks_per_step), ("max_sampling_rounds", args.rounds)) if v is not None}
    rows = [row for p in args.precisions.split(",") for row in run_arm(args.model, ids, p, args.steps, grpo, args.seed, args.out / p)]
    print("| precision | step | tasks drawn (kind: n) | success | groups | uniform | update size | grad norm | entropy | KL | "
          "sampler gap | CPU s |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        def f(key: str, fmt: str) -> str:
            return "n/a" if r[key] is None else format(r[key], fmt)
        print(f"| {r['precision']} | {r['step']} | {r['drawn']} | {f('success_rate', '.3f')} | {f('groups', '.0f')} | "
              f"{f('uniform_ratio', '.2f')} | {f('update_size', '.2e')} | {f('grad_norm', '.3f')} | {f('entropy', '.4f')} | "
              f"{f('kl', '.5f')} | {f('sampler_logprob_gap', '.4f')} | {f('cpu_seconds', '.0f')} |")
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
