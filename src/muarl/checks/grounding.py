"""Grounded claims: what the agent tells the user it did, it did; the facts it must tell come from somewhere.

``grounded_actions``: every sentence of an agent message that says an action was done ("your phone number has
been updated", "I've cancelled the order") must come after a call of a write tool that can do it (by a word of
its name: a cancellation claim needs a ``cancel...`` tool) and that ran without being refused. A claim after a
refused call, or with no call at all, fails. It sees only claims worded with the past forms it knows
(:data:`muarl.checks.conversation.CLAIM_FAMILIES`); "all done" claims nothing in particular and is not checked.

``grounded_writes``: every value a write call that ran was given must have been said by the user or shown in a tool
result before the call. The agent's own messages are no source: a write of a value it made up fails even when the
user agreed to it ("To confirm, I will update your phone to 555-123-4567. Shall I proceed?" "Yes."), which the
confirmed-before-write check, reading only whether what was written was what was confirmed, passes. Values are
compared as text after :func:`~muarl.checks.conversation.normalise`; an argument whose schema lists its choices
(``enum``: a cancellation's reason) comes from the tool, not the conversation, and is not checked; a number counts
as said where the same number appears in any form. It applies where the domain declares it
(``Domain.grounds_writes``: the clinic worlds, whose users give every value and whose oracle looks up what it
writes; τ-bench's oracle replays the gold writes without the reads that would show their ids).

``grounded_facts``: each of the task's required outputs, where the agent says it, must already have appeared in a
tool result or a user message. An output that no tool of the gold solution shows either (a count or a sum the
agent works out) cannot be traced and is not checked.
"""

from __future__ import annotations

import re
from typing import Literal

from muarl.checks.conversation import (EpisodeView, action_claims, evidence, leaf_values, may_claim, normalise, tool_does, verdict,
                                      writes_that_ran)
from muarl.domains.base import Domain
from muarl.types import CheckVerdict, Episode, Task

ACTIONS = "grounded_actions"
WRITES = "grounded_writes"
FACTS = "grounded_facts"


