"""Which weights a GRPO run hands on: the last step's, or the best on validation, the starting weights included.

Why a run would not hand on its last step: a few GRPO steps move a small model far (Adam's first steps
move every weight by about the learning rate, however weak or noisy the gradient), and a step can make the
policy worse. Issue 21's seed-1 run is the case: after its first update the sampled success on fresh train
tasks fell from 47.5% to 33.8%, and its last checkpoint lost level-2 skills the cold start had. With
``select_checkpoint: best_val`` the run validates the starting weights (candidate 0) and every
``val_every``-th step greedily on held-out *training* tasks (never the test tasks), and hands on the
candidate with the highest success; a later step must beat the best so far outright, so a tie keeps the
earlier (closer to the start) weights, and a run whose every step got worse hands back its start.

``select_on: reward`` ranks the candidates by their mean reward instead. With the outcome bit the two agree; with a
shaped reward (``process``: a success that broke the policy pays less) the run is chosen on what it was trained for,
so a process-trained run does not hand on a step that solves one more validation task by writing unconfirmed values.

The record is ``RUN/checkpoints/selection.json``. The chosen step's checkpoint directory is never pruned
(:func:`muarl.train.checkpoint.prune_checkpoints` spares it), so its weights stay on disk however many newer
checkpoints come and go; step 0 means the weights the run started from (the config's model).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from muarl.rollout.store import atomic_write_text
from muarl.train.checkpoint import checkpoint_dir

RECORD = "selection.json"


@dataclass
class Selection:
    """The validated candidates of a run, in step order, and the best of them."""

    history: list[dict[str, Any]] = field(default_factory=list)  # {"step", "success", "reward", "seconds", "cpu_seconds"}
    metric: Literal["success", "reward"] = "success"  # what ranks the candidates

    @property
    def best(self) -> dict[str, Any] | None:
        """The candidate with the highest ``metric``; the earliest of those tied."""
        best = None
        for row in self.history:
            if best is None or row[self.metric] > best[self.metric]:
                best = row
        return best

    @property
    def best_step(self) -> int | None:
        best = self.best
        return None if best is None else best["step"]

    def candidate(self, step: int) -> dict[str, Any] | None:
        """Step ``step``'s validation record, or None if that step was not validated."""
        return next((row for row in self.history if row["step"] == step), None)

    def add(self, step: int, success: float, reward: float, seconds: float, cpu_seconds: float) -> bool:
        """Record step ``step``'s validation (replacing an earlier record of that step); whether it is now the best."""
        row = {"step": step, "success": success, "reward": reward, "seconds": seconds, "cpu_seconds": cpu_seconds}
        self.history = sorted([r for r in self.history if r["step"] != step] + [row], key=lambda r: r["step"])
        return self.best_step == step

    def truncate_after(self, step: int) -> None:
        """Forget candidates after ``step``: a resumed run re-runs those steps (its checkpoint is ``step``)."""
        self.history = [r for r in self.history if r["step"] <= step]

    def seconds(self) -> tuple[float, float]:
        """Wall and CPU seconds spent validating, over every candidate."""
        return sum(r["seconds"] for r in self.history), sum(r["cpu_seconds"] for r in self.history)

    def save(self, run_dir: Path) -> None:
        best = self.best
        atomic_write_text(run_dir / "checkpoints" / RECORD,
                          json.dumps({"best": best, **asdict(self)}, indent=1) + "\n")

    @classmethod
    def load(cls, run_dir: Path, metric: Literal["success", "reward"] = "success") -> Selection:
        """The record in ``run_dir`` (ranked by the metric it was saved with), or an empty one ranked by ``metric``."""
        path = run_dir / "checkpoints" / RECORD
        if not path.is_file():
            return cls(metric=metric)
        saved = json.loads(path.read_text(encoding="utf-8"))
        return cls(history=saved["history"], metric=saved.get("metric", "success"))

    def chosen_model(self, run_dir: Path, initial_model: str) -> tuple[int, str]:
        """The selected step and the model to load for it: ``initial_model`` for step 0, else that checkpoint's model."""
        step = self.best_step
        if step is None:
            raise FileNotFoundError(f"{run_dir / 'checkpoints' / RECORD} records no validated candidate")
        if step == 0:
            return 0, initial_model
        model = checkpoint_dir(run_dir, step) / "model"
        if not model.is_dir():
            raise FileNotFoundError(f"the selected checkpoint's weights are missing: {model}")
        return step, str(model.resolve())


def chosen_model(run_dir: Path, initial_model: str) -> tuple[int, str]:
    """:meth:`Selection.chosen_model` of the selection recorded in ``run_dir``."""
    return Selection.load(run_dir).chosen_model(run_dir, initial_model)
