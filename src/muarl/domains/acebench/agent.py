"""ACEBench's agent category as the ``acebench-agent`` domain: its phone and travel scenarios, run step by step.

Splits: ``multi_step`` (the agent alone carries out the user's request with the tools, then says
"finish conversation"; 20 entries, all on the phone; as in ACEBench's runner, a message holding no call gets the
line "do not ask me any questions, carry on" back: the task's user is absent) and ``multi_turn`` (a simulated
user, told the entry's instruction, talks with the agent; 30 entries: 20 on the phone, 10 in the travel
scenario). The phone (device, messages, reminders, food delivery) is :mod:`.phone`, the airline (flights, users,
reservations) :mod:`.travel`; every entry's classes are one scenario's, and its system prompt is that scenario's
policy.

Each entry starts from its own device flags (:meth:`AceBenchAgentDomain.new_state`) and offers the functions
it lists. It is scored as ACEBench scores it (its verdict, which the default ``outcome`` reward uses): end to end, the saved attributes of
each involved class must equal the possible answer (:func:`muarl.domains.acebench.checker.check_agent`);
*process* accuracy is the share of the entry's milestone calls found, in order, among the agent's call
messages. The ground-truth policy replays the first milestone path; a milestone written in a syntax that
cannot be parsed (``'Domino's'``) leaves the replay incomplete, which is the documented maximum.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muarl.domains.acebench import AceBenchDataError, _read_lines, acebench_dir
from muarl.domains.acebench import phone, travel
from muarl.domains.base import BaseData, Domain, EpisodeDefaults, State, ToolRegistry
from muarl.domains.acebench.checker import AnswerSyntaxError, acebench_reward, parse_answer
from muarl.types import NOT_EXECUTED_OUTPUT, Absent, Action, Message, RewardInfo, Task, ToolCall, UserScenario

SPLITS = ("multi_step", "multi_turn")
CLASS_VIEWS = {**phone.CLASS_VIEWS, **travel.CLASS_VIEWS}  # every scenario class: its saved attributes
FINISH = "finish conversation"
# ACEBench's multi-step runner answers a message that holds no call with this line (its execution role)
CARRY_ON = "Please do not ask me any questions, use the known conditions to solve the problem"

POLICY = f"""You are the assistant of a phone's owner, acting with the phone's tools: the device (Wi-Fi, login), text
messages, reminders and a food delivery platform. The current time is 2024-06-11 16:00.
Carry out what the user asks step by step with the tools, deciding each step from the results of the previous ones;
call one tool at a time. Use only information the user or the tools gave you. A message cannot be viewed or sent
before the device is logged in, and nothing can be sent or ordered without Wi-Fi. Orders need the user's platform
account logged in with login_food_platform. When the task is complete, say "{FINISH}"."""

TRAVEL_POLICY = f"""You are an airline's agent, acting with its reservation tools: flights, user accounts and reservations. The
current time is 2024-07-15 08:00.
Carry out what the user asks step by step with the tools, deciding each step from the results of the previous ones;
call one tool at a time (several calls of the same tool together are allowed, such as booking both legs of a trip). Use
only information the user or the tools gave you. Before booking or changing a reservation, get the user's ID and password,
find the flights that fit (find_transfer_flights, with the layover city, when no direct flight does), and get a clear yes
to the details. A round trip is two bookings. Cabins are "Economy Class" and "Business Class"; payment is "cash" or "bank",
as the user says. Free checked bags: regular members 1 in economy and 2 in business, silver 2 and 3, gold 3 in either;
each further bag costs 50 yuan. A flight can be changed only for one with the same origin and destination; a cabin change
pays or refunds the price difference; bags can be added, not removed. To cancel, get the user ID, the reservation ID and
the reason. When the task is complete, say "{FINISH}"."""


def _gold_actions(milestones: list[Any]) -> list[Action]:
    """The calls of the first milestone path, up to the first step that cannot be parsed."""
    path = milestones[0] if milestones and isinstance(milestones[0], list) else milestones
    actions = []
    for stone in path:
        try:
            calls = parse_answer(stone, squeeze=False)
        except AnswerSyntaxError:
            break
        actions += [Action(name=name, kwargs=args) for call in calls for name, args in call.items()]
    return actions


@dataclass
class AceBenchAgentDomain(Domain):
    """The phone and travel scenarios' tools; each task offers the functions its entry lists, from its own starting state."""

    _task_tools: dict[str, ToolRegistry] = field(default_factory=dict, repr=False)

    def new_state(self, task: Task | None = None) -> State:
        state = State(self.base)
        if task is not None:
            phone.start(state, task.metadata["initial_config"])
        return state

    def gold_hash(self, task: Task) -> str:
        """The state the gold calls reach from the task's start (refusals change nothing, as in ACEBench); for the
        record; the score is ACEBench's own (:meth:`verdict`)."""
        if task.id not in self._gold_hashes:
            self._gold_hashes[task.id] = self.rerun(task, [Message(role="assistant", tool_calls=[
                ToolCall(id=str(i), name=a.name, arguments=json.dumps(a.kwargs)) for i, a in enumerate(task.actions)])]).hash()
        return self._gold_hashes[task.id]

    def verdict(self, task: Task, final_hash: str, messages: Sequence[Message]) -> RewardInfo:
        """ACEBench's end-to-end check and process accuracy: the default ``outcome`` reward scores as ACEBench does."""
        return acebench_reward(self, task, final_hash, messages)

    def task_tools(self, task: Task) -> ToolRegistry:
        if task.id not in self._task_tools:
            listed = set(task.metadata["functions"])
            self._task_tools[task.id] = ToolRegistry(t for t in self.tools if t.name in listed)
        return self._task_tools[task.id]

    def rerun(self, task: Task, messages: Sequence[Message]) -> State:
        """The state the episode's executed calls reach, run again from the task's start (tools are deterministic)."""
        state = self.new_state(task)
        results = {m.tool_call_id: m.content or "" for m in messages if m.role == "tool"}
        offered = self.task_tools(task)
        for m in messages:
            for call in m.tool_calls or []:
                if call.name not in offered or results.get(call.id) == NOT_EXECUTED_OUTPUT:
                    continue
                try:
                    offered[call.name](state, call.parsed_arguments())
                except Exception:  # noqa: BLE001 - a refused call changed nothing, in the episode as here
                    continue
        return state

    def system_prompt(self, task: Task | None = None) -> str:
        """The policy of the entry's scenario; without an entry (a server offering every tool), both scenarios'."""
        if task is None:
            return f"{self.policy}\n\n{TRAVEL_POLICY}"
        return TRAVEL_POLICY if "Travel" in task.metadata["involved_classes"] else self.policy

    def class_view(self, state: State, task: Task) -> list[dict[str, Any]]:
        """The state as ACEBench's checker reads it: the saved attributes of each class the entry involves."""
        return [{name: CLASS_VIEWS[name](state)} for name in task.metadata["involved_classes"]]


