"""GRPO update throughput: muarl's trainer update against TRL's GRPOTrainer loss, same batch, same model.

One fixed batch of multi-turn episodes as token sequences (a group of n episodes, 600-1000 tokens each,
loss mask 1 only on the policy's turns, advantages standardised from the group's rewards) is updated on,
alternately, by two arms that start from the same weights:

- ``muarl``: ``muarl.train.trainer.GRPOTrainer.update`` itself (the method the training loop calls):
  policy log-probabilities and entropies on policy tokens, reference log-probabilities for the k3 KL,
  clipped token-mean loss, backward per micro-batch, gradient clip, one AdamW step.
- ``trl``: TRL's ``GRPOTrainer``: reference log-probabilities with its ``_get_per_token_logps_and_entropies``
  on its ``ref_model`` (what its ``_generate_and_score_completions`` does after generation), then
  ``compute_loss`` on each micro-batch, backward, gradient clip, one step of the optimizer the trainer
  creates itself.

TRL's GRPO samples one completion per prompt, and its own multi-turn tool loop marks tool results inside
the completion with ``tool_mask``. Each episode is mapped the same way: prompt = the tokens before the
first policy token, completion = the rest (attention on all of it), ``tool_mask`` = our loss mask there.
Both arms therefore attend over the same tokens and put loss on the same tokens (checked: the number of
loss tokens, and the log-probabilities of both arms on one sequence before any update).

Matched settings: beta / kl_coef 0.001 (k3), epsilon 0.2 both sides, TRL ``loss_type="dapo"`` (sum over
every loss token of the batch divided by their number: muarl's ``token-mean``), one optimizer step per
batch (strictly on-policy: old log-probabilities are the detached current ones in both), the same micro-batch
size, lr 1e-6, gradient clip 1.0, bf16 autocast on both or off on both, no gradient checkpointing (TRL's
default turns it on; muarl's does not), TRL's ``use_bias_correction_kl`` off (muarl's KL term has no
importance weight). TRL's inputs are laid out as its trainer lays them out: prompts left-padded and
completions right-padded to the longest in the whole generation batch, then split into micro-batches
(``--trl-layout batch``); ``--trl-layout micro`` pads each micro-batch only to its own longest row.

Timing is interleaved (the arm that goes first alternates each repeat) after one untimed warm-up update per
arm; the figure is the median over repeats. Output: one JSON object on stdout.

    OMP_WAIT_POLICY=PASSIVE python bench/update_throughput_vs_trl.py [--repeats 3] [--threads 2] [--tiny]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported: no spinning threads on a shared CPU

import argparse
import copy
import json
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from muarl.models.hf_loading import EMBEDDED_MODEL, TINY_MODEL, load_causal_lm
from muarl.train.config import GRPOConfig as MuarlGRPOConfig
from muarl.train.config import ModelConfig
from muarl.train.grpo import group_advantages
from muarl.train.model_setup import Reference, trainable_parameters
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.trainer import GRPOTrainer as MuarlGRPOTrainer
from muarl.types import Episode, TokenTrace

KL_COEF = 0.001
CLIP = 0.2
LR = 1e-6
GRAD_CLIP = 1.0


# --------------------------------------------------------------------------- the batch
def synthetic_episodes(n: int, vocab_size: int, end_of_turn: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask) for ``n`` multi-turn episodes of 600-1000 tokens.

    Layout of each: a system prompt plus the user's opening (250-350 tokens, mask 0), then alternating policy
    turns (20-90 tokens ending with the end-of-turn id, mask 1) and observations (tool results or user
    replies, 40-150 tokens, mask 0), ending on a policy turn. Ids are random: the cost of an update depends on
    the lengths and the mask, not on which tokens they are.
    """
    rng = random.Random(seed)
    episodes = []
    for _ in range(n):
        target = rng.randint(600, 1000)
        ids: list[int] = []
        mask: list[int] = []
        _append_span(ids, mask, rng, vocab_size, rng.randint(250, 350), trained=0)
        while True:
            turn = rng.randint(20, 90)
            room = target - len(ids)
            last = room <= turn + 40 + 20  # no room left for an observation and another policy turn
            turn = room if last else turn
            _append_span(ids, mask, rng, vocab_size, turn - 1, trained=1)
            ids.append(end_of_turn)
            mask.append(1)
            if last:
                break
            _append_span(ids, mask, rng, vocab_size, min(rng.randint(40, 150), target - len(ids) - 20), trained=0)
        episodes.append((ids, mask))
    return episodes


