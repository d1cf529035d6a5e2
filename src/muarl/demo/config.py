"""What decides a learning-demonstration run, and its two forms.

``QUICK`` is the README's main command: every stage of the method on the embedded model in minutes, on few
tasks, so its numbers show the pipeline working, not a significant difference. ``FULL`` is sized for the claim
(``bench/learning_demo.py``): 150 held-out tasks, enough for an exact McNemar test to resolve +15 points, a
cold start calibrated by a recorded pilot, GRPO time-boxed, and a compute-matched SFT control.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator

from muarl.config import ConfigError, YamlConfig, validation_problems
from muarl.models.precision import Precision
from muarl.reward import RewardSpec, reward_from_setting

# GRPO as the paper runs it (groups of 8 at temperature 1.0, clip 0.2, k3 KL 0.001, token-mean loss), with
# DAPO's dynamic sampling: a group whose 8 episodes all succeed or all fail carries no advantage, so it is
# dropped and fresh tasks are rolled out in its place. lr 2e-5, not the paper's 1e-6 at 8B: a 135M model
# trained for tens of steps needs a larger step (its cold start used 3e-5). Each step takes the kinds of task
# (level x change of mind) in turn: with a plain shuffle, seed 0's first 20 GRPO tasks (all that its two steps
# drew) held no level-2 task without a change of mind, the kind that run then lost (issue 21, docs/benchmarks.md).
GRPO_DEFAULTS: dict[str, Any] = {
    "tasks_per_step": 8, "group_size": 8, "temperature": 1.0, "lr": 2e-5, "kl_coef": 0.001, "clip_low": 0.2,
    "clip_high": 0.2, "drop_uniform": True, "dynamic_sampling": True, "max_sampling_rounds": 2,
    "save_every": 1, "keep_checkpoints": 1, "stratify_by": ["difficulty", "changes_mind"],
}
RESERVED_GRPO = {"out", "seed", "domain", "split", "steps", "allow_test_split", "task_ids", "limit", "user", "reward"}
# the policy GRPO trains is the cold start's, in full weights (the evaluations load full models) and in the run's
# precision; ``grpo: {model: {...}}`` may set the other ModelConfig fields (say train_top_layers)
RESERVED_GRPO_MODEL = {"name", "precision", "finetune"}

# The cold start's size comes from the calibration pilots in docs/benchmarks.md ("Cold start on clinic-lite" and
# "The user changes their mind"): a cold start of 18 steps at lr 3e-5 on dialogues without a change of mind left
# SmolLM2-135M, sampled at T = 1 on unseen train tasks whose patient changes their mind, at 75% success on level 1
# and 28% on level 2, so most groups of 8 carry signal; 12 steps (2 epochs of 120) gave no level-2 success at all.
# The demo's 120 demonstrations make 7 steps an epoch, so the cold start is 18 steps of a 3-epoch schedule.
#
# GRPO hands on the checkpoint with the best greedy success on 64 held-out train tasks (16 of each kind), the
# cold start included as candidate 0 (muarl.train.selection): issue 21's seed-1 run got worse on fresh train
# tasks after its first update and ended below the cold start on level 2. Validation is outside the 30-minute
# box and the control's CPU match (~3 minutes a candidate; recorded as validation_minutes).
#
# From protocol 3 to 9 the learning rate warmed up over 2 steps (1e-5, then 2e-5): AdamW's first step moves every
# weight by the full learning rate whatever the gradient's signal (its second moment has seen one gradient), and
# that step at 2e-5 cost level-2 tasks in issue 21's runs 5 and 6 (validation; run 6: 15 of 16 -> 8 of 16).
# Replayed on run 6's own first-step episodes at 1e-5 (bench/first_step_probe.py), the same update kept them (14 of
# 16). Protocol 10 (below) holds the rate at 1e-5.
#
# A step is 6 tasks (48 episodes before refills), not 8: at 8 a step took 9-11 minutes, so the 30-minute box held 3
# updates on a normal hour and 2 when the host ran 20-28% slower (issue 21's run 9 replayed run 4's first step
# byte for byte, 878 CPU s against 731, stopped after 2 steps and left 8 minutes of its box unused). At 6-9
# minutes a step the box holds 4 updates (run 10), or 3 on a slow hour, and a step that does not fit wastes less.
#
# A step whose validation falls more than 10 points (7 of the 64 tasks) under the best candidate's is not built on:
# the next step starts from the best candidate (rollback_below). In 4 of issue 21's 9 validated runs the first
# update took level 2 from 15-16 of 16 to 6-9, the run trained on from there, and only one won it back in its box
# (docs/benchmarks.md, run 12). 10 points is above what rounding alone moves a greedy validation (about 4 tasks)
# and under those falls (11-19 points); run 10's dip of 7.8 points at step 3, which its step 4 more than won back,
# would have been trained on as before.
#
# Nor is a step that lost a kind of task: one whose success on some kind of the validation tasks (16 each) is more
# than 25 points (5 or more of 16) under the cold start's (kind_fall_limit); it is never chosen either. Overall
# success hid such a loss on the Intel machine: seed 0's first update took level 2 from 16 to 10 of 16 while other
# kinds gained, a fall of 9.4 points overall, so the run built on it and its next step fell to 48.4% (run 13,
# docs/benchmarks.md). Broken first steps lost 6-10 of 16 level-2 tasks (runs 5, 6, 8, 12, 13); the healthy candidates
# whose kinds are recorded (run 11's, run 13's step 3) stayed within 2 of 16 of the cold start on every kind.
#
# The control is chosen the same way, on the same tasks, among the cold start and its weights at the CPU time GRPO
# had spent by each validated step (muarl.demo.stages.stage_control): more SFT is not monotone here (run 14's control:
# 68.0% after 18 steps, 52.7% after 23), so a control handed its last step would be judged by where its budget ended.
#
# GRPO draws its tasks in the train split's mix of kinds, each step still holding one of every kind, and ranks its
# candidates (and the control's) by validation success weighted by that mix (stratify_mix: pool, protocol 8): taken
# in turn, the kinds the cold start already solves 90-95% of (no change of mind: a quarter of the split) got half of
# the rollouts and half of the ranking. On two recorded cold starts the pool's mix scored +9.3 (p = 0.024) and -0.7
# (p = 1) against the same cold start's GRPO with kinds in turn (docs/benchmarks.md, twentieth session).
#
# Every block trains. Training only the top 8 at 5e-5 (protocol 9: an update 2.4x faster, 5-7 steps in the
# box) scored +7.3 against this on seed 0's cold start (64.7% against 57.3%, p = 0.090) and -9.3 on seed 2's
# (59.3% against 68.7%, p = 0.016: its third update broke level 2, was rolled back, and nothing later beat its first);
# not adopted on a mean of -1.0 (docs/benchmarks.md, twenty-second session).
#
# Protocol 10: every update at 1e-5 (the warm-up's first rate, held), with the cold start's own demonstrations in each
# update at weight 3 (anchor_coef; the anchor's NLL beside the policy loss). Updates at 2e-5 traded level 2 for the
# change of mind: with the anchor they lost level 2 in 7 of 9 validated updates, and a seed-7 draw kept only its
# first step (60.0% held out); at 1e-5 no anchored update of two draws lost more than 3 of 16 of it. From the
# float32 seed-0 cold start (52.0% held out), GRPO seeds 0 and 7 of this protocol scored 87.3% and 80.7% (+35.3 and
# +28.7, no kind falling), against plain protocol 8's 74.7% (seed 0) and the anchored seed-7 draw at 2e-5's 60.0%
# (docs/benchmarks.md, twenty-seventh session).
#
# Protocol 11: a roll back halves the rate of the retry, and every step kept after it doubles it back to 1e-5
# (rollback_lr_factor, rollback_lr_recovery). A roll back to the start restores a fresh optimizer, so a retry at the
# same rate is AdamW's same sign step again: on the bf16 seed-1 cold start protocol 10 rolled back all four of its
# updates (RL = the cold start, +0.0), each landing on nearly the same validation transcripts. There the retry at
# 5e-6 kept level 2, the steps after it at 1e-5 kept it too, and the box scored 65.3% held out (+13.3, 21 gained / 1
# lost; the rate held at 5e-6 after the cut: 63.3%). A run that never rolls back (both protocol-10 draws from the
# float32 seed-0 cold start, float32 seed 1) is protocol 10's, step for step (docs/benchmarks.md, twenty-ninth
# session). It does not carry the bf16 seed-0 cold start (+2.7: three of four updates lost level 2, at 1e-5, 5e-6
# and 5e-6; thirtieth session).
#
# Protocol 12: protocol 11 with the cold start's SFT (and the control's) in float32 whatever the run's precision
# (sft_precision). Under bf16 autocast the same 18 SFT steps on the same demonstrations end at a loss of ~0.0105
# against ~0.0070, and GRPO lost level 2 from both bf16 cold starts in either arithmetic of the update. Protocol 11's
# GRPO in bf16 from the float32 cold starts kept level 2 at every update (none rolled back): seed 0 scored 83.3% held
# out, +31.3 (49 gained / 2 lost) where its bf16 cold start gave +2.7; seed 1 71.3%, +16.7 (26 / 1) where its bf16
# cold start gave +13.3 (docs/benchmarks.md, thirty-first session).
FULL: dict[str, Any] = {
    "eval_tasks": 150, "base_eval_tasks": 30, "sft_demos": 120, "sft_epochs": 3.0, "sft_max_steps": 18, "grpo_minutes": 30.0,
    "control": True, "sft_precision": "fp32",
    "grpo": {"tasks_per_step": 6, "val_holdout": 64, "val_every": 1, "select_checkpoint": "best_val", "lr": 1e-5,
             "anchor_coef": 3.0, "rollback_below": 0.1, "kind_fall_limit": 0.25, "stratify_mix": "pool",
             "rollback_lr_factor": 0.5, "rollback_lr_recovery": True},
}
# Minutes, not a measurement: level-1 tasks only (identify, then one write: the oracle needs 4 agent turns of the 6), a short cold start
# at a higher learning rate, small GRPO steps, few evaluation tasks, no control.
#
# The cold start is 4 steps (of a 2-epoch schedule over 60 demonstrations), from the calibration pilot in
# docs/benchmarks.md (bench/quick_cold_start.py): sampled at temperature 1 on GRPO's first 8 tasks, 3 steps succeeded
# in 1 of 64 episodes (GRPO's one step then saw no signal and the RL model was the cold start), 4 steps in 18 of 64
# (28%, the design note's 25-50%, every group of 8 carrying signal), 5, 6 and 9 steps in 56-58%. From that cold start
# (greedy 50% on the 16 held-out tasks) one GRPO step of 16 episodes changed no greedy answer and two gained one task,
# so the box is 6 minutes, two steps of about 2.5.
QUICK: dict[str, Any] = {
    "max_difficulty": 1, "max_turns": 6, "eval_tasks": 16, "base_eval_tasks": 4,
    "sft_demos": 60, "sft_epochs": 2.0, "sft_max_steps": 4, "sft_lr": 1e-4,
    "grpo_minutes": 6.0, "grpo_steps": 2, "control": False, "grpo": {"tasks_per_step": 2, "max_sampling_rounds": 1},
}
FORMS = {"quick": QUICK, "full": FULL}
# A smoke run of the pipeline on the tiny random model, on top of a form: every stage runs, in seconds, and measures nothing.
PILOT: dict[str, Any] = {
    "model": "tiny-random", "precision": "fp32", "pilot": True, "eval_tasks": 3, "base_eval_tasks": 2, "eval_concurrency": 4,
    "max_turns": 6, "max_new_tokens": 8, "sft_demos": 3, "sft_epochs": 1.0, "sft_max_steps": 1, "grpo_steps": 1,
    "grpo": {"tasks_per_step": 1, "group_size": 2, "max_sampling_rounds": 1, "val_holdout": 2},
}


FREE_ON_RESUME = {"grpo_minutes", "grpo_steps"}  # budgets a resumed run may change; everything else must match


class DemoConfig(YamlConfig):
    """Everything that decides a demo run; recorded in ``OUT/demo_config.json`` and checked on resume."""

    out: str = Field(..., description="output directory")
    form: str = Field("custom", description="quick | full | custom: which preset the other fields came from (recorded)")
    model: str = Field("smollm2-135m-instruct", description="base model: smollm2-135m-instruct, tiny-random, HF id or directory")
    domain: str = Field("clinic-lite", description="world the demo trains and evaluates on (its train and test splits)")
    seed: int = Field(0, description="seeds task choice, demonstrations, SFT, GRPO and evaluation episodes")
    demo_user: str = Field("scripted:cooperative", description="the user the cold start's and the control's demonstrations are "
                           "synthesised against; GRPO and every evaluation face the scripted user, who changes its mind")
    precision: Precision = Field("auto", description="auto (bf16 autocast where the CPU multiplies bf16 natively) | bf16 | fp32")
    sft_precision: Precision | None = Field(None, description="precision of the cold start's SFT and the control's, if not "
                                            "`precision` (the full form trains them in fp32: bf16 SFT fits this model worse)")
    max_difficulty: int = Field(2, ge=1, description="train and test tasks up to this difficulty")
    eval_tasks: int = Field(150, ge=1, description="held-out test tasks every trained model is scored on (a seeded sample)")
    base_eval_tasks: int = Field(30, ge=1, description="of those, how many the untrained base model runs (it rambles to max_turns: costly, and far below the rest)")
    eval_concurrency: int = Field(16, ge=1, description="evaluation episodes decoded together")
    max_turns: int = Field(8, ge=1, description="agent turns per episode (the oracle needs 4 or 6 on clinic-lite)")
    max_new_tokens: int = Field(96, ge=1, description="tokens per assistant turn")
    max_context: int | None = Field(None, ge=64, description="tokens per episode (default 4096; tiny-random 12288)")
    sft_demos: int = Field(120, ge=1, description="oracle demonstrations the cold start learns from")
    sft_revising_demos: int = Field(0, ge=0, description="of those, how many are held with the scripted user instead of "
                                    "demo_user: where the patient changes their mind, the oracle confirms the revised value "
                                    "again (a cold start that sometimes re-confirms, for the reward A/B; 0: none)")
    sft_epochs: float = Field(2.0, gt=0, description="passes over the demonstrations")
    sft_lr: float = Field(3e-5, gt=0, description="cold-start learning rate")
    sft_max_steps: int | None = Field(None, ge=1, description="cold-start optimizer steps at most")
    grpo_minutes: float = Field(30.0, gt=0, description="GRPO time box (rollouts and updates)")
    grpo_steps: int = Field(1000, ge=1, description="GRPO steps at most (the time box usually ends GRPO first)")
    grpo: dict[str, Any] = Field(default_factory=dict, description="GRPOConfig fields overriding GRPO_DEFAULTS")
    reward: str | RewardSpec = Field("outcome", description="the reward GRPO trains with: a name or {name, options} "
                                     "(muarl.reward); evaluations always score the benchmark's verdict")
    grpo_user: str = Field("scripted", description="the user GRPO trains against (scripted:faulty:0.2 for the quarantine "
                           "experiment); every evaluation faces the scripted user")
    control: bool = Field(True, description="also train the compute-matched control: the SFT model trained further, for GRPO's minutes, on new demonstrations")
    control_lr: float | None = Field(None, gt=0, description="control learning rate (default sft_lr)")
    pilot: bool = Field(False, description="a smoke run of the pipeline (tests), not a measurement")

    @model_validator(mode="after")
    def _check(self) -> DemoConfig:
        if RESERVED_GRPO & set(self.grpo):
            raise ValueError(f"grpo overrides may not set {sorted(RESERVED_GRPO & set(self.grpo))}: the demo sets them")
        model = self.grpo.get("model", {})
        if not isinstance(model, dict):
            raise ValueError(f"grpo.model must be a mapping of ModelConfig fields, got {type(model).__name__}: {model!r}")
        if RESERVED_GRPO_MODEL & set(model):
            raise ValueError(f"grpo.model may set ModelConfig fields other than {sorted(RESERVED_GRPO_MODEL)}: the demo sets those")
        reward_from_setting(self.reward)  # an unknown reward or option is refused here, not after the cold start
        if self.sft_revising_demos > self.sft_demos:
            raise ValueError(f"sft_revising_demos ({self.sft_revising_demos}) cannot exceed sft_demos ({self.sft_demos})")
        if self.base_eval_tasks > self.eval_tasks:
            raise ValueError(f"base_eval_tasks ({self.base_eval_tasks}) cannot exceed eval_tasks ({self.eval_tasks}): "
                             "lower it (--base-eval-tasks) or raise eval_tasks")
        return self

    @property
    def context(self) -> int:
        return self.max_context or (TINY_CONTEXT if self.model == "tiny-random" else 4096)

    @property
    def grpo_fields(self) -> dict[str, Any]:
        return {**GRPO_DEFAULTS, **self.grpo}


# The tiny random model's byte-level tokenizer spends ~2.3x SmolLM2's tokens on the same text.
TINY_CONTEXT = 12288


def form_config(form: str, **fields: Any) -> DemoConfig:
    """A config from a named form, with ``fields`` (those not None) on top; ``grpo`` overrides merge."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}: use {' or '.join(FORMS)}")
    preset = dict(FORMS[form])
    given = {k: v for k, v in fields.items() if v is not None}
    grpo = {**preset.pop("grpo", {}), **given.pop("grpo", {})}
    try:
        return DemoConfig(**{**preset, **given, "form": form, "grpo": grpo})
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, None)) from None
