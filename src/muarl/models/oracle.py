"""Reference policies that need no model: the oracle, which solves a task from its gold actions while
conversing as the policy demands, and the do-nothing agent, which only says goodbye.

The oracle is what tests, demos and offline cold-start data are built on. Its plan is fixed when the
episode starts: ask the user to identify (unless every wording of their opening request already says what
the look-up needs), look them up, then per user request (in order) state every write
and ask for a "yes" before calling it, report the outcome (done, the answer to a question, or a refusal),
or transfer for medical questions. A user who changes its mind (a request with a ``revision``) is met as a
careful agent would: it confirms what the user asked for first, and when the user revises it, confirms the
revised write; a user who stated the revised details up front is asked once. For tasks without structured requests (τ-bench's) it runs the gold
actions in order, confirming each write, and finally tells the required outputs; a gold action the user takes
on their own device (τ² telecom) it asks the user to do, naming the user's tool and its arguments; with an absent
user (ACEBench's multi-step) it asks for no confirmation and closes with the task's end phrase. Tasks scored
on a single response (``metadata["single_response"]``, ACEBench's) get it at once: all gold calls in one
message, or the required outputs as its text. For tasks whose user follows a fixed script (BFCL) it makes each
user turn's gold calls and then ends the turn in text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial

from muarl.models.base import Agent, AgentSession, AgentTurn
from muarl.types import Action, Message, Task, ToolCall, ToolSpec, UserRequest

ASK_IDENTITY = "Hello! Before I can help, could you give me your email, or your full name and date of birth, so I can verify your identity?"
ANYTHING_ELSE = "Is there anything else I can help you with?"
ASK_USER_ACTION = "Please do this on your phone:"


def _say(text: str) -> Message:
    return Message(role="assistant", content=text)


def _call_message(call_id: str, action: Action) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=call_id, name=action.name, arguments=json.dumps(action.kwargs))])


def _ask(action: Action) -> Message:
    return _say(_confirmation(action))


# a turn of the plan: its message, made only when the turn is taken (counting a plan's turns, as the efficiency
# checks do for every task they judge, then builds no message), or a confirmation chosen when it is due
Step = Callable[[], Message]


def describe(action: Action) -> str:
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in action.kwargs.items())
    return f"{action.name.replace('_', ' ')} ({args})"


class _Plan:
    def __init__(self, task: Task, tools: list[ToolSpec]):
        self.writes = {t.name for t in tools if t.kind == "write"}
        reads = [t for t in tools if t.kind == "read"]
        self.reads = {t.name for t in reads}
        # a read tool taking exactly one id argument reveals that id's record (get_appointment_details(appointment_id))
        self.getters = {t.parameters["required"][0]: t.name for t in reads if len(t.parameters.get("required", [])) == 1 and t.name.startswith("get_")}
        # a list_* tool whose arguments the user can give (list_doctors(specialty)) reveals the ids to choose from
        self.listers = {t.name: list(t.parameters.get("required", [])) for t in reads if t.name.startswith("list_")}
        self.looked_up: set[str] = set()
        self.absent = task.user.absent  # no one to confirm with; the end phrase closes the conversation
        self.steps: list[Step | _Confirm] = []
        self.calls = 0
        if task.metadata.get("single_response"):
            self._single_response(task)
        elif task.user.script:
            self._scripted(task)
        elif task.user.requests:
            self._structured(task)
        else:
            self._generic(task)

    def _call(self, action: Action, request: UserRequest | None = None) -> None:
        if action.name in self.writes and self.absent is None:
            first = _as_first_asked(action, request)
            self.steps.append(partial(_ask, action) if first == action else _Confirm(first, action))
        self.calls += 1
        self.steps.append(partial(_call_message, f"call_{self.calls}", action))

    def _look_up(self, action: Action, facts: dict[str, str]) -> None:
        """Read calls that show every id a write uses before it is used: no id comes from nowhere."""
        for name, params in self.listers.items():
            if params and all(p in facts for p in params) and any(a in self.getters for a in action.kwargs):
                self._read(name, {p: facts[p] for p in params})
        for arg, value in action.kwargs.items():
            if arg in self.getters and isinstance(value, str):
                self._read(self.getters[arg], {arg: value})

    def _read(self, name: str, kwargs: dict) -> None:
        key = f"{name}:{json.dumps(kwargs, sort_keys=True)}"
        if key not in self.looked_up:
            self.looked_up.add(key)
            self._call(Action(name=name, kwargs=kwargs))

    def _structured(self, task: Task) -> None:
        identify = [a for a in task.actions if a.request is None]
        if not _says_all(task.user.requests[0], [v for a in identify for v in a.kwargs.values()]):
            self.steps.append(partial(_say, ASK_IDENTITY))
        for action in identify:
            self._call(action)
        for arg, getter in self.getters.items():  # open the identified user's profile: it lists their record ids
            if isinstance(task.metadata.get(arg), str):
                self._read(getter, {arg: task.metadata[arg]})
        for i, request in enumerate(task.user.requests):
            unsaid = [k for k, v in request.facts.items() if v not in request.text]
            actions = [a for a in task.actions if a.request == i]
            if unsaid and request.outcome == "done":
                self.steps.append(partial(_say, f"Happy to help with that. Could you tell me the {', '.join(unsaid)}?"))
            for action in actions:
                if action.name in self.writes:
                    self._look_up(action, request.revised().facts)
                if action.name in self.reads:  # a record it has already opened is not read again
                    self._read(action.name, action.kwargs)
                else:
                    self._call(action, request)
            if request.outcome == "refused":
                self.steps.append(partial(_say, f"I'm sorry, but I can't do that: our policy does not allow it. {ANYTHING_ELSE}"))
            elif request.outcome == "answered":
                self.steps.append(partial(_say, f"You asked: the answer is {request.answer}. {ANYTHING_ELSE}"))
            elif request.outcome == "done":
                self.steps.append(partial(_say, f"All done, that request is complete. {ANYTHING_ELSE}"))

    def _scripted(self, task: Task) -> None:
        """Per scripted user turn, its gold calls (``Action.request`` is the turn), then a reply that ends the turn."""
        for turn in range(len(task.user.script)):
            for action in task.actions:
                if action.request == turn:
                    self._call(action)
            self.steps.append(partial(_say, "Done."))

    def _single_response(self, task: Task) -> None:
        """Tasks scored on one response (ACEBench's): every gold call in one message, or else the outputs as its text."""
        if task.actions:
            calls = [ToolCall(id=f"call_{i + 1}", name=a.name, arguments=json.dumps(a.kwargs)) for i, a in enumerate(task.actions)]
            self.steps.append(partial(Message, role="assistant", tool_calls=calls))
        else:
            self.steps.append(partial(_say, " ".join(task.outputs)))

    def _generic(self, task: Task) -> None:
        for action in task.actions:
            if action.requestor == "user":  # the user's own device: only the user can do it (τ² telecom)
                self.steps.append(partial(_say, f"{ASK_USER_ACTION} {action.name}({json.dumps(action.kwargs)})"))
            else:
                self._call(action)
        told = "; ".join(task.outputs)
        close = self.absent.end if self.absent is not None else ANYTHING_ELSE
        self.steps.append(partial(_say, (f"Here is the information you asked for: {told}. " if told else "Everything is done. ") + close))


def _confirmation(action: Action) -> str:
    return f"To confirm, I will {describe(action)}. Shall I proceed? (yes/no)"


def _as_first_asked(action: Action, request: UserRequest | None) -> Action:
    """The gold write with the details the user gave before changing its mind (the action itself when the
    request has no revision): what the user first asks for."""
    if request is None or request.revision is None:
        return action
    back = {new: request.facts[key] for key, new in request.revision.facts.items() if key in request.facts}
    return action.model_copy(update={"kwargs": {k: back.get(v, v) if isinstance(v, str) else v for k, v in action.kwargs.items()}})


class _Confirm:
    """The confirmation of a write the user may revise, chosen when it is due: the revised write if the user
    has said its new details (a cooperative user does in its opening; a realistic one after the first
    confirmation), else the write as first asked for, followed once more by this step."""

    def __init__(self, first: Action, final: Action, asked: bool = False):
        self.first, self.final, self.asked = first, final, asked
        self.new = [v for k, v in final.kwargs.items() if isinstance(v, str) and first.kwargs.get(k) != v]

    def expand(self, messages: list[Message]) -> list[Step | _Confirm]:
        said = " ".join(m.content or "" for m in messages if m.role == "user")
        if self.asked or all(v in said for v in self.new):
            return [partial(_ask, self.final)]
        return [partial(_ask, self.first), _Confirm(self.first, self.final, asked=True)]


def _says_all(request: UserRequest, values: list) -> bool:
    """Whether every wording of the request contains each value (then asking for them again is a wasted turn)."""
    return bool(values) and all(str(v) in text for text in (request.text, *request.variants) for v in values)


def planned_turns(task: Task, tools: list[ToolSpec]) -> int:
    """The agent turns the oracle's plan for ``task`` takes against a user who changes its mind (each write the user
    may revise is confirmed twice): the reference the efficiency checks compare an agent's turns with."""
    steps = _Plan(task, tools).steps
    return len(steps) + sum(isinstance(step, _Confirm) for step in steps)


class OracleSession(AgentSession):
    def __init__(self, task: Task, tools: list[ToolSpec]):
        self.steps = _Plan(task, tools).steps
        self.next = 0

    async def act(self, messages: list[Message]) -> AgentTurn:
        while self.next < len(self.steps) and isinstance(self.steps[self.next], _Confirm):
            self.steps[self.next:self.next + 1] = self.steps[self.next].expand(messages)
        if self.next < len(self.steps):
            self.next += 1
            return AgentTurn(self.steps[self.next - 1]())
        return AgentTurn(_say(ANYTHING_ELSE))


class OracleAgent(Agent):
    """Solves each task from its gold actions, conversing as the policy requires."""

    name = "oracle"

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> AgentSession:
        return OracleSession(task, tools)


class _GoodbyeSession(AgentSession):
    async def act(self, messages: list[Message]) -> AgentTurn:
        return AgentTurn(_say("Goodbye!"))


class DoNothingAgent(Agent):
    """Says goodbye whatever happens: the floor every success metric must sit well above."""

    name = "none"

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> AgentSession:
        return _GoodbyeSession()
