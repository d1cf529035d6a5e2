"""How the checks read a conversation: what the agent said to the user, its tool calls and their results,
confirmation asks and replies, value-like tokens and claims of actions done.

Everything here reads ``Episode.messages`` only (the agent's view, system prompt first), so an episode
replayed from another framework's results file, which has no ``tool_executions``, reads the same way. Text
is compared normalised as the outcome reward compares outputs: lower case, commas removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from muarl.types import Evidence, Message, Task

QUOTE_CHARS = 120  # evidence quotes are cut to this length


def normalise(text: str | None) -> str:
    return (text or "").lower().replace(",", "")


def evidence(messages: Sequence[Message], index: int) -> Evidence:
    """The message at ``index`` with a short quote: its text, or its first tool call."""
    m = messages[index] if 0 <= index < len(messages) else None
    if m is None:
        return Evidence(index=index)
    text = m.content or ""
    if not text and m.tool_calls:
        call = m.tool_calls[0]
        text = f"{call.name}({call.arguments})"
    text = " ".join(text.split())
    return Evidence(index=index, quote=text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…")


def to_user(m: Message) -> bool:
    """An agent message the user sees: assistant text without tool calls (as the episode loop shows it)."""
    return m.role == "assistant" and not m.tool_calls and bool(m.content)


def from_user(m: Message) -> bool:
    return m.role == "user" and m.content is not None and not m.tool_calls


@dataclass
class AgentCall:
    """One tool call of the agent, where it was made and what it answered."""

    index: int  # the assistant message holding the call
    name: str
    raw_arguments: str
    result_index: int | None  # the tool message answering it
    result: str

    @cached_property
    def arguments(self) -> dict[str, Any] | None:
        """The arguments as the loop ran them; None when they are not a JSON object (the loop's stricter
        checks, nesting and NaN, are the malformed-call check's business: it reads the loop's refusal)."""
        try:
            value = json.loads(self.raw_arguments) if self.raw_arguments.strip() else {}
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    @property
    def ok(self) -> bool:
        """Ran and was not refused (the loop writes every failure as a tool message starting ``Error:``)."""
        return self.result_index is not None and not self.result.startswith("Error")

    def identity(self) -> tuple[str, str]:
        """The call's name and arguments as written, to compare two calls."""
        return (self.name, self.raw_arguments)


class _Texts:
    """Each message's text, normalised on first use (tool results can be long, and most are never compared)."""

    def __init__(self, messages: Sequence[Message]):
        self.messages = messages
        self.cache: dict[int, str] = {}

    def __getitem__(self, index: int) -> str:
        text = self.cache.get(index)
        if text is None:
            text = self.cache[index] = normalise(self.messages[index].content)
        return text


class _LastEpisode:
    """What the checks read of the episode they are judging, computed once for all of them: they run one after
    the other on the same ``messages`` list (kept here, so a new list is never mistaken for it)."""

    messages: Sequence[Message] | None = None
    length = 0
    calls: list[AgentCall] = []
    texts: _Texts
    said: list[int] = []  # indices of the agent's messages to the user
    heard: list[int] = []  # indices of the user's messages

    @classmethod
    def of(cls, messages: Sequence[Message]) -> type[_LastEpisode]:
        if cls.messages is not messages or cls.length != len(messages):
            cls.messages, cls.length = messages, len(messages)
            cls.calls = _agent_calls(messages)
            cls.texts = _Texts(messages)
            cls.said = [i for i, m in enumerate(messages) if to_user(m)]
            cls.heard = [i for i, m in enumerate(messages) if from_user(m)]
        return cls


def agent_calls(messages: Sequence[Message]) -> list[AgentCall]:
    """Every tool call the agent made, paired with the tool message that answers it (by id among the messages
    that follow, else by position)."""
    return _LastEpisode.of(messages).calls


def texts(messages: Sequence[Message]) -> _Texts:
    """Each message's text, normalised (indexed like ``messages``)."""
    return _LastEpisode.of(messages).texts


def said_to_user(messages: Sequence[Message]) -> list[int]:
    """Indices of the agent's messages to the user (:func:`to_user`)."""
    return _LastEpisode.of(messages).said


def said_by_user(messages: Sequence[Message]) -> list[int]:
    """Indices of the user's messages to the agent (:func:`from_user`)."""
    return _LastEpisode.of(messages).heard


def _agent_calls(messages: Sequence[Message]) -> list[AgentCall]:
    calls: list[AgentCall] = []
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        replies = []
        j = i + 1
        while j < len(messages) and messages[j].role == "tool":
            replies.append(j)
            j += 1
        unused = list(replies)
        for k, call in enumerate(m.tool_calls):
            match = next((r for r in unused if messages[r].tool_call_id == call.id), None)
            if match is None and k < len(replies) and replies[k] in unused:
                match = replies[k]
            if match is not None:
                unused.remove(match)
            calls.append(AgentCall(i, call.name, call.arguments, match,
                                   (messages[match].content or "") if match is not None else ""))
    return calls


