"""Whose fault: one label per failed or errored episode, by rules that are cheap and reproducible.

- ``infra``: the episode errored (a model, user or tool server failed after its retries); it has no reward.
- ``task``: the task's gold actions do not run (its gold end state cannot be reached as written).
- ``user``: the simulated user left its instruction (:func:`user_faults`); the first such fault is the evidence.
- ``agent``: everything else; the evidence is the first failed check of :data:`BLAMING`, or else (no rule
  decided: ``source`` is ``default``) what the outcome reward missed. Those are what an LLM judge (:mod:`muarl.evals.attribution_judge`)
  is asked about.

The user-fault rules compare what the user said with what it was given to say (:func:`instruction_text`: its
instruction, identity and every wording of its structured requests) and with what the agent asked:

- ``stop``: it ended the conversation while the agent waited for an answer (a confirmation or a question other
  than "anything else?"), or before it had stated every one of its structured requests;
- ``withhold``: asked for a detail it holds (by the detail's name, in a sentence that asks), it answered with no
  value at all and never gave that detail later;
- ``wrong_value``: it stated a value (an email, a phone number, an id, a date, a number) that neither its
  instruction nor the agent's messages hold: a fact its instruction does not give, or one contradicting it;
- ``invent``: it asked for a kind of action (cancel, book, return, modify, ...) that neither its instruction nor the
  agent mentioned before;
- ``ignore_confirmation``: asked to approve an action ("confirm", "proceed"), it neither agreed, nor refused, nor
  changed what it asked for, nor asked back or spoke of what it was asked (a reply that negotiates is an answer).

They read words, not meaning: an LLM user paraphrasing "modify" as "switch" passes unseen, and one echoing a
value the agent said in another form counts as stating a new one.
"""

from __future__ import annotations

import re

from muarl.checks.conversation import (
    affirms, asks_confirmation, asks_question, denies, evidence, from_user, holds_value, instruction_text, mentions, normalise, sentences, to_user, value_tokens, wishes,
)
from muarl.domains.base import Domain, GoldReplayError
from muarl.types import Attribution, CheckVerdict, Episode, Evidence, Message, Task, UserFault
from muarl.users.base import OUT_OF_SCOPE, STOP, TRANSFER

# the checks whose failure is the agent's own misconduct, in the order they explain a failure best (using more turns
# than the oracle does not say why a task failed: alone, it leaves the label to the default)
BLAMING = ("grounded_actions", "grounded_facts", "confirmed_before_write", "malformed_calls", "repeated_calls", "turn_limit")

# names of the details a user holds, as an agent asks for them
_DETAIL_WORDS = {"date_of_birth": r"birth", "name": r"name", "email": r"e-?mail", "phone": r"phone", "user_id": r"user id",
                 "zip": r"zip", "address": r"address"}
_APPROVAL = re.compile(r"\b(confirm|proceed|go ahead|yes/no|yes or no)\b")  # approval of an action, not any offer
_ASKS_FOR = re.compile(r"\?|\b(please|need|provide|share|give|tell)\b")  # a sentence that asks for something
_WORDS = re.compile(r"[a-z]{6,}")  # content words, to see whether a reply is about what was asked
_REVISES = re.compile(r"\b(instead|actually|rather|changed my mind|not that|make it|use)\b")


def _stops(text: str | None) -> bool:
    return any(token in (text or "") for token in (STOP, TRANSFER, OUT_OF_SCOPE))


def _previous_to_user(messages: list[Message], index: int) -> int | None:
    return next((i for i in range(index - 1, -1, -1) if to_user(messages[i])), None)


def user_faults(domain: Domain, task: Task, episode: Episode) -> list[UserFault]:
    """Every way the user left its instruction, in the order it happened (at most one per user message)."""
    messages = episode.messages
    given = instruction_text(task)
    allowed_wishes = mentions(given)
    # a request is stated when one of its wordings, or one of its details, is said (an LLM user words it its own way)
    requests = [[normalise(w) for r in (req, req.revised()) for w in (r.text, *r.variants, *r.facts.values()) if w.strip()]
                for req in task.user.requests]
    stated = [False] * len(requests)
    heard = ""  # what the agent has said to the user so far
    faults: list[UserFault] = []
    for i, m in enumerate(messages):
        if to_user(m):
            heard += "\n" + normalise(m.content)
            continue
        if not from_user(m):
            continue
        said = normalise(m.content)
        for k, wordings in enumerate(requests):
            stated[k] = stated[k] or any(w in said for w in wordings)
        asked = _previous_to_user(messages, i)
        ask = messages[asked].content if asked is not None else None
        fault = _fault(i, said, m.content, ask, given + heard, allowed_wishes | mentions(heard), stated)
        if fault is None and asked is not None and asks_question(ask) and not asks_confirmation(ask):
            fault = _withheld(i, ask, said, messages[i + 1:], task)
        if fault is not None:
            faults.append(fault)
    return faults


