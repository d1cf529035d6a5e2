"""Checkpoint files are data: resuming reads tensors and plain values back, and never runs code a file carries."""

from __future__ import annotations

import os
import random

import pytest
import torch

from muarl.errors import InputError
from muarl.train.checkpoint import restore_training_state, rng_state


class _RunsCode:
    """Unpickling this calls os.mkdir(marker): what a tampered checkpoint could do with any callable."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _optimizer():
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([param], lr=1e-3)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)


def test_resume_refuses_a_checkpoint_that_would_run_code(tmp_path):
    marker = tmp_path / "code-ran"
    optimizer, scheduler = _optimizer()
    torch.save({"optimizer": _RunsCode(marker), "scheduler": scheduler.state_dict()}, tmp_path / "optimizer.pt")
    torch.save(rng_state(), tmp_path / "rng.pt")
    with pytest.raises(InputError, match=r"optimizer\.pt: refusing to load"):
        restore_training_state(tmp_path, optimizer, scheduler)
    assert not marker.exists()


def test_states_round_trip_through_safe_loading(tmp_path):
    """Optimizer, scheduler and RNG states as save_checkpoint writes them come back exactly, and the RNG state
    of older checkpoints (random.getstate()'s tuple) still loads."""
    optimizer, scheduler = _optimizer()
    optimizer.param_groups[0]["params"][0].grad = torch.ones(3)
    optimizer.step()
    scheduler.step()
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp_path / "optimizer.pt")
    (tmp_path / "trainer_state.json").write_text('{"step": 1}')
    for python_state in (rng_state()["python"], random.getstate()):  # today's form, then the older tuple
        random.seed(7)
        torch.manual_seed(7)
        state = rng_state()
        if not isinstance(python_state, dict):
            state["python"] = random.getstate()
        torch.save(state, tmp_path / "rng.pt")
        expected = (random.random(), torch.rand(1).item())
        fresh_optimizer, fresh_scheduler = _optimizer()
        assert restore_training_state(tmp_path, fresh_optimizer, fresh_scheduler) == {"step": 1}
        assert (random.random(), torch.rand(1).item()) == expected
        assert fresh_scheduler.last_epoch == 1 and fresh_optimizer.state_dict()["state"][0]["step"] == 1