def _append_span(ids: list[int], mask: list[int], rng: random.Random, vocab_size: int, length: int, trained: int) -> None:
    """``length`` random non-special token ids, all with loss mask ``trained``."""
    ids.extend(rng.randrange(3, vocab_size) for _ in range(length))
    mask.extend([trained] * length)


def group_rewards(n: int, seed: int) -> torch.Tensor:
    """Binary outcome rewards for one group of ``n``, with at least one success and one failure."""
    rng = random.Random(seed + 1)
    rewards = [float(rng.random() < 0.4) for _ in range(n)]
    rewards[0], rewards[-1] = 1.0, 0.0
    return torch.tensor([rewards])


# --------------------------------------------------------------------------- muarl arm
class _UpdateOnlyTrainer(MuarlGRPOTrainer):
    """muarl's GRPO trainer with only what ``update`` reads: no domain, no rollouts, no run directory."""

    def __init__(self, cfg: MuarlGRPOConfig, model: Any, tokenizer: Any):
        self.cfg = cfg
        self.model, self.tokenizer = model, tokenizer
        self.reference = Reference(model, cfg.model.finetune)
        self.policy_is_reference = True  # as the trainer starts: the first (warm-up) update skips the reference
        self.anchor = None  # GRPO's update alone, as TRL's arm runs it
        self.selection = None  # no validation, so no roll back and no rate cut after one
        self._trunk = None  # frozen blocks shared with the reference: checked at the first update that runs it
        self.params = trainable_parameters(model)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda i: 1.0)


def muarl_arm(model: Any, tokenizer: Any, episodes: list[tuple[list[int], list[int]]], advantages: list[float],
              micro_batch: int, bf16: bool, model_name: str) -> tuple[Callable[[], float], Any]:
    cfg = MuarlGRPOConfig(
        model=ModelConfig(name=model_name, precision="bf16" if bf16 else "fp32"), lr=LR, micro_batch_size=micro_batch, clip_low=CLIP,
        clip_high=CLIP, kl_coef=KL_COEF, kl_estimator="k3", aggregation="token-mean", grad_clip=GRAD_CLIP,
        group_size=len(episodes), tasks_per_step=1,
    )
    trainer = _UpdateOnlyTrainer(cfg, model, tokenizer)
    samples = [
        (Episode(task_id=f"bench-{i}", domain="bench", split="train", termination="user_stop",
                 tokens=TokenTrace(input_ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids))), adv)
        for i, ((ids, mask), adv) in enumerate(zip(episodes, advantages))
    ]

    def step() -> float:
        return trainer.update(samples)["trained_tokens"]

    return step, trainer


# --------------------------------------------------------------------------- TRL arm
def _zero_reward(completions: list[Any], **_: Any) -> list[float]:
    return [0.0] * len(completions)


def trl_inputs(rows: list[tuple[list[int], list[int]]], advantages: list[float], pad_id: int,
               loss_tokens: int) -> dict[str, torch.Tensor]:
    """TRL's training inputs for ``rows``: prompts left-padded, completions right-padded, as its trainer builds them."""
    split = [mask.index(1) for _, mask in rows]  # the prompt is everything before the first policy token
    prompts = [ids[:s] for (ids, _), s in zip(rows, split)]
    completions = [(ids[s:], mask[s:]) for (ids, mask), s in zip(rows, split)]
    width_p = max(len(p) for p in prompts)
    width_c = max(len(c) for c, _ in completions)
    n = len(rows)
    out = {
        "prompt_ids": torch.full((n, width_p), pad_id, dtype=torch.long),
        "prompt_mask": torch.zeros((n, width_p), dtype=torch.long),
        "completion_ids": torch.full((n, width_c), pad_id, dtype=torch.long),
        "completion_mask": torch.zeros((n, width_c), dtype=torch.long),
        "tool_mask": torch.ones((n, width_c), dtype=torch.long),  # TRL pads tool_mask with 1
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "num_items_in_batch": torch.tensor(loss_tokens),
    }
    for i, (prompt, (completion, mask)) in enumerate(zip(prompts, completions)):
        out["prompt_ids"][i, width_p - len(prompt):] = torch.tensor(prompt)
        out["prompt_mask"][i, width_p - len(prompt):] = 1
        out["completion_ids"][i, : len(completion)] = torch.tensor(completion)
        out["completion_mask"][i, : len(completion)] = 1
        out["tool_mask"][i, : len(mask)] = torch.tensor(mask)
    return out


