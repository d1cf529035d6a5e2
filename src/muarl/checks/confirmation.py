"""Confirmed before write: the policy's explicit "yes" to the stated details before every state-changing call.

For each write call that ran (a refused call changes nothing), in a domain whose policy demands confirmation
(``Domain.confirms_writes``), the check looks back from the call:

1. the user's last message before it must affirm (an explicit yes, taking nothing back: a user who changes its
   mind in reply, "actually, make it X instead", has not confirmed, whatever came before);
2. the agent's last message to the user before that reply must end by asking for approval ("... shall I
   proceed?", "Please confirm if you would like to proceed.");
3. the value written must be the one confirmed: a value the user gave since the agent's previous ask (a change
   of mind, or the next request's details) must be stated in this ask, and no value may come from nowhere
   (stated or shown in no message before the ask). So a confirmation of one value followed by a write of
   another fails, a write after the user revised it without a new confirmation fails, and so does a new
   confirmation that leaves the revised value out.

It reads text only. A first confirmation need not restate details the conversation already settled (τ-bench's
agents rarely repeat a reservation id the user gave at the start); a value written in another form
(``5551234567`` for ``555-123-4567``) counts as not stated.
"""

from __future__ import annotations

from bisect import bisect_left

from muarl.checks.conversation import EpisodeView, affirms, evidence, leaf_values, normalise, verdict, writes_that_ran
from muarl.domains.base import Domain
from muarl.types import CheckVerdict, Episode, Task

NAME = "confirmed_before_write"


def confirmed_before_write(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    if not domain.confirms_writes:
        return verdict(NAME, "not_applicable", "the domain's policy asks for no confirmation")
    messages = episode.messages
    view = EpisodeView.of(messages)
    writes = writes_that_ran(view, domain.task_tools(task).names_of_kind("write"))
    if not writes:
        return verdict(NAME, "not_applicable", "no write call ran")
    for call in writes:
        problem, at = _unconfirmed(view, call.index, call.arguments or {})
        if problem:
            return CheckVerdict(check=NAME, status="fail", detail=f"{call.name}: {problem}",
                                evidence=[evidence(messages, i) for i in (*at, call.index)])
    return verdict(NAME, "pass", f"{len(writes)} write(s), each confirmed")


def _unconfirmed(view: EpisodeView, write_index: int, arguments: dict) -> tuple[str | None, tuple[int, ...]]:
    """Why the write at ``write_index`` was not confirmed (None if it was), and the messages that show it."""
    messages = view.messages
    heard = view.heard[:bisect_left(view.heard, write_index)]
    if not heard:
        return "no user message before the write", ()
    reply = heard[-1]
    if not affirms(view.texts[reply]):
        return "the user's last message before the write does not affirm it", (reply,)
    told = view.said[:bisect_left(view.said, reply)]
    ask = told[-1] if told else None
    if ask is None or not view.asks[ask]:
        return "the agent did not ask for confirmation before the user's reply", (reply,) if ask is None else (ask, reply)
    asked = view.texts[ask]
    changed_since: int | None = -1  # worked out only for a value the ask leaves out (-1: not yet)
    for value in leaf_values(arguments):
        v = normalise(value)
        if len(v) < 2 or v in asked or v.replace("_", " ") in asked:  # a count of 0 or 1 is not stated as such;
            continue  # "one_way" is said "one way"
        if changed_since == -1:
            # what the user said after the agent's previous ask may change the action
            changed_since = next((i for i in reversed(told[:-1]) if view.asks[i]), None)
        if changed_since is not None and any(v in view.texts[i] for i in heard if changed_since < i < ask):
            return f"the value {value!r} written is not the one confirmed (the user gave it after the previous ask)", (ask, reply)
        if not any(v in view.texts[i] for i in range(1, ask) if messages[i].role != "system"):
            return f"the value {value!r} written is not the one confirmed (nobody stated or showed it before)", (ask, reply)
    return None, ()
