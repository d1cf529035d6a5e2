"""How the checks read a conversation: what the agent said to the user, its tool calls and their results,
confirmation asks and replies, value-like tokens and claims of actions done.

Everything here reads ``Episode.messages`` only (the agent's view, system prompt first), so an episode
replayed from another framework's results file, which has no ``tool_executions``, reads the same way. Text
is compared normalised as the outcome reward compares outputs: lower case, commas removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from muarl.types import CheckStatus, CheckVerdict, Evidence, Message, Task, ToolCall

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


@lru_cache(maxsize=4096, typed=True)
def verdict(check: str, status: CheckStatus, detail: str = "", value: float | None = None) -> CheckVerdict:
    """A verdict without evidence, built once per distinct content and shared (verdicts are immutable): most
    episodes get one of a few, and building a pydantic model costs more than the whole work of some checks."""
    return CheckVerdict(check=check, status=status, detail=detail, value=value)


def to_user(m: Message) -> bool:
    """An agent message the user sees: assistant text without tool calls (as the episode loop shows it)."""
    return m.role == "assistant" and not m.tool_calls and bool(m.content)


def from_user(m: Message) -> bool:
    return m.role == "user" and m.content is not None and not m.tool_calls


@dataclass(slots=True)
class AgentCall:
    """One tool call of the agent, where it was made and what it answered."""

    index: int  # the assistant message holding the call
    name: str
    raw_arguments: str
    result_index: int | None  # the tool message answering it
    result: str
    ok: bool  # ran and was not refused (the loop writes every failure as a tool message starting ``Error:``)

    _parsed: tuple[dict[str, Any] | None] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def arguments(self) -> dict[str, Any] | None:
        """The arguments as the loop ran them; None when they are not a JSON object (the loop's stricter
        checks, nesting and NaN, are the malformed-call check's business: it reads the loop's refusal).
        Parsed on first use and kept (``functools.cached_property`` takes a lock on every first use)."""
        if self._parsed is None:
            try:
                value = json.loads(self.raw_arguments) if self.raw_arguments.strip() else {}
            except (ValueError, RecursionError):
                value = None
            self._parsed = (value if isinstance(value, dict) else None,)
        return self._parsed[0]

    def identity(self) -> tuple[str, str]:
        """The call's name and arguments as written, to compare two calls."""
        return (self.name, self.raw_arguments)


class _PerMessage(dict):
    """A function of each message's text by the message's index, worked out on first use (most are never looked
    at) and kept; a dict, so that reading a kept one costs no Python call."""

    def __init__(self, messages: Sequence[Message], of: Callable[[str | None], Any]):
        super().__init__()
        self.messages = messages
        self.of = of

    def __missing__(self, index: int) -> Any:
        value = self[index] = self.of(self.messages[index].content)
        return value


