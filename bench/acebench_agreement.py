"""Do our ACEBench verdicts equal ACEBench's own checker's, entry by entry?

Reads the episodes of an ``muarl eval-suite --suite acebench`` run, writes each answer as ACEBench's result
files hold it (the text, or the tool calls in its ``[Api(key=value)]`` syntax), runs the upstream checker's
evaluation functions on them, and compares its verdict with the ``acebench`` reward's for every entry. The
upstream code is used from a copy outside the repository (it is never imported by muarl; its spreadsheet
export is stubbed, as it needs pandas/openpyxl and writes nothing we read):

    git clone https://github.com/ACEBench/ACEBench /tmp/acebench-upstream
    MUARL_SHARED_DATA=../shared/data muarl eval-suite --suite acebench --agent oracle --out /tmp/ace-oracle
    python bench/acebench_agreement.py --upstream /tmp/acebench-upstream --run /tmp/ace-oracle

Prints per category: entries compared, entries where the verdicts differ (with their ids), and upstream's
accuracy on the same answers. Note that upstream's checker passes parts of model text to ``eval``: run it
only on answers you trust, in a scratch directory.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from pathlib import Path

from muarl.domains import load_domain
from muarl.rollout.store import EPISODES_FILE, latest_per_key, read_episodes


def _upstream(path: Path):  # noqa: ANN202 - the upstream module
    """Upstream's eval_main with its spreadsheet export and score files replaced by a capture."""
    for name in ("pandas", "openpyxl", "openpyxl.styles"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["openpyxl"].Workbook = object
    sys.modules["openpyxl.styles"].Alignment = object
    sys.path.insert(0, str(path))
    import eval_main  # type: ignore[import-not-found]

    eval_main.convert_result_to_excel = lambda *a, **k: None
    eval_main.OUTPUT_PATH = tempfile.mkdtemp(prefix="acebench-scores-")
    eval_main.captured = []
    eval_main.save_score_as_json = lambda name, data, subdir=None: eval_main.captured.append(data)
    return eval_main


def _upstream_failures(up, category: str, results: list[dict], prompts: list[dict], answers: list[dict]) -> set[str]:
    """Ids of the entries upstream's checker fails."""
    up.captured.clear()
    if category.startswith("special"):
        up.special_eval(results, prompts, answers, category, "muarl", {})
    elif category.startswith("normal_multi_turn"):
        up.normal_multi_turn_eval(results, prompts, answers, category, "muarl", {})
    else:
        up.normal_single_turn_eval(results, prompts, answers, category, "muarl", {})
    rows = up.captured[-1][1:]  # the first row is the summary
    return {str(r["id"]) for r in rows if not r.get("valid", True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, type=Path, help="a copy of the ACEBench repository")
    ap.add_argument("--run", required=True, type=Path, help="an eval-suite output directory (acebench suite)")
    ap.add_argument("--data-dir", help="shared data directory (default: $MUARL_SHARED_DATA or ../shared/data)")
    args = ap.parse_args()
    up = _upstream(args.upstream)
    total = agree = 0
    for group in ("normal", "special"):
        domain = load_domain(f"acebench-{group}", args.data_dir)
        for split in domain.splits:
            category = f"{group}_{split}"
            path = args.run / category / EPISODES_FILE
            if not path.exists():
                continue
            episodes = {e.task_id: e for e in latest_per_key(read_episodes(path)[0]) if e.trial == 0 and not e.errored}
            tasks = [t for t in domain.tasks(split) if t.id in episodes]
            prompts = [{"id": t.id, "question": t.user.instruction, "function": t.metadata["functions"]} for t in tasks]
            answers = [{"id": t.id, "ground_truth": t.metadata["possible_answer"]} for t in tasks]
            results = [{"id": t.id, "result": episodes[t.id].reward.details["answer"]} for t in tasks]
            failed = _upstream_failures(up, category, results, prompts, answers)
            ours = {t.id: episodes[t.id].reward.success for t in tasks}
            differ = [t for t in ours if ours[t] == (t in failed)]
            total += len(tasks)
            agree += len(tasks) - len(differ)
            print(f"{category:40s} entries {len(tasks):4d}  differ {len(differ):3d}  upstream accuracy {1 - len(failed) / len(tasks):.3f}"
                  + (f"  ids {differ[:5]}" if differ else ""))
    print(f"agreement: {agree}/{total} = {agree / max(total, 1):.4f}")
    print(json.dumps({"entries": total, "agree": agree}))


if __name__ == "__main__":
    main()
