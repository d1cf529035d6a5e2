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

from pydantic import ValidationError

from muarl.domains.base import Domain
from muarl.domains.tau.loader import tau2_task
from muarl.errors import InputError
from muarl.domains.tau.tau2_criteria import JudgeConfig, evaluate_tau2
from muarl.reward import RewardFn, outcome_reward
from muarl.types import Episode, Message, RewardInfo, Task


class ReplayInputError(InputError):
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


def _reason(exc: Exception) -> str:
    """One line saying why a record did not fit: pydantic's first problem, the missing key, or the message."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'value'}: {first['msg']}"
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    return " ".join(str(exc).split())[:200]


def _messages(raw: Any, where: str, key: str = "messages") -> list[Message]:
    """A list of OpenAI-format messages, or a ReplayInputError naming ``where`` and the message that does not fit."""
    if not isinstance(raw, list):
        raise ReplayInputError(f"{where}: {key!r} must be a list of messages, got {type(raw).__name__}")
    messages = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ReplayInputError(f"{where}: message {i} must be an object, got {type(m).__name__}")
        calls = m.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) and isinstance(c.get("function", c), dict) for c in calls)):
            raise ReplayInputError(f"{where}: message {i}: tool_calls must be a list of {{id, type, function: {{name, arguments}}}} objects")
        try:
            messages.append(_message(m))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ReplayInputError(f"{where}: message {i} is not an OpenAI chat message ({_reason(exc)})") from None
    return messages


def _record(raw: Any, where: str, messages_key: str, reward: Any) -> dict[str, Any]:
    """The checked fields of one recorded trajectory: ``task_id``, ``trial``, ``reward`` and its ``messages``."""
    if not isinstance(raw, dict):
        raise ReplayInputError(f"{where}: expected an object, got {type(raw).__name__}")
    task_id, trial = raw.get("task_id"), raw.get("trial", 0) or 0
    if task_id is None:
        raise ReplayInputError(f"{where}: no task_id")
    if not isinstance(task_id, (str, int)) or isinstance(task_id, bool):
        raise ReplayInputError(f"{where}: task_id must be a string or an integer, got {type(task_id).__name__}")
    if not isinstance(trial, int) or isinstance(trial, bool):
        raise ReplayInputError(f"{where}: trial must be an integer, got {type(trial).__name__}")
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)):
        raise ReplayInputError(f"{where}: the recorded reward must be a number, got {type(reward).__name__}")
    if messages_key not in raw:
        raise ReplayInputError(f"{where}: no {messages_key!r} list of messages")
    return {"task_id": task_id, "trial": trial, "recorded_reward": reward, "messages": _messages(raw[messages_key], where, messages_key)}


def _tau2_to_openai(raw: Any) -> Any:
    """A message as τ² writes it, in the shape :func:`_messages` reads: τ²'s flat tool calls with object arguments
    are read as they are, but its tool message names the call it answers in ``id``, not ``tool_call_id``."""
    if isinstance(raw, dict) and raw.get("role") == "tool" and "tool_call_id" not in raw:
        return {**raw, "tool_call_id": raw.get("id")}
    return raw


# τ²'s terminations that it scores, as the muarl endings :func:`evaluate_tau2` scores; any other (its step
# limit, an error) is kept as it is and scores 0 there, as in τ²
_TAU2_ENDINGS = {"user_stop": "user_stop", "agent_stop": "terminal_tool"}


def _embedded_tasks(data: dict[str, Any], path: str | Path, domain: Domain) -> dict[str, Task]:
    """The task definitions a τ² results file carries, by id."""
    raw = data.get("tasks") or []
    if not isinstance(raw, list):
        raise ReplayInputError(f"{path}: 'tasks' must be a list of τ² tasks, got {type(raw).__name__}")
    tasks = {}
    for i, t in enumerate(raw):
        try:
            tasks[str(t["id"])] = tau2_task(domain.name, "results", t)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ReplayInputError(f"{path}: task {i} is not a τ² task ({_reason(exc)})") from None
    return tasks


def _from_tau2_results(data: dict[str, Any], path: str | Path, domain: Domain, embedded_tasks: bool) -> list[Trajectory]:
    if not isinstance(data["simulations"], list):
        raise ReplayInputError(f"{path}: 'simulations' must be a list, got {type(data['simulations']).__name__}")
    tasks = _embedded_tasks(data, path, domain) if embedded_tasks else {}
    trajectories = []
    for i, s in enumerate(data["simulations"]):
        info = s.get("reward_info") if isinstance(s, dict) else None
        if info is not None and not isinstance(info, dict):
            raise ReplayInputError(f"{path}: simulation {i}: reward_info must be an object, got {type(info).__name__}")
        if isinstance(s, dict) and isinstance(s.get("messages"), list):
            s = {**s, "messages": [_tau2_to_openai(m) for m in s["messages"]]}
        r = _record(s, f"{path}: simulation {i}", "messages", (info or {}).get("reward"))
        ending = s.get("termination_reason")
        trajectories.append(Trajectory(**{**r, "task_id": str(r["task_id"])}, task=tasks.get(str(r["task_id"])),
                                       termination=_TAU2_ENDINGS.get(ending, ending) if isinstance(ending, str) else None))
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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReplayInputError(f"{path}: not UTF-8 text (a binary file?)") from None
    stripped = text.lstrip()
    if not stripped:
        raise ReplayInputError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    except RecursionError:
        raise ReplayInputError(f"{path}: JSON nested too deeply to be a trajectory file") from None
    if data is None or (isinstance(data, dict) and "termination" in data and "task_id" in data):
        return [_from_episode(line, path, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if isinstance(data, dict) and "simulations" in data:
        return _from_tau2_results(data, path, domain, embedded_tasks)
    if isinstance(data, dict) and "messages" in data:
        if data.get("task_id", task_id) is None:
            raise ReplayInputError(f"{path}: the conversation names no task_id; pass one (--task)")
        r = _record({**data, "task_id": data.get("task_id", task_id)}, str(path), "messages", data.get("reward"))
        return [Trajectory(**{**r, "task_id": _task_id(r["task_id"], domain, split), "trial": 0})]
    if isinstance(data, list) and data and isinstance(data[0], dict) and "traj" in data[0]:
        trajectories = []
        for i, raw in enumerate(data):
            r = _record(raw, f"{path}: result {i}", "traj", raw.get("reward") if isinstance(raw, dict) else None)
            trajectories.append(Trajectory(**{**r, "task_id": _task_id(r["task_id"], domain, split)}))
        return trajectories
    if isinstance(data, list) and all(isinstance(m, dict) and "role" in m for m in data):
        if task_id is None:
            raise ReplayInputError(f"{path}: a bare message list needs the task it belongs to (--task)")
        return [Trajectory(task_id=_task_id(task_id, domain, split), messages=_messages(data, str(path)))]
    raise ReplayInputError(
        f"{path}: not a known trajectory format (muarl episodes JSONL, τ-bench results list, τ² results, or OpenAI messages)"
    )


def _from_episode(line: str, path: str | Path, number: int) -> Trajectory:
    try:
        episode = Episode.model_validate_json(line)
    except ValueError as exc:
        raise ReplayInputError(f"{path}:{number}: not a muarl episode ({_reason(exc)})") from None
    skipped = {e.call_id for e in episode.tool_executions if e.error_kind == "not_executed"}
    messages = episode.trajectory()
    executed = {c.id for m in messages for c in (m.tool_calls or []) if c.id not in skipped}
    return Trajectory(
        task_id=episode.task_id, trial=episode.trial, messages=messages, executed=executed,
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
    state = domain.new_state(task)
    calls = refused = 0
    outputs: list[str] = []
    scored = list(trajectory.messages)  # what the reward reads: the record up to where the episode ended
    for index, message in enumerate(trajectory.messages):
        if message.role not in ("assistant", "user"):
            continue
        run = domain.run_user_tool if message.role == "user" else domain.run_tool  # the user's own tools (dual control)
        ended = False
        for call in message.tool_calls or []:
            if call.id not in ran:
                continue
            calls += 1
            try:
                outputs.append(run(state, call.name, call.parsed_arguments()))
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