class EpisodeView:
    """What the checks read of one episode's messages, worked out in one pass and shared by all of them (they
    run one after the other on the same list): the agent's calls, who said what where, each message's
    normalised text and whether it asks for confirmation, both on first use (most are never looked at)."""

    def __init__(self, messages: Sequence[Message]):
        self.messages = messages
        self.length = len(messages)
        self.calls: list[AgentCall] = []
        self.said: list[int] = []  # indices of the agent's messages to the user (:func:`to_user`)
        self.heard: list[int] = []  # indices of the user's messages (:func:`from_user`)
        self.turns: list[int] = []  # indices of every assistant message
        self.texts = _PerMessage(messages, normalise)  # each message's text, normalised
        self.asks = _PerMessage(messages, asks_confirmation)  # whether it asks for confirmation (:func:`asks_confirmation`)
        turns, said, heard, agent_calls = self.turns, self.said, self.heard, self.calls
        last = len(messages) - 1
        for i, m in enumerate(messages):
            role = m.role
            if role == "assistant":
                turns.append(i)
                calls = m.tool_calls
                if not calls:
                    if m.content:
                        said.append(i)
                elif len(calls) == 1 and i < last and (reply := messages[i + 1]).role == "tool" and reply.tool_call_id == calls[0].id:
                    # the usual case, taken without a search or a call of _add (a fifth of the reading): one call,
                    # answered by the next message
                    result = reply.content or ""
                    agent_calls.append(AgentCall(i, calls[0].name, calls[0].arguments, i + 1, result, not result.startswith("Error")))
                else:
                    self._pair_calls(i, calls)
            elif role == "user" and m.content is not None and not m.tool_calls:
                heard.append(i)

    def _pair_calls(self, i: int, calls: list[ToolCall]) -> None:
        """The calls of the assistant message at ``i``, each paired with the tool message that answers it (by id
        among the tool messages that follow and are not yet paired, else by position)."""
        messages = self.messages
        end = i + 1
        while end < len(messages) and messages[end].role == "tool":
            end += 1
        replies = range(i + 1, end)
        matches: list[int | None] = list(replies[:len(calls)])  # the usual case: answered in order, each by its id
        if len(matches) < len(calls) or any(messages[r].tool_call_id != call.id for r, call in zip(replies, calls)):
            matches, unused = [], list(replies)
            for k, call in enumerate(calls):
                match = next((r for r in unused if messages[r].tool_call_id == call.id), None)
                if match is None and k < len(replies) and replies[k] in unused:
                    match = replies[k]
                if match is not None:
                    unused.remove(match)
                matches.append(match)
        for call, match in zip(calls, matches):
            self._add(i, call, match)

    def _add(self, i: int, call: ToolCall, match: int | None) -> None:
        result = (self.messages[match].content or "") if match is not None else ""
        self.calls.append(AgentCall(i, call.name, call.arguments, match, result, match is not None and not result.startswith("Error")))

    _last: EpisodeView | None = None

    @classmethod
    def of(cls, messages: Sequence[Message]) -> EpisodeView:
        """The view of ``messages``, kept for the next check (a new list, or one grown since, gets a new view)."""
        view = cls._last
        if view is None or view.messages is not messages or view.length != len(messages):
            view = cls._last = cls(messages)
        return view


def writes_that_ran(view: EpisodeView, write_tools: frozenset[str]) -> list[AgentCall]:
    """The agent's calls of ``write_tools`` that ran unrefused: the ones that changed the state."""
    return [c for c in view.calls if c.ok and c.name in write_tools]


def agent_calls(messages: Sequence[Message]) -> list[AgentCall]:
    """Every tool call the agent made, paired with the tool message that answers it (by id among the messages
    that follow, else by position)."""
    return EpisodeView.of(messages).calls


def leaf_values(value: Any) -> list[str]:
    """The scalar values of a JSON-like value (strings and numbers, not booleans or null), as text, in order."""
    found: list[str] = []
    _collect_leaves(value, found)
    return found


def _collect_leaves(value: Any, found: list[str]) -> None:
    if isinstance(value, str):
        if value.strip():
            found.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_leaves(v, found)
    elif isinstance(value, list):
        for v in value:
            _collect_leaves(v, found)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        found.append(str(value))


# ---------------------------------------------------------------- asks and replies

class _Words:
    """A pattern of alternative words, with literal strings of which every match holds one: most texts hold
    none, and looking for a few strings is far cheaper than a regular-expression search (the checks run on
    every episode)."""

    def __init__(self, pattern: str, needles: tuple[str, ...]):
        self.pattern = re.compile(pattern)
        self.needles = needles

    def may_match(self, text: str) -> bool:
        for needle in self.needles:
            if needle in text:
                return True
        return False

    def search(self, text: str) -> re.Match[str] | None:
        return self.pattern.search(text) if self.may_match(text) else None


_ASKS_CONFIRMATION = _Words(
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like|do you want|is that correct|is that right"
    r"|does (?:this|that|everything) look|yes or no|yes/no)\b",
    ("confirm", "proceed", "go ahead", "shall i", "should i", "would you like", "do you want", "is that", "does ", "yes or no", "yes/no"),
)
_REQUEST_WORDS = _Words(r"\b(please|let me know|kindly)\b", ("please", "let me know", "kindly"))


def _requests(text: str) -> bool:
    """A question mark, or words that ask ("please", "let me know", "kindly")."""
    return "?" in text or _REQUEST_WORDS.search(text) is not None
