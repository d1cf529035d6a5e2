"""Cold-start SFT: teach the policy the tool-calling format on chat JSONL before RL.

Input: one conversation per line, ``{"messages": [OpenAI messages], "tools": [OpenAI tool schemas]}``.
Each conversation is tokenised piece by piece with the same chat format the local engine uses at rollout
time (system turn with tool schemas, then one message at a time), so SFT trains on exactly the token layout
RL will sample in. The loss is on assistant tokens only: the body of each assistant message and its
end-of-turn token, not the ``<|im_start|>assistant`` header nor the newline after the end-of-turn.

Conversations from one domain open with the same system turn (policy and tool schemas: 2,539 of a clinic
demonstration's ~3,700 SmolLM2 tokens, none of them supervised). With ``share_prefix`` (the default) that
common prefix runs once per optimizer step (``muarl.train.shared_prefix``, exact by the chain rule) and each
conversation trains in its own row after it, in groups of at most ``pack_length`` unshared tokens taken in a
seeded shuffled order: a step spends its compute on the tokens that differ, and no conversation attends to
another. When the conversations share fewer than ``MIN_SHARED_TOKENS`` tokens (or gradient checkpointing is
on, which drops the KV cache), they are packed greedily into rows of ``pack_length`` tokens instead (plain
concatenation: tokens may attend across a boundary inside a row, the usual cheap packing). Either way a
conversation is cut to ``pack_length``. The final model is written as a full ``save_pretrained``
directory (LoRA adapters merged in) at ``OUT/model``, ready to be ``model.name`` of a GRPO config.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import torch

from muarl.config import ConfigError
from muarl.models.chat_formats import ChatFormat, get_chat_format
from muarl.models.hf_loading import save_model_dir
from muarl.rollout.store import atomic_write_text, writable_dir
from muarl.train.config import SFTConfig
from muarl.train.metrics import MetricsWriter
from muarl.train.model_setup import load_trainable, trainable_parameters
from muarl.train.sequences import pad_sequences, supervised_logprobs
from muarl.train.shared_prefix import backward_prefix, encode_prefix, prefix_to_share
from muarl.types import Message, ToolSpec

log = logging.getLogger(__name__)

Example = tuple[list[int], list[int]]  # (token ids, loss mask) of one conversation or one packed row


def _objects(row: Any, key: str) -> list[dict[str, Any]]:
    """``row[key]``, checked to be a list of JSON objects (``tools`` may be absent); TypeError naming what it is if not."""
    if not isinstance(row, dict):
        raise TypeError(f"the line is a JSON {type(row).__name__}, not an object")
    value = (row.get(key) or []) if key == "tools" else row.get(key)
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise TypeError(f"{key!r} must be a list of objects, got {json.dumps(value)[:80]}")
    return value


def read_conversations(path: str | Path, allow_test_split: bool = False) -> list[tuple[list[Message], list[ToolSpec]]]:
    """Conversations from chat JSONL; a bad line fails with its line number, and so does one whose ``task_split``
    (recorded by ``muarl synth``) is test, unless ``allow_test_split``."""
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
            messages = [Message.from_openai(m) for m in _objects(row, "messages")]
            tools = [ToolSpec.from_openai(t) for t in _objects(row, "tools")]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}:{n}: not a {{messages, tools}} chat record ({type(exc).__name__}: {exc})"[:500]) from None
        if row.get("task_split") == "test" and not allow_test_split:
            raise ConfigError(f"{path}:{n}: a dialogue of task split 'test': training on it would leak the evaluation set "
                              "(synthesise from split train, or pass --allow-test-split for a throwaway experiment)")
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


def tokenize_conversations(conversations: list[tuple[list[Message], list[ToolSpec]]], tokenizer: Any,
                           fmt: ChatFormat) -> list[Example]:
    """Each conversation's (ids, loss mask) as SFT trains on it, its text encoded without added special tokens
    (the chat format writes them); GRPO's anchor and the benches tokenise demonstrations through here too."""
    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return [tokenize_conversation(messages, tools, fmt, encode) for messages, tools in conversations]


