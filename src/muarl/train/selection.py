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

``kind_fall_limit`` guards the kinds of task (issue 21's criterion: no kind may fall from the cold start). Overall
success can hide a lost kind: seed 0's first update took level-2 validation tasks from 16 to 10 of 16 while the other
kinds gained, so the step fell only 9.4 points overall. A candidate whose success on some kind (``stratify_by``) is
more than the limit under the starting weights' on that kind has *lost* it: it is never the best, whatever its
overall success, and the trainer does not build on it.

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

    history: list[dict[str, Any]] = field(default_factory=list)  # {"step", "success", "reward", "seconds", "cpu_seconds", "kinds"}
    metric: Literal["success", "reward"] = "success"  # what ranks the candidates
    kind_fall_limit: float | None = None  # a candidate this far under the start on some kind lost it

    @property
    def best(self) -> dict[str, Any] | None:
        """The candidate with the highest ``metric`` among those that lost no kind; the earliest of those tied."""
        return self._best_until(None)

    def _best_until(self, step: int | None) -> dict[str, Any] | None:
        best = None
        for row in self.history:
            if step is not None and row["step"] > step:
                break
            if not self._lost(row) and (best is None or row[self.metric] > best[self.metric]):
                best = row
        return best

    def falls(self, step: int, rollback_below: float | None) -> bool:
        """Whether the trainer rolled back from candidate ``step``: it lost a kind, or it fell more than
        ``rollback_below`` under the best candidate of the record up to it (what the run knew then). A pure function
        of the record, so a resumed run decides, and counts, as the uninterrupted one did."""
        row = self.candidate(step)
        if row is None:
            return False
        if self._lost(row):
            return True
        best = self._best_until(step)
        return rollback_below is not None and best[self.metric] - row[self.metric] > rollback_below

    def rollbacks(self, rollback_below: float | None) -> int:
        """How many of the recorded candidates the run rolled back from (:meth:`falls`)."""
        return sum(self.falls(row["step"], rollback_below) for row in self.history)

    def lost_kinds(self, step: int) -> list[str]:
        """The kinds of task on which candidate ``step`` succeeds more than ``kind_fall_limit`` less often than the
        starting weights (candidate 0) did; none for a step not validated, and none without a limit, a validated
        start or per-kind records."""
        row = self.candidate(step)
        return [] if row is None else self._lost(row)

    def _lost(self, row: dict[str, Any]) -> list[str]:
        start = self.candidate(0)
        if self.kind_fall_limit is None or start is None or row["step"] == 0:
            return []
        kinds = row.get("kinds") or {}
        return [k for k, was in (start.get("kinds") or {}).items() if k in kinds and was - kinds[k] > self.kind_fall_limit]

    @property
    def best_step(self) -> int | None:
        best = self.best
        return None if best is None else best["step"]

    def candidate(self, step: int) -> dict[str, Any] | None:
        """Step ``step``'s validation record, or None if that step was not validated."""
        return next((row for row in self.history if row["step"] == step), None)

    def add(self, step: int, success: float, reward: float, seconds: float, cpu_seconds: float,
            kinds: dict[str, float] | None = None) -> bool:
        """Record step ``step``'s validation (replacing an earlier record of that step), with its success per kind of
        task if given; whether it is now the best."""
        row = {"step": step, "success": success, "reward": reward, "seconds": seconds, "cpu_seconds": cpu_seconds}
        if kinds is not None:
            row["kinds"] = kinds
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
    def load(cls, run_dir: Path, metric: Literal["success", "reward"] = "success", kind_fall_limit: float | None = None) -> Selection:
        """The record in ``run_dir`` (ranked as it was saved), or an empty one ranked by ``metric`` and ``kind_fall_limit``."""
        path = run_dir / "checkpoints" / RECORD
        if not path.is_file():
            return cls(metric=metric, kind_fall_limit=kind_fall_limit)
        saved = json.loads(path.read_text(encoding="utf-8"))
        return cls(history=saved["history"], metric=saved.get("metric", "success"), kind_fall_limit=saved.get("kind_fall_limit"))

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
