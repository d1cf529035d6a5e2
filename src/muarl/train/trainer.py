"""MUA-RL training loop: GRPO on multi-turn episodes with a simulated user in the loop.

What it really does, step by step:

1. Take the next ``tasks_per_step`` tasks of the training split (a seeded permutation per epoch; with
   ``stratify_by``, one whose kinds of task come in turn, so every step covers each kind).
2. For each task run ``group_size`` episodes with the current policy (the local token-level engine, at
   ``temperature``) against the simulated user of the config's world section (scripted, an LLM at any
   OpenAI-compatible endpoint, or a frozen local model), with its tools and reward, through
   ``rollout.runner.run_many``: the runner ``muarl rollout`` uses, so seeds, concurrency, error handling
   and the per-step episode file (``rollouts/step-NNNNNN.jsonl``) are the same. Each episode comes back with
   its exact token ids, loss mask (1 on the policy's own sampled tokens only: the user's and the tools' text
   is context, never trained) and reward.
3. Standardise rewards within each group into advantages; optionally drop groups whose rewards have zero
   variance (their advantages are all zero anyway; dropping them only changes the token-mean denominator).
   Episodes that errored (a model or user server failing after its retries) have no reward and are left out
   of their group; an episode that outgrew the context is the policy's failure and is scored. With
   ``quarantine_user_faults``, so are the failures the attribution blames on the simulated user (they say
   nothing of the policy); a group left with fewer than ``quarantine_min_group`` episodes is dropped.
4. One pass over the batch (``mini_batches`` optimizer steps; with 1, the default, strictly on-policy so the
   "old" log-probabilities are the current ones, detached): PPO clipped loss on the policy's tokens, plus
   ``kl_coef`` times the k3 KL to the frozen initial policy, minus ``entropy_coef`` times the entropy,
   averaged over all policy tokens of the batch; gradients accumulated over micro-batches, clipped to
   ``grad_clip``, one AdamW step. Every log-probability (new, old, reference) and the entropy are those of
   ``softmax(logits / temperature)``, the distribution the rollouts were sampled from. When only the top blocks
   train (``train_top_layers``), the reference runs those blocks alone from the policy's frozen trunk
   (``muarl.train.frozen_trunk``). With ``anchor_coef``, each optimizer step also back-propagates that weight times
   the supervised loss of a few demonstrations (``muarl.train.anchor``: PPO-ptx, against forgetting).
5. Log the step's metrics; checkpoint every ``save_every`` steps. With ``rollback_below``, a validated step that
   fell clearly below the best candidate is not built on: the next step starts from the best candidate's state;
   with ``kind_fall_limit``, so is one that lost a kind of task the starting weights solved.

Departures from the name: there is no value model (GRPO), the KL term is in the loss (not the reward), and
the loss is token-mean over the whole batch (DAPO) unless ``aggregation`` says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import torch

import muarl
from muarl.evals.conduct import is_user_fault
from muarl.models.local_engine import LocalPolicy, SamplingConfig
from muarl.reward import RewardFn
from muarl.rollout.config import ConfigError
from muarl.rollout.runner import run_many
from muarl.rollout.store import atomic_write_text, write_run_info
from muarl.seeds import step_seed
from muarl.rollout.world import build_world
from muarl.train.anchor import Anchor
from muarl.train.checkpoint import (
    checkpoint_dir,
    latest_checkpoint,
    restore_training_state,
    save_checkpoint,
)
from muarl.train.config import NO_ANCHOR, GRPOConfig
from muarl.train.frozen_trunk import TrunkTap, reference_logprobs_from_tap, shared_trunk_depth
from muarl.train.host_load import HostLoad
from muarl.train.selection import Selection
from muarl.train.grpo import grpo_loss, kept_advantages
from muarl.train.metrics import MetricsWriter, episode_metrics, update_size
from muarl.train.model_setup import Reference, load_trainable, trainable_parameters
from muarl.train.sequences import pad_sequences, scatter_rows, supervised_logprobs
from muarl.train.shared_prefix import (
    SharedPrefix,
    backward_prefix,
    encode_prefix,
    prefix_to_share,
)
from muarl.types import Episode, Task

ROLLOUTS_DIR = "rollouts"
VALIDATION_DIR = "validation"  # the validation episodes, one file per validated step (step-000000: the starting weights)
USER_SETTINGS = ("user", "user_base_url", "user_strategy", "user_temperature", "user_max_tokens", "user_precision")


class TrainingError(RuntimeError):
    """A step could not train at all (every episode errored); the message says what failed."""


def task_kind(task: Task, keys: list[str]) -> tuple:
    """The values of ``keys`` for a task: its attribute of that name (``difficulty``), else its metadata's."""
    return tuple(getattr(task, key) if hasattr(task, key) else task.metadata.get(key) for key in keys)


