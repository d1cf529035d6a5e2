"""How often a demo run's models propose a write before the user asked for one, per kind of held-out task.

Issue 21's lost level-2 tasks fail one way: right after the patient is identified, the model proposes an update
with an invented value, the scripted user agrees, and the wrong write lands. In a level-1 task the first request
*is* the write, so the same opening is right there; in a level-2 task the first request is a question. This counts,
in each evaluated model's held-out episodes (``eval_sft``, ``eval_control``, ``eval_rl`` of a ``muarl demo --full``
run), the episodes with an agent message between the first tool result and the user's next message that proposes
an update (its text holds "update" and "confirm", as the clinic's confirmation asks do), by kind of task.

    python bench/unrequested_writes.py runs/spread/bf16/seed-0
    python bench/unrequested_writes.py runs/spread/bf16/seed-0 --grpo   # and per GRPO step, by kind of train task
    python bench/unrequested_writes.py runs/spread/bf16/seed-0 --validation   # and per validated candidate

``--grpo`` also reads the run's GRPO rollouts (``grpo/rollouts/step-*.jsonl``, each sampling round's file) and
prints, per step and kind of train task, the groups, those with signal (some but not all solved), the successes and
the episodes proposing a write unasked: whether a step's draw or its update moved the policy onto the opening.
``--validation`` reads the greedy validation episodes of a run that chose its checkpoint on validation
(``grpo/validation/step-*.jsonl``; step 0 is the cold start) and prints, per candidate and kind of held-out train
task, the successes and the episodes proposing a write unasked: what the choice saw.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from muarl.demo import stages
from muarl.demo.config import DemoConfig
from muarl.domains import load_domain
from muarl.rollout.store import EPISODES_FILE, read_episodes
from muarl.types import Episode

MODELS = {"eval_sft": "cold start", "eval_control": "control", "eval_rl": "RL"}


def proposes_write_unasked(episode: Episode) -> bool:
    """An update proposed after the first tool result, before the user said anything more."""
    seen_tool = False
    for message in episode.messages:
        if message.role == "tool":
            seen_tool = True
        elif seen_tool and message.role == "user":
            return False
        elif seen_tool and message.role == "assistant" and message.content:
            text = message.content.lower()
            if "update" in text and "confirm" in text:
                return True
    return False


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a demo run's directory (holds demo_config.json)")
    p.add_argument("--grpo", action="store_true", help="also per GRPO step, by kind of train task")
    p.add_argument("--validation", action="store_true", help="also per validated candidate, by kind of held-out train task")
    args = p.parse_args()
    cfg = DemoConfig.model_validate_json((args.run / "demo_config.json").read_text(encoding="utf-8"))
    kinds = {t.id: stages.task_group(t) for t in stages.eval_tasks(cfg)}
    sizes = Counter(kinds.values())
    table: dict[str, dict[str, int]] = {kind: {} for kind in sorted(sizes)}
    for stage, label in MODELS.items():
        path = args.run / stage / EPISODES_FILE
        if not path.exists():
            continue
        episodes, _ = read_episodes(path)
        counts = Counter(kinds[e.task_id] for e in episodes if e.task_id in kinds and proposes_write_unasked(e))
        for kind in table:
            table[kind][label] = counts[kind]
    print(json.dumps({"run": str(args.run), "tasks": dict(sizes), "episodes proposing a write unasked": table}, indent=1))
    train_kinds = {t.id: stages.task_group(t) for t in load_domain(cfg.domain).tasks("train")} if args.grpo or args.validation else {}
    if args.grpo:
        for path in sorted((args.run / "grpo" / "rollouts").glob("step-*.jsonl")):
            print(path.name)
            for kind, row in grpo_round(read_episodes(path)[0], train_kinds).items():
                print(f"  {kind:24s} groups {row['groups']}, with signal {row['signal']}, solved {row['solved']}/{row['episodes']}, "
                      f"proposing unasked {row['proposing']}/{row['episodes']}")
    if args.validation:
        for path in sorted((args.run / "grpo" / "validation").glob("step-*.jsonl")):
            rows = grpo_round(read_episodes(path)[0], train_kinds)
            solved, total = sum(r["solved"] for r in rows.values()), sum(r["episodes"] for r in rows.values())
            print(f"validation {path.stem}: solved {solved}/{total}")
            for kind, row in rows.items():
                print(f"  {kind:24s} solved {row['solved']}/{row['episodes']}, proposing unasked {row['proposing']}/{row['episodes']}")


def grpo_round(episodes: list[Episode], kinds: dict[str, str]) -> dict[str, dict[str, int]]:
    """One sampling round of a GRPO step, by kind of task: groups, groups with signal, episodes, solved, proposing."""
    groups: dict[str, dict[str, list[Episode]]] = defaultdict(lambda: defaultdict(list))
    for episode in episodes:
        groups[kinds.get(episode.task_id, "unknown")][episode.task_id].append(episode)
    rows = {}
    for kind in sorted(groups):
        solved = [sum(bool(e.reward and e.reward.success) for e in group) for group in groups[kind].values()]
        sizes = [len(group) for group in groups[kind].values()]
        rows[kind] = {"groups": len(sizes), "signal": sum(0 < s < n for s, n in zip(solved, sizes)), "episodes": sum(sizes),
                      "solved": sum(solved), "proposing": sum(proposes_write_unasked(e) for g in groups[kind].values() for e in g)}
    return rows


if __name__ == "__main__":
    main()
