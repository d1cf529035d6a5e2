"""The pure parts of muarl on verl, computed by hand: ``muarl_grpo`` (verl's GRPO over the episodes that ran)
and the step metrics verl logs for muarl's episodes."""

from __future__ import annotations

import os

import numpy as np
import pytest

if not os.environ.get("CI"):
    pytest.importorskip("verl", reason="the verl test dependencies are not installed (see the README's test command)")

import torch  # noqa: E402

from muarl.integrations.verl_advantage import muarl_grpo_advantage  # noqa: E402
from muarl.integrations.verl_metrics import step_metrics  # noqa: E402

# rows: group a = [success, failure, errored], group b = [success, errored], group c = [success]
INDEX = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
SCORES = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
TRAINED = [True, True, False, True, False, True]


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0]])
    rewards = torch.zeros(6, 3)
    for i, (score, width) in enumerate(zip(SCORES, [2, 1, 3, 3, 3, 1])):
        rewards[i, width - 1] = score  # verl puts the score on the last valid token
    return rewards, mask


def test_errored_rows_leave_their_group_and_lone_rows_get_no_advantage():
    rewards, mask = batch()
    adv, returns = muarl_grpo_advantage(rewards, mask, INDEX)
    # group a over its two episodes that ran: mean 0.5, sample std sqrt(0.5) -> +-0.5 / 0.70711
    expected = [0.70711, -0.70711, 0.0, 0.0, 0.0, 0.0]
    assert torch.allclose(adv, torch.tensor(expected)[:, None] * mask, atol=1e-4)
    assert torch.equal(adv, returns)
    assert not adv[~torch.tensor(TRAINED)].any()  # rows that trained nothing
    unscaled, _ = muarl_grpo_advantage(rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    assert unscaled[0, 0].item() == pytest.approx(0.5) and unscaled[1, 0].item() == pytest.approx(-0.5)


def test_verls_own_grpo_counts_the_errored_row_as_a_failure():
    """Why muarl_grpo exists: verl's estimator moves group a's baseline with the placeholder 0 of the errored row."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards, mask = batch()
    theirs, _ = compute_grpo_outcome_advantage(rewards, mask, INDEX)
    ours, _ = muarl_grpo_advantage(rewards, mask, INDEX)
    assert theirs[0, 0].item() == pytest.approx((1 - 1 / 3) / np.std([1, 0, 0], ddof=1), abs=1e-4) != pytest.approx(ours[0, 0].item())


def test_the_registered_estimator_reads_verls_algorithm_config():
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards, mask = batch()
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    adv, _ = get_adv_estimator_fn("muarl_grpo")(token_level_rewards=rewards, response_mask=mask, index=INDEX, config=config)
    assert adv[0, 0].item() == pytest.approx(0.5)


def test_step_metrics_from_the_batchs_muarl_fields():
    fields = {
        "muarl_errored": np.array([False, True, False]), "muarl_termination": np.array(["user_stop", "error", "context_full"]),
        "muarl_success": np.array([True, False, False]), "muarl_agent_turns": np.array([4, 0, 2]),
        "muarl_user_turns": np.array([3, 1, 1]), "muarl_user_tokens": np.array([10, 0, 20]),
        "muarl_tool_calls": np.array([2, 0, 1]), "muarl_malformed_calls": np.array([0, 0, 1]),
        "muarl_calls/find_patient": np.array([2, None, 1], dtype=object), "muarl_calls/book": np.array([None, None, 1], dtype=object),
        "muarl_violation/confirmed_before_write": np.array([0, None, 1], dtype=object),
        "muarl_user_fault": np.array([False, False, True]), "muarl_quarantined": np.array([False, False, True]),
    }
    assert step_metrics(fields) == pytest.approx({
        "muarl/episodes": 3.0, "muarl/errored_rate": 1 / 3, "muarl/context_full_rate": 1 / 3, "muarl/success_rate": 0.5,
        "muarl/agent_turns_per_episode": 3.0, "muarl/user_turns_per_episode": 2.0, "muarl/user_tokens_per_episode": 15.0,
        "muarl/tool_calls_per_episode": 1.5, "muarl/malformed_calls_per_episode": 0.5,
        "muarl/termination/user_stop": 0.5, "muarl/termination/context_full": 0.5,
        "muarl/tool_calls/find_patient": 1.5, "muarl/tool_calls/book": 0.5,
        "muarl/check_violation/confirmed_before_write": 0.5, "muarl/user_fault_rate": 1 / 3,
        "muarl/quarantined": 1.0,
    })
    assert step_metrics({}) == {}
