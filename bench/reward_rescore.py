"""Recorded episodes rescored with each reward: what a shaped reward would have paid, and how many GRPO groups it
would have given a signal. Calibration before a reward A/B (issue 25: "signal per group"), in seconds.

    python bench/reward_rescore.py runs/demo/grpo/rollouts/step-000001.jsonl runs/demo/eval_rl/episodes.jsonl \\
        --reward outcome --reward process --reward '{name: process, options: {violation_reward: 0.25}}' --reward checklist

Each file's episodes are grouped by task (a GRPO step's file holds one group per task; an evaluation's, one
episode per task, so no group). Per file and reward: mean reward, successes (the benchmark's verdict, the same
for every reward), successes the reward pays less than 1 (a process gate, a cost), failures it pays more than 0
(partial credit), and the groups of two or more episodes whose rewards differ (the ones GRPO learns from). The
episodes' final state hashes are rescored, not re-run: the domain must be the one that recorded them.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from muarl.domains.spec import load_domain_spec
from muarl.reward import describe_reward, parse_reward_flag, reward_from_setting
from muarl.rollout.store import latest_per_key, read_episodes


def rescore(path: Path, settings: list) -> list[dict]:
    episodes = [e for e in latest_per_key(read_episodes(path)[0]) if e.reward is not None]
    if not episodes:
        raise SystemExit(f"{path}: no scored episode")
    domain = load_domain_spec(episodes[0].domain, None)
    rows = []
    for setting in settings:
        fn = reward_from_setting(setting)
        groups: dict[str, list[float]] = defaultdict(list)
        paid, solved, short, partial = [], 0, 0, 0
        for e in episodes:
            info = fn(domain, domain.task(e.task_id), e.reward.final_hash, e.trajectory(), e.agent_turns)
            assert info.success == e.reward.success, f"{e.task_id}: shaping changed the verdict"
            paid.append(info.reward)
            groups[e.task_id].append(info.reward)
            solved += info.success
            short += info.success and info.reward < 1
            partial += not info.success and info.reward > 0
        sized = [g for g in groups.values() if len(g) >= 2]
        rows.append({"file": str(path), "reward": describe_reward(setting), "episodes": len(episodes), "mean": sum(paid) / len(paid),
                     "solved": solved, "solved_paid_less": short, "failed_paid_more": partial,
                     "groups": len(sized), "groups_with_signal": sum(len(set(g)) > 1 for g in sized)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="episode files (a GRPO step's rollouts, an evaluation's episodes.jsonl)")
    parser.add_argument("--reward", action="append", help="a reward name or YAML {name, options} (repeat) [outcome, process, checklist]")
    args = parser.parse_args()
    settings = [parse_reward_flag(r) for r in args.reward or ["outcome", "process", "checklist"]]
    print("| file | reward | episodes | mean reward | solved | solved, paid < 1 | failed, paid > 0 | groups with signal |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path in args.files:
        for r in rescore(path, settings):
            groups = f"{r['groups_with_signal']} of {r['groups']}" if r["groups"] else "n/a"
            print(f"| {r['file']} | {r['reward']} | {r['episodes']} | {r['mean']:.3f} | {r['solved']} | {r['solved_paid_less']} | "
                  f"{r['failed_paid_more']} | {groups} |")


if __name__ == "__main__":
    main()
