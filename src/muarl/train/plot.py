"""``muarl plot RUN_DIR``: the training-dynamics figure of a run, one panel per quantity, as in the paper.

Reads ``RUN_DIR/metrics.jsonl`` and writes ``RUN_DIR/training_dynamics.png``. Panels whose metric the run
never logged are left out, so the same function draws GRPO and SFT runs. Steps are whole numbers and are ticked
so. In "calls per tool", calls to names the run's domain does not have (a policy invents ``find_PatientByEmail``,
``callback``, an empty name...) are one "unknown tool" series; metrics.jsonl keeps each name. Legends sit below
their panel, off the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from muarl.rollout.store import read_run_info

TOOL_PREFIX = "tool_calls/"
UNKNOWN_TOOL = TOOL_PREFIX + "unknown tool"

PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["reward_mean", "val/reward_mean"]),
    ("groups all correct / all wrong", ["all_correct_ratio", "all_wrong_ratio"]),
    ("KL to reference", ["kl"]),
    ("entropy", ["entropy"]),
    ("clip fraction", ["clip_fraction"]),
    ("gradient norm", ["grad_norm"]),
    ("turns per episode", ["turns_per_episode"]),
    ("response tokens per episode", ["response_tokens_per_episode"]),
    ("response tokens per turn", ["response_tokens_per_turn"]),
    ("tool calls per episode", ["tool_calls_per_episode"]),
    ("tool error rate", ["tool_error_rate"]),
    ("user-fault / ungrounded-claim rate", ["user_fault_rate", "grounded_claim_failure_rate"]),
    ("episodes quarantined (user faults)", ["quarantined"]),
    ("seconds: rollout vs update", ["rollout_seconds", "update_seconds"]),
    ("tokens/s", ["rollout_tokens_per_s", "update_tokens_per_s"]),
    ("policy loss", ["policy_loss"]),
    ("SFT loss", ["loss"]),
]


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}: is it a muarl training run directory?")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_tools(run_dir: Path) -> set[str] | None:
    """The names of the tools the run's domain offered (its run.json), None when the run did not record them."""
    info = read_run_info(run_dir)
    tools = (info or {}).get("tools")
    if not isinstance(tools, list):
        return None
    return {str((t.get("function") or t).get("name")) for t in tools if isinstance(t, dict)}


def group_unknown_tools(rows: list[dict[str, Any]], known: set[str]) -> list[dict[str, Any]]:
    """``rows`` with each row's calls to tools not in ``known`` summed into one :data:`UNKNOWN_TOOL` value."""
    grouped = []
    for row in rows:
        unknown = [k for k in row if k.startswith(TOOL_PREFIX) and k[len(TOOL_PREFIX):] not in known]
        kept = {k: v for k, v in row.items() if k not in unknown}
        if unknown:
            kept[UNKNOWN_TOOL] = sum(row[k] for k in unknown)
        grouped.append(kept)
    return grouped


def draw(rows: list[dict[str, Any]], title: str) -> Any:
    """The figure of metrics rows (a matplotlib Figure): one panel per quantity logged, whole-number step ticks,
    legends below their panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [(name, [k for k in keys if any(k in r for r in rows)]) for name, keys in PANELS]
    per_tool = sorted({k for r in rows for k in r if k.startswith(TOOL_PREFIX)}, key=lambda k: (k == UNKNOWN_TOOL, k))
    if per_tool:
        panels.append(("calls per tool (per episode)", per_tool))
    violations = sorted({k for r in rows for k in r if k.startswith("check_violation/")})
    if violations:
        panels.append(("check violation rates", violations))
    panels = [(name, keys) for name, keys in panels if keys]
    if not panels:
        raise ValueError("none of the plotted metrics was logged")
    cols = 4
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.4 * nrows), squeeze=False, layout="constrained")
    for ax, (name, keys) in zip(axes.flat, panels):
        for key in keys:
            points = [(r["step"], r[key]) for r in rows if key in r]
            label = key[len(TOOL_PREFIX):] if key.startswith(TOOL_PREFIX) else key
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 30 else None, label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        if len(keys) > 1:  # below the axes (and their step label), where no line can run under it
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncols=min(3, len(keys)), frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"training dynamics: {title}")
    return fig


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the panels of a run's metrics to a PNG and return its path."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    known = run_tools(run_dir)
    try:
        fig = draw(group_unknown_tools(rows, known) if known is not None else rows, run_dir.name)
    except ValueError as exc:
        raise ValueError(f"{run_dir}/metrics.jsonl: {exc}") from None
    import matplotlib.pyplot as plt  # after draw() chose the Agg backend

    target = Path(out) if out else run_dir / "training_dynamics.png"
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(target)
    return target
