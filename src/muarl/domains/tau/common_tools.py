"""The three tools every τ-bench world offers: a calculator, a scratchpad, and the hand-off to a human.

They touch no table. ``transfer_to_human_agents`` ends the episode (τ-bench stops the conversation there and
its reward replay skips it; it changes nothing, so skipping it or not gives the same state).
"""

from __future__ import annotations

from muarl.domains.base import State, ToolError, tool

_EXPRESSION_CHARS = frozenset("0123456789+-*/(). ")


@tool(kind="generic")
def calculate(state: State, expression: str) -> str:
    """Evaluate an arithmetic expression and return the result rounded to two decimals.

    Args:
        expression: The arithmetic to evaluate, e.g. '12.5 * 3 - 4'. Only digits, + - * /, parentheses,
            decimal points and spaces are allowed.
    """
    if not set(expression) <= _EXPRESSION_CHARS:
        raise ToolError("invalid characters in expression")
    if "**" in expression:  # τ-bench would evaluate powers; 9**9**9 would stall a training run, so refuse them
        raise ToolError("powers (**) are not supported; use repeated multiplication")
    try:
        # the character whitelist above leaves no names to look up, so this can only do arithmetic
        value = eval(expression, {"__builtins__": None}, {})
        return str(round(float(value), 2))
    except Exception as exc:  # noqa: BLE001 - τ-bench shows the Python error text to the agent
        raise ToolError(str(exc)) from None


@tool(kind="think")
def think(state: State, thought: str) -> str:
    """Write down a thought. Nothing is looked up and nothing changes; use it to reason through a hard step.

    Args:
        thought: The reasoning to record.
    """
    return ""


@tool(kind="generic", terminal=True)
def transfer_to_human_agents(state: State, summary: str) -> str:
    """Hand the customer over to a human agent, with a summary of their issue. Do this only when the user
    explicitly asks for a human, or when their request cannot be handled with the tools you have.

    Args:
        summary: A short summary of the customer's issue for the human agent.
    """
    return "Transfer successful"
