"""Memory and crash exposure of a long in-process rollout: episodes kept in memory or only on disk.

``muarl rollout`` runs the clinic's oracle agent against the scripted user for ``--episodes`` episodes (the test
split's tasks × enough trials) through ``rollout.runner.run_many``. Two arms, each in a fresh subprocess so its
peak RSS is its own:

- **kept**: ``keep_episodes=True``, every finished episode also held in memory (what a caller that wants the
  episodes back, e.g. the trainer, gets; what every rollout did before the runner wrote and forgot them);
- **disk**: ``keep_episodes=False``, then the summary read back with ``read_episodes(outcomes_only=True)``
  (what ``muarl rollout`` and ``muarl eval`` do now).

Each arm reports its peak RSS (``ru_maxrss``), its wall time, and when its first episode reached the disk
(the crash exposure: a kill before that moment loses everything). The ratio kept / disk is the figure.

    OMP_WAIT_POLICY=PASSIVE python bench/runner_memory.py [--episodes 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def arm(kind: str, episodes: int) -> dict[str, float]:
    """Run one arm in this process; returns its figures."""
    from muarl.domains import load_domain
    from muarl.models.oracle import OracleAgent
    from muarl.rollout.runner import run_many
    from muarl.rollout.store import read_episodes
    from muarl.users.scripted import ScriptedUser

    domain = load_domain("clinic")
    tasks = domain.tasks("test")
    trials = -(-episodes // len(tasks))
    out = Path(tempfile.mkdtemp(prefix="runner-memory-")) / "episodes.jsonl"
    first_on_disk: list[float] = []
    start = time.perf_counter()

    def watch() -> None:  # the moment the first episode is on disk, seen from outside the event loop
        while not first_on_disk:
            if out.exists() and out.stat().st_size:
                first_on_disk.append(time.perf_counter() - start)
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()
    result = asyncio.run(run_many(domain, tasks, OracleAgent(), ScriptedUser(), trials=trials, out=out, progress=False,
                                  keep_episodes=kind == "kept"))
    if kind == "disk":
        read_episodes(out, outcomes_only=True)
    wall = time.perf_counter() - start
    return {"episodes": float(result.ran), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "wall_s": wall, "first_episode_on_disk_s": first_on_disk[0] if first_on_disk else float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=5000)
    p.add_argument("--arm", choices=["kept", "disk"], help=argparse.SUPPRESS)  # a subprocess's own arm
    args = p.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm, args.episodes)))
        return
    figures = {}
    for kind in ("kept", "disk"):
        proc = subprocess.run([sys.executable, __file__, "--arm", kind, "--episodes", str(args.episodes)],
                              capture_output=True, text=True, check=True, env=os.environ)
        figures[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["kept_over_disk_peak_rss"] = figures["kept"]["peak_rss_mb"] / figures["disk"]["peak_rss_mb"]
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
