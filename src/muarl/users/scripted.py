"""A deterministic user that needs no model: it answers from the task's structured requests.

It opens with its first request, and then reacts to what the agent says, by keywords, in this order of
precedence: a request to identify (gives its email, or else its name and date of birth), a request to
confirm (says yes; but asked to approve a change while its current request is a question, it says no and
asks its question again, as the person it plays would), questions about details of the current request
(answers only what was asked), a report that the request was done or refused, or the expected answer of a
question (moves to the next request, or says ``###STOP###`` after the last). Anything else gets the request
restated, and so does being asked again for details it already gave; after ``patience`` restatements it gives
up on that request.

A request with a ``revision`` is a change of mind: the first time the agent asks to confirm it, the user says
the revision instead of yes, and the revised details hold from then on (its restatements and answers use
them). The *cooperative* user (``scripted:cooperative``) has made up its mind before it calls: it words every
such request with the revised details from the start and never changes them. It is the user a cold start's
demonstrations can be synthesised against, while RL and evaluation face the one that changes its mind.

Phrasing varies with the episode seed, so RL sees more than one wording: the greetings and replies, and each
request's wording when the task gives ``variants`` of it (drawn from a random stream of their own, so tasks
without variants are worded exactly as before). A user whose opening already states its email counts as
identified.

For tasks without structured requests (τ-bench's), it is the "confirming user": it opens with its
instruction, says yes to every confirmation and stops at anything else. For tasks with a fixed ``script``
(BFCL's multi-turn entries, whose user turns are data), it is the replaying user: it says the script's
messages in order, one each time the agent replies in text, and stops after the last.

Given tools of its own (a dual-control world: τ² telecom's phone), it opens with its goal (why it calls and who
it is) and does what the agent asks on its device: every one of its tools the agent's message names is called,
with the arguments written after the name as a JSON object (``toggle_data()``,
``grant_app_permission({"app_name": "messaging", "permission": "sms"})``), else with the arguments of the task's
own user action of that name, else with none. It then tells the agent what its tools answered, and otherwise
behaves as above.

For tasks whose user is absent (``UserScenario.absent``: ACEBench's multi-step entries), it opens with its
instruction and then answers every text message of the agent with the task's one line (ACEBench's "do not ask
me, carry on"), until the agent's message holds the task's end phrase ("finish conversation").
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

from muarl.types import Message, Task, ToolCall, ToolSpec, UserRequest
from muarl.users.base import STOP, UserSession, UserSimulator, UserTurn

_IDENTITY = re.compile(r"\b(e-?mail|full name|your name|date of birth|birth ?date|verify|identify|identity|authenticate)\b")
_CONFIRM = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like me to|do you want me to|is that correct|is that right|yes or no|yes/no)\b"
)
_DONE = re.compile(r"\b(done|completed|successfully|all set|has been|have been|is now|are now|i've|i have (booked|cancelled|canceled|moved|updated|refilled|processed|requested|changed))\b")
_CHANGE = re.compile(r"\b(updat|chang|modif|set|book|cancel|reschedul|mov|refill|delet|remov|replac|add)\w*\b")
_REFUSED = re.compile(r"\b(cannot|can't|can not|unable|not able|not possible|not allowed|sorry|unfortunately|won't be able)\b")
_FACT_KEYWORDS = {
    "doctor": r"\b(doctor|physician|provider|dr\.?|who)\b",
    "specialty": r"\b(specialty|speciality|kind of doctor|type of doctor|department)\b",
    "time": r"\b(time|when|date|day|slot)\b",
    "reason": r"\b(reason|purpose|why|what for)\b",
    "appointment": r"\b(which appointment|what appointment|appointment)\b",
    "medication": r"\b(medication|medicine|prescription|drug|which one)\b",
    "email": r"\b(e-?mail)\b",
    "phone": r"\b(phone|number)\b",
    "address": r"\b(address|street|city|zip)\b",
    "payment": r"\b(card|payment|pay with|method)\b",
    "amount": r"\b(amount|how much)\b",
}
_YES = ["Yes, please go ahead.", "Yes, that's right.", "Yes.", "Correct, please do it.", "Yes, I confirm."]
_THANKS_NEXT = ["Thank you. Also, {text}", "Great, thanks. One more thing: {text}", "Okay. {text}", "Thanks! Next, {text}"]
_BYE = ["Thank you, that's all I needed. " + STOP, "Great, that's everything. Goodbye! " + STOP, "Thanks for your help. " + STOP]


def _normalise(text: str) -> str:
    return text.lower().replace(",", "")


def asks_to_confirm(text: str) -> bool:
    """Whether the scripted user takes an agent's message as a request to confirm (it then says yes, or changes
    its mind)."""
    return bool(_CONFIRM.search(_normalise(text)))


class ScriptedUserSession(UserSession):
    def __init__(self, task: Task, seed: int, patience: int = 2, max_turns: int = 40, tools: Sequence[ToolSpec] = (),
                 cooperative: bool = False):
        self.task = task
        self.tools = _tool_pattern(tools)
        self.calls = 0
        self.rng = random.Random(f"{task.id}/{seed}")
        self.requests: list[UserRequest] = list(task.user.requests)
        wording = random.Random(f"{task.id}/{seed}/wording")
        self.wordings = [wording.choice([r.text, *r.variants]) if r.variants else r.text for r in self.requests]
        if cooperative:  # the same wording, with the revised details
            for i in range(len(self.requests)):
                self._revise(i)
        self.current = 0
        email = task.user.known_info.get("email")
        self.identified = bool(email and self.wordings and email in self.wordings[0])
        self.restated = 0
        self.given: set[str] = set()  # details of the current request already told
        self.patience = patience
        self.turns_left = max_turns

    def _say(self, options: list[str], **values: str) -> str:
        return self.rng.choice(options).format(**values)

    async def reply(self, history: list[Message]) -> UserTurn:
        self.turns_left -= 1
        if not history or all(m.role != "user" for m in history):
            return UserTurn(text=self._opening())
        if history[-1].role == "tool":  # its own tools answered: tell the agent what they said
            return UserTurn(text=_report(history))
        calls = self._asked_to_act(history[-1].content or "")
        if calls:
            return UserTurn(text="", tool_calls=calls)
        said = _normalise(history[-1].content or "")
        if self.turns_left <= 0:
            return UserTurn(text="I have to go now. " + STOP, done="user_stop")
        if not self.requests:
            return self._confirming_user(said)
        text = self._react(said)
        return UserTurn(text=text, done="user_stop" if STOP in text else None)

    def _asked_to_act(self, said: str) -> list[ToolCall]:
        """Calls of its own tools that the agent's message asks for (see the module docstring)."""
        if self.tools is None:
            return []
        calls = []
        for match in self.tools.finditer(said):
            name, written = match.group(1), match.group(2)
            arguments = _json_object(written) if written else None
            if arguments is None:
                gold = next((a for a in self.task.actions if a.requestor == "user" and a.name == name), None)
                arguments = gold.kwargs if gold else {}
            self.calls += 1
            calls.append(ToolCall(id=f"user_call_{self.calls}", name=name, arguments=json.dumps(arguments)))
        return calls

    def _opening(self) -> str:
        if not self.requests:
            return (self.tools is not None and self.task.user.goal) or self.task.user.instruction
        return self._say(["Hi. {text}", "Hello! {text}", "Hi there, {text}"], text=self.wordings[0])

    def _confirming_user(self, said: str) -> UserTurn:
        if _CONFIRM.search(said):
            return UserTurn(text="Yes.")
        return UserTurn(text=self._say(_BYE), done="user_stop")

    def _identity(self) -> str:
        known = self.task.user.known_info
        if "email" in known and not self.identified:
            text = f"Sure, my email is {known['email']}."
        else:
            text = f"My name is {known['name']} and my date of birth is {known['date_of_birth']}."
        self.identified = True
        return text

    def _asked(self, request: UserRequest, text: str) -> list[str]:
        return [k for k, pattern in _FACT_KEYWORDS.items() if k in request.facts and re.search(pattern, text)]

    def _react(self, said: str) -> str:
        request = self.requests[self.current]
        asked = self._asked(request, said)
        # the closing sentence decides between "a question about a detail" and "a report": a refusal that names
        # the prescription ("that prescription cannot be refilled. anything else?") is a report, not a question
        tail = re.split(r"(?<=[.!])\s+", said.strip())[-1]
        asked_now = self._asked(request, tail) if "?" in tail else []
        if _IDENTITY.search(said) and (not self.identified or not asked):
            return self._identity()
        if _CONFIRM.search(said):
            if request.outcome == "answered" and _CHANGE.search(said):
                return self._decline_change(request, said)
            if request.revision is not None:
                return self._change_mind()
            return self._say(_YES)
        if asked_now:
            return self._facts(request, asked_now)
        answered = _holds_answer(request, said)
        if answered or (request.outcome != "answered" and (_DONE.search(said) or _REFUSED.search(said))):
            return self._advance()
        if asked:
            return self._facts(request, asked)
        if self._out_of_patience():
            return self._advance(gave_up=True)
        details = " ".join(f"The {k} is {v}." for k, v in request.facts.items())
        return f"Let me repeat: {self.wordings[self.current]} {details}".strip()

    def _decline_change(self, request: UserRequest, said: str) -> str:
        """Asked to approve a change while its request is a question: it never says yes to a write it did not ask
        for (a yes would let an invented value land). The answer, if the message holds it, still counts; a
        declined proposal is otherwise a restatement, so an agent that keeps proposing runs out its patience."""
        if _holds_answer(request, said):
            return self._advance()
        if self._out_of_patience():
            return self._advance(gave_up=True)
        return f"No, please don't change anything. {self.wordings[self.current]}"

    def _revise(self, i: int) -> None:
        """Request ``i`` from now on as revised: its wording and details with the new values."""
        request = self.requests[i]
        if request.revision is not None:
            self.wordings[i] = request.model_copy(update={"text": self.wordings[i], "variants": []}).revised().text
            self.requests[i] = request.revised()

    def _change_mind(self) -> str:
        revision = self.requests[self.current].revision
        assert revision is not None
        self._revise(self.current)
        self.given = set()  # the revised details are new: being asked for them again is no repeat
        return self.rng.choice([revision.text, *revision.variants])

    def _facts(self, request: UserRequest, keys: list[str]) -> str:
        """The asked details; being asked again for details already given counts against ``patience``, or an
        agent that keeps asking would hold the user in a loop until the turn limit."""
        if set(keys) <= self.given and self._out_of_patience():
            return self._advance(gave_up=True)
        self.given.update(keys)
        return " ".join(f"The {k} is {request.facts[k]}." for k in keys)

    def _out_of_patience(self) -> bool:
        """Counts one more restatement of the current request; True once there have been more than ``patience``."""
        self.restated += 1
        return self.restated > self.patience

    def _advance(self, gave_up: bool = False) -> str:
        self.current += 1
        self.restated = 0
        self.given = set()
        prefix = "Never mind that. " if gave_up else ""
        if self.current >= len(self.requests):
            return prefix + self._say(_BYE)
        return prefix + self._say(_THANKS_NEXT, text=self.wordings[self.current])