def _fault(i: int, said: str, raw: str | None, ask: str | None, known: str, allowed_wishes: set[str],
           stated: list[bool]) -> UserFault | None:
    if _stops(raw):
        if ask is not None and (asks_confirmation(ask) or asks_question(ask)):
            return UserFault(kind="stop", index=i, detail="ended the conversation while the agent waited for an answer")
        if not all(stated):
            missing = stated.index(False)
            return UserFault(kind="stop", index=i, detail=f"ended the conversation before stating request {missing + 1}")
    new = [t for t in value_tokens(said) if not holds_value(known, t)]
    if new:
        return UserFault(kind="wrong_value", index=i, detail=f"stated {new[0]!r}, which its instruction does not hold")
    invented = wishes(said) - allowed_wishes
    if invented:
        return UserFault(kind="invent", index=i, detail=f"asked to {sorted(invented)[0]}, which its instruction never mentions")
    if ask is not None and asks_confirmation(ask) and _APPROVAL.search(normalise(ask)) and not _stops(raw):
        engaged = "?" in said or set(_WORDS.findall(said)) & set(_WORDS.findall(normalise(ask)))  # a counter-question, or about the ask
        if not (affirms(said) or denies(said) or _REVISES.search(said) or value_tokens(said) or engaged):
            return UserFault(kind="ignore_confirmation", index=i, detail="asked to confirm, neither agreed, refused nor changed its request")
    return None


def _withheld(i: int, ask: str | None, said: str, later: list[Message], task: Task) -> UserFault | None:
    """Asked for a detail it holds, the user answered with none of its details and no other value, and never
    gave that detail afterwards."""
    if value_tokens(said) or affirms(said):
        return None
    held: dict[str, set[str]] = {key: {normalise(v)} for key, v in task.user.known_info.items()}
    for request in task.user.requests:
        for key, value in (*request.facts.items(), *request.revised().facts.items()):
            held.setdefault(key, set()).add(normalise(value))
    if any(v and v in said for values in held.values() for v in values):
        return None
    question = " ".join(s for s in sentences(normalise(ask)) if _ASKS_FOR.search(s))  # where it asks, not all it says
    told_later = " ".join(normalise(m.content) for m in later if from_user(m))
    for key, values in held.items():
        word = _DETAIL_WORDS.get(key, re.escape(key.replace("_", " ")))
        if re.search(rf"\b{word}", question) and not any(v and v in told_later for v in values):
            return UserFault(kind="withhold", index=i, detail=f"asked for its {key}, which it holds, and never gave it")
    return None


def attribute(domain: Domain, task: Task, episode: Episode, checks: list[CheckVerdict] | None = None) -> Attribution | None:
    """The label of a failed or errored episode (None for a solved one); ``checks``: its verdicts, for the evidence
    of an ``agent`` label (computed by :func:`muarl.checks.run_checks` if not given)."""
    if episode.errored:
        return Attribution(label="infra", reason=f"errored: {episode.error or 'unknown error'}"[:300])
    if episode.reward is None or episode.reward.success:
        return None
    try:
        domain.gold_hash(task)
    except GoldReplayError as exc:
        return Attribution(label="task", reason=f"the gold actions do not run: {exc}"[:300])
    faults = user_faults(domain, task, episode)
    if faults:
        first = faults[0]
        return Attribution(label="user", reason=f"{first.kind}: {first.detail}", evidence=[evidence(episode.messages, first.index)],
                           user_faults=faults)
    if checks is None:
        from muarl.checks import run_checks

        checks = run_checks(domain, task, episode)
    failed = next((v for name in BLAMING for v in checks if v.check == name and v.status == "fail"), None)
    if failed is not None:
        return Attribution(label="agent", reason=f"{failed.check}: {failed.detail}"[:300], evidence=failed.evidence)
    return Attribution(label="agent", reason=_outcome_miss(episode), evidence=_last_agent(episode), source="default")


def _outcome_miss(episode: Episode) -> str:
    reward = episode.reward
    missing = [o for o, found in (reward.outputs_found if reward else {}).items() if not found]
    if reward is not None and not reward.state_match:
        return "the final state differs from the gold one"
    if missing:
        return f"required output {missing[0]!r} never said"
    return "the outcome reward failed the episode"


def _last_agent(episode: Episode) -> list[Evidence]:
    last = next((i for i in range(len(episode.messages) - 1, -1, -1) if episode.messages[i].role == "assistant"), None)
    return [] if last is None else [evidence(episode.messages, last)]
