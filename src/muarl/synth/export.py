"""Exporting accepted dialogues for supervised fine-tuning, and the human-review round trip.

SFT line format (``sft_train.jsonl`` / ``sft_validation.jsonl``), read by ``muarl sft``, TRL's SFTTrainer
and LLaMA-Factory (sharegpt/OpenAI format with tools)::

    {"messages": [OpenAI messages: system, user, assistant (with "tool_calls"), tool (with "tool_call_id")],
     "tools": [OpenAI function specs], "task_id": "...", "split": "train" | "validation", "task_split": "train"}

``task_split`` is the domain split the task came from: ``muarl sft`` refuses lines from a split named test
unless told otherwise, as ``muarl train`` refuses to train on one.

Messages end with the agent's last message (the user's closing ``###STOP###`` line teaches nothing).
The split is by *task*: every dialogue of a task lands in the same split, so validation measures tasks the
model never trained on. Parquet copies (for verl) hold the same rows, ``messages`` and ``tools`` as nested
lists; only each tool's ``parameters`` JSON schema stays JSON text, because schemas differ from tool to tool
and one Parquet struct type for all of them would give every tool every other tool's arguments as nulls.

Human review: ``review.jsonl`` has one line per dialogue with its automatic verdict, reasons and a readable
transcript, and an empty ``decision``; a person sets it to ``accept`` or ``reject`` (optionally ``note``)
and re-imports it; a decision, where given, overrides the automatic verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from muarl.rollout.store import atomic_write_text
from muarl.synth.validate import DialogueVerdict, render_transcript
from muarl.types import Episode, ToolSpec

SPLITS = ("train", "validation")


def sft_messages(episode: Episode) -> list[dict[str, Any]]:
    """The episode's messages in OpenAI form, up to and including the agent's last message."""
    last = max((i for i, m in enumerate(episode.messages) if m.role == "assistant"), default=-1)
    return [m.to_openai() for m in episode.messages[: last + 1]]


def sft_record(episode: Episode, tools: Sequence[ToolSpec], split: str) -> dict[str, Any]:
    return {"messages": sft_messages(episode), "tools": [t.to_openai() for t in tools], "task_id": episode.task_id, "split": split,
            "task_split": episode.split}


def assign_splits(task_ids: Iterable[str], validation_fraction: float, seed: int = 0) -> dict[str, str]:
    """Task id -> split: the ``ceil(n * fraction)`` tasks with the smallest seeded hash go to validation.

    Hash order (not list order) keeps a task's split stable when tasks are added or the run is resumed.
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    ids = sorted(set(task_ids), key=lambda t: hashlib.sha256(f"{seed}/{t}".encode()).hexdigest())
    n_val = math.ceil(len(ids) * validation_fraction) if len(ids) > 1 else 0
    return {t: ("validation" if i < n_val else "train") for i, t in enumerate(ids)}


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def parquet_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool specs as Parquet holds them: a list of ``{type, function: {name, description, parameters}}``
    with ``parameters`` (the JSON schema) as JSON text."""
    return [{**t, "function": {**t["function"], "parameters": json.dumps(t["function"]["parameters"], ensure_ascii=False)}}
            for t in tools]


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows as Parquet (tmp + rename), ``tools`` as :func:`parquet_tools` gives them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{**r, "tools": parquet_tools(r["tools"])} for r in rows])
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def export_sft(
    episodes: Sequence[Episode], verdicts: dict[str, DialogueVerdict], tools: Sequence[ToolSpec], out_dir: Path,
    *, validation_fraction: float = 0.1, seed: int = 0, parquet: bool = False,
) -> tuple[dict[str, int], list[str]]:
    """Write the accepted dialogues per split; returns how many lines each split got, and the files written."""
    accepted = [e for e in episodes if verdicts[f"{e.task_id}#{e.trial}"].accepted]
    splits = assign_splits([e.task_id for e in episodes], validation_fraction, seed)
    counts, files = {}, []
    for split in SPLITS:
        rows = [sft_record(e, tools, split) for e in accepted if splits[e.task_id] == split]
        write_jsonl(out_dir / f"sft_{split}.jsonl", rows)
        files.append(f"sft_{split}.jsonl")
        if parquet:
            write_parquet(out_dir / f"sft_{split}.parquet", rows)
            files.append(f"sft_{split}.parquet")
        counts[split] = len(rows)
    return counts, files


def write_review(path: Path, episodes: Sequence[Episode], verdicts: dict[str, DialogueVerdict]) -> None:
    rows = []
    for e in episodes:
        v = verdicts[f"{e.task_id}#{e.trial}"]
        rows.append({
            "key": v.key, "decision": v.human or "", "note": v.human_note,
            "automatic": "accept" if v.automatic_pass else "reject", "reasons": v.reasons(),
            "judge_notes": v.judge.notes, "transcript": render_transcript(e.messages).splitlines(),
        })
    write_jsonl(path, rows)


def read_review(path: Path) -> dict[str, tuple[str | None, str]]:
    """key -> (decision or None, note); a line with another decision is an error naming the line."""
    decisions: dict[str, tuple[str | None, str]] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key, decision = row["key"], (row.get("decision") or "").strip().lower()
        except (json.JSONDecodeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}:{n}: not a review line ({exc})") from None
        if decision not in ("", "accept", "reject"):
            raise ValueError(f"{path}:{n}: decision must be 'accept', 'reject' or empty, got {decision!r}")
        decisions[key] = (decision or None, str(row.get("note", "")))
    return decisions
