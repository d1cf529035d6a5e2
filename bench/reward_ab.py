"""The reward A/B of issue 25: from one cold start per seed, GRPO once per reward, scored on the same held-out tasks.

    OMP_WAIT_POLICY=PASSIVE python bench/reward_ab.py --out runs/reward_ab --seeds 0,1,2 --arm outcome --arm process
    OMP_WAIT_POLICY=PASSIVE python bench/reward_ab.py --out runs/reward_ab --seeds 0,1,2 --arm outcome --arm process \\
        --arm checklist --resume        # after an interruption, or to add an arm to finished seeds
    # one seed a session, each kept; then the table over every seed kept
    OMP_WAIT_POLICY=PASSIVE python bench/reward_ab.py --out runs/reward_ab --seeds 0 --records bench/results/reward_ab
    python bench/reward_ab.py --out runs/reward_ab --from-records bench/results/reward_ab
    # the quarantine experiment: GRPO against a user who leaves its script in 20% of its replies
    OMP_WAIT_POLICY=PASSIVE python bench/reward_ab.py --out runs/quarantine_ab --seeds 0,1,2 --grpo-user scripted:faulty:0.2 \\
        --arm plain=outcome --arm '{label: quarantined, reward: outcome, grpo: {quarantine_user_faults: true}}'

The full form of ``muarl demo`` (150 held-out clinic-lite tasks, the calibrated cold start, GRPO's 30 minutes)
with no control, its stages reused (:mod:`muarl.demo.reward_ab`): per seed ``OUT/seed-N`` holds the shared cold
start and each arm's ``grpo-<arm>`` / ``eval-<arm>``; ``OUT/reward_ab.md`` is the one table (success and its
paired difference from the first arm with McNemar p and bootstrap CI, confirmed-before-write violations on
change-of-mind tasks, turns after completion) and ``OUT/seed-N/violations_per_step.png`` the violation rates per
GRPO step of every arm. An arm: a reward name, ``LABEL=REWARD`` (REWARD a name or a YAML ``{name, options}``),
or a YAML ``{label, reward, grpo}`` mapping. About 45 minutes per arm and 25 for the shared cold start per seed
on an idle 2-core machine; GRPO's minutes are wall minutes, so run it on an idle machine. ``--records DIR`` keeps
each seed's record in DIR as soon as the seed ends (one file per precision, seed and CPU, as the learning claim's
records; a file there of another experiment under that name is refused before the first stage), so seeds run on
different days make one table (``--from-records DIR``, which runs nothing).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from muarl.cli.train import prepare_threads
from muarl.config import ConfigError
from muarl.demo.config import PILOT, form_config
from muarl.demo.reward_ab import ab_markdown, parse_arm, run_reward_ab, write_ab
from muarl.demo.spread import load_records, record_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--arm", action="append", help="an arm (repeat; the first is the baseline) [outcome, process]")
    parser.add_argument("--grpo-user", help="the user GRPO trains against (default scripted)")
    parser.add_argument("--grpo-minutes", type=float, help="GRPO time box per arm (default: the full form's 30)")
    parser.add_argument("--eval-tasks", type=int, help="held-out tasks (default: the full form's 150)")
    parser.add_argument("--precision", choices=["auto", "bf16", "fp32"])
    parser.add_argument("--sft-revising-demos", type=int, help="of the cold start's demonstrations, how many are held with the "
                        "user who changes their mind, the oracle re-confirming the revised value (default 0)")
    parser.add_argument("--pilot", action="store_true", help="a smoke run on the tiny random model, in minutes: measures nothing")
    parser.add_argument("--resume", action="store_true", help="continue the runs in --out, skipping finished stages")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--records", type=Path, help="keep each finished seed's record here")
    parser.add_argument("--from-records", type=Path, help="run nothing: the table over every seed kept in this directory")
    args = parser.parse_args()
    if args.from_records:
        print(write_ab(args.out, load_records(args.from_records)))
        return
    prepare_threads()
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    sizes = dict(PILOT) if args.pilot else {}
    eval_tasks = args.eval_tasks or sizes.pop("eval_tasks", None)
    cfg = form_config("full", **{**sizes, "out": str(args.out), "grpo_user": args.grpo_user, "grpo_minutes": args.grpo_minutes,
                                 "eval_tasks": eval_tasks, "base_eval_tasks": None if eval_tasks is None else min(eval_tasks, 30),
                                 "precision": args.precision or sizes.get("precision"), "control": False,
                                 "sft_revising_demos": args.sft_revising_demos})
    try:  # bad arms, or a --records directory keeping another experiment, are refused before the first stage
        arms = [parse_arm(a) for a in args.arm or ["outcome", "process"]]
        records = run_reward_ab(cfg, arms, [int(s) for s in args.seeds.split(",")], resume=args.resume,
                                progress=not args.quiet, records=args.records)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    for record in records if args.records else []:  # each kept as its seed ended; said here too under --quiet
        print(f"kept {args.records / record_name(record)}")
    print(ab_markdown(records))


if __name__ == "__main__":
    main()
