"""Do our ACEBench verdicts equal ACEBench's own checker's, entry by entry?

Reads the episodes of an ``muarl eval-suite --suite acebench`` run, writes each answer as ACEBench's result
files hold it (the text, or the tool calls in its ``[Api(key=value)]`` syntax), runs the upstream checker's
evaluation functions on them, and compares its verdict with the ``acebench`` reward's for every entry. The
upstream code is used from a copy outside the repository (it is never imported by muarl; its spreadsheet
export is stubbed, as it needs pandas/openpyxl and writes nothing we read):

    git clone https://github.com/ACEBench/ACEBench /tmp/acebench-upstream
    MUARL_DATA=../shared/data muarl eval-suite --suite acebench --agent oracle --out /tmp/ace-oracle
    python bench/acebench_agreement.py --upstream /tmp/acebench-upstream --run /tmp/ace-oracle --perturb

Agent entries (phone and travel): the calls each episode executed are run on upstream's own scenario classes, and
its checker scores their saved attributes (end to end) and the call messages (process). ``--perturb`` adds wrong
answers derived from each normal entry's possible answer (an argument dropped or changed, an extra or renamed call,
plain text) and from each agent entry's reference calls (the last call dropped, repeated, or with one argument
changed: another cabin, payment method or count, an altered string), so that failures are compared too. Prints
per category: entries compared, entries where the verdicts differ (with their ids), and upstream's accuracy on the
same answers. Note that upstream's checker passes parts of model text to ``eval``: run it only on answers you trust,
in a scratch directory.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import sys
import tempfile
import types
from pathlib import Path

from muarl.domains import load_domain
from muarl.domains.acebench.checker import AnswerSyntaxError, acebench_reward, answer_calls, answer_text, check_normal, render_calls
from muarl.rollout.store import EPISODES_FILE, latest_per_key, read_episodes
from muarl.types import Message, Task, ToolCall


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


def _saved_attributes(path: Path) -> dict[str, list[str]]:
    """Upstream's SAVED_CLASS (which attributes of each scenario class it scores), read from its source text."""
    tree = ast.parse((path / "model_inference" / "apimodel_inference.py").read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SAVED_CLASS")
    return ast.literal_eval(node.value)


_RUNS = itertools.count()  # upstream keeps each run's class instances in module globals, named by its test id


def _upstream_agent(up, path: Path, category: str, runs: list[tuple[Task, list[Message], list[str]]]) -> tuple[set[int], float]:
    """Upstream's verdicts on agent answers, each (entry, the episode's messages, our process steps): the call messages
    are run on upstream's own scenario classes, and its checker scores the classes' saved attributes and the messages
    as the process. Returns the indices of the runs it fails, and its mean process accuracy."""
    from model_inference.multi_step.execution_role_step import EXECUTION_STEP  # type: ignore[import-not-found]

    saved = _saved_attributes(path)
    results = []
    for task, messages, process in runs:
        steps = [m for m in messages if m.role == "assistant" and m.tool_calls]
        execution = EXECUTION_STEP("muarl", task.metadata["initial_config"], task.metadata["involved_classes"], f"{task.id}_{next(_RUNS)}", "en")
        instances = []
        for message in steps:
            try:
                text = render_calls(answer_calls(message, squeeze=False))
            except AnswerSyntaxError:  # arguments that are not a JSON object: text upstream cannot parse either
                text = " ".join(f"{tc.name}({tc.arguments})" for tc in message.tool_calls)
            _, instance = execution.respond([{"message": text}])
            if instance and instance not in instances:
                instances.append(instance)
        final = [{name: {k: v for k, v in vars(obj).items() if k in saved[name]}} for inst in instances for name, obj in inst.items()]
        results.append({"result": json.loads(json.dumps(final)), "process": process})
    answers = [{"ground_truth": t.metadata["possible_answer"], "mile_stone": t.metadata["milestones"]} for t, _, _ in runs]
    up.captured.clear()
    up.language = "en"
    os.makedirs("score_all/score_en/muarl", exist_ok=True)
    _, process = up.agent_eval(results, answers, answers, category, "muarl")
    return {int(r["id"]) for r in up.captured[-1][1:] if not r.get("valid", True)}, process


def _perturbed(task) -> list[tuple[str, Message]]:
    """Wrong answers derived from a normal entry's possible answer, so that the checkers are compared on failures
    too: an argument dropped, a string changed, an extra call, the call's name changed, and plain text."""
    calls = [{a.name: dict(a.kwargs)} for a in task.actions]
    out = []
    (name, args), = calls[0].items()
    if args:
        key = next(iter(args))
        out.append(("dropped", [{name: {k: v for k, v in args.items() if k != key}}, *calls[1:]]))
        strings = [k for k, v in args.items() if isinstance(v, str)]
        if strings:
            out.append(("changed", [{name: {**args, strings[0]: args[strings[0]] + " extra"}}, *calls[1:]]))
    out += [("extra", [*calls, calls[0]]), ("renamed", [{name + "X": args}, *calls[1:]])]
    messages = [(kind, Message(role="assistant", tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=json.dumps(a))
                                                             for i, c in enumerate(cs) for n, a in c.items()])) for kind, cs in out]
    return [*messages, ("text", Message(role="assistant", content="I will look into that for you."))]


_SWAPS = {"Economy Class": "Business Class", "Business Class": "Economy Class", "bank": "cash", "cash": "bank"}