def demonstration_examples(path: str | Path, tokenizer: Any, chat_format: str) -> list[Example]:
    """The (ids, loss mask) of each conversation of a chat JSONL file, in file order, as SFT trains on them: what
    GRPO's anchor draws from and what the benches score."""
    return tokenize_conversations(read_conversations(path), tokenizer, get_chat_format(chat_format))


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


def common_prefix(examples: list[Example], cfg: SFTConfig) -> int:
    """Tokens every conversation opens with (before any supervised target), or 0 when sharing does not apply."""
    return prefix_to_share([ids[: cfg.pack_length] for ids, _ in examples], [mask[: cfg.pack_length] for _, mask in examples],
                           enabled=cfg.share_prefix and not cfg.model.gradient_checkpointing)


def group_suffixes(examples: list[Example], cut: int, length: int) -> list[list[Example]]:
    """Each conversation, cut to ``length`` tokens, minus its first ``cut``; consecutive ones grouped while
    their tokens fit in ``length`` (a group holds at least one)."""
    groups: list[list[Example]] = []
    used = 0
    for ids, mask in examples:
        suffix = (ids[cut:length], mask[cut:length])
        if not groups or used + len(suffix[0]) > length:
            groups.append([])
            used = 0
        groups[-1].append(suffix)
        used += len(suffix[0])
    return groups


def backward_nll(model: Any, rows: list[Example], pad_id: int, *, bf16: bool, prefix_ids: list[int] | None = None,
                 scale: float = 1.0) -> tuple[float, int]:
    """Back-propagate ``scale`` times the mean negative log-likelihood of the supervised tokens of ``rows``; (that
    mean, unscaled, and the tokens). GRPO's anchor (``muarl.train.anchor``) adds it to a policy loss at a weight.

    Rows run one at a time, each weighted by its share of the tokens, so memory holds one row's activations and
    no row is padded: a padding mask sends attention down a slower, larger path (3 whole clinic conversations in
    one padded batch: 83 s and an 18 GB peak for their backward; after a shared prefix, one at a time: 26 s,
    7.7 GB). With ``prefix_ids`` each row is what
    follows those tokens: they run once, and the gradient flows through their keys and values exactly as if
    every row had been run whole."""
    total = supervised_count(rows)
    prefix = encode_prefix(model, prefix_ids, bf16=bf16) if prefix_ids else None
    loss = 0.0
    for ids, mask in rows:
        logprobs, _ = supervised_logprobs(model, pad_sequences([ids], [mask], pad_id), bf16=bf16, prefix=prefix)
        if not logprobs.numel():
            continue
        row_loss = -logprobs.sum() / total
        (row_loss * scale).backward()
        loss += float(row_loss.detach())
    if prefix is not None:
        backward_prefix(prefix)
    return loss, total


def supervised_count(rows: list[Example]) -> int:
    """The tokens of ``rows`` whose loss counts: supervised ones after each row's first (which nothing predicts).
    The denominator of :func:`backward_nll` and :func:`mean_nll`, so the loss trained on and the one measured agree."""
    return sum(sum(mask[1:]) for _, mask in rows)


def mean_nll(model: Any, rows: list[Example], pad_id: int, *, bf16: bool) -> float:
    """The mean negative log-likelihood of the supervised tokens of ``rows``, without a gradient: the loss
    :func:`backward_nll` trains on, measured (each row whole, no shared prefix)."""
    total = supervised_count(rows)
    with torch.no_grad():
        return sum(-float(supervised_logprobs(model, pad_sequences([ids], [mask], pad_id), bf16=bf16)[0].sum())
                   for ids, mask in rows) / total


