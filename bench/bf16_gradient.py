"""Does bf16 autocast change the direction of an update? The same data, the same weights, a gradient computed in
float32 and under bf16 autocast, compared: the GRPO policy loss on a step's episodes (``--episodes``), or the
cold start's SFT loss on its demonstrations (``--demos``).

The episodes are a GRPO step's rollouts (``RUN/rollouts/step-N.jsonl``, e.g. of ``bench/grpo_precision_ab.py``);
their advantages are recomputed per group as the trainer does (group-standardised rewards; groups without signal
left out). The loss is the trainer's on-policy one (ratio 1: old log-probs are the new ones, detached), token-mean
over the batch, without KL. The demonstrations are a demo run's ``synth/sft_demos.jsonl``; the loss is SFT's
(``muarl.train.sft.backward_nll``) on the first ``--conversations`` of them, tokenised as SFT tokenises them.

Reported: the cosine between the two gradients, the norm of each, and the relative norm of their difference; and,
for scale, the same between the float32 gradients of two halves of the data (how much the gradient changes with
the data, against how much it changes with the arithmetic). Also the share of entries whose signs agree, over all
entries and over the half with the larger float32 magnitude: AdamW's first step moves every weight by the
learning rate in the sign of its gradient (``g / (|g| + eps)`` with the first moments equal to the gradient), so
it follows the signs, small entries as much as large ones, where the cosine weighs entries by their size. With
``--demos``, the first AdamW step (``--lr``) from each gradient is taken and the float32 SFT loss on the next
``--conversations`` demonstrations measured: what the difference does to the fit.

    OMP_WAIT_POLICY=PASSIVE python bench/bf16_gradient.py --model COLD_START --episodes RUN/rollouts/step-000001.jsonl
    OMP_WAIT_POLICY=PASSIVE python bench/bf16_gradient.py --model smollm2-135m-instruct --demos RUN/synth/sft_demos.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import torch

from muarl.models.hf_loading import load_causal_lm
from muarl.rollout.store import read_episodes
from muarl.train.config import ModelConfig
from muarl.train.grpo import group_advantages
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.sft import Example, backward_nll, demonstration_examples, mean_nll
from muarl.train.trainer import has_signal
from muarl.types import Episode


def samples(path: Path) -> list[list[tuple[Episode, float]]]:
    """(episode, advantage) per group with signal, groups in file order."""
    groups: dict[str, list[Episode]] = {}
    for e in read_episodes(path)[0]:
        if e.reward is not None and e.tokens is not None:
            groups.setdefault(e.task_id, []).append(e)
    out = []
    for group in groups.values():
        if has_signal(group):
            adv = group_advantages(torch.tensor([[e.reward.reward for e in group]]))[0]
            out.append(list(zip(group, adv.tolist())))
    return out


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def grpo_gradient(model: torch.nn.Module, batch: list[tuple[Episode, float]], pad: int, bf16: bool) -> torch.Tensor:
    """The flattened gradient of the token-mean on-policy GRPO loss over ``batch``."""
    model.zero_grad(set_to_none=True)
    total = sum(sum(e.tokens.loss_mask[1:]) for e, _ in batch)
    for e, advantage in batch:
        padded = pad_sequences([e.tokens.input_ids], [e.tokens.loss_mask], pad)
        logprobs, _ = supervised_logprobs(model, padded, bf16=bf16)
        ratio = torch.exp(logprobs - logprobs.detach())
        (-(advantage * ratio).sum() / total).backward()
    return flat_gradient(model)


def sft_gradient(model: torch.nn.Module, rows: list[Example], pad: int, bf16: bool) -> torch.Tensor:
    """The flattened gradient of SFT's token-mean NLL over ``rows``."""
    model.zero_grad(set_to_none=True)
    backward_nll(model, rows, pad, bf16=bf16)
    return flat_gradient(model)


def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """In float64: sums over 135M float32 entries are not to be trusted to the fourth digit."""
    a, b = a.double(), b.double()
    na, nb = a.norm(), b.norm()
    large = a.abs() >= a.abs().median()
    same = torch.sign(a) == torch.sign(b)
    return {"cosine": float(a @ b / (na * nb)), "norm_a": float(na), "norm_b": float(nb),
            "relative_difference": float((a - b).norm() / na), "signs_agree": float(same.double().mean()),
            "signs_agree_large": float(same[large].double().mean())}