def _changed(value):  # noqa: ANN001, ANN202 - any JSON value
    """Another value of the same kind: the other cabin or payment method, a count one higher, a string altered."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return _SWAPS.get(value, f"{value}X") if isinstance(value, str) else None


def _perturbed_agent(task: Task) -> list[tuple[str, list[Message]]]:
    """Wrong call sequences derived from an agent entry's reference calls (one call per message): the last call
    dropped, repeated, or with one of its arguments changed."""
    calls = [(a.name, dict(a.kwargs)) for a in task.actions]
    if not calls:
        return []
    name, args = calls[-1]
    variants = [("dropped", calls[:-1]), ("repeated", [*calls, calls[-1]])]
    variants += [(f"changed {key}", [*calls[:-1], (name, {**args, key: _changed(value)})]) for key, value in args.items() if _changed(value) is not None]
    return [(kind, [Message(role="assistant", tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=json.dumps(a))]) for i, (n, a) in enumerate(cs)])
            for kind, cs in variants]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, type=Path, help="a copy of the ACEBench repository")
    ap.add_argument("--run", required=True, type=Path, help="an eval-suite output directory (acebench suite)")
    ap.add_argument("--data-dir", help="data directory (default: $MUARL_DATA, then ~/.cache/muarl/data)")
    ap.add_argument("--perturb", action="store_true", help="also compare on wrong answers derived from each answered entry's possible answer or reference calls")
    args = ap.parse_args()
    up = _upstream(args.upstream)
    os.chdir(tempfile.mkdtemp(prefix="acebench-agreement-"))  # upstream writes its process files under the working directory
    total = agree = 0

    def report(label: str, n: int, differ: list, upstream_accuracy: float, extra: str = "") -> None:
        nonlocal total, agree
        total, agree = total + n, agree + n - len(differ)
        print(f"{label:48s} entries {n:4d}  differ {len(differ):3d}  upstream accuracy {upstream_accuracy:.3f}{extra}"
              + (f"  ids {differ[:5]}" if differ else ""))

    def report_agent(label: str, runs: list, rewards: list, labels: list[str]) -> None:
        failed_at, process = _upstream_agent(up, args.upstream, label.split()[0], runs)
        differ = [labels[i] for i, r in enumerate(rewards) if r.success == (i in failed_at)]
        mine = sum(r.details["process_accuracy"] for r in rewards) / len(rewards)
        report(label, len(runs), differ, 1 - len(failed_at) / len(runs), f"  process: upstream {process:.3f}, ours {mine:.3f}")

    for group in ("normal", "special", "agent"):
        domain = load_domain(f"acebench-{group}", args.data_dir)
        for split in domain.splits:
            category = f"{group}_{split}"
            path = args.run / category / EPISODES_FILE
            if not path.exists():
                continue
            episodes = {e.task_id: e for e in latest_per_key(read_episodes(path)[0]) if e.trial == 0 and not e.errored}
            tasks = [t for t in domain.tasks(split) if t.id in episodes]
            ours = {t.id: episodes[t.id].reward.success for t in tasks}
            if group == "agent":
                rewards = [episodes[t.id].reward for t in tasks]
                runs = [(t, episodes[t.id].messages, r.details["steps"]) for t, r in zip(tasks, rewards)]
                report_agent(category, runs, rewards, [t.id for t in tasks])
                if args.perturb:
                    wrong = [(t, kind, messages) for t in tasks for kind, messages in _perturbed_agent(t)]
                    rewards = [acebench_reward(domain, t, domain.rerun(t, messages).hash(), messages) for t, _, messages in wrong]
                    runs = [(t, messages, r.details["steps"]) for (t, _, messages), r in zip(wrong, rewards)]
                    report_agent(f"{category} (perturbed)", runs, rewards, [f"{t.id} {kind}" for t, kind, _ in wrong])
                continue
            prompts = [{"id": t.id, "question": t.user.instruction, "function": t.metadata["functions"]} for t in tasks]
            answers = [{"id": t.id, "ground_truth": t.metadata["possible_answer"]} for t in tasks]
            results = [{"id": t.id, "result": episodes[t.id].reward.details["answer"]} for t in tasks]
            failed = _upstream_failures(up, category, results, prompts, answers)
            report(category, len(tasks), [t for t in ours if ours[t] == (t in failed)], 1 - len(failed) / len(tasks))
            if args.perturb and group == "normal" and not split.startswith("multi_turn"):
                wrong = [(t, kind, m) for t in tasks for kind, m in _perturbed(t)]
                results = [{"id": f"{t.id}#{i}", "result": answer_text(m)} for i, (t, _, m) in enumerate(wrong)]
                prompts = [{"id": r["id"], "question": t.user.instruction, "function": t.metadata["functions"]} for r, (t, _, _) in zip(results, wrong)]
                answers = [{"id": r["id"], "ground_truth": t.metadata["possible_answer"]} for r, (t, _, _) in zip(results, wrong)]
                failed = _upstream_failures(up, category, results, prompts, answers)
                differ = [r["id"] for r, (t, _, m) in zip(results, wrong)
                          if check_normal(t.metadata["functions"], m, t.metadata["possible_answer"]).valid == (r["id"] in failed)]
                report(f"{category} (perturbed)", len(wrong), differ, 1 - len(failed) / len(wrong))
    print(f"agreement: {agree}/{total} = {agree / max(total, 1):.4f}")
    print(json.dumps({"entries": total, "agree": agree}))


if __name__ == "__main__":
    main()