def grounded_actions(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    writes = domain.task_tools(task).names_of_kind("write")
    if not writes:
        return verdict(ACTIONS, "not_applicable", "the domain has no write tools")
    messages = episode.messages
    view = EpisodeView.of(messages)
    calls = view.calls
    claims = 0
    if not may_claim(view.texts[i] for i in view.said):
        return verdict(ACTIONS, "not_applicable", "the agent claimed no action")
    for i in view.said:
        for family, sentence in action_claims(view.texts[i]):
            claims += 1
            done = [c for c in calls if c.index < i and tool_does(family, c.name) and c.name in writes]
            if not any(c.ok for c in done):
                why = f"after a refused {done[-1].name} call" if done else "without a matching write call"
                proof = [evidence(messages, done[-1].result_index)] if done and done[-1].result_index is not None else []
                return CheckVerdict(check=ACTIONS, status="fail", detail=f"claims {family!r} done {why}: {sentence[:80]!r}",
                                    evidence=[evidence(messages, i), *proof])
    if not claims:
        return verdict(ACTIONS, "not_applicable", "the agent claimed no action")
    return verdict(ACTIONS, "pass", f"{claims} claim(s), each after a successful matching call")


def grounded_writes(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    if not domain.grounds_writes:
        return verdict(WRITES, "not_applicable", "the domain does not declare its writes grounded")
    tools = domain.task_tools(task)
    messages = episode.messages
    view = EpisodeView.of(messages)
    writes = writes_that_ran(view, tools.names_of_kind("write"))
    if not writes:
        return verdict(WRITES, "not_applicable", "no write call ran")
    for call in writes:
        chosen = _enum_arguments(tools[call.name].spec.parameters)
        shown = [c.result_index for c in view.calls if c.result_index is not None and c.result_index < call.index]
        sources = [view.texts[i] for i in (*(i for i in view.heard if i < call.index), *shown)]
        for name, value in (call.arguments or {}).items():
            if name in chosen:
                continue
            for leaf in leaf_values(value):
                if not _mentioned(sources, leaf):
                    return CheckVerdict(check=WRITES, status="fail", detail=f"{call.name}: {name}={leaf!r} was said by neither the "
                                        "user nor a tool before the call", evidence=[evidence(messages, call.index)])
    return verdict(WRITES, "pass", f"{len(writes)} write(s), every value from the user or a tool")


def _mentioned(sources: list[str], value: str) -> bool:
    """``value`` in one of the normalised ``sources``: as text, or, for a number, as any number of the same value
    there (a payment of ``105.0`` against a balance shown as ``105``)."""
    text = normalise(value)
    if any(text in source for source in sources):
        return True
    try:
        number = float(value)
    except ValueError:
        return False
    return any(float(found) == number for source in sources for found in _NUMBER.findall(source))


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _enum_arguments(schema: dict) -> frozenset[str]:
    """The arguments whose schema lists the values they may take."""
    return frozenset(name for name, prop in (schema.get("properties") or {}).items() if isinstance(prop, dict) and "enum" in prop)


def grounded_facts(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    if not task.outputs:
        return verdict(FACTS, "not_applicable", "the task requires no facts to be told")
    messages = episode.messages
    view = EpisodeView.of(messages)
    checked = 0
    for output in task.outputs:
        how, said = fact_told(domain, task, view, output)
        if how == "grounded":
            checked += 1
        elif how == "ungrounded":
            return CheckVerdict(check=FACTS, status="fail", detail=f"told {output!r} before any tool result or user message showed it",
                                evidence=[evidence(messages, said)])
    if not checked:
        return verdict(FACTS, "not_applicable", "no traceable required fact was told")
    return verdict(FACTS, "pass", f"{checked} required fact(s) told after a tool or the user showed them")


Told = Literal["unsaid", "grounded", "ungrounded", "untraceable"]


def fact_told(domain: Domain, task: Task, view: EpisodeView, output: str) -> tuple[Told, int]:
    """How a required output was told to the user, and where (-1: never): ``grounded`` (a tool result or a user
    message showed it first), ``ungrounded`` (nothing did, though a tool of the gold solution shows it: the agent
    guessed or made it up), ``untraceable`` (worked out by the agent, a count or a sum: no gold tool shows it)
    or ``unsaid``. Shared by :func:`grounded_facts` and the checklist reward (:mod:`muarl.reward.checklist`)."""
    messages = view.messages
    wanted = normalise(output)
    said = next((i for i in view.said if wanted in view.texts[i]
                 and not view.asks[i]), None)  # a confirmation proposes: it tells nothing yet
    if said is None:
        return "unsaid", -1  # never said: the outcome reward fails it; nothing to trace
    if any(messages[i].role in ("tool", "user") and wanted in view.texts[i] for i in range(said)):
        return "grounded", said
    if not _gold_shows(domain, task, wanted):
        return "untraceable", said
    return "ungrounded", said


_GOLD_SHOWS: dict[int, tuple[Task, str]] = {}  # id(task) -> (task, what its gold tool results show, normalised)


def _gold_shows(domain: Domain, task: Task, wanted: str) -> bool:
    """Whether a tool result of the task's gold solution shows the fact (then the agent could have looked it up)."""
    hit = _GOLD_SHOWS.get(id(task))
    if hit is None or hit[0] is not task:
        if len(_GOLD_SHOWS) > 50_000:
            _GOLD_SHOWS.clear()
        hit = _GOLD_SHOWS[id(task)] = (task, "\n".join(_gold_results(domain, task)))
    return wanted in hit[1]


def _gold_results(domain: Domain, task: Task) -> list[str]:
    """The normalised results of the task's gold calls that ran. The outcome reward's gold replay has them already
    when every gold action is the agent's and none was refused (a replay may record a refusal as ``Error: ...``,
    or run a user's action as the agent's); else the actions are run again here, a refused one showing nothing."""
    replayed = domain.gold_outputs(task)
    if replayed is not None and not any(a.requestor == "user" for a in task.actions) and not any(o.startswith("Error") for o in replayed):
        return [normalise(o) for o in replayed]
    state = domain.new_state(task)
    shown = []
    for action in task.actions:
        try:
            run = domain.run_user_tool if action.requestor == "user" else domain.run_tool
            shown.append(normalise(run(state, action.name, action.kwargs)))
        except Exception:  # noqa: BLE001 - a refused or broken gold call shows nothing
            continue
    return shown