_CLOSING_QUESTION = re.compile(r"\b(anything else|something else|any other|anything more|further questions|else i can)\b")
_AFFIRMS = _Words(
    r"\b(yes|yeah|yep|yup|sure|correct|confirm|confirmed|go ahead|please do|proceed|ok|okay|that's right|that is right|sounds good|do it)\b",
    ("ye", "yup", "sure", "correct", "confirm", "go ahead", "please do", "proceed", "ok", "right", "sounds good", "do it"),
)
_DENIES = _Words(
    r"\b(no|nope|not|don't|do not|instead|actually|wait|hold on|changed my mind|rather|never mind)\b",
    ("no", "don't", "do not", "instead", "actually", "wait", "hold on", "changed my mind", "rather", "never mind"),
)


# a sentence ends at white space after . ! or ?, or at a line break (the look-ahead only lets the search skip
# the positions where neither can start)
_SENTENCE_BREAK = re.compile(r"(?=\s)(?:(?<=[.!?])\s+|\n+)")


def sentences(text: str) -> list[str]:
    return [p for p in _SENTENCE_BREAK.split(text.strip()) if p.strip()]


def last_sentences(text: str, n: int) -> list[str]:
    """``sentences(text)[-n:]``, splitting only the end of a long text. Breaks are runs of white space, so cut
    at a character that is not one the breaks after it are the same; the first sentence of the cut text may be
    a part of one, so it needs more than ``n``."""
    text = text.strip()
    window = 64
    while True:
        start = len(text) - window
        while 0 < start < len(text) and text[start].isspace():
            start += 1
        if start <= 0:
            return sentences(text)[-n:]
        found = sentences(text[start:])
        if len(found) > n:
            return found[-n:]
        window *= 2


def last_sentence(text: str) -> str:
    parts = last_sentences(text, 1)
    return parts[-1] if parts else ""


def asks_confirmation(text: str | None) -> bool:
    """The message ends by asking the user to approve an action: one of its last two sentences asks or requests
    ("... Shall I proceed? (yes/no)", "Please confirm if you would like to proceed."), in words of approval.
    "I have confirmed it. Anything else?" does not."""
    tail = normalise((text or "")[-600:])  # the last two sentences are in it (long tables of details come before)
    if not (_ASKS_CONFIRMATION.may_match(tail) and ("?" in tail or _REQUEST_WORDS.may_match(tail))):
        return False  # no sentence of it can ask
    return any(_ASKS_CONFIRMATION.search(s) and _requests(s) for s in last_sentences(tail, 2))


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
_ANY_CLAIM_VERB = _Words(r"\b(" + "|".join(verbs for verbs, _ in CLAIM_FAMILIES.values()) + r")\b",
                         ("updated", "changed", "modified", "edited", "cancel", "booked", "reserved", "rescheduled", "moved",
                          "refilled", "refunded", "exchanged", "returned", "paid", "sent", "issued"))
_CLAIM_BREAK = re.compile(r"(?=\s)(?:(?<=[.!?;])\s+|\n+)")
_NEGATED = re.compile(r"\b(not|never|unable|cannot|can't|couldn't|won't|wasn't|weren't|hasn't|haven't|didn't|failed)\b|n't\b")


def may_claim(texts: Iterable[str]) -> bool:
    """Whether any of these normalised texts may claim an action (holds a word a claim needs): False rules
    out every :func:`action_claims` at once."""
    return _ANY_CLAIM_VERB.may_match("\n".join(texts))  # no claim word holds a line break


def action_claims(text: str | None) -> list[tuple[str, str]]:
    """(family, sentence) for each sentence of an agent's message that says an action was done: not a question,
    not negated ("could not be cancelled"), not a plan ("I will update")."""
    claims: list[tuple[str, str]] = []
    text = normalise(text)
    if not _ANY_CLAIM_VERB.search(text):
        return claims
    for sentence in _CLAIM_BREAK.split(text):
        # every claim pattern ends in one of the verbs: a sentence without any claims nothing
        if "?" in sentence or not _ANY_CLAIM_VERB.search(sentence) or _NEGATED.search(sentence):
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
