"""τ-bench task files as upstream writes them (Python source: a list of ``Task(...)`` calls), made from muarl's JSON
export, for the tests of reading a checkout and of fetching from upstream."""

from __future__ import annotations

from typing import Any


def _py(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_py(v)}" for k, v in value.items()) + "}"
    return repr(value)


def tau_task_source(tasks: list[dict[str, Any]], name: str = "TASKS") -> str:
    """A ``tasks_<split>.py`` holding ``tasks``; it imports τ-bench and exits if run, so a reader that ran it would fail."""
    lines = ["from tau_bench.types import Task, Action", "raise SystemExit('must not run')", "", f"{name} = ["]
    for t in tasks:
        actions = ", ".join(f"Action(name={a['name']!r}, kwargs={_py(a['kwargs'])})" for a in t["actions"])
        lines.append(f"    Task(annotator='0', user_id={t['user_id']!r}, instruction={t['instruction']!r}, actions=[{actions}], outputs={t['outputs']!r}),")
    lines.append("]")
    return "\n".join(lines)