def epoch_order(tasks: list[Task], seed: int, epoch: int, stratify_by: list[str] | None = None, mix: str = "even",
                block: int = 1) -> list[int]:
    """Indices of ``tasks`` in the order epoch ``epoch`` draws them: a seeded shuffle. With ``stratify_by`` the
    shuffle's kinds (:func:`task_kind`) are taken in turn, one task of each, so any run of as many tasks as there
    are kinds covers every kind (while the smaller kinds last; then the rest go on in turn). A plain shuffle can
    leave a rare kind out of several steps, and an update that never sees a kind can unlearn it.

    Taken in turn, every kind gets an equal share, whatever its share of the pool. ``mix="pool"`` keeps the
    coverage and restores the pool's proportions: each run of ``block`` tasks (a step's) takes one task of every
    kind left, then fills its other places with the kinds furthest below their share of the pool so far."""
    order = list(range(len(tasks)))
    random.Random(f"{seed}/epoch/{epoch}").shuffle(order)
    if not stratify_by:
        return order
    queues: dict[tuple, list[int]] = {}
    for index in order:  # kinds in the order the shuffle first meets them: seeded too
        queues.setdefault(task_kind(tasks[index], stratify_by), []).append(index)
    turns = {kind: q[::-1] for kind, q in queues.items()}
    if mix == "pool":
        return _pool_order(turns, block)
    interleaved: list[int] = []
    while turns:
        interleaved += [q.pop() for q in turns.values()]
        turns = {kind: q for kind, q in turns.items() if q}
    return interleaved


def _pool_order(turns: dict[tuple, list[int]], block: int) -> list[int]:
    """The ``mix="pool"`` interleave of :func:`epoch_order` over its per-kind stacks (each popped from the end)."""
    total = sum(len(q) for q in turns.values())
    share = {kind: len(q) / total for kind, q in turns.items()}
    drawn = dict.fromkeys(turns, 0)
    out: list[int] = []

    def take(kind: tuple) -> None:
        out.append(turns[kind].pop())
        drawn[kind] += 1

    while len(out) < total:
        start, left = len(out), [kind for kind, q in turns.items() if q]
        if block >= len(left):  # every kind once per step
            for kind in left:
                take(kind)
        while len(out) - start < block and len(out) < total:
            # the kind furthest below its share of the tasks drawn so far (the first met wins a tie)
            take(max((kind for kind, q in turns.items() if q), key=lambda kind: share[kind] * (len(out) + 1) - drawn[kind]))
    return out


def pool_shares(tasks: list[Task], stratify_by: list[str]) -> dict[str, float]:
    """Each kind's share of ``tasks``, keyed as validation records kinds (``difficulty=2,changes_mind=True``)."""
    counts = Counter(kind_key(task, stratify_by) for task in tasks)
    return {key: n / len(tasks) for key, n in sorted(counts.items())}


def kind_key(task: Task, stratify_by: list[str]) -> str:
    """A task's kind as validation records key it: ``difficulty=2,changes_mind=True``."""
    return ",".join(f"{k}={v}" for k, v in zip(stratify_by, task_kind(task, stratify_by)))


def weighted_by_kind(values: dict[str, float], shares: dict[str, float]) -> float:
    """The mean of per-kind ``values`` weighted by ``shares``, over the kinds present in both."""
    kinds = [k for k in values if k in shares]
    return sum(values[k] * shares[k] for k in kinds) / sum(shares[k] for k in kinds)


def has_signal(group: list[Episode]) -> bool:
    """At least two scored episodes whose rewards differ: only then are the group's advantages non-zero."""
    rewards = {e.reward.reward for e in group if e.reward is not None and e.tokens is not None}
    return len(rewards) > 1


def next_step_fits(elapsed_s: float, steps_run: int, limit_s: float) -> bool:
    """Whether one more step, taking as long as the mean of those run so far, ends within ``limit_s``. A box
    checked only after the step that crosses it overruns by up to a whole step (minutes on a CPU), which
    would also hand a compute-matched control more minutes than RL was meant to get."""
    return elapsed_s + elapsed_s / max(steps_run, 1) <= limit_s