def nll_after_first_step(model: torch.nn.Module, grad: torch.Tensor, lr: float, rows: list[Example], pad: int) -> float:
    """The float32 NLL of ``rows`` after AdamW's first step from ``grad`` (eps 1e-8, no weight decay), the weights
    restored afterwards."""
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        offset = 0
        for p in params:
            g = grad[offset:offset + p.numel()].view_as(p)
            p -= lr * g / (g.abs() + 1e-8)
            offset += p.numel()
    model.zero_grad(set_to_none=True)
    loss = mean_nll(model, rows, pad, bf16=False)
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
    return loss


def table(rows: list[tuple[str, dict[str, float]]]) -> None:
    print("| compared | cosine | norm A | norm B | norm(A - B) / norm(A) | signs agree | signs agree, larger half of A |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, c in rows:
        print(f"| {label} | {c['cosine']:.4f} | {c['norm_a']:.4g} | {c['norm_b']:.4g} | {c['relative_difference']:.4f} "
              f"| {c['signs_agree']:.3f} | {c['signs_agree_large']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the weights the gradients are taken at")
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--episodes", type=Path, help="a GRPO step's rollouts (JSONL)")
    data.add_argument("--demos", type=Path, help="SFT demonstrations (chat JSONL, a demo run's synth/sft_demos.jsonl)")
    parser.add_argument("--groups", type=int, help="with --episodes: only the first N groups with signal")
    parser.add_argument("--conversations", type=int, default=16, help="with --demos: conversations per gradient (and held out)")
    parser.add_argument("--lr", type=float, default=3e-5, help="with --demos: the first AdamW step's learning rate (the demo's sft_lr)")
    args = parser.parse_args()
    model, tokenizer = load_causal_lm(args.model)
    model.train()
    pad = tokenizer.pad_token_id
    if args.episodes:
        groups = samples(args.episodes)[:args.groups]
        if len(groups) < 2:
            raise SystemExit(f"{args.episodes}: {len(groups)} group(s) with signal; need 2 or more")
        data, size = [s for g in groups for s in g], len(groups)
        gradient: Callable = lambda batch, bf16: grpo_gradient(model, batch, pad, bf16)
        print(f"{len(groups)} groups with signal, {len(data)} episodes, {sum(sum(e.tokens.loss_mask[1:]) for e, _ in data)} policy tokens")
        halves = ([s for g in groups[:size // 2] for s in g], [s for g in groups[size // 2:] for s in g])
    else:
        every = demonstration_examples(args.demos, tokenizer, ModelConfig.model_fields["chat_format"].default)
        data, held = every[:args.conversations], every[args.conversations:2 * args.conversations]
        if len(data) < 2 or not held:
            raise SystemExit(f"{args.demos}: {len(every)} demonstration(s); need more than {args.conversations}")
        gradient = lambda batch, bf16: sft_gradient(model, batch, pad, bf16)
        print(f"{len(data)} demonstrations, {sum(sum(m[1:]) for _, m in data)} supervised tokens; {len(held)} held out")
        halves = (data[:len(data) // 2], data[len(data) // 2:])
    fp32, bf16 = gradient(data, False), gradient(data, True)
    first, second = gradient(halves[0], False), gradient(halves[1], False)
    table([("fp32 (A) vs bf16 autocast (B), all the data", compare(fp32, bf16)),
           ("fp32, first half of the data (A) vs second half (B)", compare(first, second))])
    if args.demos:
        print(f"\nfloat32 NLL of the {len(held)} held-out demonstrations: before {mean_nll(model, held, pad, bf16=False):.4f}, after AdamW's "
              f"first step (lr {args.lr:g}) from the fp32 gradient {nll_after_first_step(model, fp32, args.lr, held, pad):.4f}, "
              f"from the bf16 gradient {nll_after_first_step(model, bf16, args.lr, held, pad):.4f}")


if __name__ == "__main__":
    main()
