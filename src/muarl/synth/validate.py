"""Double validation of synthesised dialogues: hard rules first, then an LLM judge with a written rubric.

Rules (:func:`check_rules`), each a named rejection reason:

- ``episode_error``: the episode ended in an error (a model, user or tool server failed).
- ``malformed_call``: a tool call whose arguments were not JSON, named an unknown tool, or did not fit the
  tool's schema (the loop's ``malformed`` / ``unknown_tool`` / ``bad_arguments``).
- ``write_before_identification``: a write tool was called before any identification tool (a per-domain or
  per-scenario list, e.g. ``find_patient``) had succeeded. Skipped when the list is empty.
- ``unconfirmed_write``: the last user message before a write call was not an affirmative. *Affirmative*
  means it contains one of yes / yeah / yep / sure / ok / okay / correct / confirm(ed) / go ahead /
  proceed / please do / do it / that's right, and does not open with a refusal (no, nope, not, don't,
  do not, wait, stop). A turn that makes several writes after one "yes" is fine.
- ``invented_id``: a tool argument that looks like an identifier (a string without spaces, at least three
  characters, with a digit, and not a date or time) that appears nowhere before the call in the system
  prompt, the user's messages or earlier tool outputs (case-insensitive, a leading ``#`` ignored). The
  agent's own messages do not count as a source: that is where inventions come from.
- ``reward_below_1``: the task has gold actions or required outputs and the outcome reward is not 1.
  Episodes scored as ``unscored`` (scenario backends with no gold state) skip this rule.

Judge (:class:`LLMJudge`): the rubric asks four yes/no questions with a reason each; a failed criterion
is the rejection reason ``judge:<criterion>``; an answer that is not the requested JSON is
``judge_unparsable`` and a judge server that fails is ``judge_error`` (both reject: an unchecked
dialogue is not exported). Without a judge endpoint the judge stage is recorded as ``skipped``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from muarl.domains.base import ArgumentError, Domain
from muarl.models.base import AgentTurn, ModelError
from muarl.types import Episode, Message, Task, ToolSpec

_AFFIRMATIVE = re.compile(
    r"\b(yes|yeah|yep|sure|ok|okay|correct|confirm|confirmed|go ahead|proceed|please do|do it|that's right|that is right)\b", re.I
)
_REFUSAL_OPENING = re.compile(r"^\W*(no|nope|not|don't|do not|wait|stop)\b", re.I)
_DATE_OR_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?)?|\d{1,2}:\d{2}(:\d{2})?)$")


def is_affirmative(text: str) -> bool:
    """Whether a user message gives consent, by the rule in the module docstring."""
    return bool(_AFFIRMATIVE.search(text)) and not _REFUSAL_OPENING.match(text)


def looks_like_id(value: str) -> bool:
    """Whether a string argument is an identifier whose origin must be traceable."""
    return len(value) >= 3 and not any(c.isspace() for c in value) and any(c.isdigit() for c in value) and not _DATE_OR_TIME.match(value)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class Rejection(BaseModel):
    reason: str  # one of the rule or judge reason names
    detail: str = ""


class RuleConfig(BaseModel):
    """What the rules need to know about a world."""

    identification_tools: list[str] = Field(default_factory=list)  # read tools that identify the user; empty: rule off
    require_confirmation: bool = True  # a write needs an affirmative last user message
    check_invented_ids: bool = True
    require_reward: bool = True  # tasks with gold actions/outputs must reach reward 1


class StageVerdict(BaseModel):
    status: Literal["pass", "fail", "skipped", "error"]
    rejections: list[Rejection] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict)  # the judge's reason per criterion


def check_rules(episode: Episode, domain: Domain, task: Task, config: RuleConfig) -> StageVerdict:
    """Apply every hard rule; all rejections are reported, not only the first."""
    found: list[Rejection] = []
    if episode.errored:
        return StageVerdict(status="fail", rejections=[Rejection(reason="episode_error", detail=episode.error or "")])
    # the loop records one execution per call, in call order (the user's own calls, in dual-control worlds, apart)
    calls = [c for m in episode.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    by_call = {id(call): execution for call, execution in zip(calls, (e for e in episode.tool_executions if e.requestor == "assistant"))}
    seen: list[str] = []
    last_user = ""
    identified = not config.identification_tools
    for message in episode.messages:
        if message.role in ("system", "user", "tool"):
            seen.append((message.content or "").lower())
            if message.role == "user":
                last_user = message.content or ""
            continue
        for call in message.tool_calls or []:
            execution = by_call.get(id(call))
            if execution is None or execution.error_kind == "not_executed":
                continue
            if execution.error_kind in ("malformed", "unknown_tool", "bad_arguments"):
                found.append(Rejection(reason="malformed_call", detail=f"{call.name}: {execution.error}"))
                continue
            tool = domain.tools[call.name]
            arguments = execution.arguments or {}
            if execution.error is None:
                try:
                    tool.validate(arguments)
                except ArgumentError as exc:
                    found.append(Rejection(reason="malformed_call", detail=f"{call.name}: {exc}"))
            if config.check_invented_ids:
                context = "\n".join(seen)
                for value in _strings(arguments):
                    if looks_like_id(value) and value.lower().lstrip("#") not in context:
                        found.append(Rejection(reason="invented_id", detail=f"{call.name} argument {value!r} appears nowhere before the call"))
            if tool.kind == "write":
                if not identified:
                    found.append(Rejection(reason="write_before_identification", detail=f"{call.name} before any of {config.identification_tools} succeeded"))
                if config.require_confirmation and not is_affirmative(last_user):
                    found.append(Rejection(reason="unconfirmed_write", detail=f"{call.name} after user said {last_user[:120]!r}"))
            if execution.error is None and call.name in config.identification_tools:
                identified = True
    reward = episode.reward
    unscored = reward is not None and reward.details.get("unscored")
    if config.require_reward and (task.actions or task.outputs) and not unscored and (reward is None or reward.reward < 1.0):
        found.append(Rejection(reason="reward_below_1", detail=f"reward {None if reward is None else reward.reward}"))
    return StageVerdict(status="fail" if found else "pass", rejections=found)


# ---------------------------------------------------------------- LLM judge

RUBRIC = """You review a customer-service dialogue between an AI agent and a user, including the agent's tool calls and their results. Judge the AGENT only.

