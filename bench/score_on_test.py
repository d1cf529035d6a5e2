"""Any model scored on a learning-demo run's held-out test tasks, paired against the run's own models: a diagnostic,
never a way to choose one.

A run that chooses its checkpoint on validation (``select_checkpoint: best_val``) hands on one model; what the others
would have scored on the test tasks is a question for the post-mortem (issue 21's seed-2 run handed back its cold
start: what did its last step, which protocol 1 would have handed on, score?). This evaluates ``MODEL`` exactly as the
demo's evaluation stages do (the run's ``demo_config.json``: its seeded test tasks, scripted user, turn limit,
context, precision), writes the episodes to ``--out`` (resumable), and prints its success overall and by kind beside
each of the run's evaluated models, with the paired difference (exact McNemar p, bootstrap CI).

    python bench/score_on_test.py runs/spread3/bf16/seed-2 runs/spread3/bf16/seed-2/grpo/checkpoints/step-000003/model \\
        --out runs/spread3/bf16/seed-2/eval_step3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from muarl.demo import stages as st
from muarl.demo.config import DemoConfig
from muarl.demo.run import CONFIG_FILE
from muarl.evals.paired import compare, success_rates
from muarl.rollout.store import latest_per_key, read_episodes

RUN_MODELS = {"cold start": "eval_sft", "control": "eval_control", "RL": "eval_rl"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a learning-demo run directory (holds demo_config.json and its eval_* stages)")
    p.add_argument("model", help="the model to score (a directory of HF weights, or a registered name)")
    p.add_argument("--out", type=Path, required=True, help="where its episodes go (an existing file is resumed)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args()
    cfg = DemoConfig.model_validate_json((args.run / CONFIG_FILE).read_text(encoding="utf-8"))
    tasks = st.eval_tasks(cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    scored = st.evaluate_model(args.model, tasks, cfg, args.out, resume=True, progress=not args.quiet, desc="eval")
    kinds = {t.id: st.task_group(t) for t in tasks}
    ours = scored["per_task"]
    out = {"model": args.model, "tasks": len(ours), "success": scored["success"], "ci95": scored["ci95"],
           "by_kind": st.solved_by_group(ours, kinds), "against": {}}
    for name, stage in RUN_MODELS.items():
        path = args.run / stage / st.EPISODES_FILE
        if path.is_file():
            theirs = success_rates(latest_per_key(read_episodes(path, outcomes_only=True)[0]))
            out["against"][name] = {"by_kind": st.solved_by_group(theirs, kinds), **compare(ours, theirs).to_json()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
