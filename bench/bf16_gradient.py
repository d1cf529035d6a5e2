"""Does bf16 autocast change the direction of a GRPO update? The same episodes, the same weights, the gradient
of the GRPO policy loss computed in float32 and under bf16 autocast, compared.

The episodes are a GRPO step's rollouts (``RUN/rollouts/step-N.jsonl``, e.g. of ``bench/grpo_precision_ab.py``);
their advantages are recomputed per group as the trainer does (group-standardised rewards; groups without signal
left out). The loss is the trainer's on-policy one (ratio 1: old log-probs are the new ones, detached), token-mean
over the batch, without KL. Reported: the cosine between the two gradients, the norm of each, and the relative
norm of their difference; and, for scale, the same between the float32 gradients of two halves of the groups
(how much the gradient changes with the data, against how much it changes with the arithmetic).

    OMP_WAIT_POLICY=PASSIVE python bench/bf16_gradient.py --model COLD_START --episodes RUN/rollouts/step-000001.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from muarl.models.hf_loading import load_causal_lm
from muarl.rollout.store import read_episodes
from muarl.train.grpo import group_advantages
from muarl.train.sequences import pad_sequences, supervised_logprobs
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


def gradient(model: torch.nn.Module, batch: list[tuple[Episode, float]], pad: int, bf16: bool) -> torch.Tensor:
    """The flattened gradient of the token-mean on-policy GRPO loss over ``batch``."""
    model.zero_grad(set_to_none=True)
    total = sum(sum(e.tokens.loss_mask[1:]) for e, _ in batch)
    for e, advantage in batch:
        padded = pad_sequences([e.tokens.input_ids], [e.tokens.loss_mask], pad)
        logprobs, _ = supervised_logprobs(model, padded, bf16=bf16)
        ratio = torch.exp(logprobs - logprobs.detach())
        (-(advantage * ratio).sum() / total).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """In float64: sums over 135M float32 entries are not to be trusted to the fourth digit."""
    a, b = a.double(), b.double()
    na, nb = a.norm(), b.norm()
    return {"cosine": float(a @ b / (na * nb)), "norm_a": float(na), "norm_b": float(nb),
            "relative_difference": float((a - b).norm() / na)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the weights the episodes were sampled from")
    parser.add_argument("--episodes", type=Path, required=True, help="a GRPO step's rollouts (JSONL)")
    parser.add_argument("--groups", type=int, help="only the first N groups with signal (a cheaper measurement)")
    args = parser.parse_args()
    model, tokenizer = load_causal_lm(args.model)
    model.train()
    groups = samples(args.episodes)[:args.groups]
    if len(groups) < 2:
        raise SystemExit(f"{args.episodes}: {len(groups)} group(s) with signal; need 2 or more")
    batch = [s for g in groups for s in g]
    pad = tokenizer.pad_token_id
    fp32 = gradient(model, batch, pad, bf16=False)
    bf16 = gradient(model, batch, pad, bf16=True)
    half = len(groups) // 2
    first = gradient(model, [s for g in groups[:half] for s in g], pad, bf16=False)
    second = gradient(model, [s for g in groups[half:] for s in g], pad, bf16=False)
    print(f"{len(groups)} groups with signal, {len(batch)} episodes, {sum(sum(e.tokens.loss_mask[1:]) for e, _ in batch)} policy tokens")
    print("| compared | cosine | norm A | norm B | norm(A - B) / norm(A) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, (a, b) in (("fp32 (A) vs bf16 autocast (B), all groups", (fp32, bf16)),
                          ("fp32, first half of the groups (A) vs second half (B)", (first, second))):
        c = compare(a, b)
        print(f"| {label} | {c['cosine']:.4f} | {c['norm_a']:.4g} | {c['norm_b']:.4g} | {c['relative_difference']:.4f} |")


if __name__ == "__main__":
    main()
