"""muarl's training dynamics in verl's step metrics.

verl keeps each sample's ``extra_fields`` in its batch but logs none of them, and its ``AgentLoopMetrics``
has fixed fields. What it does log is the rollout manager's timing dictionary: every key the manager
returns from ``_performance_metrics`` reaches verl's logger (console, TensorBoard, wandb ...) as
``timing_s/<key>``. :class:`MuarlAgentLoopManager` (set it with
``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=muarl.integrations.verl_metrics.MuarlAgentLoopManager``)
adds :func:`step_metrics` of the step's episodes there, so a GPU run shows the paper's training dynamics as
``timing_s/muarl/...``: success, agent and user turns, user tokens, tool calls per tool, terminations,
errored and context-full rates, each trajectory check's violation rate, the share of user-fault episodes and
how many were quarantined (left out of their group).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from verl.experimental.agent_loop import AgentLoopManager

PREFIX = "muarl/"


def step_metrics(fields: Mapping[str, Any]) -> dict[str, float]:
    """Step metrics from the batch's per-sample muarl fields (``muarl_*`` arrays, one entry per sample; what
    :func:`muarl.integrations.verl.episode_fields` writes). Rates are over all episodes; the other means over
    the episodes that were scored (not errored). Empty when the batch holds no muarl episode."""
    errored = np.array([bool(x) for x in fields.get("muarl_errored", [])])
    n = len(errored)
    if n == 0:
        return {}
    scored = ~errored
    terminations = Counter(str(t) for t in np.asarray(fields["muarl_termination"])[scored])

    def mean(name: str) -> float:
        values = np.asarray([float(x) for x in fields[name]])[scored]
        return float(values.mean()) if values.size else 0.0

    out = {"episodes": float(n), "errored_rate": float(errored.mean()),
           "context_full_rate": float(np.mean([str(t) == "context_full" for t in fields["muarl_termination"]]))}
    if scored.any():
        out.update({name[len("muarl_"):] + "_per_episode": mean(name) for name in
                    ("muarl_agent_turns", "muarl_user_turns", "muarl_user_tokens", "muarl_tool_calls", "muarl_malformed_calls")})
        out["success_rate"] = mean("muarl_success")
        out.update({f"termination/{t}": c / scored.sum() for t, c in sorted(terminations.items())})
        for key in sorted(k for k in fields if k.startswith("muarl_calls/")):
            calls = [0.0 if x is None else float(x) for x in np.asarray(fields[key])[scored]]
            out[f"tool_calls/{key[len('muarl_calls/'):]}"] = float(np.mean(calls))
    for key in sorted(k for k in fields if k.startswith("muarl_violation/")):  # over the episodes the check applied to
        applied = [float(x) for x in fields[key] if x is not None]
        if applied:
            out[f"check_violation/{key[len('muarl_violation/'):]}"] = float(np.mean(applied))
    if "muarl_user_fault" in fields:
        out["user_fault_rate"] = float(np.mean([bool(x) for x in fields["muarl_user_fault"]]))
    if "muarl_quarantined" in fields:  # a count per step, as muarl train logs it
        out["quarantined"] = float(sum(bool(x) for x in fields["muarl_quarantined"]))
    return {PREFIX + k: v for k, v in out.items()}


class MuarlAgentLoopManager(AgentLoopManager):
    """verl's rollout manager, with muarl's :func:`step_metrics` added to the metrics verl logs each step."""

    def _performance_metrics(self, metrics: list[list[dict[str, str]]], output: Any) -> dict[str, float]:
        timing = super()._performance_metrics(metrics, output)
        timing.update(step_metrics({k: v for k, v in output.non_tensor_batch.items() if k.startswith("muarl_")}))
        return timing
