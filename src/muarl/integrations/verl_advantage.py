"""``muarl_grpo``: verl's GRPO advantage over the episodes that ran, registered as a verl plugin.

An episode whose user or tool server failed has no verdict; :class:`~muarl.integrations.verl.MuarlAgentLoop`
returns it with an all-zero response mask (it trains nothing) and a placeholder reward of 0. verl's own
``grpo`` estimator would still count that 0 in the group's mean and standard deviation, as if the policy
had failed the task. ``muarl_grpo`` leaves such rows out: each group's statistics come from its rows with at
least one trained token, computed by verl's own ``compute_grpo_outcome_advantage``; a group left with fewer
than two such rows gets advantage 0 (nothing to compare), and so do the excluded rows.

verl loads this module in every process that imports it (entry point group ``verl.plugins`` in muarl's
package metadata), so ``algorithm.adv_estimator=muarl_grpo`` works in the trainer's driver without any
import in user code.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

ESTIMATOR = "muarl_grpo"


def muarl_grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                         epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True, config: Any = None,
                         **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) as verl's GRPO computes them, over the rows that trained tokens only."""
    if config is not None:
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    ran = (response_mask.sum(dim=-1) > 0).numpy()
    sizes = Counter(index[ran].tolist())
    keep = ran & np.array([sizes[i] >= 2 for i in index.tolist()], dtype=bool)
    advantages = torch.zeros_like(token_level_rewards)
    if keep.any():
        rows = torch.from_numpy(keep)
        kept, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards[rows], response_mask[rows], index[keep], epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
        advantages[rows] = kept
    return advantages, advantages


def register() -> None:
    """Make ``muarl_grpo`` known to verl (idempotent: verl refuses a second, different function by the name)."""
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR) is not muarl_grpo_advantage:
        core_algos.register_adv_est(ESTIMATOR)(muarl_grpo_advantage)


register()
