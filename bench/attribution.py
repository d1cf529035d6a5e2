"""How well the rule-based failure attribution finds the user's faults, against a user whose faults are known.

The oracle agent solves every task with the plain scripted user, so with the fault-injecting user
(``scripted:faulty``) the faults it injected (recorded in ``Episode.injected_faults``) are the ground truth.
For each domain this runs every test task for ``--trials`` trials with the faulty user, and once with the
fault-free scripted user, and measures:

- *labels*: over the failed episodes, the ``user`` label against "a fault was injected" (precision, recall);
- *detection*: over all episodes, solved ones included, the user-fault rules (:func:`user_faults`) finding any
  fault against "a fault was injected", and per injected kind whether a fault of that kind was found;
- *fault-free*: how many episodes without an injected fault (the fault-free run and the faulty run's clean
  episodes) get the label ``user`` or any fault found. Targets: label precision >= 0.95, recall >= 0.90, and 0.

    python bench/attribution.py [--domains clinic-lite tau-retail] [--trials 2] [--rate 0.3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections import Counter

from muarl.checks.attribution import user_faults
from muarl.domains import load_domain
from muarl.models.oracle import OracleAgent
from muarl.rollout.runner import run_many
from muarl.users.factory import make_user


def ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def measure(name: str, trials: int, rate: float) -> dict:
    domain = load_domain(name)
    tasks = domain.tasks("test")
    by_id = {t.id: t for t in tasks}
    faulty = asyncio.run(run_many(domain, tasks, OracleAgent(), make_user(f"scripted:faulty:{rate}"), trials=trials, progress=False)).episodes
    clean = asyncio.run(run_many(domain, tasks, OracleAgent(), make_user("scripted"), trials=1, progress=False)).episodes
    label = Counter()  # tp / fp / fn over failed episodes
    detect = Counter()  # the same over all episodes
    kinds_injected, kinds_found = Counter(), Counter()
    for ep in faulty:
        injected = bool(ep.injected_faults)
        found = user_faults(domain, by_id[ep.task_id], ep)
        detect["tp" if injected and found else "fp" if found else "fn" if injected else "tn"] += 1
        for fault in {f.kind for f in ep.injected_faults}:
            kinds_injected[fault] += 1
            kinds_found[fault] += any(f.kind == fault for f in found)
        if not ep.reward.success:
            user = ep.attribution is not None and ep.attribution.label == "user"
            label["tp" if injected and user else "fp" if user else "fn" if injected else "tn"] += 1
    without = [ep for ep in faulty if not ep.injected_faults] + clean
    return {
        "domain": name, "episodes": len(faulty), "with_faults": sum(bool(ep.injected_faults) for ep in faulty),
        "failed": sum(not ep.reward.success for ep in faulty), "clean_run_solved": sum(ep.reward.success for ep in clean), "clean_run": len(clean),
        "label_precision": ratio(label["tp"], label["tp"] + label["fp"]), "label_recall": ratio(label["tp"], label["tp"] + label["fn"]),
        "label_counts": dict(label),
        "detection_precision": ratio(detect["tp"], detect["tp"] + detect["fp"]), "detection_recall": ratio(detect["tp"], detect["tp"] + detect["fn"]),
        "detection_counts": dict(detect),
        "recall_by_kind": {k: f"{kinds_found[k]}/{n}" for k, n in sorted(kinds_injected.items())},
        "fault_free_episodes": len(without),
        "fault_free_labelled_user": sum(ep.attribution is not None and ep.attribution.label == "user" for ep in without),
        "fault_free_with_a_fault_found": sum(bool(user_faults(domain, by_id[ep.task_id], ep)) for ep in without),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["clinic-lite", "tau-retail"])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.3, help="fault rate per user reply")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    results = [measure(name, args.trials, args.rate) for name in args.domains]
    if args.json:
        print(json.dumps({"results": results, "seconds": round(time.perf_counter() - started, 1), "machine": platform.processor()}))
        return
    for r in results:
        print(f"{r['domain']}: {r['episodes']} episodes, {r['with_faults']} with injected faults, {r['failed']} failed "
              f"(fault-free run: {r['clean_run_solved']}/{r['clean_run']} solved)")
        print(f"  labels of failed episodes: precision {r['label_precision']}, recall {r['label_recall']}  {r['label_counts']}")
        print(f"  detection over all episodes: precision {r['detection_precision']}, recall {r['detection_recall']}  {r['detection_counts']}")
        print(f"  recall by injected kind: {r['recall_by_kind']}")
        print(f"  fault-free episodes: {r['fault_free_episodes']}, labelled user {r['fault_free_labelled_user']}, "
              f"with a fault found {r['fault_free_with_a_fault_found']}")
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
