"""Rows joining and leaving a ``RowBatch``, without the model: this tree's against an older tree's, in one process.

The batch's copies alone, on SmolLM2's cache shapes (30 layers, 3 key-value heads of 64, float32): ``--rows``
sessions of ~``--context`` tokens join at once (a turn's start); then ``--steps`` decode steps each append one
token to every row (``cache.update``, as the model does), and every ``--every`` steps one row leaves and comes
back ``--every`` steps later with ``--feed`` more tokens (its tool result and next prompt), as in continuous
batching. Both engines run the same script, alternating ``--rounds`` times; the figure is the median CPU time.
The older tree's ``kv_cache.py`` (a ``src`` folder from ``git archive``) is loaded from its file: it imports
nothing else from muarl.

    nice -n 19 python bench/row_batch_churn.py --old-src /tmp/old/src [--rows 16] [--context 2000]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported

import argparse
import importlib.util
import json
import platform
import statistics
import time
from pathlib import Path
from types import ModuleType

import torch

from muarl.models import kv_cache

LAYERS, HEADS, HEAD_DIM = 30, 3, 64  # SmolLM2-135M


def load_old(src: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("old_kv_cache", Path(src) / "muarl" / "models" / "kv_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def append(cache: object, rows: int, tokens: int) -> None:
    for layer in range(LAYERS):
        states = torch.randn(rows, HEADS, tokens, HEAD_DIM)
        cache.update(states, states, layer)


def churn(module: ModuleType, args: argparse.Namespace) -> float:
    """CPU seconds of the script above with ``module``'s caches and ``RowBatch``."""
    def session(n: int) -> object:
        cache = module.growing_cache(None)
        append(cache, 1, n)
        return cache

    def join(batch: object, caches: list) -> None:
        if module is kv_cache:
            batch.add(caches)
        else:  # the old RowBatch took one row per call
            for cache in caches:
                batch.add(cache)

    sessions = [session(args.context + 37 * i) for i in range(args.rows)]
    start = time.process_time()
    batch = module.RowBatch()
    join(batch, sessions)
    away = None
    for step in range(1, args.steps + 1):
        append(batch.cache, len(batch), 1)
        batch.advance()
        if step % args.every == 0:
            if away is not None:
                append(away, 1, args.feed)
                join(batch, [away])
            taken = batch.remove([step // args.every % len(batch)])
            (away,) = taken[0] if isinstance(taken, tuple) else taken  # RowBatch.remove also says the rows' new order now
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old-src", required=True)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--context", type=int, default=2000)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--feed", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    engines = {"old": load_old(args.old_src), "new": kv_cache}
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for arm in ("old", "new") if r % 2 == 0 else ("new", "old"):
            seconds[arm].append(round(churn(engines[arm], args), 2))
    median = {arm: statistics.median(s) for arm, s in seconds.items()}
    print(json.dumps({
        "rows": args.rows, "context": args.context, "steps": args.steps, "every": args.every, "feed": args.feed,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "cpu_seconds": seconds, "median_cpu_seconds": median, "old_over_new": round(median["old"] / median["new"], 2),
    }, indent=1))


if __name__ == "__main__":
    main()
