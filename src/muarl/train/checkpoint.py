"""Checkpoints that resume a run exactly: weights (full model or LoRA adapters), optimizer and scheduler
state, RNG states, step and data position.

Layout: ``RUN/checkpoints/step-000010/{model/, optimizer.pt, trainer_state.json, rng.pt}`` and
``RUN/checkpoints/latest`` naming the newest complete one. A checkpoint is written under a temporary name
and renamed into place, and ``latest`` is replaced atomically after it, so a run killed mid-save resumes
from the previous checkpoint instead of a torn one.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from muarl.errors import InputError
from muarl.rollout.store import atomic_write_text


def rng_state() -> dict[str, Any]:
    """The RNG states in plain lists, ints and tensors, which ``torch.load(weights_only=True)`` reads back."""
    version, internal, gauss = random.getstate()
    return {"python": {"version": version, "internal": list(internal), "gauss": gauss}, "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    python = state["python"]
    if isinstance(python, dict):
        python = (python["version"], tuple(python["internal"]), python["gauss"])
    random.setstate(python)  # older checkpoints stored getstate()'s tuple as it is
    torch.set_rng_state(state["torch"])


def load_state(path: Path) -> Any:
    """A ``.pt`` file of states, unpickling only tensors and plain containers: a checkpoint is data, and loading it
    must not run code (pickle can). A file holding anything else is refused with the reason."""
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = " ".join(str(exc).split())[:300]
        raise InputError(f"{path}: refusing to load a checkpoint file that holds more than tensors and plain values ({reason})") from None


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """Where checkpoint ``step`` of the run in ``run_dir`` lives."""
    return run_dir / "checkpoints" / f"step-{step:06d}"


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, optimizer: Any, scheduler: Any,
                    state: dict[str, Any], keep: int = 2, spare: int | None = None) -> Path:
    """Write checkpoint ``step`` and point ``latest`` at it; keep the newest ``keep`` checkpoints and step ``spare``."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(run_dir, step)
    tmp = root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save_pretrained(tmp / "model")  # PEFT models save only their adapters
    tokenizer.save_pretrained(tmp / "model")
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optimizer.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({**state, "step": step}, indent=2), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(root / "latest", final.name)
    prune_checkpoints(run_dir, keep, spare)
    return final


def prune_checkpoints(run_dir: Path, keep: int, spare: int | None = None) -> None:
    """Delete all but the newest ``keep`` checkpoints, sparing step ``spare`` (the one a validation chose,
    :mod:`muarl.train.selection`), however old."""
    spared = f"step-{spare:06d}" if spare is not None else None
    for old in sorted(p for p in (run_dir / "checkpoints").glob("step-*") if p.is_dir())[:-keep]:
        if old.name != spared:
            shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / "checkpoints" / pointer.read_text(encoding="utf-8").strip()
    if not (path / "trainer_state.json").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing or incomplete; delete {pointer} to start over")
    return path


def restore_training_state(path: Path, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Load optimizer, scheduler and RNG states from a checkpoint; returns its trainer state (step, ...)."""
    opt = load_state(path / "optimizer.pt")
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    set_rng_state(load_state(path / "rng.pt"))
    return json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
