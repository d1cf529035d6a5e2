"""Any model's greedy success on a GRPO run's validation tasks: what ``select_checkpoint: best_val`` would have seen.

A run that chose its checkpoint on validation recorded only its own candidates. To ask what the choice would have
made of another run's model (issue 21's run 3, trained before validation existed, whose last checkpoint lost level-2
tasks), this scores that model on the same held-out train tasks, through the same trainer code and settings (the
run's recorded ``grpo/config.yaml``, its seed and so its draw of validation tasks), and prints the success overall
and by kind of task, beside the run's own recorded candidates.

    python bench/validate_checkpoint.py runs/spread3/bf16/seed-1/grpo runs/spread2/bf16/seed-1/grpo/checkpoints/step-000003/model
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from muarl.demo.stages import solved_by_group, task_group
from muarl.evals.paired import success_rates
from muarl.train.config import GRPOConfig
from muarl.train.selection import Selection
from muarl.train.trainer import validate_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a GRPO run directory that validated (holds config.yaml and checkpoints/selection.json)")
    p.add_argument("model", help="the model to score (a directory of HF weights, or a registered name)")
    args = p.parse_args()
    cfg = GRPOConfig.load(args.run / "config.yaml")
    with tempfile.TemporaryDirectory() as scratch:
        validation = validate_model(cfg, args.model, Path(scratch))
    episodes = validation.episodes
    kinds = {t.id: task_group(t) for t in validation.tasks}
    print(json.dumps({
        "model": args.model, "val_tasks": len(episodes), "success": sum(e.succeeded for e in episodes) / len(episodes),
        "by_kind": solved_by_group(success_rates(episodes), kinds),
        "the run's candidates": [{"step": r["step"], "success": r["success"]} for r in Selection.load(args.run).history],
    }, indent=1))


if __name__ == "__main__":
    main()
