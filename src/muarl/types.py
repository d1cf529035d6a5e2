"""The vocabulary every layer of muarl speaks.

Messages follow the OpenAI chat format (an assistant message carries ``tool_calls`` whose ``arguments``
is the raw JSON *string* the model produced, exactly as OpenAI-compatible servers return it): keeping the
raw string is what lets a malformed call be shown back to the policy as an error instead of being lost.

Everything here is a pydantic v2 model and round-trips through JSON lines. Messages are written in the OpenAI
form itself (a tool call as ``{id, type: "function", function: {name, arguments}}``, no null fields), so an
episode file's messages can be sent to or compared with any OpenAI-compatible tool as they are; the flat form
older episode files hold (``{id, name, arguments}``, nulls included) still reads. This module imports nothing
else of muarl.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

Role = Literal["system", "user", "assistant", "tool"]
ToolKind = Literal["read", "write", "think", "generic"]
Requestor = Literal["assistant", "user"]  # who makes a tool call: the agent, or (in dual-control worlds) the user
Termination = Literal[
    "user_stop",  # the user said ###STOP###
    "user_transfer",  # the user said ###TRANSFER###
    "user_out_of_scope",  # the user said ###OUT-OF-SCOPE###
    "terminal_tool",  # the agent called a terminal tool (transfer_to_human_agents)
    "max_turns",  # the agent used all its turns
    "token_budget",  # the conversation went over its token budget
    "context_full",  # the policy's conversation outgrew its model's context: the policy's failure, scored
    "error",  # a model or user server failed after its retries: the episode has no reward
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


MAX_ARGUMENT_NESTING = 32  # deeper tool arguments are malformed (JSON parsers of episode files stop near 200)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels (stops descending once over it)."""
    if not isinstance(value, (dict, list)):
        return False
    if limit <= 0:
        return True
    children = value.values() if isinstance(value, dict) else value
    return any(_nesting_exceeds(child, limit - 1) for child in children)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(value: Any) -> Any:
    """Text (or every string of a JSON-like value, keys included) with lone UTF-16 surrogates replaced by U+FFFD,
    the rest kept: they cannot be encoded as UTF-8, so an episode holding one (a model can emit them, e.g. as
    ``\\ud800`` escapes in its server's JSON) could not be written to disk."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [valid_unicode(v) for v in value]
    if isinstance(value, dict):
        return {valid_unicode(k): valid_unicode(v) for k, v in value.items()}
    return value


class ToolCall(_Model):
    """One function call requested by the agent, as in the OpenAI format."""

    id: str
    name: str
    arguments: str = "{}"  # raw JSON text as generated; parsed (and validated) by the episode loop

    @model_validator(mode="before")
    @classmethod
    def _from_openai_form(cls, data: Any) -> Any:
        """``{id, type: "function", function: {name, arguments}}`` (as written since episodes use it) to our fields."""
        if isinstance(data, dict) and isinstance(data.get("function"), dict) and data.get("type", "function") == "function":
            fn = data["function"]
            return {"id": data.get("id"), **{k: fn[k] for k in ("name", "arguments") if k in fn}}
        return data

    @model_serializer(mode="plain")
    def _openai_form(self) -> dict[str, Any]:
        return self.to_openai()

    @field_validator("id", "name", "arguments")
    @classmethod
    def _encodable(cls, value: str) -> str:
        return valid_unicode(value)

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ValueError with a readable reason when they are not a JSON object.

        Stricter than ``json.loads`` on purpose: NaN/Infinity, unpaired surrogate escapes and absurd nesting
        would parse, but the episode holding them could then not be written to (or read back from) JSON lines.
        """
        try:
            value = json.loads(self.arguments, parse_constant=_reject_constant) if self.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
        except (ValueError, RecursionError) as exc:  # NaN/Infinity, over-long integers, nesting beyond the parser
            raise ValueError(f"arguments are not valid JSON ({exc or type(exc).__name__})") from None
        if not isinstance(value, dict):
            raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
        if _nesting_exceeds(value, MAX_ARGUMENT_NESTING):
            raise ValueError(f"arguments nest deeper than {MAX_ARGUMENT_NESTING} levels")
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("arguments contain an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)") from None
        return value

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class Message(_Model):
    """A chat message. ``tool_calls`` only on assistant messages; ``tool_call_id`` only on tool messages."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name on tool messages

    @field_validator("content", "name", "tool_call_id")
    @classmethod
    def _encodable(cls, value: str | None) -> str | None:
        return valid_unicode(value)

    def writable(self) -> Message:
        """This message with every text in it (tool-call ids included) made encodable (:func:`valid_unicode`),
        whatever was written into the objects after they were built; how a message from code muarl does not run
        (an in-process agent or user) enters an episode, which must be written to disk."""
        return Message.model_validate(valid_unicode(self.model_dump()))

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI chat-completions request expects it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> Message:
        """Reads an OpenAI-format message (tool calls nested under ``function``) or our own flat form.

        Raises ValueError when ``tool_calls`` is not a list of call objects (e.g. a server that gives names
        as strings): that is not a message in either form, whatever the model meant."""
        calls = None
        if data.get("tool_calls"):
            if not isinstance(data["tool_calls"], list):
                raise ValueError(f"tool_calls must be a list of tool-call objects, not {data['tool_calls']!r}")
            calls = []
            for i, raw in enumerate(data["tool_calls"]):
                fn = raw.get("function", raw) if isinstance(raw, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name", ""), str):
                    raise ValueError(f"tool_calls[{i}] is not a tool-call object with a function name: {raw!r}")
                args = fn.get("arguments", "{}")
                if not isinstance(args, str):
                    args = json.dumps(args)
                calls.append(ToolCall(id=raw.get("id") or f"call_{i}", name=fn.get("name", ""), arguments=args))
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name") if data["role"] == "tool" else None,
        )


class ToolSpec(_Model):
    """A tool as offered to the model: an OpenAI function schema plus what muarl needs to know of it."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    kind: ToolKind = "generic"
    terminal: bool = False  # calling it ends the episode

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> ToolSpec:
        """Reads an OpenAI tool schema (``{"type": "function", "function": {...}}``); KeyError/TypeError if it is not one."""
        fn = data["function"]
        return cls(name=fn["name"], description=fn.get("description", ""),
                   parameters=fn.get("parameters", {"type": "object", "properties": {}}))


