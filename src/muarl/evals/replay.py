"""Re-scoring recorded runs: run a trajectory's tool calls again on a fresh state and score the result.

Recorded rewards can go stale (a tool fixed, a task corrected) or come from another harness. Replaying
the agent's own calls, in order, on a fresh state of the named task and applying the reward again gives
today's verdict beside the recorded one, without calling any model.

Files understood (:func:`read_trajectories` tells them apart by their shape):

* muarl episodes, JSON lines: one :class:`muarl.types.Episode` per line (as the runner writes them);
* τ-bench results: a JSON list of ``{task_id, trial, reward, traj}``, ``task_id`` being the task's index in
  its split (``split`` says which, default test);
* τ²-bench results: a JSON object with ``simulations: [{task_id, trial, termination_reason, messages,
  reward_info}]`` and, usually, the ``tasks`` they ran. Messages are in τ²'s own form (a tool call is
  ``{id, name, arguments: {...}, requestor}``; a tool message names the call it answers in ``id``). The
  trajectories are scored against the task definitions the file embeds, as τ² scored them, unless the
  domain's own (shipped) definitions are asked for; a termination τ² does not score (its step limit, an
  error) gives 0, as in τ²;
* one conversation: a JSON object ``{task_id, messages}``, or a bare list of OpenAI-format messages together
  with ``task_id``.

Which calls ran: in an episode, those the loop executed (not the ones it skipped); elsewhere, those that got
a tool message back (τ-bench runs only the first call of a turn and answers only it). A terminal tool ends
the replay, as it ended the episode: τ-bench scores at ``transfer_to_human_agents``, so neither a later call
nor later text counts. τ² tasks are the exception: τ²'s transfer tool ends nothing (its user simulator ends the
conversation), so their replay runs and scores the whole record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muarl.domains.base import Domain
from muarl.domains.tau.loader import tau2_task
from muarl.evals.tau2_criteria import JudgeConfig, evaluate_tau2
from muarl.reward import RewardFn, outcome_reward
from muarl.types import Episode, Message, RewardInfo, Task


class ReplayInputError(ValueError):
    """The file is not a trajectory format replay understands, or names a task the domain lacks."""


@dataclass
class Trajectory:
    task_id: str
    messages: list[Message]
    trial: int = 0
    recorded_reward: float | None = None
    executed: set[str] | None = None  # ids of the calls that ran; None: those answered by a tool message
    termination: str | None = None
    task: Task | None = None  # the definition it was scored against, when the file carries it; None: the domain's


@dataclass
class ReplayResult:
    task_id: str
    trial: int
    recorded_reward: float | None
    reward: RewardInfo
    calls: int = 0  # tool calls executed again
    refused: int = 0  # of which the tools refused
    outputs: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool | None:
        return None if self.recorded_reward is None else abs(self.recorded_reward - self.reward.reward) < 1e-9

    def summary(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "trial": self.trial, "recorded_reward": self.recorded_reward,
            "reward": self.reward.reward, "agrees": self.agrees, "state_match": self.reward.state_match,
            "outputs_found": self.reward.outputs_found, "components": self.reward.components,
            "calls": self.calls, "refused": self.refused,
        }


def _message(raw: dict[str, Any]) -> Message:
    content = raw.get("content")
    if isinstance(content, list):  # content parts: keep the text
        raw = {**raw, "content": "".join(p.get("text", "") for p in content if isinstance(p, dict))}
    return Message.from_openai(raw)


def _tau2_message(raw: dict[str, Any]) -> Message:
    """A message as τ² writes it: flat tool calls whose arguments are an object (which :func:`_message` reads),
    and a tool message that names the call it answers in ``id`` where the OpenAI format says ``tool_call_id``."""
    if raw.get("role") == "tool" and "tool_call_id" not in raw:
        raw = {**raw, "tool_call_id": raw.get("id")}
    return _message(raw)


# τ²'s terminations that it scores, as the muarl endings :func:`evaluate_tau2` scores; any other (its step
# limit, an error) is kept as it is and scores 0 there, as in τ²
_TAU2_ENDINGS = {"user_stop": "user_stop", "agent_stop": "terminal_tool"}


def _from_tau2_results(data: dict[str, Any], domain: Domain, embedded_tasks: bool) -> list[Trajectory]:
    tasks = {str(t["id"]): tau2_task(domain.name, "results", t) for t in data.get("tasks") or []} if embedded_tasks else {}
    trajectories = []
    for s in data["simulations"]:
        ending = s.get("termination_reason")
        trajectories.append(Trajectory(
            task_id=str(s["task_id"]), trial=s.get("trial", 0) or 0, messages=[_tau2_message(m) for m in s["messages"]],
            recorded_reward=(s.get("reward_info") or {}).get("reward"), termination=_TAU2_ENDINGS.get(ending, ending),
            task=tasks.get(str(s["task_id"])),
        ))
    return trajectories


def _task_id(raw_id: Any, domain: Domain, split: str) -> str:
    """τ-bench numbers tasks per split; muarl's τ-bench ids are ``<split>-<index>``."""
    if isinstance(raw_id, int) and domain.name.startswith("tau-"):
        return f"{split}-{raw_id}"
    return str(raw_id)


