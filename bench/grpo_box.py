"""How many GRPO steps the learning demo's time box fits, with the muarl that is on ``PYTHONPATH`` (issue 24).

The demo's GRPO stage, run as the demo runs it (``muarl.demo.stages.stage_grpo``) from a finished run's cold
start: that run's settings (its ``demo_config.json``; ``--minutes`` sets the box), its GRPO task pool (the
train tasks its cold start did not see, from its synth stage) and its seed, into a directory of its own. Run
once with this tree and once with an older tree's ``src`` on ``PYTHONPATH``, on the same idle machine, to
compare engines and trainers by what the box buys: steps, and per step the rollout and update seconds. With
``--grpo`` it runs a variant of the run's GRPO (say ``'{mini_batches: 2}'``) from the same cold start and prints the
model it hands on, for ``bench/score_on_test.py`` to score on the run's held-out tasks; with ``anchor_coef`` in
``--grpo`` the anchor is the run's own SFT demonstrations. With ``--seed`` it runs the
same GRPO again under another seed (its validation split, task order and samples): how far one protocol's result
moves from one cold start by GRPO's own draws, the noise any two protocols' difference must stand out from.

    python bench/grpo_box.py --run runs/spread/bf16/seed-0 --out /tmp/box-new
    git archive f1888bb src | tar -x -C /tmp/old && PYTHONPATH=/tmp/old/src python bench/grpo_box.py --run ... --out /tmp/box-old

The run's settings are read through the tree's own ``DemoConfig``, keeping only the fields that tree knows, so
an older tree runs the settings it can express. Prints one JSON object.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import json
import platform
from pathlib import Path

import yaml

import muarl
from muarl.demo import stages
from muarl.demo.config import DemoConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a demo run whose synth and sft stages are done")
    parser.add_argument("--out", type=Path, required=True, help="where the GRPO stage runs (a new directory)")
    parser.add_argument("--minutes", type=float, help="the box (default: the run's grpo_minutes)")
    parser.add_argument("--grpo", type=yaml.safe_load, default={}, metavar="YAML",
                        help="GRPO settings over the run's (e.g. '{mini_batches: 2}'): a variant of its GRPO from its cold start")
    parser.add_argument("--steps", type=int, help="GRPO steps at most (default: the run's grpo_steps); with a --minutes the box "
                        "cannot end, a variant compared with another run at its number of steps")
    parser.add_argument("--seed", type=int, help="GRPO's seed (default: the run's; the cold start is the run's either way)")
    args = parser.parse_args()

    saved = json.loads((args.run / "demo_config.json").read_text(encoding="utf-8"))
    known = {k: v for k, v in saved.items() if k in DemoConfig.model_fields}
    known["grpo"] = {**known.get("grpo", {}), **args.grpo}
    if args.steps is not None:
        known["grpo_steps"] = args.steps
    if args.seed is not None:
        known["seed"] = args.seed  # only the GRPO stage runs here: the seed reaches no other stage
    cfg = DemoConfig(**{**known, "out": str(args.out), **({"grpo_minutes": args.minutes} if args.minutes else {})})
    synth = json.loads((args.run / "synth" / "stage.json").read_text(encoding="utf-8"))
    sft = json.loads((args.run / "sft" / "stage.json").read_text(encoding="utf-8"))
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"{args.out} is not empty: each measurement needs a fresh directory")
    args.out.mkdir(parents=True, exist_ok=True)

    result = stages.stage_grpo(cfg, args.out, sft["model"], synth["grpo_task_ids"], progress=False,
                               demos=args.run / "synth" / stages.SFT_DEMOS)
    rows = [json.loads(line) for line in (args.out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    print(json.dumps({
        "muarl": str(Path(muarl.__file__).resolve().parents[1]), "run": str(args.run), "box_minutes": cfg.grpo_minutes,
        "seed": cfg.seed, "grpo": cfg.grpo, "steps": result["steps"], "minutes": round(result["minutes"], 2), "cpu_minutes": round(result["cpu_minutes"], 2),
        # the model the stage hands on (its chosen checkpoint when it validates), for bench/score_on_test.py
        "model": result["model"], "chosen_step": result.get("chosen_step"),
        "per_step": [{k: round(r[k], 1 if k.endswith("seconds") else 4) if isinstance(r.get(k), float) else r.get(k)
                      for k in ("step", "episodes", "rollout_seconds", "update_seconds", "cpu_seconds", "rollout_tokens_per_s",
                                "success_rate", "anchor_nll") if k in r} for r in rows],
        "cpu": cpu_name(), "threads": os.environ.get("OMP_NUM_THREADS"), "python": platform.python_version(),
    }, indent=2))


def cpu_name() -> str | None:
    """The CPU's model name, read here so that an older tree without ``muarl.models.precision.cpu_model`` runs too."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


if __name__ == "__main__":
    main()
