"""``muarl plot RUN_DIR``: the training-dynamics figure of a run, one panel per quantity, as in the paper.

Reads ``RUN_DIR/metrics.jsonl`` and writes ``RUN_DIR/training_dynamics.png``. Panels whose metric the run
never logged are left out, so the same function draws GRPO and SFT runs.
"""

from __future__ import annotations

import json
from pathlib import Path

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


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the panels of a run's metrics to a PNG and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    panels = [(title, [k for k in keys if any(k in r for r in rows)]) for title, keys in PANELS]
    extra_tools = sorted({k for r in rows for k in r if k.startswith("tool_calls/")})
    if extra_tools:
        panels.append(("calls per tool (per episode)", extra_tools))
    violations = sorted({k for r in rows for k in r if k.startswith("check_violation/")})
    if violations:
        panels.append(("check violation rates", violations))
    panels = [(t, keys) for t, keys in panels if keys]
    if not panels:
        raise ValueError(f"{run_dir}/metrics.jsonl has none of the plotted metrics")
    cols = 4
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        for key in keys:
            points = [(r["step"], r[key]) for r in rows if key in r]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 30 else None, label=key)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        if len(keys) > 1:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"training dynamics: {run_dir.name}")
    fig.tight_layout()
    target = Path(out) if out else run_dir / "training_dynamics.png"
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(target)
    return target