def run_sft(cfg: SFTConfig, progress: bool = True, allow_test_split: bool = False) -> Path:
    """Train, log metrics to ``OUT/metrics.jsonl``, and save the final full model to ``OUT/model``."""
    from tqdm import tqdm

    conversations = read_conversations(cfg.data, allow_test_split)  # a bad file fails before the model loads
    cfg = cfg.model_copy(update={"model": cfg.model.resolved()})  # record the precision this machine runs
    out = Path(cfg.out)
    writable_dir(out)
    model, tokenizer = load_trainable(cfg.model, seed=cfg.seed)  # a model that is not there fails before out is written
    atomic_write_text(out / "config.yaml", cfg.dump_yaml())
    random.Random(cfg.seed).shuffle(conversations)
    examples = fit_examples(tokenize_conversations(conversations, tokenizer, get_chat_format(cfg.model.chat_format)), cfg.pack_length)
    cut = common_prefix(examples, cfg)
    prefix_ids = examples[0][0][:cut] if cut else None
    rows = group_suffixes(examples, cut, cfg.pack_length) if cut else [[row] for row in pack(examples, cfg.pack_length)]
    if cut:
        log.info("SFT: the %d conversations share a %d-token prefix; it runs once per step", len(examples), cut)
    total_steps = max(1, math.ceil(len(rows) * cfg.epochs / cfg.rows_per_step))
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    started, cpu_started = time.perf_counter(), time.process_time()
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = cfg.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)
    metrics = MetricsWriter(out)
    marks = sorted(cfg.save_at_cpu_minutes)  # those not crossed yet
    order = random.Random(f"{cfg.seed}/rows")
    stream: list[int] = []
    model.train()
    try:
        for step in tqdm(range(1, total_steps + 1), desc="SFT steps", disable=not progress, dynamic_ncols=True):
            t0, cpu0 = time.perf_counter(), time.process_time()
            picked: list[Example] = []
            for _ in range(cfg.rows_per_step):
                if not stream:
                    stream = order.sample(range(len(rows)), len(rows))
                picked += rows[stream.pop()]
            optimizer.zero_grad(set_to_none=True)
            loss, supervised = backward_nll(model, picked, tokenizer.pad_token_id, bf16=cfg.model.bf16, prefix_ids=prefix_ids)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
            lr = scheduler.get_last_lr()[0]  # this step's rate: after scheduler.step() it reports the next one's
            optimizer.step()
            scheduler.step()
            seconds = time.perf_counter() - t0
            # tokens of the conversations as trained on (a shared prefix counted once per row): the rate an
            # unshared run would need to match
            covered = sum(len(ids) for ids, _ in picked) + cut * len(picked)
            cpu_spent = time.process_time() - cpu_started  # what the CPU budget and the save marks are checked against
            metrics.write(step, {"loss": loss, "grad_norm": grad_norm, "lr": lr,
                                 "supervised_tokens": float(supervised), "rows": float(len(picked)),
                                 "shared_prefix_tokens": float(cut), "tokens_per_s": covered / max(seconds, 1e-9),
                                 "seconds": seconds, "cpu_seconds": time.process_time() - cpu0, "cpu_minutes_so_far": cpu_spent / 60})
            out_of_time = cfg.time_limit_minutes is not None and time.perf_counter() - started >= 60 * cfg.time_limit_minutes
            out_of_cpu = cfg.cpu_time_limit_minutes is not None and cpu_spent >= 60 * cfg.cpu_time_limit_minutes
            last = step == total_steps or out_of_time or out_of_cpu  # its model is OUT/model
            marks_crossed = [m for m in marks if m <= cpu_spent / 60]  # the logged cpu_minutes_so_far (control_candidate reads it)
            marks = marks[len(marks_crossed):]
            if not last and ((cfg.save_every and step % cfg.save_every == 0) or marks_crossed):
                save_full_model(model, tokenizer, out / f"model-step-{step:06d}")
            if out_of_time:
                log.info("SFT time limit of %.1f min reached after %d of %d steps", cfg.time_limit_minutes, step, total_steps)
                break
            if out_of_cpu:
                log.info("SFT CPU-time limit of %.1f min reached after %d of %d steps", cfg.cpu_time_limit_minutes, step, total_steps)
                break
    finally:
        metrics.close()
    return save_full_model(model, tokenizer, out / "model")


def save_full_model(model: Any, tokenizer: Any, target: Path) -> Path:
    """A standalone ``save_pretrained`` directory (LoRA merged into a copy), written atomically; the tokenizer
    carries the chat template it was trained with (set by ``load_trainable``)."""
    import copy

    full = copy.deepcopy(model).merge_and_unload() if hasattr(model, "merge_and_unload") else model
    return save_model_dir(full, tokenizer, target)