class GRPOTrainer:
    def __init__(self, cfg: GRPOConfig, reward_fn: RewardFn | None = None, progress: bool = True):
        """``reward_fn`` overrides the config's named reward (for experiments with rewards defined in code)."""
        # the precisions this machine runs (the policy's, and a local user's)
        self.cfg = cfg = cfg.model_copy(update={"model": cfg.model.resolved()}).with_user_precision_resolved()
        self.run_dir = Path(cfg.out)
        self.progress = progress
        self.world = build_world(cfg, concurrency=cfg.tasks_per_step * cfg.group_size)
        self.cfg = cfg = self.world.config  # the domain's turn budget, parallel calls and reward where the config sets none
        self.domain = self.world.domain
        tasks = self.world.tasks
        if cfg.val_holdout >= len(tasks):
            raise ConfigError(f"val_holdout={cfg.val_holdout} leaves no training tasks (split {cfg.split!r} has {len(tasks)} after filtering)")
        # the held-out tasks: a seeded draw (epoch -1, which training never reaches), by kind in turn with
        # stratify_by, so a kind of task rare in the split is still validated
        held_out = set(epoch_order(tasks, cfg.seed, -1, cfg.stratify_by)[:cfg.val_holdout])
        self.val_tasks: list[Task] = [t for i, t in enumerate(tasks) if i in held_out]
        # validation holds every kind equally (its kind guard needs each); with stratify_mix: pool its candidates are
        # ranked as the split is mixed
        self.kind_shares = pool_shares(tasks, cfg.stratify_by) if cfg.stratify_mix == "pool" else None
        self.tasks: list[Task] = [t for i, t in enumerate(tasks) if i not in held_out]
        self.selection = (Selection(metric=cfg.select_on, kind_fall_limit=cfg.kind_fall_limit)
                          if cfg.select_checkpoint == "best_val" else None)
        self.validation_seconds = self.validation_cpu_seconds = 0.0  # this process's, outside any time box
        self.model, self.tokenizer = load_trainable(cfg.model, seed=cfg.seed)
        self.anchor = (Anchor(cfg.anchor_data, self.tokenizer, cfg.model.chat_format, cfg.max_context, cfg.anchor_per_step, cfg.seed)
                       if cfg.anchored else None)
        self.reference = Reference(self.model, cfg.model.finetune) if cfg.kl_coef > 0 else None
        # whether the trainable weights are those the reference was built from (a fresh start, or a roll back to
        # candidate 0): the reference's log-probabilities are then the policy's own and its forward is skipped, a
        # fifth of an update's time (issue 21: in a 30-minute box a roll back to the start is common)
        self.policy_is_reference = True
        self._trunk: int | None = None  # frozen bottom blocks shared with the reference (None: not checked yet)
        self.params = trainable_parameters(self.model)
        self.optimizer, self.scheduler = self._fresh_optimizer()
        # the starting weights, for a roll back to candidate 0 (the trainable ones: all, or the LoRA adapters)
        rolls_back = cfg.rollback_below is not None or cfg.kind_fall_limit is not None
        self._start = [p.detach().clone() for p in self.params] if rolls_back else None
        self.reward_fn = reward_fn or self.world.reward_fn
        # one event loop for the whole run: the user's and tools' clients keep connections bound to it
        self._loop = asyncio.new_event_loop()
        self.step = 0
        self.position = 0  # tasks consumed so far (data position)

    # ---------------------------------------------------------------- run directory
    def start(self, resume: bool = False) -> None:
        """Create the run directory (recording the config), or resume from its latest checkpoint."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        saved = self.run_dir / "config.yaml"
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is not None and not resume:
            raise ConfigError(f"{self.run_dir} already holds a run (checkpoint {ckpt.name}); resume it or choose another out")
        if resume and ckpt is not None:
            conflicts = self.cfg.resume_conflicts(GRPOConfig.load(saved).model_dump(mode="json"))
            if conflicts:
                raise ConfigError(f"cannot resume {self.run_dir} with settings other than those in {saved} ({'; '.join(conflicts)}); "
                                  f"only {', '.join(sorted(self.cfg.RESUMABLE))} may change")
            self._load(ckpt)
        if self.selection is not None:
            self.selection = Selection.load(self.run_dir, self.cfg.select_on, self.cfg.kind_fall_limit)
            self.selection.truncate_after(self.step)  # steps after the checkpoint are re-run (and re-validated)
            if resume and self.rollback_due():  # the checkpoint is a step the run had rolled back from
                self.roll_back()
        atomic_write_text(saved, self.cfg.dump_yaml())
        write_run_info(self.run_dir, {
            "command": "train", "muarl_version": muarl.__version__, "started": datetime.now(timezone.utc).isoformat(),
            "resumed_at_step": self.step if resume else None, "policy": self.cfg.model.name, "precision": self.cfg.model.precision,
            "user": self.world.user.name, "user_settings": {k: getattr(self.cfg, k) for k in USER_SETTINGS},
            "tools": [t.to_openai() for t in self.domain.tools.specs()], "n_tasks": len(self.tasks), "n_val_tasks": len(self.val_tasks),
        })
        self.metrics = MetricsWriter(self.run_dir)
        self.metrics.truncate_after(self.step)
        for stale in [*(self.run_dir / ROLLOUTS_DIR).glob("step-*.jsonl"), *(self.run_dir / VALIDATION_DIR).glob("step-*.jsonl")]:
            # steps after the checkpoint are re-run
            if int(stale.name[len("step-"):len("step-") + 6]) > self.step:
                stale.unlink()

    def _load(self, ckpt: Path) -> None:
        if self.cfg.model.finetune == "lora":
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(self.model, load_peft_weights(str(ckpt / "model")))
        else:
            from transformers import AutoModelForCausalLM

            saved = AutoModelForCausalLM.from_pretrained(ckpt / "model", dtype=torch.float32)
            self.model.load_state_dict(saved.state_dict())
        state = restore_training_state(ckpt, self.optimizer, self.scheduler)
        self.step, self.position = state["step"], state["position"]
        self.policy_is_reference = False  # a checkpoint is a step's weights
        self._trunk = None  # its frozen blocks are compared with the reference's again

    def _fresh_optimizer(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        cfg = self.cfg
        optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay, eps=cfg.adam_eps)
        warmup = cfg.warmup_steps
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)

    def rollback_due(self) -> bool:
        """Whether this step's validation fell more than ``rollback_below`` under the best candidate's, or lost a kind
        of task (``kind_fall_limit``): a pure function of the selection record, so a resumed run decides as the
        uninterrupted one did."""
        return self.selection is not None and self.selection.falls(self.step, self.cfg.rollback_below)

    @property
    def lr_scale(self) -> float:
        """What every optimizer step multiplies the scheduler's rate by: ``rollback_lr_factor`` once per roll back so
        far (with ``rollback_lr_recovery``, divided by it again for every step kept since). A retry from the same
        weights at the same rate is again the same first AdamW step (issue 21: four of them, from four batches, landed
        on nearly the same validation transcripts); a smaller one is not."""
        cfg = self.cfg
        if self.selection is None or cfg.rollback_lr_factor == 1.0:
            return 1.0
        if not cfg.rollback_lr_recovery:
            return cfg.rollback_lr_factor ** self.selection.rollbacks(cfg.rollback_below)
        scale = 1.0  # each kept step (the start counts as one, at no cost) takes the rate back up, to lr at most
        for row in self.selection.history:
            fell = self.selection.falls(row["step"], cfg.rollback_below)
            scale = scale * cfg.rollback_lr_factor if fell else min(1.0, scale / cfg.rollback_lr_factor)
        return scale

    def roll_back(self) -> None:
        """Carry on from the best candidate: its checkpoint's weights, optimizer and scheduler (step 0: the starting
        weights, a fresh optimizer and warmup), keeping this step's count and data position, so the next step draws
        new tasks from weights that did not break what validation measures."""
        step, position, best = self.step, self.position, self.selection.best_step
        if best == 0:
            with torch.no_grad():
                for param, start in zip(self.params, self._start):
                    param.copy_(start)
            self.optimizer, self.scheduler = self._fresh_optimizer()
            self.policy_is_reference = True
        else:
            self._load(checkpoint_dir(self.run_dir, best))
        self.step, self.position = step, position

    def save(self) -> Path:
        spare = self.selection.best_step if self.selection is not None else None
        return save_checkpoint(self.run_dir, self.step, self.model, self.tokenizer, self.optimizer, self.scheduler,
                               {"position": self.position}, keep=self.cfg.keep_checkpoints, spare=spare)

    # ---------------------------------------------------------------- rollouts
    def next_tasks(self, n: int | None = None) -> list[Task]:
        """The next ``n`` (default ``tasks_per_step``) distinct tasks of the seeded per-epoch order."""
        batch: list[Task] = []
        limit = min(n or self.cfg.tasks_per_step, len(self.tasks))
        while len(batch) < limit:
            epoch, index = divmod(self.position, len(self.tasks))
            order = epoch_order(self.tasks, self.cfg.seed, epoch, self.cfg.stratify_by, self.cfg.stratify_mix, self.cfg.tasks_per_step)
            task = self.tasks[order[index]]
            self.position += 1
            if all(t.id != task.id for t in batch):  # an epoch boundary may bring a task of this batch again
                batch.append(task)
        return batch

    def policy(self, temperature: float) -> LocalPolicy:
        cfg = self.cfg
        sampling = SamplingConfig(temperature=temperature, top_p=cfg.top_p if temperature > 0 else 1.0,
                                  max_new_tokens=cfg.max_new_tokens, max_context=cfg.max_context, bf16=cfg.model.bf16)
        # a new policy per rollout batch: its shared system-prompt KV cache belongs to the current weights
        return LocalPolicy(self.model, self.tokenizer, cfg.model.chat_format, sampling, name=cfg.model.name,
                           batch=cfg.batched_rollouts, max_batch_rows=cfg.rollout_batch_rows)

    def run_episodes(self, tasks: list[Task], trials: int, temperature: float, seed: int, desc: str,
                     out: Path | None = None) -> list[Episode]:
        """``trials`` episodes of each task with the current weights, through the rollout runner; with
        ``batched_rollouts`` they run concurrently and the policy decodes their turns together."""
        world = self.world
        concurrency = len(tasks) * trials if self.cfg.batched_rollouts else 1
        if out is not None:
            out.unlink(missing_ok=True)  # a step re-run after a resume replaces what the crashed run wrote
        self.model.eval()
        result = self._loop.run_until_complete(run_many(
            world.domain, tasks, self.policy(temperature), world.user, trials=trials, concurrency=concurrency, out=out,
            seed=seed, config=world.loop, reward_fn=self.reward_fn, backend_factory=world.backend_factory,
            progress=self.progress, desc=desc,
        ))
        return result.episodes

    def rollout(self, tasks: list[Task], round_: int = 0) -> list[list[Episode]]:
        """``group_size`` episodes per task, grouped by task in ``tasks`` order (trials in order)."""
        name = f"step-{self.step + 1:06d}" + (f".round-{round_ + 1}" if round_ else "")
        out = self.run_dir / ROLLOUTS_DIR / f"{name}.jsonl" if self.cfg.keep_rollouts else None
        desc = f"step {self.step + 1} rollouts" + (f" (round {round_ + 1})" if round_ else "")
        episodes = self.run_episodes(tasks, self.cfg.group_size, self.cfg.temperature,
                                     step_seed(self.cfg.seed, self.step, round_), desc, out)
        by_task: dict[str, list[Episode]] = {t.id: [] for t in tasks}
        for episode in sorted(episodes, key=lambda e: e.trial):
            by_task[episode.task_id].append(episode)
        return [by_task[t.id] for t in tasks]

    # ---------------------------------------------------------------- update
    def trainable(self, group: list[Episode]) -> list[Episode] | None:
        """The episodes of a group that enter its advantages: the scored ones, less those the attribution blames
        on the user when ``quarantine_user_faults`` is on; None when too few remain (the group is dropped)."""
        scored = [e for e in group if e.reward is not None and e.tokens is not None]
        if not self.cfg.quarantine_user_faults:
            return scored if len(scored) >= 2 else None
        kept = [e for e in scored if not is_user_fault(e)]
        return kept if len(kept) >= self.cfg.quarantine_min_group else None

    def training_samples(self, groups: list[list[Episode]]) -> tuple[list[tuple[Episode, float]], dict[str, float]]:
        """(episode, advantage) for every episode that trains, and the group statistics.

        All-correct / all-wrong ratios read the reward function's verdict (``success``); a group gives no
        signal when its rewards have zero variance, whatever their value (a turn-penalised reward can differ
        between successes). With ``quarantine_user_faults``, the episodes labelled ``user`` leave their group
        first (:func:`muarl.train.grpo.kept_advantages`): ``quarantined`` counts them, and
        ``quarantine_dropped_groups`` the groups left with fewer than ``quarantine_min_group``."""
        samples: list[tuple[Episode, float]] = []
        stats = {"groups": 0.0, "all_correct_ratio": 0.0, "all_wrong_ratio": 0.0, "uniform_ratio": 0.0, "groups_dropped": 0.0}
        quarantine = self.cfg.quarantine_user_faults
        if quarantine:
            stats.update({"quarantined": 0.0, "quarantine_dropped_groups": 0.0})
        for group in groups:
            scored = [e for e in group if e.reward is not None and e.tokens is not None]
            faults = [quarantine and is_user_fault(e) for e in scored]
            if quarantine:
                stats["quarantined"] += sum(faults)
            if len(scored) < 2:
                stats["groups_dropped"] += 1
                continue
            verdicts = (torch.tensor([float(e.succeeded) for e in scored]) if self.cfg.advantage_std == "verdict" else None)
            advantages = kept_advantages(torch.tensor([e.reward.reward for e in scored], dtype=torch.float32), torch.tensor(faults),
                                         min_kept=self.cfg.quarantine_min_group if quarantine else 2,
                                         scale_by_std=self.cfg.advantage_std is not False, std_of=verdicts)
            if advantages is None:  # quarantine left too few
                stats["quarantine_dropped_groups"] += 1
                stats["groups_dropped"] += 1
                continue
            kept = [e for e, fault in zip(scored, faults) if not fault]
            stats["groups"] += 1
            correct = [e.succeeded for e in kept]
            stats["all_correct_ratio"] += all(correct)
            stats["all_wrong_ratio"] += not any(correct)
            uniform = not has_signal(kept)
            stats["uniform_ratio"] += uniform
            if uniform and (self.cfg.drop_uniform or self.cfg.dynamic_sampling):
                stats["groups_dropped"] += 1
                continue
            samples.extend(zip(kept, advantages.tolist()))
        if stats["groups"]:
            for key in ("all_correct_ratio", "all_wrong_ratio", "uniform_ratio"):
                stats[key] /= stats["groups"]
        return samples, stats

    def update(self, samples: list[tuple[Episode, float]]) -> dict[str, float]:
        """One pass of GRPO updates over the samples; returns the loss diagnostics."""
        cfg = self.cfg
        self.model.train()
        pad = self.tokenizer.pad_token_id
        chunks = [samples[i::cfg.mini_batches] for i in range(cfg.mini_batches)]
        chunks = [c for c in chunks if c]
        old = self._old_logprobs(samples) if cfg.mini_batches > 1 else None
        before = [p.detach().clone() for p in self.params]
        sums = {"policy_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "sampler_logprob_gap": 0.0}
        tokens_seen, grad_norms, rates, anchor_nll, anchor_weights = 0, [], [], [], []
        for i, chunk in enumerate(chunks):
            self.optimizer.zero_grad(set_to_none=True)
            total_tokens = sum(sum(e.tokens.loss_mask[1:]) for e, _ in chunk)
            at_reference = self.policy_is_reference
            cut, prefix, ref_prefix = self._shared_prefix(chunk, with_reference=not at_reference)
            tap = self._trunk_tap() if self.reference is not None and not at_reference else None
            for start in range(0, len(chunk), cfg.micro_batch_size):
                micro = chunk[start:start + cfg.micro_batch_size]
                batch = pad_sequences([e.tokens.input_ids[cut:] for e, _ in micro], [e.tokens.loss_mask[cut:] for e, _ in micro],
                                      pad, [e.tokens.logprobs[cut:] for e, _ in micro])
                mask = batch.loss_mask[:, 1:]
                n_tokens = int(mask.sum())
                if n_tokens == 0:
                    continue
                with tap.recording(self.model) if tap is not None else contextlib.nullcontext():
                    flat, entropy = supervised_logprobs(self.model, batch, bf16=cfg.model.bf16, with_entropy=True, prefix=prefix,
                                                        temperature=cfg.temperature)
                if cfg.entropy_coef == 0:
                    entropy = entropy.detach()
                old_flat = flat.detach() if old is None else torch.cat([old[id(e)] for e, _ in micro])
                ref_flat = None
                if self.reference is not None and at_reference:
                    ref_flat = flat.detach()
                elif tap is not None:  # the reference's top blocks only, from the policy's frozen trunk
                    with self.reference.active(self.model) as ref_model:
                        ref_flat = reference_logprobs_from_tap(
                            ref_model, tap, batch, bf16=cfg.model.bf16, temperature=cfg.temperature,
                            cache=None if ref_prefix is None else ref_prefix.cache_for(len(micro)))
                    tap.clear()
                elif self.reference is not None:
                    with torch.no_grad(), self.reference.active(self.model) as ref_model:
                        ref_flat, _ = supervised_logprobs(ref_model, batch, bf16=cfg.model.bf16, prefix=ref_prefix,
                                                          temperature=cfg.temperature)
                logprobs = scatter_rows(flat, mask)
                terms = grpo_loss(
                    logprobs, scatter_rows(old_flat, mask), torch.tensor([a for _, a in micro]), mask,
                    ref_logprobs=None if ref_flat is None else scatter_rows(ref_flat, mask),
                    entropy=scatter_rows(entropy, mask), clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                    kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator, entropy_coef=cfg.entropy_coef,
                    aggregation=cfg.aggregation, seq_norm=cfg.effective_seq_norm,
                )
                weight = n_tokens / max(1, total_tokens) if cfg.aggregation == "token-mean" else len(micro) / len(chunk)
                (terms.loss * weight).backward()
                sampler = batch.extra[:, 1:][mask]
                gap = float((flat.detach() - sampler).abs().mean())
                for key, value in (("policy_loss", terms.policy_loss), ("kl", terms.kl), ("entropy", terms.entropy),
                                   ("clip_fraction", terms.clip_fraction), ("ratio_mean", terms.ratio_mean),
                                   ("sampler_logprob_gap", gap)):
                    sums[key] += value * n_tokens
                tokens_seen += n_tokens
            if prefix is not None:
                backward_prefix(prefix)
            if self.anchor is not None:  # optimizer steps are counted as the run's steps are: a resumed run draws alike
                draw, share = self.step * cfg.mini_batches + i, cfg.share_prefix and not cfg.model.gradient_checkpointing
                if cfg.anchor_grad_ratio is None:
                    nll, _ = self.anchor.backward(self.model, draw, cfg.anchor_coef, bf16=cfg.model.bf16, share_prefix=share)
                else:
                    nll, anchor_weight = self.anchor.backward_relative(self.model, self.params, draw, cfg.anchor_grad_ratio,
                                                                       bf16=cfg.model.bf16, share_prefix=share)
                    anchor_weights.append(anchor_weight)
                anchor_nll.append(nll)
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)))
            rate = self.scheduler.get_last_lr()[0] * self.lr_scale  # the rate this optimizer step applies
            for group in self.optimizer.param_groups:
                group["lr"] = rate
            rates.append(rate)
            self.optimizer.step()
            self.scheduler.step()
            self.policy_is_reference = False
        out = {k: v / max(1, tokens_seen) for k, v in sums.items()}
        out["grad_norm"] = sum(grad_norms) / max(1, len(grad_norms))
        out["lr"] = sum(rates) / max(1, len(rates))
        out["update_size"] = update_size(before, self.params)
        out["trained_tokens"] = float(tokens_seen)
        if anchor_nll:
            out["anchor_nll"] = sum(anchor_nll) / len(anchor_nll)
        if anchor_weights:  # the weight anchor_grad_ratio gave the anchor's NLL
            out["anchor_weight"] = sum(anchor_weights) / len(anchor_weights)
        return out

    def _trunk_tap(self) -> TrunkTap | None:
        """A tap on the policy's first trainable block when the blocks under it are the reference's own weights
        (``train_top_layers``), so the reference runs its top blocks only; checked once per loaded set of weights."""
        if self._trunk is None:
            with self.reference.active(self.model) as ref_model:
                self._trunk = shared_trunk_depth(self.model, ref_model)
        return TrunkTap(self._trunk) if self._trunk else None

    def _shared_prefix(self, chunk: list[tuple[Episode, float]], with_reference: bool = True
                       ) -> tuple[int, SharedPrefix | None, SharedPrefix | None]:
        """The token count every sequence of ``chunk`` shares before its first target, and that prefix encoded
        once by the policy (with gradients) and, ``with_reference``, by the reference (without); (0, None, None)
        when not shared."""
        cfg = self.cfg
        cut = prefix_to_share([e.tokens.input_ids for e, _ in chunk], [e.tokens.loss_mask for e, _ in chunk],
                              enabled=cfg.share_prefix and not cfg.model.gradient_checkpointing)
        if not cut:
            return 0, None, None
        ids = chunk[0][0].tokens.input_ids[:cut]
        ref_prefix = None
        if self.reference is not None and with_reference:
            with torch.no_grad(), self.reference.active(self.model) as ref_model:
                ref_prefix = encode_prefix(ref_model, ids, bf16=cfg.model.bf16)
        return cut, encode_prefix(self.model, ids, bf16=cfg.model.bf16), ref_prefix

    def _old_logprobs(self, samples: list[tuple[Episode, float]]) -> dict[int, torch.Tensor]:
        """Log-probabilities under the pre-update weights, needed when a batch takes several optimizer steps."""
        old = {}
        with torch.no_grad():
            for ep, _ in samples:
                batch = pad_sequences([ep.tokens.input_ids], [ep.tokens.loss_mask], self.tokenizer.pad_token_id)
                old[id(ep)] = supervised_logprobs(self.model, batch, bf16=self.cfg.model.bf16, temperature=self.cfg.temperature)[0]
        return old

    # ---------------------------------------------------------------- loop
    def collect_groups(self) -> tuple[list[list[Episode]], int]:
        """The step's groups, and how many rollout rounds they took. With ``dynamic_sampling`` (DAPO's), rounds
        of fresh tasks follow while fewer than ``tasks_per_step`` groups carry signal, up to
        ``max_sampling_rounds``; the groups without signal are then dropped by the update (``drop_uniform``)."""
        groups: list[list[Episode]] = []
        wanted = self.cfg.tasks_per_step
        rounds = self.cfg.max_sampling_rounds if self.cfg.dynamic_sampling else 1
        for round_ in range(rounds):
            new = self.rollout(self.next_tasks(wanted), round_)
            groups += new
            wanted -= sum(has_signal(kept) for kept in map(self.trainable, new) if kept is not None)
            if wanted <= 0:
                break
        return groups, round_ + 1

    def train_step(self) -> dict[str, float]:
        t0, cpu0, load = time.perf_counter(), time.process_time(), HostLoad.start()
        groups, rounds = self.collect_groups()
        rollout_seconds = time.perf_counter() - t0
        episodes = [e for g in groups for e in g]
        if all(e.errored for e in episodes):
            raise TrainingError(f"step {self.step + 1}: all {len(episodes)} episodes errored, nothing to train on "
                                f"(first error: {episodes[0].error}); check the user and tool servers, then resume")
        samples, group_stats = self.training_samples(groups)
        t1 = time.perf_counter()
        losses = self.update(samples) if samples else {}
        update_seconds = time.perf_counter() - t1
        self.step += 1
        generated = sum(e.usage.completion_tokens for e in episodes)
        trained = sum(len(e.tokens.input_ids) for e, _ in samples)
        metrics = {
            **episode_metrics(episodes), **group_stats, **losses,
            "lr": losses.get("lr", self.scheduler.get_last_lr()[0]), "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "cpu_seconds": time.process_time() - cpu0,  # the process's CPU time (all threads) of rollouts and update
            "rollout_tokens_per_s": generated / max(rollout_seconds, 1e-9),
            "update_tokens_per_s": trained / max(update_seconds, 1e-9) if samples else 0.0,
            "data_position": float(self.position), "sampling_rounds": float(rounds),
        }
        others = load.others()  # the CPUs other processes kept busy meanwhile: a time box shared buys fewer steps
        if others is not None:
            metrics["others_cpus"] = others
        if self.validation_due():
            metrics.update(self.validate())
            if self.rollback_due():
                metrics["rolled_back_to"] = float(self.selection.best_step)
        return metrics

    def validation_due(self) -> bool:
        return bool(self.cfg.val_every and self.val_tasks and self.step % self.cfg.val_every == 0)

    def validate(self) -> dict[str, float]:
        """Greedy episodes, one per held-out task, with the current weights; with ``select_checkpoint: best_val``
        they are a candidate (step ``self.step``; 0 is the starting weights). Its minutes are counted apart
        (``val/seconds``): they are not training, so neither a time box nor ``cpu_seconds`` includes them."""
        t0, cpu0 = time.perf_counter(), time.process_time()
        kept = self.run_dir / VALIDATION_DIR / f"step-{self.step:06d}.jsonl" if self.cfg.keep_rollouts else None
        episodes = self.validation_episodes(f"step {self.step} validation", kept)
        stats = episode_metrics(episodes)
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
        self.validation_seconds += seconds
        self.validation_cpu_seconds += cpu_seconds
        scalars = {f"val/{k}": v for k, v in stats.items() if k in ("reward_mean", "success_rate", "turns_per_episode", "tool_error_rate")}
        record = self.candidate_record(episodes, stats)
        if self.selection is not None and record is not None:
            self.selection.add(self.step, record["success"], record["reward"], seconds, cpu_seconds, record["kinds"])
            if self.kind_shares is not None:
                scalars["val/success_pool_weighted"] = record["success"]
            if self.cfg.kind_fall_limit is not None:
                scalars["val/kinds_lost"] = float(len(self.selection.lost_kinds(self.step)))
        return {**scalars, "val/seconds": seconds, "val/cpu_seconds": cpu_seconds}

    def candidate_record(self, episodes: list[Episode], stats: dict[str, float]) -> dict[str, Any] | None:
        """What a validation tells the checkpoint choice of a candidate: its success, mean reward and success per
        kind; None when no episode was scored (every one errored): errors are not 0s."""
        if "success_rate" not in stats:
            return None
        kinds = self.by_kind(episodes, lambda e: float(e.succeeded)) if self.cfg.stratify_by else None
        if self.kind_shares is None:
            return {"success": stats["success_rate"], "reward": stats["reward_mean"], "kinds": kinds}
        rewards = self.by_kind(episodes, lambda e: e.reward.reward)
        return {"success": weighted_by_kind(kinds, self.kind_shares), "reward": weighted_by_kind(rewards, self.kind_shares), "kinds": kinds}

    def by_kind(self, episodes: list[Episode], value: Callable[[Episode], float]) -> dict[str, float]:
        """The mean ``value`` of the scored validation episodes per kind of task (``stratify_by``), keyed like
        ``difficulty=2,changes_mind=True``; a kind none of whose episodes was scored is left out."""
        kind_of = {t.id: kind_key(t, self.cfg.stratify_by) for t in self.val_tasks}
        values: dict[str, list[float]] = {}
        for e in episodes:
            if e.reward is not None:
                values.setdefault(kind_of[e.task_id], []).append(value(e))
        return {kind: sum(v) / len(v) for kind, v in sorted(values.items())}

    def validation_episodes(self, desc: str = "validation", out: Path | None = None) -> list[Episode]:
        """One greedy episode per held-out task with the current weights, the same draw at every validation."""
        return self.run_episodes(self.val_tasks, 1, 0.0, step_seed(self.cfg.seed, -1), desc, out)

    def train(self, time_limit_s: float | None = None) -> None:
        """Train up to ``cfg.steps``; with ``time_limit_s``, a time box: stop when the next step is not expected to
        end inside it (:func:`next_step_fits`; at least one step runs) and checkpoint the last step, so a
        time-boxed run ends within its box, give or take one step's variation, on a resumable checkpoint. The box
        holds rollouts and updates; validation's minutes are not training and do not count against it."""
        if self.selection is not None and self.validation_due() and self.selection.candidate(self.step) is None:
            self.validate()  # the starting weights (candidate 0), or a checkpoint whose validation a crash lost
            self.selection.save(self.run_dir)
        bar = _progress(self.cfg.steps, "GRPO steps", self.progress, initial=self.step)
        started, first, validated_before = time.monotonic(), self.step, self.validation_seconds
        try:
            while self.step < self.cfg.steps:
                metrics = self.train_step()
                self.metrics.write(self.step, metrics)
                bar.update(1)
                bar.set_postfix(reward=f"{metrics.get('reward_mean', 0):.3f}", kl=f"{metrics.get('kl', 0):.4f}")
                training_s = time.monotonic() - started - (self.validation_seconds - validated_before)
                out_of_time = time_limit_s is not None and not next_step_fits(training_s, self.step - first, time_limit_s)
                chosen = self.selection is not None and self.selection.best_step == self.step
                if self.step % self.cfg.save_every == 0 or self.step == self.cfg.steps or out_of_time or chosen:
                    self.save()
                if self.selection is not None:
                    self.selection.save(self.run_dir)  # after the checkpoint it may name
                if out_of_time:
                    break
                if "rolled_back_to" in metrics:  # after this step's checkpoint: a resume from it rolls back again
                    self.roll_back()
        finally:
            bar.close()
            self.metrics.close()
            self.close()
        if self.cfg.plot:
            from muarl.train.plot import plot_run

            plot_run(self.run_dir)


    def close(self) -> None:
        """Close the simulated user's and tools' connections and the run's event loop."""
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.world.aclose())
            self._loop.close()