class Action(_Model):
    """A gold action: a tool call the task's solution makes, in order."""

    name: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    request: int | None = None  # index of the user request it serves (embedded tasks), None when unknown
    requestor: Requestor = "assistant"  # "user" for an action the user takes on their own device (τ² telecom)


class Revision(_Model):
    """A change of mind: what the user says instead of "yes" the first time the agent asks to confirm, and the
    details that hold from then on. A cooperative user has made up its mind already and states the revised
    details from its first wording of the request."""

    text: str  # how the user says it ("Actually, make it ... instead.")
    variants: list[str] = Field(default_factory=list)  # other wordings of ``text``
    facts: dict[str, str]  # the details that replace the request's (same keys)


class UserRequest(_Model):
    """One thing the user wants, revealed one at a time by a scripted user."""

    text: str  # how the user first says it
    variants: list[str] = Field(default_factory=list)  # other wordings of ``text`` (same facts); the scripted user picks one per episode
    facts: dict[str, str] = Field(default_factory=dict)  # details given only when asked (key: topic)
    outcome: Literal["done", "refused", "transfer", "answered"] = "done"  # what a correct agent does
    answer: str | None = None  # for "answered" requests: the fact the user waits to hear
    revision: Revision | None = None  # a change of mind; gold actions use the revised facts

    def revised(self) -> UserRequest:
        """The request as a user who has changed its mind words it: every revised detail's old value replaced by
        the new one, in every wording and in the facts (itself when there is no revision)."""
        if self.revision is None:
            return self

        def swap(text: str) -> str:
            for key, new in self.revision.facts.items():
                if key in self.facts:
                    text = text.replace(self.facts[key], new)
            return text

        return self.model_copy(update={"text": swap(self.text), "variants": [swap(v) for v in self.variants],
                                       "facts": {**self.facts, **self.revision.facts}, "revision": None})


