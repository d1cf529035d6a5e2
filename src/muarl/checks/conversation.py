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
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like|do you want|is that correct|is that right"
    r"|does (?:this|that|everything) look|yes or no|yes/no)\b"
)
_REQUESTS = re.compile(r"\?|\b(please|let me know|kindly)\b")
_CLOSING_QUESTION = re.compile(r"\b(anything else|something else|any other|anything more|further questions|else i can)\b")
_AFFIRMS = re.compile(r"\b(yes|yeah|yep|yup|sure|correct|confirm|confirmed|go ahead|please do|proceed|ok|okay|that's right|that is right|sounds good|do it)\b")
_DENIES = re.compile(r"\b(no|nope|not|don't|do not|instead|actually|wait|hold on|changed my mind|rather|never mind)\b")


def sentences(text: str) -> list[str]:
    return [p for p in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if p.strip()]


def last_sentence(text: str) -> str:
    parts = sentences(text)
    return parts[-1] if parts else ""


def asks_confirmation(text: str | None) -> bool:
    """The message ends by asking the user to approve an action: one of its last two sentences asks or requests
    ("... Shall I proceed? (yes/no)", "Please confirm if you would like to proceed."), in words of approval.
    "I have confirmed it. Anything else?" does not."""
    tail = (text or "")[-600:]  # the last two sentences are in it (long tables of details come before)
    return any(_ASKS_CONFIRMATION.search(s) and _REQUESTS.search(s) for s in sentences(normalise(tail))[-2:])


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

_ORDINAL = re.compile(r"^(\d+)(st|nd|rd|th)$")
_VALUE_TOKEN = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|#?\w[\w:-]*")


def value_tokens(text: str | None) -> list[str]:
    """Value-like tokens of a text (emails, phone numbers, ids, dates, numbers of three digits or more), normalised:
    the things a user can state wrongly."""
    found = []
    for token in _VALUE_TOKEN.findall(normalise(text)):
        token = _ORDINAL.sub(r"\1", token.strip(".-:_"))  # "20th" is the 20 of "May 20"
        if len(token) >= 3 and any(c.isdigit() for c in token):
            found.append(token)
    return found


# claims of an action done, by family: the past forms an agent uses, and the write tools (by a word of their
# name) that can do it
CLAIM_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "update": (r"updated|changed|modified|edited", ("update", "modify", "change", "edit", "exchange", "reschedule")),
    "cancel": (r"cancell?ed", ("cancel",)),
    "book": (r"booked|reserved", ("book", "schedule", "reserve", "update", "modify")),  # a change of flights books new ones
    "reschedule": (r"rescheduled|moved", ("reschedule", "update", "modify")),
    "refill": (r"refilled", ("refill",)),
    "refund": (r"refunded", ("return", "cancel", "refund", "exchange", "pay", "modify", "update")),
    "exchange": (r"exchanged", ("exchange", "modify")),
    "return": (r"returned", ("return",)),
    "pay": (r"paid", ("pay",)),
    "send": (r"sent|issued", ("send", "certificate", "issue")),
}
# "was booked" mostly tells history ("it was booked within 24 hours"), not what the agent did: not a claim
_CLAIM_LEAD = r"\b(?:i|i've|i have|we|we've|we have|has been|have been|is now|are now|successfully|now)\s+(?:\w+\s+){0,2}?"
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

# a wish is a verb after words that ask ("I want to cancel", "can you book it", "please update"), not a noun
# ("my booking", "for the update", "a change of plan", "for the return")
_WISH_FAMILIES = {
    "cancel": r"cancel|cancelling|canceling", "book": r"book|reserve", "reschedule": r"reschedule|rescheduling",
    "refill": r"refill|refilling", "return": r"return|returning|refund", "exchange": r"exchange|exchanging|swap",
    "modify": r"update|updating|modify|modifying|edit|change|changing|upgrade|downgrade",
}
_ASKING = r"\b(?:want|wants|like|need|wish|please|can you|could you|would you|help me|let's|let me|i'll|i will|go ahead and|able to)"
WISHES = {family: re.compile(rf"{_ASKING}(?:\W+\w+){{0,3}}?\W+({verbs})\b") for family, verbs in _WISH_FAMILIES.items()}
# kinds of action that doing another one involves: a change of flights books new ones, or is a rescheduling
IMPLIED = {"modify": {"book", "reschedule"}, "reschedule": {"modify", "book"}}
# what an instruction mentions, in any form: "you want the cancellation done", "you want to fly to Seattle"
_MENTIONS = {
    "cancel": r"cancel", "book": r"book|reserv|fly|flight", "reschedule": r"reschedul", "refill": r"refill",
    "return": r"return|refund", "exchange": r"exchang|swap", "modify": r"updat|chang|modif|edit|upgrad|downgrad",
}
MENTIONS = {family: re.compile(rf"\b({stems})\w*") for family, stems in _MENTIONS.items()}


def wishes(text: str | None) -> set[str]:
    """The kinds of action a user's text asks for, by their verbs (cancel, book, return, modify, ...)."""
    t = normalise(text)
    return {family for family, pattern in WISHES.items() if pattern.search(t)}


def mentions(text: str | None) -> set[str]:
    """The kinds of action a text mentions in any form (an instruction: "the cancellation", "fly", "upgrade"),
    with those they involve (:data:`IMPLIED`)."""
    t = normalise(text)
    found = {family for family, pattern in MENTIONS.items() if pattern.search(t)}
    return found.union(*(IMPLIED.get(f, set()) for f in found))


def holds_value(text: str, token: str) -> bool:
    """Whether a normalised text holds a value token as a whole ("2001" in "2001-04-12", not "2am" in "12am")."""
    return re.search(rf"(?<![\w.@]){re.escape(token)}(?![\w@])", text) is not None


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
