"""BFCL's multi-turn verdict on a muarl episode: state and response checks after every user turn.

As BFCL's checker does, the episode's function calls are replayed, turn by turn, on fresh instances of the
entry's classes, beside the possible answer's calls on another set. After each turn whose possible answer
is not empty: the model must have made at least one call in that turn; every public attribute of every
instance must equal the ground truth's (state check); and each result of the turn's ground-truth calls must
be among the results of all the model's calls so far, counted with multiplicity, in any order (response
check, so a value fetched in an earlier turn need not be fetched again). A turn whose possible answer is empty
(a missing function or parameter) is not checked; calls made in it still change the state. An episode that
ends before the user's last turn is answered fails, as BFCL fails an entry it had to cut. BFCL also cuts a
turn after 20 steps (model messages); muarl cuts the episode at ``max_turns`` agent turns instead, because
with one call per message (its default) a turn of BFCL's longest possible answers (34 calls) takes more
than 20 messages, and would be cut where a model making the same calls in parallel is not. The user must be
the scripted one, which says the entry's turns: an episode whose user said anything else fails
(``user_off_script``), since its turns are not BFCL's.

The calls replayed are the ones the episode loop ran: a call whose arguments were not a JSON object, or that
the loop skipped (one call per turn unless ``parallel_tool_calls``), changed nothing then and is not replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from muarl.domains.bfcl.world import BfclState
from muarl.types import NOT_EXECUTED_OUTPUT, Message, RewardInfo, Task

if TYPE_CHECKING:
    from muarl.domains.bfcl.domain import BfclDomain

Step = list[tuple[str, dict[str, Any]]]  # the calls of one assistant message that were run


def turn_steps(messages: Sequence[Message], turns: int) -> tuple[list[list[Step]], bool]:
    """The steps of each user turn, and whether the user's script was played to its end (a user message after
    the last turn: the replaying user's stop)."""
    steps: list[list[Step]] = [[] for _ in range(turns)]
    turn = -1
    for i, msg in enumerate(messages):
        if msg.role == "user":
            turn += 1
            if turn >= turns:
                return steps, True
        elif msg.role == "assistant" and msg.tool_calls and 0 <= turn < turns:
            outputs = [m.content for m in messages[i + 1 : i + 1 + len(msg.tool_calls)]]
            step = []
            for call, output in zip(msg.tool_calls, outputs):
                if output == NOT_EXECUTED_OUTPUT:
                    continue
                try:
                    step.append((call.name, call.parsed_arguments()))
                except ValueError:
                    continue
            if step:
                steps[turn].append(step)
    return steps, False


def _missing(expected: list[str], got: list[str]) -> list[str]:
    """Items of ``expected`` not in ``got``, each item of ``got`` matching at most once."""
    left = list(got)
    missing = []
    for item in expected:
        if item in left:
            left.remove(item)
        else:
            missing.append(item)
    return missing


def _check(task: Task, steps: list[list[Step]], model: BfclState, gold: BfclState) -> tuple[str, int, Any] | None:
    """The first failed check as (error type, turn, detail), or None when every turn passes."""
    seen: list[str] = []
    for turn, turn_steps_ in enumerate(steps):
        seen += [model.result(name, args) for step in turn_steps_ for name, args in step]
        gold_calls = [a for a in task.actions if a.request == turn]
        expected = [gold.result(a.name, a.kwargs) for a in gold_calls]
        if not gold_calls:
            continue
        if not turn_steps_:
            return "empty_turn_model_response", turn, "no function call in a turn whose possible answer has some"
        differences = model.differences(gold)
        if differences:
            return "instance_state_mismatch", turn, differences
        missing = _missing(expected, seen)
        if missing:
            return "execution_response_mismatch", turn, [m[:300] for m in missing[:3]]
    return None


def judge(domain: BfclDomain, task: Task, final_hash: str, messages: Sequence[Message]) -> RewardInfo:
    """BFCL's verdict on the episode's messages (see the module docstring)."""
    entry = domain.entry(task)
    steps, finished = turn_steps(messages, task.metadata["turns"])
    failure: tuple[str, int | None, Any] | None
    said = [m.content for m in messages if m.role == "user"][: len(task.user.script)]
    if said != task.user.script[: len(said)]:
        failure = ("user_off_script", None, "the user did not say the entry's turns: BFCL needs the scripted user (--user scripted)")
    elif not finished:
        failure = ("force_terminated", None, "the episode ended before the user's last turn was answered")
    else:
        long_context = domain.category == "long_context"
        model = BfclState(entry["initial_config"], entry["involved_classes"], long_context)
        gold = BfclState(entry["initial_config"], entry["involved_classes"], long_context)
        failure = _check(task, steps, model, gold)
    success = failure is None
    details: dict[str, Any] = {"bfcl_error": None}
    if failure is not None:
        details = {"bfcl_error": failure[0], "turn": failure[1], "detail": failure[2]}
    return RewardInfo(
        reward=float(success), success=success, state_match=success or details["bfcl_error"] == "execution_response_mismatch",
        final_hash=final_hash, gold_hash=domain.gold_hash(task), details=details,
    )