class Absent(_Model):
    """No user to talk to once the request is made (ACEBench's multi-step entries): whatever the agent writes
    instead of calling a tool gets ``reply``, until it writes ``end``."""

    reply: str
    end: str


class UserScenario(_Model):
    """What the simulated user knows and wants. ``instruction`` is the natural-language form an LLM user gets."""

    persona: str = ""
    known_info: dict[str, str] = Field(default_factory=dict)  # identity facts: name, email, date of birth, …
    goal: str = ""
    instruction: str
    requests: list[UserRequest] = Field(default_factory=list)  # structured goals for the scripted user
    script: list[str] = Field(default_factory=list)  # a fixed script (BFCL): one message per agent reply, whatever it says
    absent: Absent | None = None  # the user makes its request and is gone (scripted users only)
    rules: list[str] = Field(default_factory=list)  # how this world's users behave beyond the general rules (LLM users' prompt)


class Task(_Model):
    id: str
    domain: str
    split: str
    difficulty: int | None = None
    user: UserScenario
    actions: list[Action] = Field(default_factory=list)  # gold actions, replayed to get the gold state
    outputs: list[str] = Field(default_factory=list)  # facts the agent must tell the user
    metadata: dict[str, Any] = Field(default_factory=dict)


def with_user_tool_messages(messages: list[Message], user_tool_messages: list[tuple[int, list[Message]]]) -> list[Message]:
    """``messages`` with each run of the user's tool traffic inserted before the message at its index."""
    if not user_tool_messages:
        return messages
    merged: list[Message] = []
    start = 0
    for index, acted in user_tool_messages:
        merged += messages[start:index] + acted
        start = index
    return merged + messages[start:]


NOT_EXECUTED = "only one tool call per turn is executed; this call was skipped, call it again on its own turn"
NOT_EXECUTED_OUTPUT = f"Error: {NOT_EXECUTED}"  # the tool message of a skipped call (scorers that replay calls skip it)


def executed_calls(trajectory: list[Message]) -> list[tuple[Requestor, ToolCall]]:
    """The tool calls a trajectory ran, in order, with who made them (a ``user`` message carrying calls is the
    user's, in dual-control worlds): every call except those the episode loop skipped (:data:`NOT_EXECUTED`)."""
    skipped = {m.tool_call_id for m in trajectory if m.role == "tool" and m.content == NOT_EXECUTED_OUTPUT}
    return [("user" if m.role == "user" else "assistant", call) for m in trajectory if m.role in ("assistant", "user")
            for call in m.tool_calls or [] if call.id not in skipped]


class ToolExecution(_Model):
    """What happened when the loop ran one tool call."""

    turn: int
    call_id: str
    name: str
    arguments: dict[str, Any] | None = None  # None when they could not be parsed
    output: str
    error: str | None = None  # None on success
    error_kind: Literal["malformed", "unknown_tool", "bad_arguments", "tool", "not_executed"] | None = None
    seconds: float = 0.0
    requestor: Requestor = "assistant"  # "user": a call the simulated user made inside its turn (dual control)


class TurnTiming(_Model):
    turn: int
    agent_seconds: float = 0.0
    tools_seconds: float = 0.0
    user_seconds: float = 0.0


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.requests += other.requests


class RewardInfo(_Model):
    """The reward and why: each named check, and what the final state looked like.

    ``success`` is the one verdict everything reads (pass^k, the runner's progress, training's group
    statistics): every reward function sets it, so a shaped ``reward`` (a turn penalty) never changes what
    counts as solved. Files written before the field existed get the verdict pass^k used then.
    """

    reward: float
    success: bool
    state_match: bool
    outputs_found: dict[str, bool] = Field(default_factory=dict)
    final_hash: str
    gold_hash: str
    components: dict[str, float] = Field(default_factory=dict)  # reward variants' terms, if any
    details: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _legacy_success(cls, data: Any) -> Any:
        if isinstance(data, dict) and "success" not in data and "state_match" in data:
            found = data.get("outputs_found") or {}
            data = {**data, "success": bool(data["state_match"]) and all(found.values())}
        return data


