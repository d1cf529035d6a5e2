"""How well cold starts fit demonstrations, measured in float32 and under bf16 autocast, and how much of what
their SFT moved a bf16 forward can see (issue 21).

The cold starts of one demo seed are SFT runs on byte-identical demonstrations with the same steps and rate; a
bf16 one ended its SFT at a loss ~45% above the float32 one's, and only the bf16 ones lost level 2 at GRPO's first
update. Two readings: the bf16 SFT left a worse model, or its loss only reads worse in bf16. Each model's
token-mean NLL of the given demonstrations (say the run's ``synth/sft_demos.jsonl``, what SFT trained on, and its
``synth/control_demos.jsonl``, held out from it) in both arithmetics tells them apart. Autocast keeps the weights in
float32 and rounds the linear layers' weights to bfloat16 for each multiply; an SFT step moves a weight by about
its learning rate (3e-5), a fraction of a bfloat16 step at the weights' size, so also reported: per model, the share
of linear-layer entries whose bfloat16 value differs from the base model's (what a bf16 forward sees change).

    OMP_WAIT_POLICY=PASSIVE python bench/cold_start_fit.py --base smollm2-135m-instruct \
        --model fp32=RUN_A/sft/run/model --model bf16=RUN_B/sft/run/model --demos RUN_A/synth/sft_demos.jsonl --conversations 16

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from muarl.models.hf_loading import load_causal_lm
from muarl.train.config import ModelConfig
from muarl.train.sft import demonstration_examples, mean_nll


def linear_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights autocast rounds to bfloat16: every ``nn.Linear``'s (the float32 head excepted, as muarl runs it)."""
    head = model.get_output_embeddings()
    return {name: m.weight.detach() for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head}


def bf16_moved(base: dict[str, torch.Tensor], model: dict[str, torch.Tensor]) -> dict[str, float]:
    """Share of entries whose float32 value moved, and of those whose bfloat16 value did."""
    entries = moved = seen = 0
    for name, w in model.items():
        w0 = base[name]
        entries += w.numel()
        moved += int((w != w0).sum())
        seen += int((w.to(torch.bfloat16) != w0.to(torch.bfloat16)).sum())
    return {"float32_moved": moved / entries, "bf16_moved": seen / entries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the model the cold starts were trained from")
    parser.add_argument("--model", action="append", required=True, metavar="LABEL=PATH", help="a cold start (repeatable)")
    parser.add_argument("--demos", type=Path, action="append", required=True, help="demonstrations to score (repeatable)")
    parser.add_argument("--conversations", type=int, default=16, help="the first N of each demonstrations file")
    args = parser.parse_args()
    base, tokenizer = load_causal_lm(args.base)
    base_weights = {k: v.clone() for k, v in linear_weights(base).items()}
    chat_format = ModelConfig.model_fields["chat_format"].default
    data = {str(path): demonstration_examples(path, tokenizer, chat_format)[:args.conversations] for path in args.demos}
    models = dict(item.split("=", 1) for item in args.model)
    out: dict[str, dict] = {}
    for label, path in {"base": args.base, **models}.items():
        model = base if label == "base" else load_causal_lm(path)[0]
        model.eval()
        row: dict = {"model": path}
        if label != "base":
            row.update(bf16_moved(base_weights, linear_weights(model)))
        row["nll"] = {name: {"fp32": round(mean_nll(model, rows, tokenizer.pad_token_id, bf16=False), 5),
                             "bf16": round(mean_nll(model, rows, tokenizer.pad_token_id, bf16=True), 5)} for name, rows in data.items()}
        out[label] = row
    print(json.dumps({"conversations": args.conversations, "models": out}, indent=2))


if __name__ == "__main__":
    main()
