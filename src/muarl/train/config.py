"""Configuration of ``muarl train`` (GRPO) and ``muarl sft``: pydantic models loadable from YAML.

Every field has a default and a one-line meaning. A run directory records the full resolved config
(``config.yaml``), so a run can always be repeated or resumed exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from muarl.config import YamlConfig
from muarl.models.precision import Precision, resolve_precision, use_bf16
from muarl.rollout.world import WorldConfig


class ModelConfig(YamlConfig):
    """Which policy to train and how its weights are updated."""

    name: str = Field("smollm2-135m-instruct", description="embedded default, tiny-random, HF model id or local directory")
    chat_format: str = Field("chatml-hermes", description="chat format name (chatml-hermes, qwen3, ...)")
    finetune: Literal["full", "lora"] = Field("full", description="update all weights, or LoRA adapters only")
    lora_r: int = Field(16, ge=1, description="LoRA rank")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r)")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA branch")
    lora_targets: list[str] | str = Field("all-linear", description="module names to adapt, or all-linear")
    precision: Precision = Field("auto", description="auto (bf16 autocast where the hardware multiplies bf16 natively, else fp32) | bf16 | fp32; weights stay float32")
    gradient_checkpointing: bool = Field(False, description="trade compute for activation memory")
    train_top_layers: int | None = Field(
        None, ge=1, description="full fine-tune of the top N decoder blocks and the final norm only; the embeddings (and a "
                                "head tied to them) and the blocks below stay frozen, so the backward stops at block L - N")

    @model_validator(mode="after")
    def _frozen_blocks_need_full_weights(self) -> ModelConfig:
        if self.train_top_layers is not None and self.finetune != "full":
            raise ValueError("train_top_layers freezes blocks of a full fine-tune; with LoRA choose lora_targets instead")
        return self

    @property
    def bf16(self) -> bool:
        return use_bf16(self.precision)

    def resolved(self) -> ModelConfig:
        """This config with ``precision: auto`` replaced by what this machine gets, as a run records it."""
        return self.model_copy(update={"precision": resolve_precision(self.precision)})


def anchors(settings: Mapping[str, Any]) -> bool:
    """Whether GRPO settings (a config's fields, or a partial mapping of them) weigh demonstrations in the update:
    by a fixed ``anchor_coef`` or by ``anchor_grad_ratio``."""
    return bool(settings.get("anchor_coef")) or settings.get("anchor_grad_ratio") is not None


# the settings that turn the anchor off, for a trainer that only validates or rolls out
NO_ANCHOR: dict[str, Any] = {"anchor_coef": 0.0, "anchor_grad_ratio": None}


class GRPOConfig(WorldConfig):
    """MUA-RL GRPO: groups of episodes per task against the simulated user, then a clipped policy update.

    The world fields (domain, tasks, user, tools, reward, limits) are the ones ``muarl rollout`` reads, with the
    same defaults (the domain's reward, turn budget and parallel calls) except the split (train)."""

    # besides the world's (endpoints, timeout, retries): how many steps the run takes
    RESUMABLE: ClassVar[frozenset[str]] = WorldConfig.RESUMABLE | {"steps", "out"}

    out: str = Field("runs/grpo", description="run directory (config, metrics, TensorBoard, checkpoints, rollouts)")
    seed: int = Field(0, description="seeds task order, sampling and initialisation")
    model: ModelConfig = Field(default_factory=ModelConfig)
    # environment (the rest of it is the shared world section)
    split: str = Field("train", description="split whose tasks are trained on")
    allow_test_split: bool = Field(False, description="permit training on a split named test (never for reported results)")
    val_holdout: int = Field(0, ge=0, description="tasks of the training split held out (never trained on) for validation")
    val_every: int = Field(0, ge=0, description="greedy validation every N steps (0: never)")
    select_checkpoint: Literal["last", "best_val"] = Field(
        "last", description="the weights the run hands on: its last step's, or (best_val) the validated candidate with the highest "
                            "success, the starting weights (step 0) included; needs val_holdout and val_every")
    select_on: Literal["success", "reward"] = Field(
        "success", description="what best_val ranks the candidates by: validation success, or the mean of the run's own reward "
                               "(a shaped reward's objective: process pays less for a success that broke the policy)")
    rollback_below: float | None = Field(
        None, gt=0, description="with best_val: after a validated step whose ranking (select_on) falls more than this below the best "
                                "candidate's, the run carries on from the best candidate's weights and optimizer state (the starting "
                                "weights and a fresh optimizer for step 0); the data moves on. None: always train on from the last step")
    kind_fall_limit: float | None = Field(
        None, gt=0, description="with best_val and stratify_by: a validated candidate whose success on some kind of validation "
                                "task is more than this under the starting weights' on that kind lost that kind: it is never "
                                "chosen, and the run carries on from the best candidate as after a rollback_below fall. "
                                "None: kinds are not compared")
    rollback_lr_factor: float = Field(
        1.0, gt=0, le=1, description="with rollback_below or kind_fall_limit: every roll back multiplies the rate of all later "
                                     "steps by this (0.5: the retry takes half the step). A retry from the same weights at the "
                                     "same rate is AdamW's same first step again; 1: the rate never changes")
    rollback_lr_recovery: bool = Field(
        False, description="with rollback_lr_factor < 1: every validated step that is kept divides the rate by the factor again, "
                           "up to lr (the cut is for the retry; false: it stays for the rest of the run)")
    # rollouts
    steps: int = Field(100, ge=1, description="policy updates (one rollout batch each)")
    tasks_per_step: int = Field(2, ge=1, description="tasks per rollout batch")
    stratify_by: list[str] = Field(default_factory=list, description="task attributes (difficulty) or metadata keys "
                                   "(changes_mind): the seeded order then takes their kinds in turn, so each step covers "
                                   "every kind instead of what a plain shuffle brings")
    stratify_mix: Literal["even", "pool"] = Field(
        "even", description="with stratify_by, the share of each kind: 'even' takes the kinds in turn (each an equal share of "
                            "the draws and of the validation score); 'pool' gives each step one task of every kind and the rest "
                            "in the split's proportions, and ranks validation candidates by success weighted by those "
                            "proportions, so training and the checkpoint choice follow the mix the split (and a test drawn "
                            "like it) has")
    group_size: int = Field(8, ge=2, description="episodes per task (n of the group)")
    temperature: float = Field(1.0, ge=0, description="rollout sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="rollout nucleus sampling mass")
    max_new_tokens: int = Field(128, ge=1, description="tokens per assistant turn")
    max_context: int = Field(4096, ge=64, description="policy tokens per episode; an episode that outgrows it ends context_full (scored, a failure)")
    batched_rollouts: bool = Field(True, description="run a step's episodes concurrently and decode their turns in one batch")
    rollout_batch_rows: int = Field(64, ge=1, description="most episodes decoded together in one forward (batched_rollouts): a whole step of 8 tasks x 8")
    # update
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate")
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warmup steps")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW eps: a weight whose gradient is far under it moves by lr * g / eps instead of "
                            "Adam's full lr * sign(g) of a first step (a floor for gradient noise; the default is torch's)")
    micro_batch_size: int = Field(1, ge=1, description="sequences per forward/backward (gradients accumulate over the batch)")
    share_prefix: bool = Field(True, description="encode the prompt prefix all sequences of an update share once (exact; not with gradient checkpointing)")
    mini_batches: int = Field(1, ge=1, description="optimizer steps per rollout batch (1: strictly on-policy)")
    clip_low: float = Field(0.2, ge=0, description="PPO clip below 1 (ratio >= 1 - clip_low)")
    clip_high: float = Field(0.2, ge=0, description="PPO clip above 1; > clip_low is DAPO's clip-higher")
    kl_coef: float = Field(0.001, ge=0, description="weight of the KL-to-reference loss term (0 disables the reference)")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="per-token KL estimator")
    entropy_coef: float = Field(0.0, ge=0, description="entropy bonus weight (entropy is logged either way)")
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm")
    advantage_std: bool | Literal["verdict"] = Field(
        True, description="divide advantages by the group std of the rewards (true), of the benchmark's verdicts (verdict: a "
        "shaped reward orders a group, the verdict sets its step size; a group of equal verdicts uses the rewards' std), "
        "or not at all (false: Dr. GRPO)")
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-sum"] = Field("token-mean", description="loss reduction (seq-sum: Dr. GRPO)")
    seq_norm: float | None = Field(None, gt=0, description="seq-sum divisor (default max_new_tokens * max_turns)")
    drop_uniform: bool = Field(False, description="skip groups whose scored episodes all have the same reward (zero variance: no signal)")
    dynamic_sampling: bool = Field(False, description="DAPO's dynamic sampling: roll out fresh tasks while fewer than tasks_per_step groups carry signal; groups without signal are dropped")
    max_sampling_rounds: int = Field(3, ge=1, description="rollout rounds per step at most, with dynamic_sampling")
    anchor_data: str | None = Field(None, description="chat JSONL of demonstrations (as muarl sft reads) kept in the update: with "
                                    "anchor_coef, each optimizer step adds their supervised loss (say, the cold start's own SFT data)")
    anchor_coef: float = Field(0.0, ge=0, description="weight of the anchor's mean NLL beside the policy loss (InstructGPT's PPO-ptx); "
                               "0: no anchor")
    anchor_grad_ratio: float | None = Field(
        None, gt=0, description="instead of anchor_coef's fixed weight: each optimizer step rescales the anchor's gradient to this "
                                "fraction of the policy gradient's norm, so the demonstrations pull by the same measure "
                                "whatever the cold start's fit of them (at weight 3 its gradient was 0.7x the policy's on one "
                                "cold start, 2.8x on another)")
    anchor_per_step: int = Field(8, ge=1, description="demonstrations each optimizer step anchors on (a seeded draw, epoch by epoch)")
    quarantine_user_faults: bool = Field(False, description="leave the episodes the failure attribution labels user (the "
                                         "simulated user left its script) out of their group before advantages are computed")
    quarantine_min_group: int = Field(2, ge=2, description="with quarantine_user_faults: a group left with fewer episodes is dropped")
    # bookkeeping
    save_every: int = Field(10, ge=1, description="checkpoint every N steps (and at the end)")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept on disk (oldest deleted)")
    keep_rollouts: bool = Field(True, description="write every step's episodes to rollouts/step-NNNNNN.jsonl (token traces included)")
    plot: bool = Field(True, description="draw the training-dynamics figure at the end")

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.select_checkpoint == "best_val" and not (self.val_holdout and self.val_every):
            raise ValueError("select_checkpoint: best_val chooses on validation: set val_holdout and val_every too")
        if self.anchored and not self.anchor_data:
            raise ValueError("anchor_coef and anchor_grad_ratio weigh the supervised loss of demonstrations: set anchor_data to their chat JSONL")
        if self.anchor_coef > 0 and self.anchor_grad_ratio is not None:
            raise ValueError("anchor_coef (a fixed weight) and anchor_grad_ratio (a weight set each step) are two ways to weigh the "
                             "anchor: set one")
        if self.rollback_below is not None and self.select_checkpoint != "best_val":
            raise ValueError("rollback_below goes back to the best validated candidate: set select_checkpoint: best_val too")
        if self.rollback_lr_factor < 1 and self.rollback_below is None and self.kind_fall_limit is None:
            raise ValueError("rollback_lr_factor cuts the rate after a roll back: set rollback_below or kind_fall_limit too")
        if self.rollback_lr_recovery and self.rollback_lr_factor == 1:
            raise ValueError("rollback_lr_recovery restores a rate cut after a roll back: set rollback_lr_factor under 1 too")
        if self.kind_fall_limit is not None and not (self.select_checkpoint == "best_val" and self.stratify_by):
            raise ValueError("kind_fall_limit compares validation by kind of task: set select_checkpoint: best_val and stratify_by too")
        if self.stratify_mix != "even" and not self.stratify_by:
            raise ValueError(f"stratify_mix: {self.stratify_mix} mixes kinds of task: set stratify_by too")
        if self.select_on != "success" and self.select_checkpoint != "best_val":
            raise ValueError(f"select_on: {self.select_on} ranks validated candidates: set select_checkpoint: best_val too")
        if self.split == "test" and not self.allow_test_split:
            raise ValueError("training on split 'test' would leak the evaluation set; use split: train "
                             "(or set allow_test_split: true for a throwaway experiment)")
        if self.quarantine_min_group > self.group_size:
            raise ValueError(f"quarantine_min_group ({self.quarantine_min_group}) cannot exceed group_size ({self.group_size})")
        if self.mini_batches > self.tasks_per_step * self.group_size:
            raise ValueError("mini_batches cannot exceed the episodes per step (tasks_per_step * group_size)")
        return self

    @property
    def anchored(self) -> bool:
        """Whether the update weighs an anchor (``anchor_coef`` or ``anchor_grad_ratio``)."""
        return anchors(vars(self))

    @property
    def effective_seq_norm(self) -> float:
        """The seq-sum divisor; of a config resolved for its domain (``WorldConfig.for_domain``), whose max_turns is set.
        1.0 under the other aggregations, which never divide by it (so an update needs no domain to run)."""
        if self.seq_norm:
            return self.seq_norm
        if self.aggregation != "seq-sum":
            return 1.0
        if self.max_turns is None:
            raise ValueError("seq_norm defaults to max_new_tokens * max_turns: resolve the config for its domain first")
        return float(self.max_new_tokens * self.max_turns)


class SFTConfig(YamlConfig):
    """Cold-start supervised fine-tuning on chat JSONL (OpenAI messages + tools), loss on assistant tokens."""

    data: str = Field(..., description="JSONL file: one {messages: [...], tools: [...]} conversation per line")
    out: str = Field("runs/sft", description="run directory (config, metrics, final model)")
    seed: int = Field(0, description="seeds shuffling and initialisation")
    model: ModelConfig = Field(default_factory=ModelConfig)
    epochs: float = Field(1.0, gt=0, description="passes over the data (fractions allowed)")
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate")
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warmup steps")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    pack_length: int = Field(8192, ge=16, description="tokens per packed training row (longer conversations are cut; keep it above the system prompt with its tool schemas)")
    rows_per_step: int = Field(1, ge=1, description="packed rows per optimizer step")
    share_prefix: bool = Field(True, description="when every conversation opens with the same tokens (one system turn and tool schemas), run them once per step and train each conversation unpacked in its own row after them; pack_length then caps the unshared tokens per row group")
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm")
    save_every: int = Field(0, ge=0, description="also save every N steps (0: only at the end)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps, even within the epochs")
    time_limit_minutes: float | None = Field(None, gt=0, description="stop (and save) after the step that crosses this much training time")
    cpu_time_limit_minutes: float | None = Field(None, gt=0, description="stop (and save) after the step that crosses this much "
                                                 "CPU time of the process (all threads): a budget other jobs on the machine do not shrink")
    save_at_cpu_minutes: list[float] = Field(default_factory=list, description="also save the model (OUT/model-step-N) after the "
                                             "step that crosses each of these CPU minutes, unless it is the last step: the points a "
                                             "compared run was validated at (the demo's control at GRPO's steps)")