def _slice(inputs: dict[str, torch.Tensor], start: int, stop: int) -> dict[str, torch.Tensor]:
    return {k: v if k == "num_items_in_batch" else v[start:stop] for k, v in inputs.items()}


def trl_arm(model: Any, tokenizer: Any, episodes: list[tuple[list[int], list[int]]], advantages: list[float],
            micro_batch: int, bf16: bool, layout: str) -> tuple[Callable[[], float], Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    n = len(episodes)
    if n % micro_batch:
        raise SystemExit(f"--micro-batch {micro_batch} must divide --sequences {n}")
    accumulation = n // micro_batch
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), report_to="none", use_cpu=True, bf16=bf16,
        beta=0.0,  # the reference is attached below (TRL would reload it from the model's path, which tiny-random lacks)
        epsilon=CLIP, loss_type="dapo", use_bias_correction_kl=False, learning_rate=LR, max_grad_norm=GRAD_CLIP,
        per_device_train_batch_size=micro_batch, gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation, num_generations=n, num_iterations=1, activation_checkpointing=False,
        logging_steps=1_000_000, save_strategy="no", seed=0,
    )
    reference = copy.deepcopy(model).eval()
    trainer = GRPOTrainer(model=model, reward_funcs=_zero_reward, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": ["bench"] * n}))
    # What GRPOTrainer.__init__ does for beta > 0 with a full model: a frozen copy of the initial weights with
    # the fused log-prob head.
    trainer.beta = KL_COEF
    for p in reference.parameters():
        p.requires_grad_(False)
    add_fused_lm_head(reference, temperature=trainer.temperature)
    trainer.ref_model = reference
    trainer.current_gradient_accumulation_steps = accumulation  # set by Trainer's loop at each step
    optimizer = trainer.create_optimizer()
    params = [p for p in model.parameters() if p.requires_grad]
    pad = tokenizer.pad_token_id
    loss_tokens = sum(sum(m) for _, m in episodes)
    bounds = [(s, s + micro_batch) for s in range(0, n, micro_batch)]
    if layout == "batch":
        whole = trl_inputs(episodes, advantages, pad, loss_tokens)
        micro = [_slice(whole, s, e) for s, e in bounds]
    else:
        micro = [trl_inputs(episodes[s:e], advantages[s:e], pad, loss_tokens) for s, e in bounds]

    def step() -> float:
        model.train()
        with torch.no_grad():  # reference log-probabilities, computed once per generation batch in TRL
            for inputs in micro:
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
                attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
                inputs["ref_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                    trainer.ref_model, ids, attention, inputs["completion_ids"].size(1), batch_size=micro_batch)[0]
        optimizer.zero_grad(set_to_none=True)
        for inputs in micro:
            trainer.compute_loss(model, inputs).backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimizer.step()
        return float(sum(int((x["completion_mask"] * x["tool_mask"]).sum()) for x in micro))

    return step, trainer


def logprob_gap(muarl_trainer: Any, trl_trainer: Any, episode: tuple[list[int], list[int]], pad_id: int, bf16: bool) -> float:
    """Max |muarl - TRL| log-probability over one sequence's loss tokens, both arms' models untouched yet."""
    ids, mask = episode
    with torch.no_grad():
        ours, _ = supervised_logprobs(muarl_trainer.model, pad_sequences([ids], [mask], pad_id), bf16=bf16)
        inputs = trl_inputs([episode], [0.0], pad_id, sum(mask))
        full = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        theirs = trl_trainer._get_per_token_logps_and_entropies(
            trl_trainer.model, full, attention, inputs["completion_ids"].size(1))[0]
        theirs = theirs[inputs["tool_mask"].bool() & inputs["completion_mask"].bool()]
    return float((ours - theirs).abs().max())


# --------------------------------------------------------------------------- main
def update_bench_parser(description: str) -> argparse.ArgumentParser:
    """The options every update benchmark takes (this one and ``update_shared_prefix.py``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tiny", action="store_true", help="a tiny random Llama instead of SmolLM2 (quick check only)")
    parser.add_argument("--sequences", type=int, default=8, help="episodes in the batch")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per forward/backward (muarl's default is 1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed updates per arm (after one warm-up each)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fp32", action="store_true", help="no bf16 autocast in any arm (muarl's default is bf16)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def load_bench_model(args: argparse.Namespace) -> tuple[str, Any, Any, bool]:
    """The threads and seed the options set, then (model name, model, tokenizer, bf16)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model_name = TINY_MODEL if args.tiny else EMBEDDED_MODEL
    base, tokenizer = load_causal_lm(model_name, seed=args.seed)
    return model_name, base, tokenizer, not args.fp32


def main() -> None:
    parser = update_bench_parser(__doc__.splitlines()[0])
    parser.add_argument("--trl-layout", choices=["batch", "micro"], default="batch",
                        help="pad TRL inputs to the whole generation batch (as its trainer does) or per micro-batch")
    args = parser.parse_args()
    model_name, base, tokenizer, bf16 = load_bench_model(args)
    base.config.use_cache = False
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    episodes = synthetic_episodes(args.sequences, base.config.vocab_size, end_of_turn, args.seed)
    advantages = group_advantages(group_rewards(args.sequences, args.seed))[0].tolist()

    muarl_step, muarl_trainer = muarl_arm(copy.deepcopy(base), tokenizer, episodes, advantages, args.micro_batch, bf16, model_name)
    trl_step, trl_trainer = trl_arm(copy.deepcopy(base), tokenizer, episodes, advantages, args.micro_batch, bf16, args.trl_layout)
    del base
    gap = logprob_gap(muarl_trainer, trl_trainer, episodes[0], tokenizer.pad_token_id, bf16)

    arms = {"muarl": muarl_step, "trl": trl_step}
    loss_tokens = {name: step() for name, step in arms.items()}  # warm-up, untimed
    if loss_tokens["muarl"] != loss_tokens["trl"]:
        raise SystemExit(f"the arms train different token counts: {loss_tokens}")
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(args.repeats):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            t0 = time.perf_counter()
            arms[name]()
            seconds[name].append(time.perf_counter() - t0)

    total_tokens = sum(len(ids) for ids, _ in episodes)
    trained = int(loss_tokens["muarl"])
    report: dict[str, Any] = {
        "model": model_name, "sequences": args.sequences, "micro_batch": args.micro_batch, "bf16": bf16,
        "trl_layout": args.trl_layout, "repeats": args.repeats, "threads": args.threads,
        "sequence_tokens": total_tokens, "loss_tokens": trained,
        "sequence_lengths": [len(ids) for ids, _ in episodes],
        "logprob_max_abs_diff_before_update": gap,
        "versions": {"torch": torch.__version__, "trl": __import__("trl").__version__,
                     "transformers": __import__("transformers").__version__},
        "machine": platform.processor() or platform.machine(),
    }
    for name, times in seconds.items():
        median = statistics.median(times)
        report[name] = {
            "seconds": [round(t, 3) for t in times], "median_seconds": round(median, 3),
            "tokens_per_s": round(total_tokens / median, 1), "loss_tokens_per_s": round(trained / median, 1),
        }
    report["ratio_muarl_over_trl"] = round(statistics.median(seconds["trl"]) / statistics.median(seconds["muarl"]), 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
