"""Our tasks and SFT dialogues as the Parquet files verl reads (``muarl export-verl``); no verl import needed.

RL rows (read by verl's ``RLHFDataset``, one per task)::

    data_source  "muarl/<domain>"
    prompt       [{"role": "system", "content": <the domain's system prompt for the task>}]
    ability      "tool_use"
    reward_model {"style": "rule", "ground_truth": <task id>}   (our reward scores the episode, not verl's)
    extra_info   {"domain", "split", "task_id", "seed", "index"}
    agent_name   "muarl"   (the agent-loop YAML entry of that name runs :class:`muarl.integrations.verl.MuarlAgentLoop`)

The prompt is only what verl measures and logs: the agent loop renders the real opening itself (the system
turn with the tool schemas, then the simulated user's first line). ``seed`` is the one ``muarl rollout
--seed`` gives the task's first trial, so the row's episode can be checked against a muarl rollout.

SFT rows (read by verl's ``MultiTurnSFTDataset``): ``messages`` and ``tools`` as nested lists, as
:func:`muarl.synth.export.write_parquet` writes them.

A split named test is refused unless forced: training on it would leak the evaluation set.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from muarl.config import ConfigError
from muarl.domains.base import Domain
from muarl.seeds import episode_seed
from muarl.types import Task

AGENT_NAME = "muarl"  # the name examples/verl/agent_loops.yaml gives its MuarlAgentLoop entry
TEST_SPLIT = "test"


def refuse_test_split(split: str, force: bool) -> None:
    if split == TEST_SPLIT and not force:
        raise ConfigError("refusing to export split 'test' for training: it would leak the evaluation set "
                          "(export split train, or pass --force for a throwaway experiment)")


def rl_rows(domain: Domain, tasks: Sequence[Task], seed: int = 0, spec: str | None = None) -> list[dict[str, Any]]:
    """One verl RL row per task (see the module docstring); ``spec`` is how the domain was named when loaded
    (a ``module:factory`` plugin), so the agent loop loads it the same way."""
    return [{
        "data_source": f"muarl/{domain.name}",
        "prompt": [{"role": "system", "content": domain.system_prompt(task)}],
        "ability": "tool_use",
        "reward_model": {"style": "rule", "ground_truth": task.id},
        "extra_info": {"domain": spec or domain.name, "split": task.split, "task_id": task.id,
                       "seed": episode_seed(seed, task.id, 0), "index": i},
        "agent_name": AGENT_NAME,
    } for i, task in enumerate(tasks)]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows as one Parquet file (tmp + rename, so a failed write leaves no half file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)


def sft_rows(jsonl: Path, force: bool = False) -> list[dict[str, Any]]:
    """The dialogues of a chat JSONL (``muarl synth``'s ``sft_*.jsonl``) as SFT rows; test-split dialogues refused."""
    from muarl.train.sft import read_conversations

    try:
        conversations = read_conversations(jsonl, allow_test_split=force)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--allow-test-split", "--force")) from None
    return [{"messages": [m.to_openai() for m in messages], "tools": [t.to_openai() for t in tools]} for messages, tools in conversations]
