"""A tiny shop world for tests that must not depend on a real domain: users, orders, one write tool.

``load`` has the domain-registry signature, so a test can serve it with
``muarl serve-mcp --domain shop_world:load`` (with ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

from muarl.domains.base import BaseData, Domain, State, ToolError, ToolRegistry, tool
from muarl.domains.spec import domain_factory
from muarl.types import Action, Task, UserScenario

POLICY = (
    "You are a shop assistant. Identify the user by email with find_user_id_by_email before changing "
    "anything. Before cancelling an order, list its details and get an explicit yes."
)


@tool("read")
def find_user_id_by_email(state: State, email: str) -> str:
    """Find a user's id from their email.

    Args:
        email: The user's email address.
    """
    for user_id, user in state.table("users").items():
        if user["email"] == email:
            return user_id
    raise ToolError("user not found")


@tool("read")
def get_order(state: State, order_id: str) -> dict:
    """Get an order's details.

    Args:
        order_id: The order id, such as '#W1'.
    """
    order = state.get("orders", order_id)
    if order is None:
        raise ToolError("order not found")
    return order


@tool("write")
def cancel_order(state: State, order_id: str, reason: str) -> dict:
    """Cancel a pending order.

    Args:
        order_id: The order id, such as '#W1'.
        reason: Why the user cancels.
    """
    if ("orders", order_id) not in state:
        raise ToolError("order not found")
    order = state.edit("orders", order_id)
    if order["status"] != "pending":
        raise ToolError(f"order is {order['status']}, only pending orders can be cancelled")
    order["status"] = "cancelled"
    order["reason"] = reason
    return order


@tool("generic", terminal=True)
def transfer_to_human_agents(state: State, summary: str) -> str:
    """Hand the conversation to a human agent.

    Args:
        summary: What the user needs.
    """
    return "Transfer successful"


SEED = {
    "users": {"ann_lee_1": {"email": "ann@example.com", "name": "Ann Lee"}},
    "orders": {
        "#W1": {"user_id": "ann_lee_1", "status": "pending", "item": "lamp"},
        "#W2": {"user_id": "ann_lee_1", "status": "delivered", "item": "desk"},
    },
}

TASKS = [
    Task(
        id="cancel_w1", domain="shop", split="train",
        user=UserScenario(
            instruction="You are Ann Lee (ann@example.com). Cancel your order #W1 because you no longer need it.",
            known_info={"email": "ann@example.com", "order": "#W1"}, goal="cancel order #W1",
        ),
        actions=[Action(name="cancel_order", kwargs={"order_id": "#W1", "reason": "no longer needed"})],
    ),
    Task(
        id="ask_w2", domain="shop", split="test",
        user=UserScenario(instruction="You are Ann Lee (ann@example.com). Ask what the status of order #W2 is."),
        outputs=["delivered"],
    ),
]


@domain_factory
def load(data_dir: str | None = None) -> Domain:
    tools = ToolRegistry.from_functions([find_user_id_by_email, get_order, cancel_order, transfer_to_human_agents])
    return Domain(
        name="shop", base=BaseData(SEED), tools=tools, policy=POLICY,
        task_loader=lambda split: [t for t in TASKS if t.split == split],
    )


# ---------------------------------------------------------------- scripted parties for loop-level tests

import json  # noqa: E402

from muarl.models.base import Agent, AgentSession, AgentTurn  # noqa: E402
from muarl.types import Message, ToolCall, ToolSpec  # noqa: E402
from muarl.users.base import UserSession, UserSimulator, UserTurn, stop_reason  # noqa: E402


def call(name: str, arguments: dict | str, call_id: str | None = None) -> Message:
    """An assistant message with one tool call (``arguments`` as a dict, or a raw string to test malformed JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Message(role="assistant", content=None, tool_calls=[ToolCall(id=call_id or f"call_{name}", name=name, arguments=raw)])


def say(text: str) -> Message:
    return Message(role="assistant", content=text)


class PlanAgent(Agent):
    """Plays a fixed list of assistant messages, one per turn, whatever it is told."""

    name = "plan"

    def __init__(self, plan: list[Message]):
        self.plan = plan

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> AgentSession:
        plan = list(self.plan)

        class _Session(AgentSession):
            async def act(self, messages: list[Message]) -> AgentTurn:
                return AgentTurn(plan.pop(0) if plan else say("Goodbye."))

        return _Session()


class ListUser(UserSimulator):
    """Says a fixed list of lines in order; the last should carry ###STOP###."""

    name = "list"

    def __init__(self, lines: list[str]):
        self.lines = lines

    def new_session(self, task: Task, seed: int) -> UserSession:
        lines = list(self.lines)

        class _Session(UserSession):
            async def reply(self, history: list[Message]) -> UserTurn:
                text = lines.pop(0) if lines else "###STOP###"
                return UserTurn(text=text, done=stop_reason(text))

        return _Session()