class TokenTrace(_Model):
    """Exact token-in/token-out record filled by the token-level training engine."""

    input_ids: list[int]
    loss_mask: list[int]  # 1 on policy-sampled tokens only
    logprobs: list[float]  # sampling log-probability per token (0.0 where loss_mask is 0)


CheckStatus = Literal["pass", "fail", "not_applicable", "error"]
FailureLabel = Literal["agent", "user", "task", "infra", "undecided"]


class Evidence(_Model):
    """Where a verdict looked: a message index of ``Episode.messages`` and a short quote of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    quote: str = ""


class CheckVerdict(_Model):
    """One trajectory check's verdict on one episode (see :mod:`muarl.checks`). ``error``: the check itself
    raised (a defect of the check, recorded rather than crashing the run). Immutable: the checks give many
    episodes the same verdict object (:func:`muarl.checks.conversation.verdict`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    status: CheckStatus
    detail: str = ""
    evidence: list[Evidence] = Field(default_factory=list)
    value: float | None = None  # a measured quantity where the check has one (turns after completion, ...)


class UserFault(_Model):
    """A way the simulated user left its instruction: injected by the fault-injecting user (ground truth) or
    found by the attribution rules. ``index``: the user message of ``Episode.messages`` it happened in."""

    kind: Literal["stop", "withhold", "wrong_value", "invent", "ignore_confirmation"]
    index: int
    detail: str = ""


class Attribution(_Model):
    """Whose fault a failed or errored episode is, and why (see :mod:`muarl.checks.attribution`)."""

    label: FailureLabel
    reason: str
    # rules: a rule decided; default: no rule did and the agent is blamed by default (what a judge is asked about);
    # judge: an LLM judge decided (or, as ``undecided``, could not)
    source: Literal["rules", "default", "judge"] = "rules"
    evidence: list[Evidence] = Field(default_factory=list)
    user_faults: list[UserFault] = Field(default_factory=list)  # what the user-fault rules found


class Episode(_Model):
    """One conversation between a policy and a simulated user on one task, with everything measured."""

    task_id: str
    domain: str
    split: str
    trial: int = 0
    agent: str = ""
    user: str = ""
    user_settings: dict[str, Any] = Field(default_factory=dict)  # the user's strategy, sampling, precision (UserSimulator.settings)
    messages: list[Message] = Field(default_factory=list)  # the agent's view, system prompt first
    tool_executions: list[ToolExecution] = Field(default_factory=list)
    timings: list[TurnTiming] = Field(default_factory=list)
    termination: Termination
    error: str | None = None  # why the episode errored (termination == "error")
    reward: RewardInfo | None = None  # None when errored
    usage: Usage = Field(default_factory=Usage)
    user_usage: Usage = Field(default_factory=Usage)
    agent_turns: int = 0
    malformed_calls: int = 0
    seconds: float = 0.0
    seed: int | None = None
    tokens: TokenTrace | None = None
    # dual control: the user's own tool calls and their results, each run with the index in ``messages`` of the
    # user message they came before (the agent never sees them; :meth:`trajectory` puts them back)
    user_tool_messages: list[tuple[int, list[Message]]] = Field(default_factory=list)
    checks: list[CheckVerdict] | None = None  # trajectory checks (None: not computed, e.g. files written before them)
    attribution: Attribution | None = None  # whose fault, for a failed or errored episode whose checks were computed
    injected_faults: list[UserFault] = Field(default_factory=list)  # faults a fault-injecting user made on purpose

    def trajectory(self) -> list[Message]:
        """The whole conversation as it happened: the agent's view with the user's tool traffic put back in place
        (what τ² scores, and what a replay must run); the agent's view itself where the user has no tools."""
        return with_user_tool_messages(self.messages, self.user_tool_messages)

    @property
    def errored(self) -> bool:
        return self.termination == "error"

    @property
    def succeeded(self) -> bool:
        """The reward function's verdict (``RewardInfo.success``); an errored episode has none."""
        return self.reward is not None and self.reward.success

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.trial)