# What ACEBench's multi-turn user is told beyond "one line at a time, reveal only what the step needs, invent
# nothing" (its user prompts, per scenario), in our words, for an LLM user
USER_RULES = {
    "phone": ["Give every detail the current step needs when you ask for it (a reminder: its title, description and time).",
              "When asked whether you need anything else, check that every task above is done; if one is not, ask for it.",
              "A name in your situation is that person's full name.",
              "Do not offer the agent help; answer its questions as your situation says."],
    "travel": ["If your situation asks for a round trip, say that you want to book a round-trip flight in your first message.",
               "When asked to confirm something, confirm it only if it matches your situation."],
}


def _tasks(data: Path, split: str) -> list[Task]:
    category = f"agent_{split}"
    answers = {a["id"]: a for a in _read_lines(data / "possible_answer" / f"data_{category}.json")}
    tasks = []
    for row in _read_lines(data / f"data_{category}.json"):
        unknown = sorted(set(row["involved_classes"]) - set(CLASS_VIEWS))
        if unknown:
            raise AceBenchDataError(f"{row['id']} involves scenario class(es) {unknown}, which muarl does not have; it has {sorted(CLASS_VIEWS)}")
        answer = answers[row["id"]]
        metadata = {"category": category, "functions": [f["name"] for f in row["function"]], "involved_classes": row["involved_classes"],
                    "initial_config": row["initial_config"], "possible_answer": answer["ground_truth"], "milestones": answer["mile_stone"]}
        absent = Absent(reply=CARRY_ON, end=FINISH) if split == "multi_step" else None
        rules = [] if absent else USER_RULES["travel" if "Travel" in row["involved_classes"] else "phone"]
        user = UserScenario(instruction=row["question"], absent=absent, rules=rules)
        tasks.append(Task(id=row["id"], domain="acebench-agent", split=split, user=user,
                          actions=_gold_actions(answer["mile_stone"]), metadata=metadata))
    return tasks


def acebench_agent(data_dir: str | os.PathLike[str] | None = None, **options: Any) -> Domain:
    if options:
        raise TypeError(f"domain acebench-agent takes no options, got {sorted(options)}")
    data = acebench_dir(data_dir)
    return AceBenchAgentDomain(
        name="acebench-agent", base=BaseData({**phone.tables(), **travel.tables()}), tools=ToolRegistry([*phone.tools(), *travel.tools()]),
        policy=POLICY, task_loader=lambda split: _tasks(data, split), splits=SPLITS,
        description="ACEBench agent category, phone and travel scenarios (end-to-end and process accuracy)",
        defaults=EpisodeDefaults(parallel_tool_calls=True),  # ACEBench runs every call of a model turn
    )