class Validation(NamedTuple):
    """A model's greedy validation: the held-out tasks, their episodes, and the candidate's record
    (:meth:`GRPOTrainer.candidate_record` with ``seconds`` and ``cpu_seconds``; None when no episode was scored)."""

    tasks: list[Task]
    episodes: list[Episode]
    record: dict[str, Any] | None


def validate_model(cfg: GRPOConfig, model: str, scratch: Path, progress: bool = False) -> Validation:
    """Any model's greedy validation on ``cfg``'s held-out train tasks, through the trainer's own code and draw
    (its seed, split, ``val_holdout`` and ``stratify_by``): what ``select_checkpoint: best_val`` sees of a candidate.
    For models the run did not train itself: the compute-matched SFT control's candidates, another run's checkpoint.
    ``scratch`` is a directory nothing is started in."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    # no reference: validation never reads it, and it would copy the model
    trainer = GRPOTrainer(cfg.model_copy(update={"out": str(scratch), "model": cfg.model.model_copy(update={"name": model}),
                                                 "plot": False, "kl_coef": 0.0, **NO_ANCHOR}),
                           progress=progress)
    try:
        episodes = trainer.validation_episodes(f"validation of {Path(model).name}")
    finally:
        trainer.close()
    record = trainer.candidate_record(episodes, episode_metrics(episodes))
    if record is not None:
        record.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - cpu0)
    return Validation(trainer.val_tasks, episodes, record)


def _progress(total: int, desc: str, enabled: bool, initial: int = 0) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, initial=initial, disable=not enabled, leave=False, dynamic_ncols=True)
