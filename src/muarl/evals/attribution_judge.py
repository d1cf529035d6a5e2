"""An LLM judge for the failures the attribution rules cannot decide, over any OpenAI-compatible endpoint.

The rules (:mod:`muarl.checks.attribution`) blame the agent by default when no rule fired: no user fault found
and no check failed (``Attribution.source == "default"``). Those episodes, and only those, are shown to a judge
model with the user's instruction and the conversation, and it answers ``agent`` or ``user`` with a reason.

The judge is reached with the same client, timeout and retry rules as agents and users. A judge that fails (the
server down after its retries, a reply that is not the JSON asked for) leaves the label ``undecided`` with the
reason; it never stops the evaluation. Verdicts are cached per episode (by the judge model and the episode's
task, trial and messages) in a JSON-lines file beside the run's episodes, so re-running the evaluation asks
nothing again; failures are not cached, so a re-run retries them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from muarl.models.base import ContextFull, ModelError
from muarl.models.openai_client import ChatClient
from muarl.types import Attribution, Episode, Message, Task

CACHE_FILE = "attribution_judge.jsonl"

INSTRUCTIONS = """You judge a failed conversation between a customer-service agent and a simulated customer.
The simulated customer was given an instruction: what it knows and wants. The agent failed its task. Decide whose
fault the failure is:
- "user" if the simulated customer left its instruction: it stopped before its goal could be reached, withheld a
  detail it was asked for and holds, stated a fact or wish the instruction does not give, contradicted it, or did
  not answer a request for confirmation;
- "agent" otherwise (the agent misunderstood, broke its policy, made a wrong call, or gave up).
Answer with one JSON object and nothing else: {"label": "agent" or "user", "reason": "one sentence"}."""


def prompt(task: Task, episode: Episode) -> list[Message]:
    """What the judge reads: the user's instruction and the conversation (tool calls named, results shown)."""
    lines = []
    for i, m in enumerate(episode.messages):
        if m.role == "system":
            continue
        text = m.content or ""
        if m.tool_calls:
            text = (text + " " if text else "") + "; ".join(f"calls {c.name}({c.arguments})" for c in m.tool_calls)
        lines.append(f"[{i}] {m.role}: {text}")
    body = f"Customer instruction:\n{task.user.instruction}\n\nConversation:\n" + "\n".join(lines)
    return [Message(role="system", content=INSTRUCTIONS), Message(role="user", content=body)]


def parse(text: str | None) -> tuple[str, str]:
    """(label, reason) of a judge reply; ValueError when it is not the JSON asked for."""
    cleaned = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())
    try:
        reply = json.loads(cleaned)
        label, reason = reply["label"], str(reply.get("reason", ""))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"the judge's reply is not the JSON asked for ({exc!r}): {str(text)[:200]!r}") from None
    if label not in ("agent", "user"):
        raise ValueError(f"the judge's label {label!r} is neither 'agent' nor 'user'")
    return label, reason


def episode_key(model: str, episode: Episode) -> str:
    transcript = json.dumps([m.model_dump(mode="json") for m in episode.messages], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(f"{model}\x00{episode.task_id}\x00{episode.trial}\x00{transcript}".encode()).hexdigest()


class VerdictCache:
    """The judge's verdicts by episode key, read from and appended to one JSON-lines file (a torn last line,
    after a crash, is skipped)."""

    def __init__(self, path: Path):
        self.path = path
        self.verdicts: dict[str, dict[str, str]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self.verdicts[row["key"]] = {"label": row["label"], "reason": row["reason"]}
                except (ValueError, KeyError, TypeError):
                    continue

    def add(self, key: str, label: str, reason: str) -> None:
        self.verdicts[key] = {"label": label, "reason": reason}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"key": key, "label": label, "reason": reason}, ensure_ascii=False) + "\n")


async def judge_undecided(episodes: Sequence[Episode], tasks: dict[tuple[str, str], Task], client: ChatClient,
                          cache: VerdictCache) -> list[Episode]:
    """The episodes with each default-labelled failure (whose task is in ``tasks``, by (split, id)) judged;
    the others unchanged."""

    async def one(episode: Episode) -> Episode:
        old = episode.attribution
        task = tasks.get((episode.split, episode.task_id))
        if old is None or old.source != "default" or task is None:
            return episode
        key = episode_key(client.model, episode)
        verdict = cache.verdicts.get(key)
        if verdict is None:
            try:
                turn = await client.complete(prompt(task, episode), temperature=0.0)
                label, reason = parse(turn.message.content)
            except (ModelError, ContextFull, ValueError) as exc:
                judged = Attribution(label="undecided", reason=f"judge failed: {exc}"[:300], evidence=old.evidence, source="judge")
                return episode.model_copy(update={"attribution": judged})
            cache.add(key, label, reason)
            verdict = {"label": label, "reason": reason}
        judged = Attribution(label=verdict["label"], reason=f"judge: {verdict['reason']}"[:300], evidence=old.evidence,  # type: ignore[arg-type]
                             source="judge")
        return episode.model_copy(update={"attribution": judged})

    return list(await asyncio.gather(*(one(ep) for ep in episodes)))