Criteria (answer each with pass true/false and a one-sentence reason):
- goal_met: the user's goal (given below) was achieved, or correctly refused when the policy forbids it.
- policy_followed: the agent obeyed the policy (given below), e.g. identified the user and got explicit confirmation before any change.
- no_invented_facts: every fact, id, price or date the agent stated or used came from the user, the policy or a tool result.
- user_treated_well: the agent was clear, polite, did not pressure the user, and did not stop while the user still needed help.

Answer with one JSON object and nothing else:
{"goal_met": {"pass": true, "reason": "..."}, "policy_followed": {"pass": true, "reason": "..."}, "no_invented_facts": {"pass": true, "reason": "..."}, "user_treated_well": {"pass": true, "reason": "..."}}"""

CRITERIA = ("goal_met", "policy_followed", "no_invented_facts", "user_treated_well")


class Completer(Protocol):
    """What the judge (and the simulated tools) need of a chat client: ``muarl.models.openai_client.ChatClient``."""

    async def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, **sampling: Any) -> AgentTurn: ...


def render_transcript(messages: Sequence[Message]) -> str:
    """The dialogue as plain text for a reader (the judge, a human reviewer); the system prompt is left out."""
    lines = []
    for m in messages:
        if m.role == "user":
            lines.append(f"USER: {m.content}")
        elif m.role == "assistant":
            if m.content:
                lines.append(f"AGENT: {m.content}")
            for c in m.tool_calls or []:
                lines.append(f"AGENT CALLS {c.name}({c.arguments})")
        elif m.role == "tool":
            lines.append(f"TOOL {m.name} RETURNS: {m.content}")
    return "\n".join(lines)


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a model's answer (models often wrap it in prose or code fences)."""
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


class LLMJudge:
    """Grades a dialogue against :data:`RUBRIC` with a chat model (temperature 0)."""

    def __init__(self, client: Completer, rubric: str = RUBRIC):
        self.client = client
        self.rubric = rubric

    def prompt(self, episode: Episode, domain: Domain, task: Task) -> list[Message]:
        policy = domain.system_prompt(task)
        body = f"POLICY:\n{policy}\n\nUSER'S GOAL:\n{task.user.instruction}\n\nDIALOGUE:\n{render_transcript(episode.messages)}"
        return [Message(role="system", content=self.rubric), Message(role="user", content=body)]

    async def judge(self, episode: Episode, domain: Domain, task: Task) -> StageVerdict:
        try:
            turn = await self.client.complete(self.prompt(episode, domain, task), temperature=0.0)
        except ModelError as exc:
            return StageVerdict(status="error", rejections=[Rejection(reason="judge_error", detail=str(exc))])
        answer = first_json_object(turn.message.content or "")
        if answer is None or not all(isinstance(answer.get(c), dict) and "pass" in answer[c] for c in CRITERIA):
            return StageVerdict(status="error", rejections=[Rejection(reason="judge_unparsable", detail=(turn.message.content or "")[:300])])
        notes = {c: str(answer[c].get("reason", "")) for c in CRITERIA}
        failed = [c for c in CRITERIA if answer[c]["pass"] is not True]
        rejections = [Rejection(reason=f"judge:{c}", detail=notes[c]) for c in failed]
        return StageVerdict(status="fail" if failed else "pass", rejections=rejections, notes=notes)


class DialogueVerdict(BaseModel):
    """Everything decided about one dialogue; stored one per line in ``validation.jsonl``."""

    task_id: str
    trial: int
    rules: StageVerdict
    judge: StageVerdict
    human: Literal["accept", "reject"] | None = None
    human_note: str = ""

    @property
    def key(self) -> str:
        return f"{self.task_id}#{self.trial}"

    @property
    def automatic_pass(self) -> bool:
        return self.rules.status == "pass" and self.judge.status in ("pass", "skipped")

    @property
    def accepted(self) -> bool:
        """A human decision, where given, overrides the automatic one."""
        return self.automatic_pass if self.human is None else self.human == "accept"

    def reasons(self) -> list[str]:
        """Rejection reasons, each once (a human rejection is ``human_reject``)."""
        names = [r.reason for r in self.rules.rejections + self.judge.rejections]
        if self.human == "reject":
            names.append("human_reject")
        return list(dict.fromkeys(names))
