"""The validation report: how many dialogues passed each stage, and rejections counted by reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from muarl.synth.validate import DialogueVerdict


def build_report(verdicts: Iterable[DialogueVerdict], exported: dict[str, int] | None = None) -> dict[str, Any]:
    """Counts over dialogues; a dialogue with several reasons counts once under each."""
    verdicts = list(verdicts)
    reasons: Counter[str] = Counter()
    for v in verdicts:
        if not v.accepted:
            reasons.update(v.reasons())
    return {
        "dialogues": len(verdicts),
        "accepted": sum(v.accepted for v in verdicts),
        "rejected": sum(not v.accepted for v in verdicts),
        "rules_failed": sum(v.rules.status != "pass" for v in verdicts),
        "judge": dict(Counter(v.judge.status for v in verdicts)),
        "human_decisions": dict(Counter(v.human for v in verdicts if v.human)),
        "rejections_by_reason": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "exported": exported or {},
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"dialogues {report['dialogues']}: accepted {report['accepted']}, rejected {report['rejected']}",
        f"rules failed: {report['rules_failed']}; judge: " + (", ".join(f"{k} {n}" for k, n in report["judge"].items()) or "-"),
    ]
    if report["human_decisions"]:
        lines.append("human: " + ", ".join(f"{k} {n}" for k, n in report["human_decisions"].items()))
    if report["rejections_by_reason"]:
        lines.append("rejections by reason:")
        width = max(len(r) for r in report["rejections_by_reason"])
        lines += [f"  {r:<{width}}  {n}" for r, n in report["rejections_by_reason"].items()]
    if report["exported"]:
        lines.append("exported: " + ", ".join(f"{s} {n}" for s, n in report["exported"].items()))
    return "\n".join(lines)
