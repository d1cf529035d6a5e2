"""Cold-start SFT: teach the policy the tool-calling format on chat JSONL before RL.

Input: one conversation per line, ``{"messages": [OpenAI messages], "tools": [OpenAI tool schemas]}``.
Each conversation is tokenised piece by piece with the same chat format the local engine uses at rollout
time (system turn with tool schemas, then one message at a time), so SFT trains on exactly the token layout
RL will sample in. The loss is on assistant tokens only: the body of each assistant message and its
end-of-turn token, not the ``<|im_start|>assistant`` header nor the newline after the end-of-turn.

Conversations are packed greedily, in a seeded shuffled order, into rows of ``pack_length`` tokens
(plain concatenation: tokens may attend across a boundary inside a row, the usual cheap packing); a longer
conversation is cut to ``pack_length``. The final model is written as a full ``save_pretrained``
directory (LoRA adapters merged in) at ``OUT/model``, ready to be ``model.name`` of a GRPO config.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from muarl.models.chat_formats import ChatFormat, get_chat_format
from muarl.config import ConfigError
from muarl.rollout.store import atomic_write_text
from muarl.train.config import SFTConfig
from muarl.train.metrics import MetricsWriter
from muarl.train.model_setup import load_trainable, trainable_parameters
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.types import Message, ToolSpec

log = logging.getLogger(__name__)


def read_conversations(path: str | Path) -> list[tuple[list[Message], list[ToolSpec]]]:
    """Conversations from chat JSONL; a bad line fails with its line number."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read SFT data {path}: {exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            messages = [Message.from_openai(m) for m in row["messages"]]
            tools = [ToolSpec(name=t["function"]["name"], description=t["function"].get("description", ""),
                              parameters=t["function"].get("parameters", {"type": "object", "properties": {}}))
                     for t in row.get("tools") or []]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}:{n}: not a {{messages, tools}} chat record ({type(exc).__name__}: {exc})") from None
        if not any(m.role == "assistant" for m in messages):
            continue
        out.append((messages, tools))
    if not out:
        raise ConfigError(f"{path} has no conversation with an assistant message to learn from")
    return out


def tokenize_conversation(messages: list[Message], tools: list[ToolSpec], fmt: ChatFormat, encode: Any) -> tuple[list[int], list[int]]:
    """(ids, loss mask) of a conversation; mask 1 on assistant bodies and their end-of-turn token."""
    system = messages[0].content or "" if messages and messages[0].role == "system" else ""
    rest = messages[1:] if messages and messages[0].role == "system" else messages
    ids = encode(fmt.system_text(system, tools))
    mask = [0] * len(ids)
    pending: list[Message] = []
    for message in rest + [None]:
        if message is not None and message.role != "assistant":
            pending.append(message)
            continue
        if pending:
            piece = encode(fmt.render_delta(pending))
            ids += piece
            mask += [0] * len(piece)
            pending = []
        if message is None:
            break
        for text, supervised in ((fmt.generation_prompt, 0), (fmt.assistant_body(message) + fmt.end_of_turn, 1), (fmt.after_end, 0)):
            piece = encode(text)
            ids += piece
            mask += [supervised] * len(piece)
    return ids, mask


def pack(examples: list[tuple[list[int], list[int]]], length: int) -> list[tuple[list[int], list[int]]]:
    """Greedy packing into rows of at most ``length`` tokens, in the given order; long examples are cut."""
    rows: list[tuple[list[int], list[int]]] = []
    ids: list[int] = []
    mask: list[int] = []
    for ex_ids, ex_mask in examples:
        ex_ids, ex_mask = ex_ids[:length], ex_mask[:length]
        if ids and len(ids) + len(ex_ids) > length:
            rows.append((ids, mask))
            ids, mask = [], []
        ids, mask = ids + ex_ids, mask + ex_mask
    if ids:
        rows.append((ids, mask))
    return rows


