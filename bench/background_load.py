"""How much one low-priority busy process slows torch's threads: is a learning run's machine really idle enough?

A learning run's GRPO stage is boxed in wall-clock minutes, so anything that slows it changes how much it trains.
A ``nice -n 19`` process never takes the CPU from a normal one, but torch's worker threads sleep between parallel
regions (``OMP_WAIT_POLICY=PASSIVE``) and, woken, may wait behind whatever runs on the other core; each parallel
region then runs at its slower thread's speed. This times a 2-thread workload of the local engine's shape (a bf16
``linear`` of 64 rows through an MLP weight: the decode step's largest kind of product) for ``--seconds``, alone and
beside one ``nice -n 19`` busy loop, ``--rounds`` times, and prints products per second, the cores the process used
(its CPU time over wall time) and the ratio.

    python bench/background_load.py [--seconds 8] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the demo and the trainer run

import argparse
import json
import subprocess
import sys
import time

import torch


def throughput(seconds: float) -> tuple[float, float]:
    """(products per second, cores used) of the workload over ``seconds``."""
    x = torch.randn(64, 576, dtype=torch.bfloat16)
    w = torch.randn(1536, 576, dtype=torch.bfloat16)
    count, t0, cpu0 = 0, time.perf_counter(), time.process_time()
    with torch.inference_mode():
        while time.perf_counter() - t0 < seconds:
            for _ in range(50):
                torch.nn.functional.linear(x, w)
            count += 50
    wall = time.perf_counter() - t0
    return count / wall, (time.process_time() - cpu0) / wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    throughput(1.0)  # warm-up
    rounds = []
    for _ in range(args.rounds):
        alone = throughput(args.seconds)
        hog = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5)
            beside = throughput(args.seconds)
        finally:
            hog.kill()
            hog.wait()
        time.sleep(0.5)
        rounds.append({"alone_per_s": round(alone[0]), "alone_cores": round(alone[1], 2), "beside_per_s": round(beside[0]),
                       "beside_cores": round(beside[1], 2), "ratio": round(beside[0] / alone[0], 3)})
    print(json.dumps({"threads": args.threads, "torch": torch.__version__, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
