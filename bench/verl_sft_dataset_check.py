"""Do the Parquet files ``muarl export-verl`` writes load with verl 0.9.1's own dataset classes?

verl 0.9.1 caps transformers below 5.11, so its multi-turn SFT dataset does not import beside muarl's `train`
extra and tests/integrations/test_verl.py skips its SFT test there. This script runs in a separate environment
with verl's own pins (recipe in docs/scale.md) and checks, end to end:

1. ``muarl synth`` writes oracle dialogues for a few clinic-lite train tasks (sft_train.jsonl);
2. ``muarl export-verl --sft`` turns them into sft_train.parquet and the tasks into rl_train.parquet;
3. verl's ``MultiTurnSFTDataset`` tokenizes every dialogue with a local tool-aware chat template (the tiny
   model's) and its loss mask covers exactly the assistant turns: every assistant text and tool call is in the
   masked tokens, no user or tool-result text is, and the masked ids match the assistant turns' token count;
4. verl's ``RLHFDataset`` reads every RL row, with the raw prompt and the fields muarl's agent loop needs.

    /tmp/verl-venv/bin/python bench/verl_sft_dataset_check.py [--tasks 4]

Prints one JSON line of results and exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from muarl.cli import main as muarl_cli
from muarl.models.local_spec import export_model


def run_cli(*args: str) -> None:
    muarl_cli.main(list(args), standalone_mode=False)


def assistant_texts(message: dict) -> list[str]:
    """What of an assistant message must be trained on: its text and each tool call's name and arguments."""
    texts = [message["content"]] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        texts += [call["function"]["name"], call["function"]["arguments"]]
    return texts


def check_sft(parquet: Path, tokenizer) -> dict:
    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    dataset = MultiTurnSFTDataset(str(parquet), tokenizer, OmegaConf.create({"max_length": 8192, "truncation": "error", "pad_mode": "no_padding"}))
    failures, masked_tokens, tokens, assistant_turns = [], 0, 0, 0
    for i in range(len(dataset)):
        item, messages = dataset[i], dataset.messages[i]
        ids, mask = item["input_ids"], item["loss_mask"]
        masked = tokenizer.decode(ids[mask.bool()])
        unmasked = tokenizer.decode(ids[~mask.bool()])
        said = [t for m in messages if m["role"] == "assistant" for t in assistant_texts(m)]
        turns = sum(m["role"] == "assistant" for m in messages)
        assistant_turns += turns
        runs = int(mask[0]) + int(((mask[1:] == 1) & (mask[:-1] == 0)).sum())
        if runs != turns:
            failures.append(f"row {i}: {runs} masked spans for {turns} assistant turns")
        failures += [f"row {i}: assistant {t[:40]!r} not in the loss mask" for t in said if t not in masked]
        for m in messages:
            text = m["content"] if m["role"] in ("user", "tool") else None
            if text and text in masked and not any(text in t for t in said):  # an id the assistant repeats is its own
                failures.append(f"row {i}: {m['role']} text {text[:40]!r} is in the loss mask")
            if text and text not in unmasked:
                failures.append(f"row {i}: {m['role']} text {text[:40]!r} not among the unmasked tokens")
        if not dataset.tools[i] or not all(isinstance(t["function"]["parameters"], dict) for t in dataset.tools[i]):
            failures.append(f"row {i}: the tools did not arrive as schemas")
        masked_tokens += int(mask.sum())
        tokens += len(ids)
    return {"rows": len(dataset), "assistant_turns": assistant_turns, "tokens": tokens, "loss_mask_tokens": masked_tokens, "failures": failures}


def check_rl(parquet: Path, tokenizer, tasks: int) -> dict:
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    dataset = RLHFDataset(str(parquet), tokenizer, OmegaConf.create({"max_prompt_length": 4096, "return_raw_chat": True,
                                                                     "filter_overlong_prompts": True, "cache_dir": str(parquet.parent / "cache")}))
    failures = [] if len(dataset) == tasks else [f"{len(dataset)} RL rows, expected {tasks}"]
    for i in range(len(dataset)):
        item = dataset[i]
        if item["agent_name"] != "muarl" or item["raw_prompt"][0]["role"] != "system" or "task_id" not in item["extra_info"]:
            failures.append(f"RL row {i}: {sorted(item)} lacks what the agent loop reads")
    return {"rows": len(dataset), "keys": sorted(dataset[0]) if len(dataset) else [], "failures": failures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=4, help="clinic-lite train tasks to synthesise and export")
    args = parser.parse_args()
    import torch
    import transformers
    import verl
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run_cli("synth", "--domain", "clinic-lite", "--limit", str(args.tasks), "--validation-fraction", "0", "--no-parquet", "--out", str(work / "synth"))
        run_cli("export-verl", "--domain", "clinic-lite", "--limit", str(args.tasks), "--sft", str(work / "synth" / "sft_train.jsonl"), "--out", str(work / "verl"))
        tokenizer = AutoTokenizer.from_pretrained(export_model("tiny-random", work / "model"))
        sft = check_sft(work / "verl" / "sft_train.parquet", tokenizer)
        rl = check_rl(work / "verl" / "rl_train.parquet", tokenizer, args.tasks)
    ok = not sft["failures"] and not rl["failures"] and sft["rows"] == args.tasks and sft["loss_mask_tokens"] > 0
    print(json.dumps({"verl": verl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                      "ok": ok, "sft": sft, "rl": rl}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
