"""A scripted user that leaves its instruction on purpose, at a seeded rate, and records every time it does.

It is the ground truth the failure attribution is measured against (bench/attribution.py): run the oracle agent
with it, and the faults it injected are exactly the user's faults in those episodes. Each reply after the
opening (and the opening itself, for the faults that can happen there) is, with probability ``rate``, replaced
or changed by one fault drawn from those of ``kinds`` that fit the moment:

- ``stop``: ends the conversation (``###STOP###``) instead of replying;
- ``withhold``: asked a question whose answer states a detail, says it would rather not say, and from then on
  never gives that detail;
- ``wrong_value``: a value it states (an email, a phone number, an id, a date) comes out with a digit changed;
- ``invent``: adds a request for a kind of action its instruction never mentions;
- ``ignore_confirmation``: asked to confirm, talks of something else.

Faults are drawn from a random stream of the episode seed of their own, so the same seed gives the same faults,
and each is returned with the reply (``UserTurn.fault``) for the episode loop to record in
``Episode.injected_faults``. Spec: ``scripted:faulty[:RATE[:KIND,KIND...]]`` (rate 0.2, every kind by default).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import get_args

from muarl.checks.conversation import instruction_text, mentions
from muarl.types import Message, Task, ToolSpec, UserFault
from muarl.users.base import STOP, UserSession, UserTurn
from muarl.users.scripted import ScriptedUser, ScriptedUserSession, asks_to_confirm

FAULT_KINDS: tuple[str, ...] = get_args(UserFault.model_fields["kind"].annotation)
# its own reading of values and answers, independent of the attribution rules it is the ground truth for
_VALUE = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|[\w#-]*\d[\w-]*")
_GIVES_DETAILS = re.compile(r"^(The \w+ is |Sure, my email is |My name is )")
_REFUSE = "I'd rather not say that."
_INVENTED = {"cancel": "cancel", "book": "book", "reschedule": "reschedule", "refill": "refill", "return": "return",
             "exchange": "exchange", "modify": "update"}


def parse_faulty_spec(spec: str) -> tuple[float, tuple[str, ...]]:
    """(rate, kinds) of a ``scripted:faulty[:RATE[:KINDS]]`` spec; ValueError saying what to change."""
    parts = spec.split(":")[2:]
    try:
        rate = float(parts[0]) if parts and parts[0] else 0.2
    except ValueError:
        raise ValueError(f"bad fault rate {parts[0]!r} in {spec!r}: use scripted:faulty:RATE with RATE in [0, 1]") from None
    if not 0 <= rate <= 1:
        raise ValueError(f"fault rate {rate} in {spec!r} is not in [0, 1]")
    kinds = tuple(k for k in parts[1].split(",") if k) if len(parts) > 1 else FAULT_KINDS
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown or len(parts) > 2:
        raise ValueError(f"bad fault kinds in {spec!r}: choose among {', '.join(FAULT_KINDS)}")
    return rate, kinds


class FaultySession(UserSession):
    def __init__(self, inner: UserSession, task: Task, seed: int, rate: float, kinds: Sequence[str]):
        self.inner = inner
        self.rng = random.Random(f"{task.id}/{seed}/faults")
        self.rate, self.kinds = rate, tuple(kinds)
        self.given = instruction_text(task)
        self.unasked = [family for family in _INVENTED if family not in mentions(self.given)]
        self.details = {v for v in task.user.known_info.values()} | {v for r in task.user.requests for q in (r, r.revised())
                                                                       for v in q.facts.values()}
        self.withheld: set[str] = set()  # details it refused to give: it never gives them

    async def reply(self, history: list[Message]) -> UserTurn:
        turn = await self.inner.reply(history)
        if any(v in turn.text for v in self.withheld):  # still withholding: the same fault, not a new one
            return UserTurn(text=_REFUSE, usage=turn.usage)
        if turn.tool_calls or turn.done is not None or self.rng.random() >= self.rate:
            return turn
        opening = all(m.role != "user" for m in history)
        agent = history[-1].content if history and history[-1].role == "assistant" else None
        faults = {kind: fault for kind in self.kinds if (fault := self._fault(kind, turn.text, agent, opening)) is not None}
        if not faults:
            return turn
        kind = self.rng.choice(sorted(faults))
        text, detail = faults[kind]
        if kind == "withhold":
            self.withheld |= {v for v in self.details if v in turn.text}
        return UserTurn(text=text, done="user_stop" if STOP in text else None, usage=turn.usage,
                        fault=UserFault(kind=kind, index=-1, detail=detail))  # type: ignore[arg-type]

    def _fault(self, kind: str, text: str, agent: str | None, opening: bool) -> tuple[str, str] | None:
        """The faulty reply of this kind and what it did, or None when the kind does not fit this moment."""
        if kind == "stop" and not opening:
            return f"I have to go now. {STOP}", "stopped before its requests were done"
        confirming = agent is not None and asks_to_confirm(agent)
        if kind == "withhold" and not opening and not confirming and _GIVES_DETAILS.match(text):
            return _REFUSE, "refused to give a detail it holds, and never gives it"
        if kind == "ignore_confirmation" and not opening and confirming:
            return "Hmm, let me think about it. Tell me more about your services first.", "talked of something else when asked to confirm"
        if kind == "wrong_value":
            held = [t for t in _VALUE.findall(text) if len(t) >= 3 and t.lower() in self.given]
            if held:
                token = self.rng.choice(held)
                wrong = _changed_digit(token, self.rng)
                for _ in range(10):  # a value the instruction does not hold elsewhere
                    if wrong.lower() not in self.given:
                        break
                    wrong = _changed_digit(token, self.rng)
                else:
                    return None
                return re.sub(rf"(?<![\w.@#-]){re.escape(token)}(?![\w@-])", wrong, text, count=1), f"said {wrong!r} for {token!r}"
        if kind == "invent" and self.unasked:
            family = self.rng.choice(self.unasked)
            return f"{text} Also, I want to {_INVENTED[family]} my other one too.".strip(), f"asked to {family}"
        return None


def _changed_digit(token: str, rng: random.Random) -> str:
    positions = [i for i, c in enumerate(token) if c.isdigit()]
    i = rng.choice(positions)
    return token[:i] + str((int(token[i]) + rng.randrange(1, 10)) % 10) + token[i + 1:]


class FaultyUser(ScriptedUser):
    """The scripted user, leaving its instruction at ``rate`` in the ways ``kinds`` name (see the module docstring)."""

    def __init__(self, rate: float = 0.2, kinds: Sequence[str] = FAULT_KINDS, **options):
        super().__init__(**options)
        self.rate, self.kinds = rate, tuple(kinds)
        self.name = f"scripted:faulty:{rate:g}:{','.join(self.kinds)}"

    def new_session(self, task: Task, seed: int, tools: Sequence[ToolSpec] = ()) -> UserSession:
        inner = super().new_session(task, seed, tools)
        if not isinstance(inner, ScriptedUserSession):  # a script or an absent user: nothing of its own to leave
            return inner
        return FaultySession(inner, task, seed, self.rate, self.kinds)