def fit_examples(examples: list[tuple[list[int], list[int]]], length: int) -> list[tuple[list[int], list[int]]]:
    """Examples that keep a supervised token within ``length``; says how many were cut or dropped.

    A conversation whose assistant turns all lie past the cut would train on nothing (a loss of exactly 0 that
    looks like success), so it is dropped, and if none is left the run stops and says what to change.
    """
    kept = [ex for ex in examples if any(ex[1][:length])]
    if not kept:
        first = min(ex[1].index(1) for ex in examples if 1 in ex[1]) if any(1 in ex[1] for ex in examples) else None
        hint = f"the earliest assistant token is at position {first}" if first is not None else "no conversation has an assistant turn"
        raise ConfigError(f"no conversation has a supervised token within pack_length={length} ({hint}): raise pack_length")
    cut = sum(len(ex[0]) > length for ex in examples)
    if cut:
        log.warning("%d of %d conversations are longer than pack_length=%d and were cut; %d kept no assistant token and were dropped",
                    cut, len(examples), length, len(examples) - len(kept))
    return kept


def run_sft(cfg: SFTConfig, progress: bool = True) -> Path:
    """Train, log metrics to ``OUT/metrics.jsonl``, and save the final full model to ``OUT/model``."""
    from tqdm import tqdm

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", cfg.dump_yaml())
    model, tokenizer = load_trainable(cfg.model, seed=cfg.seed)
    fmt = get_chat_format(cfg.model.chat_format)

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    conversations = read_conversations(cfg.data)
    random.Random(cfg.seed).shuffle(conversations)
    rows = pack(fit_examples([tokenize_conversation(m, t, fmt, encode) for m, t in conversations], cfg.pack_length), cfg.pack_length)
    total_steps = max(1, math.ceil(len(rows) * cfg.epochs / cfg.rows_per_step))
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    started = time.perf_counter()
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = cfg.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)
    metrics = MetricsWriter(out)
    order = random.Random(f"{cfg.seed}/rows")
    stream: list[int] = []
    model.train()
    try:
        for step in tqdm(range(1, total_steps + 1), desc="SFT steps", disable=not progress, dynamic_ncols=True):
            t0 = time.perf_counter()
            picked = []
            for _ in range(cfg.rows_per_step):
                if not stream:
                    stream = order.sample(range(len(rows)), len(rows))
                picked.append(rows[stream.pop()])
            batch = pad_sequences([r[0] for r in picked], [r[1] for r in picked], tokenizer.pad_token_id)
            optimizer.zero_grad(set_to_none=True)
            logprobs, _ = supervised_logprobs(model, batch, bf16=cfg.model.bf16)
            loss = -logprobs.mean() if logprobs.numel() else logprobs.sum()
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
            optimizer.step()
            scheduler.step()
            seconds = time.perf_counter() - t0
            metrics.write(step, {"loss": float(loss.detach()), "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0],
                                 "supervised_tokens": float(logprobs.numel()),
                                 "tokens_per_s": float(batch.attention_mask.sum()) / max(seconds, 1e-9)})
            if cfg.save_every and step % cfg.save_every == 0 and step < total_steps:
                save_full_model(model, tokenizer, out / f"model-step-{step:06d}")
            if cfg.time_limit_minutes is not None and time.perf_counter() - started >= 60 * cfg.time_limit_minutes:
                log.info("SFT time limit of %.1f min reached after %d of %d steps", cfg.time_limit_minutes, step, total_steps)
                break
    finally:
        metrics.close()
    return save_full_model(model, tokenizer, out / "model")


def save_full_model(model: Any, tokenizer: Any, target: Path) -> Path:
    """A standalone ``save_pretrained`` directory (LoRA merged into a copy), written atomically."""
    import copy

    full = copy.deepcopy(model).merge_and_unload() if hasattr(model, "merge_and_unload") else model
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    full.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target
