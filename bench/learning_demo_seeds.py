"""The learning claim over seeds and precisions: ``muarl demo --full`` once per (precision, seed), one table.

    OMP_WAIT_POLICY=PASSIVE python bench/learning_demo_seeds.py --seeds 0,1,2 --precisions fp32,bf16 --out runs/spread
    OMP_WAIT_POLICY=PASSIVE python bench/learning_demo_seeds.py ... --resume     # after an interruption
    python bench/learning_demo_seeds.py --out runs/spread --from-records bench/results/learning_spread

``--records DIR`` keeps each run's results in DIR as soon as the run ends (one file per precision, seed and CPU;
a file there of another experiment under the same name is refused before the first run starts), and
``--from-records DIR`` writes the table over every run kept there without running anything: runs made in
different sessions or on different machines add up to one spread.

Each run goes to ``OUT/<precision>/seed-N`` (its own results.md; ``OUT/<precision>/spread.md`` covers that
precision), and ``OUT/spread.md`` covers every run: each run's RL - SFT and RL - control with McNemar p and paired
CI, the mean and range, and per kind of held-out task the falls from the cold start of more than 10 points
(``muarl.demo.spread``). About 100 minutes per run on an idle 2-core machine; a bf16 arm needs a CPU with
AVX-512-BF16 or AMX to be worth running (elsewhere bf16 training is an order of magnitude slower).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from muarl.cli.train import prepare_threads
from muarl.config import ConfigError
from muarl.demo.config import form_config
from muarl.demo.run import check_records, run_seeds
from muarl.demo.spread import load_records, record_name, spread_markdown, write_spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grpo-minutes", type=float, help="GRPO time box (default: the full form's 30)")
    parser.add_argument("--resume", action="store_true", help="continue the runs in --out, skipping finished stages")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--records", type=Path, help="keep each finished run's results here")
    parser.add_argument("--from-records", type=Path, help="run nothing: the table over every run kept in this directory")
    args = parser.parse_args()
    if args.from_records:
        print(spread_markdown(write_spread(args.out, load_records(args.from_records))))
        return
    prepare_threads()
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    seeds = [int(s) for s in args.seeds.split(",")]
    cfgs = [form_config("full", out=str(args.out / p), precision=p, grpo_minutes=args.grpo_minutes) for p in args.precisions.split(",")]
    runs = []
    try:  # every precision's records checked before the first run, each run's kept as it ends
        if args.records:
            for cfg in cfgs:
                check_records(cfg, seeds, args.records)
        for cfg in cfgs:
            run_seeds(cfg, seeds, resume=args.resume, progress=not args.quiet, records=args.records)
            runs += [json.loads((Path(cfg.out) / f"seed-{seed}" / "results.json").read_text(encoding="utf-8")) for seed in seeds]
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    for results in runs if args.records else []:  # each kept as its run ended; said here too under --quiet
        print(f"kept {args.records / record_name(results)}")
    print(spread_markdown(write_spread(args.out, runs)))


if __name__ == "__main__":
    main()