def read_trajectories(path: str | Path, domain: Domain, split: str = "test", task_id: str | None = None,
                      embedded_tasks: bool = True) -> list[Trajectory]:
    """Every trajectory of a file (see the module docstring for the formats). ``embedded_tasks=False`` scores τ²
    results against the domain's task definitions instead of those the file carries."""
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.lstrip()
    if not stripped:
        raise ReplayInputError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if data is None or (isinstance(data, dict) and "termination" in data and "task_id" in data):
        return [_from_episode(line, path, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if isinstance(data, dict) and "simulations" in data:
        return _from_tau2_results(data, domain, embedded_tasks)
    if isinstance(data, dict) and "messages" in data:
        tid = data.get("task_id", task_id)
        if tid is None:
            raise ReplayInputError(f"{path}: the conversation names no task_id; pass one (--task)")
        return [Trajectory(task_id=_task_id(tid, domain, split), messages=[_message(m) for m in data["messages"]],
                           recorded_reward=data.get("reward"))]
    if isinstance(data, list) and data and isinstance(data[0], dict) and "traj" in data[0]:
        return [
            Trajectory(task_id=_task_id(r["task_id"], domain, split), trial=r.get("trial", 0) or 0,
                       messages=[_message(m) for m in r["traj"]], recorded_reward=r.get("reward"))
            for r in data
        ]
    if isinstance(data, list) and all(isinstance(m, dict) and "role" in m for m in data):
        if task_id is None:
            raise ReplayInputError(f"{path}: a bare message list needs the task it belongs to (--task)")
        return [Trajectory(task_id=_task_id(task_id, domain, split), messages=[_message(m) for m in data])]
    raise ReplayInputError(
        f"{path}: not a known trajectory format (muarl episodes JSONL, τ-bench results list, τ² results, or OpenAI messages)"
    )


def _from_episode(line: str, path: str | Path, number: int) -> Trajectory:
    try:
        episode = Episode.model_validate_json(line)
    except ValueError as exc:
        raise ReplayInputError(f"{path}:{number}: not a muarl episode: {str(exc)[:200]}") from None
    skipped = {e.call_id for e in episode.tool_executions if e.error_kind == "not_executed"}
    executed = {c.id for m in episode.messages for c in (m.tool_calls or []) if c.id not in skipped}
    return Trajectory(
        task_id=episode.task_id, trial=episode.trial, messages=episode.messages, executed=executed,
        recorded_reward=episode.reward.reward if episode.reward else None, termination=episode.termination,
    )


def replay_trajectory(domain: Domain, trajectory: Trajectory, reward_fn: RewardFn | None = None, judge: JudgeConfig | None = None) -> ReplayResult:
    """Run the trajectory's executed tool calls on a fresh state of its task, then score it: with ``reward_fn`` if
    given, else with τ²'s criteria for τ² tasks (``judge`` grades their NL assertions) and the outcome reward
    otherwise."""
    task = trajectory.task
    if task is None:
        try:
            task = domain.task(trajectory.task_id)
        except KeyError:
            raise ReplayInputError(f"domain {domain.name!r} has no task {trajectory.task_id!r}") from None
    answered = {m.tool_call_id for m in trajectory.messages if m.role == "tool"}
    ran = trajectory.executed if trajectory.executed is not None else answered
    stops = "tau2" not in task.metadata  # a terminal tool ends a τ-bench or muarl episode, not a τ² one
    state = domain.new_state()
    calls = refused = 0
    outputs: list[str] = []
    scored = list(trajectory.messages)  # what the reward reads: the record up to where the episode ended
    for index, message in enumerate(trajectory.messages):
        if message.role != "assistant":
            continue
        ended = False
        for call in message.tool_calls or []:
            if call.id not in ran:
                continue
            calls += 1
            try:
                outputs.append(domain.run_tool(state, call.name, call.parsed_arguments()))
            except Exception as exc:  # noqa: BLE001 - a refused or malformed call is part of the record, as in the episode
                refused += 1
                outputs.append(f"Error: {exc}")
                continue
            tool = domain.tools.get(call.name)
            ended = ended or (stops and tool is not None and tool.terminal)
        if ended:
            scored = trajectory.messages[: index + 1]
            break
    if reward_fn is not None:
        reward = reward_fn(domain, task, state.hash(), scored, 0)
    elif "tau2" in task.metadata:
        reward = evaluate_tau2(domain, task, state.hash(), scored, judge=judge, termination=trajectory.termination)
    else:
        reward = outcome_reward(domain, task, state.hash(), scored, 0)
    return ReplayResult(task_id=task.id, trial=trajectory.trial, recorded_reward=trajectory.recorded_reward,
                        reward=reward, calls=calls, refused=refused, outputs=outputs)


def replay_all(domain: Domain, trajectories: Iterable[Trajectory], reward_fn: RewardFn | None = None, judge: JudgeConfig | None = None) -> list[ReplayResult]:
    return [replay_trajectory(domain, t, reward_fn, judge) for t in trajectories]
