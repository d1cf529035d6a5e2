"""Hand-scripted agents and users for driving the real episode loop in core tests.

``ScriptAgent`` says a fixed list of assistant messages in order (then a closing line forever), optionally
with a fixed usage per turn or an exception at some turn of each episode; ``LineUser`` says fixed lines in order (then its
last line forever), ending the conversation when a line carries a stop token, or raising at some reply.
Both record what they were shown, so tests can check the views the loop builds.
"""

from __future__ import annotations

from collections.abc import Sequence

from muarl.models.base import Agent, AgentSession, AgentTurn
from muarl.types import Message, Task, ToolCall, ToolSpec, Usage
from muarl.users.base import UserSession, UserSimulator, UserTurn, stop_reason


def say(text: str | None) -> Message:
    return Message(role="assistant", content=text)


def calls(*specs: tuple[str, str], content: str | None = None) -> Message:
    """An assistant message with tool calls given as (name, raw JSON arguments); ids call_0, call_1, …"""
    return Message(role="assistant", content=content,
                   tool_calls=[ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(specs)])


class ScriptAgent(Agent):
    name = "script"

    def __init__(self, turns: Sequence[Message], usage: Usage | None = None, fail_at: int | None = None,
                 error: Exception | None = None, closing: str = "Is there anything else?"):
        self.turns = list(turns)
        self.usage = usage
        self.fail_at = fail_at
        self.error = error
        self.closing = closing
        self.seen: list[list[Message]] = []  # the messages each act() got, per turn
        self.sessions = 0  # episodes started
        self.tools: list[ToolSpec] = []

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> AgentSession:
        agent = self
        agent.tools = tools
        agent.sessions += 1
        turns = iter(self.turns)

        class _Session(AgentSession):
            acted = 0

            async def act(self, messages: list[Message]) -> AgentTurn:
                agent.seen.append(list(messages))
                self.acted += 1
                if agent.fail_at is not None and self.acted - 1 == agent.fail_at:
                    raise agent.error or RuntimeError("scripted agent failure")
                message = next(turns, None) or say(agent.closing)
                return AgentTurn(message, agent.usage.model_copy() if agent.usage else Usage(requests=1))

        return _Session()


class LineUser(UserSimulator):
    name = "lines"

    def __init__(self, lines: Sequence[str], fail_at: int | None = None, error: Exception | None = None):
        self.lines = list(lines)
        self.fail_at = fail_at
        self.error = error
        self.histories: list[list[Message]] = []  # what each reply() was shown

    def new_session(self, task: Task, seed: int, tools: Sequence[ToolSpec] = ()) -> UserSession:
        user = self

        class _Session(UserSession):
            async def reply(self, history: list[Message]) -> UserTurn:
                user.histories.append(list(history))
                i = len(user.histories) - 1
                if user.fail_at is not None and i == user.fail_at:
                    raise user.error or RuntimeError("scripted user failure")
                text = user.lines[min(i, len(user.lines) - 1)]
                return UserTurn(text=text, done=stop_reason(text))

        return _Session()
