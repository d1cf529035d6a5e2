"""BFCL's function calls as text, read with :mod:`ast` and written back, never evaluated.

BFCL writes its possible answers as Python call expressions (``mv(source='a.pdf', destination='temp')``,
sometimes with positional arguments: ``sort('final_report.pdf')``) and its checker runs them, and models'
decoded outputs, with ``eval``. muarl parses them instead: the expression must be a single call of a bare
function name whose arguments are literals, and it is turned into a name and keyword arguments (positional
ones bound to their parameter names by the caller, who knows the function's signature).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


class CallSyntaxError(ValueError):
    """A call string is not ``name(literal, ..., key=literal, ...)``."""


@dataclass(frozen=True)
class ParsedCall:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def parse_call(text: str) -> ParsedCall:
    """``"cd(folder='document')"`` -> ParsedCall("cd", (), {"folder": "document"}); literals only."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise CallSyntaxError(f"not a Python call expression: {text!r} ({exc.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallSyntaxError(f"not a call of a function name: {text!r}")
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except ValueError:
        raise CallSyntaxError(f"arguments are not literals: {text!r}") from None
    if len(kwargs) != len(node.keywords):
        raise CallSyntaxError(f"**-arguments are not allowed: {text!r}")
    return ParsedCall(node.func.id, args, kwargs)


def format_call(name: str, kwargs: dict[str, Any]) -> str:
    """The call as BFCL's checker reads a decoded function-calling response: ``name(key=repr(value), ...)``."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in kwargs.items())})"
