"""Efficiency: how many turns the agent used, and on what.

- ``turn_limit``: the episode was cut for length (turn limit or token budget) instead of ending.
- ``malformed_calls``: a call whose arguments were not a JSON object, to a tool that does not exist, or whose
  arguments did not fit the schema.
- ``repeated_calls``: the agent made the same call (name and arguments) twice in a row with nothing said in
  between: it did not read the first answer.
- ``turns_vs_oracle``: the agent's turns against the turns the oracle's plan takes on the same task (its value
  is the ratio); more than half again as many, and at least two more, fails.
- ``turns_after_completion``: on a solved task, the agent turns after it was complete (its last non-read call
  that was not refused, which on a solved task left the gold state, and every required output said; the
  value). Ending the conversation late is normal (a closing report, the user's "anything else"); talking on
  until the episode is cut for length is the failure. A write that changed nothing still counts as the last
  change, and worlds where the user changes the state too (dual control) are not checked.
"""

from __future__ import annotations

from muarl.checks.conversation import EpisodeView, agent_calls, evidence, normalise, verdict
from muarl.domains.base import Domain
from muarl.models.oracle import planned_turns
from muarl.types import CheckVerdict, Episode, Message, Task

CUT = ("max_turns", "token_budget")  # ended for length, not by the user or a terminal tool
MALFORMED = ("Error: could not parse arguments", "Error: unknown tool")  # how the loop words those refusals
TALK_ON = 3  # agent turns after completion that, on an episode cut for length, count as talking on


def agent_turn_indices(domain: Domain, messages: list[Message]) -> list[int]:
    """Indices of the agent's turns: its messages, the domain's opening greeting left out."""
    turns = EpisodeView.of(messages).turns
    if domain.greeting and turns and turns[0] <= 1 and messages[turns[0]].content == domain.greeting and not messages[turns[0]].tool_calls:
        turns = turns[1:]
    return turns


def turn_limit(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    if episode.termination in CUT:
        last = len(episode.messages) - 1
        return CheckVerdict(check="turn_limit", status="fail", detail=f"cut by {episode.termination}", evidence=[evidence(episode.messages, last)])
    return verdict("turn_limit", "pass", f"ended by {episode.termination}")


def malformed_calls(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    calls = agent_calls(episode.messages)
    if not calls:
        return verdict("malformed_calls", "not_applicable", "no tool call")
    offered = domain.task_tools(task)
    bad = []
    for c in calls:
        if c.result_index is None or c.ok:  # a call that ran had a known tool and arguments that fit
            continue
        if c.arguments is None or c.name not in offered or c.result.startswith(MALFORMED):
            bad.append(c)
        else:
            try:
                offered[c.name].check_names(c.arguments)
            except Exception:  # noqa: BLE001 - an unknown or missing argument: the schema does not fit
                bad.append(c)
    if bad:
        return CheckVerdict(check="malformed_calls", status="fail", detail=f"{len(bad)} of {len(calls)} call(s) malformed",
                            evidence=[evidence(episode.messages, c.index) for c in bad[:3]], value=len(bad))
    return verdict("malformed_calls", "pass", f"{len(calls)} well-formed call(s)", 0)


def repeated_calls(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    calls = agent_calls(episode.messages)
    if len(calls) < 2:
        return verdict("repeated_calls", "not_applicable", "fewer than two tool calls")
    messages = episode.messages
    repeats = []
    for before, after in zip(calls, calls[1:]):
        if before.identity() == after.identity() and not any(messages[i].role in ("user", "assistant") and not messages[i].tool_calls
                                                              for i in range(before.index + 1, after.index)):
            repeats.append(after)
    if repeats:
        return CheckVerdict(check="repeated_calls", status="fail", detail=f"{len(repeats)} call(s) repeated its previous call",
                            evidence=[evidence(messages, c.index) for c in repeats[:3]], value=len(repeats))
    return verdict("repeated_calls", "pass", "", 0)


_PLANNED: dict[int, tuple[Task, int]] = {}  # id(task) -> (task, the oracle's turns): a plan depends on the task alone


def _oracle_turns(domain: Domain, task: Task) -> int:
    hit = _PLANNED.get(id(task))
    if hit is None or hit[0] is not task:
        if len(_PLANNED) > 50_000:
            _PLANNED.clear()
        hit = _PLANNED[id(task)] = (task, planned_turns(task, domain.task_tools(task).specs()))
    return hit[1]


def turns_vs_oracle(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    try:
        reference = _oracle_turns(domain, task)
    except Exception as exc:  # noqa: BLE001 - a task the oracle cannot plan (no gold actions it understands)
        return verdict("turns_vs_oracle", "not_applicable", f"no oracle plan: {type(exc).__name__}")
    if reference <= 0:
        return verdict("turns_vs_oracle", "not_applicable", "the oracle's plan is empty")
    turns = len(agent_turn_indices(domain, episode.messages))
    ratio = turns / reference
    status = "fail" if turns > reference + max(2, reference // 2) else "pass"
    return verdict("turns_vs_oracle", status, f"{turns} agent turns, the oracle plans {reference}", round(ratio, 3))


def turns_after_completion(domain: Domain, task: Task, episode: Episode) -> CheckVerdict:
    name = "turns_after_completion"
    if episode.reward is None or not episode.reward.success:
        return verdict(name, "not_applicable", "the task was not solved")
    messages = episode.messages
    found = completion(domain, task, messages)
    if isinstance(found, str):
        return verdict(name, "not_applicable", found)
    complete, after = found
    status = "fail" if episode.termination in CUT and len(after) >= TALK_ON else "pass"
    proof = [evidence(messages, complete), evidence(messages, after[-1])] if after else [evidence(messages, complete)]
    return CheckVerdict(check=name, status=status, detail=f"{len(after)} agent turn(s) after completion, ended by {episode.termination}",
                        evidence=proof, value=len(after))


def completion(domain: Domain, task: Task, messages: list[Message]) -> tuple[int, list[int]] | str:
    """Where a *solved* episode's task was complete (the later of its last state change and the first saying of
    each required output) and the agent's turns after it; or why that is not measured (a string). Shared by
    the check and the reward's cost of turns after completion (:mod:`muarl.reward.efficiency`)."""
    if len(domain.user_tools):
        return "the user changes the state too (dual control)"
    complete = _state_reached(domain, task, messages)
    view = EpisodeView.of(messages)
    for output in task.outputs:
        wanted = normalise(output)
        said = next((i for i in view.said if wanted in view.texts[i]), None)
        complete = max(complete, said if said is not None else len(messages))
    if complete == 0 and not task.outputs:
        return "the task asks for no change and no fact"
    return complete, [i for i in agent_turn_indices(domain, messages) if i > complete]


def _state_reached(domain: Domain, task: Task, messages: list[Message]) -> int:
    """Index of the agent message whose call last changed the state (0: none did): its last non-read call that
    ran without being refused, as the episode is solved and so ended in the gold state."""
    changes = domain.task_tools(task).names_of_kind("write", "think", "generic")  # every kind of tool but a read
    return next((c.index for c in reversed(agent_calls(messages)) if c.ok and c.name in changes), 0)
