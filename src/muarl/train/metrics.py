"""Per-step training metrics: what a group of episodes says about the policy, and where they are written.

Each step appends one JSON object to ``RUN/metrics.jsonl`` (the file ``muarl plot`` reads) and the same
scalars to TensorBoard under ``RUN/tensorboard``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from muarl.evals.conduct import conduct_scalars
from muarl.types import Episode


def user_failed(episode: Episode) -> bool:
    """The episode errored because its user simulator's server failed (``UserError``), not the policy's."""
    return episode.errored and (episode.error or "").startswith("UserError")


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Means over the scored episodes: reward, turns, response tokens (per episode and per turn), tool use,
    and the user's side (its turns and tokens, how often it said ###STOP###); errors counted over all; and the
    trajectory checks' violation rates, the user-fault rate and the grounded-claim failure rate
    (:func:`muarl.evals.conduct.conduct_scalars`)."""
    scored = [e for e in episodes if e.reward is not None]
    out: dict[str, float] = {"episodes": float(len(episodes)), "episodes_errored": float(len(episodes) - len(scored)),
                             "user_errors": float(sum(user_failed(e) for e in episodes))}
    if not scored:
        return out
    n = len(scored)
    response = [sum(e.tokens.loss_mask) if e.tokens else e.usage.completion_tokens for e in scored]
    turns = [e.agent_turns for e in scored]
    calls = Counter(x.name for e in scored for x in e.tool_executions)
    executions = [x for e in scored for x in e.tool_executions]
    out.update({
        "reward_mean": sum(e.reward.reward for e in scored) / n,
        "success_rate": sum(e.succeeded for e in scored) / n,
        "turns_per_episode": sum(turns) / n,
        "response_tokens_per_episode": sum(response) / n,
        "response_tokens_per_turn": sum(response) / max(1, sum(turns)),
        "tool_calls_per_episode": len(executions) / n,
        "tool_error_rate": sum(x.error is not None for x in executions) / max(1, len(executions)),
        "malformed_calls_per_episode": sum(e.malformed_calls for e in scored) / n,
        "user_turns_per_episode": sum(sum(m.role == "user" for m in e.messages) for e in scored) / n,
        "user_tokens_per_episode": sum(e.user_usage.completion_tokens for e in scored) / n,
        "user_stop_rate": sum(e.termination == "user_stop" for e in scored) / n,
    })
    out.update({f"tool_calls/{name}": count / n for name, count in sorted(calls.items())})
    terminations = Counter(e.termination for e in scored)
    out.update({f"termination/{name}": count / n for name, count in sorted(terminations.items())})
    out.update(conduct_scalars(episodes))  # how the policy behaved: check violations, user faults, ungrounded claims
    return out


def update_size(before: list[Any], after: list[Any]) -> float:
    """Relative size of one update, ‖θ_after − θ_before‖ / ‖θ_before‖ over the trainable parameters: how far
    a step moved the policy, whatever the learning rate and the gradient clip made of it."""
    import torch

    with torch.no_grad():
        moved = sum(float((a.detach() - b).double().pow(2).sum()) for b, a in zip(before, after))
        size = sum(float(b.double().pow(2).sum()) for b in before)
    return (moved / size) ** 0.5 if size > 0 else 0.0


class MetricsWriter:
    """Appends a row per step to metrics.jsonl and mirrors the numbers to TensorBoard (if installed)."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "metrics.jsonl"
        self._tb: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional; the JSONL file is the record
            self._tb = None

    def write(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **metrics}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def truncate_after(self, step: int) -> None:
        """Drop rows beyond ``step`` (a resumed run re-does the steps after its checkpoint)."""
        if not self.path.exists():
            return
        rows = [line for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
        kept = [r for r in rows if json.loads(r)["step"] <= step]
        tmp = self.path.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(r + "\n" for r in kept), encoding="utf-8")
        tmp.replace(self.path)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