def leaf_values(value: Any) -> Iterator[str]:
    """The scalar values of a JSON-like value (strings and numbers, not booleans or null), as text."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaf_values(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaf_values(v)
    elif isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


# ---------------------------------------------------------------- asks and replies

_ASKS_CONFIRMATION = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like me to|do you want me to|is that correct|is that right|yes or no|yes/no)\b"
)
_CLOSING_QUESTION = re.compile(r"\b(anything else|something else|any other|anything more|further questions|else i can)\b")
_AFFIRMS = re.compile(r"\b(yes|yeah|yep|yup|sure|correct|confirm|confirmed|go ahead|please do|proceed|ok|okay|that's right|that is right|sounds good|do it)\b")
_DENIES = re.compile(r"\b(no|nope|not|don't|do not|instead|actually|wait|hold on|changed my mind|rather|never mind)\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def last_sentence(text: str) -> str:
    parts = [p for p in _SENTENCE_END.split(text.strip()) if p]
    return parts[-1] if parts else ""


def asks_confirmation(text: str | None) -> bool:
    """A question asking the user to approve an action ("... Shall I proceed? (yes/no)")."""
    t = normalise(text)
    return "?" in t and bool(_ASKS_CONFIRMATION.search(t))


def asks_question(text: str | None) -> bool:
    """The message waits for an answer: its last sentence is a question other than a closing one ("anything else?")."""
    tail = last_sentence(normalise(text))
    return "?" in tail and not _CLOSING_QUESTION.search(tail)


def affirms(text: str | None) -> bool:
    """An explicit yes, with nothing that takes it back or changes what is asked."""
    t = normalise(text)
    return bool(_AFFIRMS.search(t)) and not _DENIES.search(t)


def denies(text: str | None) -> bool:
    t = normalise(text)
    return bool(re.search(r"\b(no|nope|don't|do not)\b", t)) and not _AFFIRMS.search(t)


# ---------------------------------------------------------------- values and claims

_VALUE_TOKEN = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|#?\w[\w:-]*")


def value_tokens(text: str | None) -> list[str]:
    """Value-like tokens of a text (emails, phone numbers, ids, dates, numbers of three digits or more), normalised:
    the things a user can state wrongly."""
    found = []
    for token in _VALUE_TOKEN.findall(normalise(text)):
        token = token.strip(".-:_")
        if len(token) >= 3 and any(c.isdigit() for c in token):
            found.append(token)
    return found


# claims of an action done, by family: the past forms an agent uses, and the write tools (by a word of their
# name) that can do it
CLAIM_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "update": (r"updated|changed|modified|edited", ("update", "modify", "change", "edit", "exchange", "reschedule")),
    "cancel": (r"cancell?ed", ("cancel",)),
    "book": (r"booked|scheduled|reserved", ("book", "schedule", "reserve")),
    "reschedule": (r"rescheduled|moved", ("reschedule", "update", "modify")),
    "refill": (r"refilled", ("refill",)),
    "refund": (r"refunded", ("return", "cancel", "refund", "exchange", "pay", "modify")),
    "exchange": (r"exchanged", ("exchange", "modify")),
    "return": (r"returned", ("return",)),
    "pay": (r"paid", ("pay",)),
    "send": (r"sent|issued", ("send", "certificate", "issue")),
}
_CLAIM_LEAD = r"\b(?:i|i've|i have|we|we've|we have|has been|have been|was|were|is now|are now|successfully|now)\s+(?:\w+\s+){0,2}?"
_CLAIMS = {family: re.compile(_CLAIM_LEAD + rf"({verbs})\b") for family, (verbs, _) in CLAIM_FAMILIES.items()}
_ANY_CLAIM_VERB = re.compile(r"\b(" + "|".join(verbs for verbs, _ in CLAIM_FAMILIES.values()) + r")\b")
_NEGATED = re.compile(r"\b(not|never|unable|cannot|can't|couldn't|won't|wasn't|weren't|hasn't|haven't|didn't|failed)\b|n't\b")


def action_claims(text: str | None) -> list[tuple[str, str]]:
    """(family, sentence) for each sentence of an agent's message that says an action was done: not a question,
    not negated ("could not be cancelled"), not a plan ("I will update")."""
    claims: list[tuple[str, str]] = []
    if not _ANY_CLAIM_VERB.search(normalise(text)):
        return claims
    for sentence in re.split(r"(?<=[.!?;])\s+|\n+", normalise(text)):
        if "?" in sentence or _NEGATED.search(sentence):
            continue
        for family, pattern in _CLAIMS.items():
            if pattern.search(sentence):
                claims.append((family, sentence.strip()))
    return claims


def tool_does(family: str, tool_name: str) -> bool:
    """Whether a write tool of this name can do what a claim of ``family`` says was done."""
    return any(word in tool_name.lower() for word in CLAIM_FAMILIES[family][1])


# ---------------------------------------------------------------- what the user was told to be and want

_WISH_FAMILIES = {
    "cancel": r"cancel", "book": r"book|reserv", "reschedule": r"reschedul", "refill": r"refill",
    "return": r"return|refund", "exchange": r"exchang|swap", "modify": r"updat|chang|modif|edit",
}
WISHES = {family: re.compile(rf"\b({stems})\w*") for family, stems in _WISH_FAMILIES.items()}


def wishes(text: str | None) -> set[str]:
    """The kinds of action a text asks for or mentions (cancel, book, return, modify, ...)."""
    t = normalise(text)
    return {family for family, pattern in WISHES.items() if pattern.search(t)}


def instruction_text(task: Task) -> str:
    """Everything the simulated user was given to say (normalised): its instruction, persona, goal, identity and
    each structured request in every wording, revised or not, with its details, answer and change of mind."""
    user = task.user
    parts = [user.instruction, user.goal, user.persona, *user.known_info.values(), *user.script]
    for request in user.requests:
        for r in (request, request.revised()):
            parts += [r.text, *r.variants, *r.facts.values(), r.answer or ""]
        if request.revision is not None:
            parts += [request.revision.text, *request.revision.variants, *request.revision.facts.values()]
    return normalise("\n".join(parts))
