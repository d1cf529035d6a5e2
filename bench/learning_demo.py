"""The learning demonstration's full form: ``muarl demo --full`` (its options pass through).

    OMP_WAIT_POLICY=PASSIVE python bench/learning_demo.py --out runs/learning-demo            # ~2 h on 2 cores
    OMP_WAIT_POLICY=PASSIVE python bench/learning_demo.py --out runs/learning-demo --resume   # after an interruption

150 held-out clinic-lite test tasks, the cold start calibrated by the recorded pilot, GRPO time-boxed, and the
compute-matched SFT control; results.md holds the table with McNemar p-values and paired CIs. The stages and
their summaries are described in ``muarl.demo.run``; the figures it produced are in docs/benchmarks.md.
"""

from __future__ import annotations

import sys

from muarl.cli.demo import demo

if __name__ == "__main__":
    demo.main(["--full", *sys.argv[1:]], prog_name="bench/learning_demo.py")