class AbsentUserSession(UserSession):
    """Opens with the instruction, then says ``task.user.absent.reply`` to anything but the end phrase."""

    def __init__(self, task: Task):
        self.instruction = task.user.instruction
        assert task.user.absent is not None
        self.absent = task.user.absent

    async def reply(self, history: list[Message]) -> UserTurn:
        if not history or all(m.role != "user" for m in history):
            return UserTurn(text=self.instruction)
        if self.absent.end in (history[-1].content or ""):
            return UserTurn(text=STOP, done="user_stop")
        return UserTurn(text=self.absent.reply)


class ReplayingUserSession(UserSession):
    """Says ``task.user.script`` one message per reply, then stops: the user turns are the data's, not a reaction."""

    def __init__(self, task: Task):
        self.script = list(task.user.script)
        self.said = 0

    async def reply(self, history: list[Message]) -> UserTurn:
        if self.said >= len(self.script):
            return UserTurn(text=STOP, done="user_stop")
        self.said += 1
        return UserTurn(text=self.script[self.said - 1])


def _holds_answer(request: UserRequest, said: str) -> bool:
    """Whether the agent's (normalised) message holds the fact a question request waits to hear."""
    return request.answer is not None and _normalise(request.answer) in said


def _tool_pattern(tools: Sequence[ToolSpec]) -> re.Pattern[str] | None:
    """Matches a tool's name, and the JSON object written in parentheses after it, if any."""
    if not tools:
        return None
    names = "|".join(re.escape(t.name) for t in sorted(tools, key=lambda t: -len(t.name)))
    return re.compile(rf"\b({names})\b(?:\((\{{.*?\}})?\))?")


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _report(history: list[Message]) -> str:
    """What the user's latest tool calls answered, in one message to the agent."""
    results = []
    for m in reversed(history):
        if m.role != "tool":
            break
        results.append(f"{m.name}: {m.content}")
    return "I did that on my phone. " + " / ".join(reversed(results))


class ScriptedUser(UserSimulator):
    """Deterministic user for offline runs and tests (see the module docstring)."""

    name = "scripted"

    def __init__(self, patience: int = 2, max_turns: int = 40, cooperative: bool = False):
        self.patience = patience
        self.max_turns = max_turns
        self.cooperative = cooperative
        if cooperative:
            self.name = "scripted:cooperative"

    @property
    def settings(self) -> dict[str, Any]:
        return {"patience": self.patience, "max_turns": self.max_turns, "cooperative": self.cooperative}

    def new_session(self, task: Task, seed: int, tools: Sequence[ToolSpec] = ()) -> UserSession:
        if task.user.script:
            return ReplayingUserSession(task)
        if task.user.absent is not None:
            return AbsentUserSession(task)
        return ScriptedUserSession(task, seed, self.patience, self.max_turns, tools, self.cooperative)
