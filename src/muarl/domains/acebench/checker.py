"""ACEBench's verdicts on one answer: the AST match of normal tasks and the phrase checks of special ones.

ACEBench scores a model's answer text, ``[Api(key='value', ...), ...]``, against a possible answer. The rules
here are its checker's, reimplemented (not imported: its code evaluates parts of model text), including the
parts that are lenient on purpose or by accident, because a score is only comparable with the leaderboard if
every entry gets the same verdict (``bench/acebench_agreement.py`` measures that against the upstream code):

* all whitespace is removed from the answer text before it is parsed;
* function names must match with the same multiplicity (``Api_1``/``Api_2`` keys of a possible answer are two
  calls of ``Api``); every parameter the model gives must be in the schema and in the possible answer, and the
  schema's required ones must be given;
* strings match when the possible answer, lower-cased and without spaces and ``,./-_*^``, is contained in the
  model's value so normalised; lists must be equal after that normalisation; objects are compared key by key
  (same number of keys; a leaf matches when the expected value's text occurs in the model value's text);
* a value whose Python type is not the schema's (``number`` is read as ``int``), but is the possible answer's,
  is accepted without comparing it; integers, floats and booleans of the schema's type are not compared at all.

Special tasks are scored on the answer text: ``incomplete`` needs "Missing necessary parameters", the API's
name and each missing parameter; ``error_param`` needs "There is incorrect value" and each wrong value;
``irrelevant`` needs "the limitations of the function".
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from muarl.domains.base import Domain
from muarl.types import Message, RewardInfo, Task

Call = dict[str, dict[str, Any]]  # {function name: {argument: value}}


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error: str = ""


class AnswerSyntaxError(ValueError):
    """The answer is not a list of calls in ACEBench's syntax."""


# ---------------------------------------------------------------- reading answers (never evaluated)

_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _literal(node: ast.AST) -> Any:
    """The value an argument's syntax denotes, read from the tree: constants, containers, names as strings,
    arithmetic on numbers; anything else is refused."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)):
        return -node.operand.value  # any unary operator reads as a minus sign, as in ACEBench
    if isinstance(node, ast.List):
        return [_literal(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _literal(node.left), _literal(node.right)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)) and not isinstance(left, bool) and not isinstance(right, bool):
            return _ARITHMETIC[type(node.op)](left, right)
        raise AnswerSyntaxError(f"arithmetic on non-numbers: {ast.unparse(node)}")
    if isinstance(node, ast.Call):
        return _call(node) if node.keywords else {_dotted(node.func): {}}
    if isinstance(node, ast.Subscript):
        return f"{ast.unparse(node.value)}[{ast.unparse(node.slice)}]"
    raise AnswerSyntaxError(f"unsupported syntax {type(node).__name__}")


def _dotted(func: ast.AST) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _call(node: ast.Call) -> Call:
    return {_dotted(node.func): {kw.arg: _literal(kw.value) for kw in node.keywords}}


def parse_answer(text: str, squeeze: bool = True) -> list[Call]:
    """The calls of an answer text ``[Api(a=1), Other(b='x')]``, whitespace removed first as ACEBench does when
    it scores one answer (``squeeze``; its agent scenarios run the calls as written)."""
    squeezed = "".join(text.split()) if squeeze else text.strip()
    try:
        tree = ast.parse(squeezed, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise AnswerSyntaxError(f"not a list of calls: {type(exc).__name__}") from None
    if not isinstance(tree.body, (ast.List, ast.Tuple, ast.Set)):
        raise AnswerSyntaxError("the answer is not a bracketed list of calls")
    calls = []
    for elem in tree.body.elts:
        if not isinstance(elem, ast.Call):
            raise AnswerSyntaxError(f"list item is not a call: {ast.unparse(elem)[:80]}")
        calls.append(_call(elem))
    return calls


def _squeeze(value: Any) -> Any:
    """A JSON value with all whitespace removed from its strings, as ACEBench's parsing of the text form does."""
    if isinstance(value, str):
        return "".join(value.split())
    if isinstance(value, list):
        return [_squeeze(v) for v in value]
    if isinstance(value, dict):
        return {_squeeze(k): _squeeze(v) for k, v in value.items()}
    return value


def to_python_literal(value: Any) -> str:
    """A JSON value written as the Python literal ACEBench's answer syntax expects (``True``, ``None``...)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{to_python_literal(k)}: {to_python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_python_literal(v) for v in value) + "]"
    return repr(value)


def render_calls(calls: Sequence[Call]) -> str:
    """Calls in ACEBench's answer syntax, e.g. for its own checker to read."""
    parts = []
    for call in calls:
        (name, args), = call.items()
        parts.append(f"{name}(" + ", ".join(f"{k}={to_python_literal(v)}" for k, v in args.items()) + ")")
    return "[" + ", ".join(parts) + "]"


def first_answer(messages: Sequence[Message]) -> Message | None:
    """The agent's answer: its first message (ACEBench scores one response per entry)."""
    return next((m for m in messages if m.role == "assistant"), None)


def answer_calls(answer: Message, squeeze: bool = True) -> list[Call]:
    """The calls an answer makes: its tool calls (arguments as JSON), else its text in ACEBench's syntax; with
    whitespace removed as ACEBench does when it scores one answer (``squeeze``)."""
    keep = _squeeze if squeeze else (lambda value: value)
    if answer.tool_calls:
        calls = []
        for tc in answer.tool_calls:
            try:  # the episode loop's own parser: NaN, lone surrogates and absurd nesting are refused, not crashed on
                args = tc.parsed_arguments()
            except ValueError as exc:
                raise AnswerSyntaxError(f"arguments of {tc.name}: {exc}") from None
            calls.append({keep(tc.name): keep(args)})
        return calls
    return parse_answer(answer.content or "", squeeze)


def answer_text(answer: Message | None) -> str:
    """The answer as ACEBench's result files hold it: the text, or the tool calls in its syntax."""
    if answer is None:
        return ""
    if answer.tool_calls:
        try:
            return render_calls(answer_calls(answer))
        except AnswerSyntaxError:
            return " ".join(f"{tc.name}({tc.arguments})" for tc in answer.tool_calls)
    return answer.content or ""


# ---------------------------------------------------------------- the AST match of normal tasks

_TYPES: dict[str, Any] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list, "dict": dict,
    "any": str, "list": list, "object": dict, "objectArray": list, "list(string)": list, "list(enum)": list,
    "int": int, "enum": "enum", "number": int,
}
_NESTED = {"array", "tuple", "list(string)", "list(enum)", "object", "objectArray"}
_NOISE = re.compile(r"[ ,./\-_*^]")


def normalise(text: str) -> str:
    return _NOISE.sub("", text).lower().replace("'", '"')


def _answer_type(expected: Any) -> type | None:
    return None if expected == "" else type(expected)


def _as_bool(value: Any) -> Any:
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


def _type_ok(value: Any, expected: Any, py_type: Any, nested: Any) -> tuple[bool, bool]:
    """(type accepted, value exempt from comparison) for one argument."""
    answer_type = _answer_type(expected)
    exempt = answer_type is not None and answer_type is not py_type
    value = _as_bool(value)
    ok = True
    if type(value) is py_type:
        if nested is None:
            return True, exempt
        if not isinstance(expected, (str, list, dict, tuple)):
            raise _Uncheckable(f"possible answer {expected!r} is not a container")
        for item in expected:
            if not isinstance(item, list) or all(_type_ok(v, item, nested, None)[0] for v in value):
                return True, exempt
        ok = False
    if answer_type is not None and (type(value) is answer_type or expected == value):
        return ok, True
    return False, exempt


def _dict_match(value: Any, expected: Mapping[str, Any]) -> bool:
    if not isinstance(value, dict) or len(value) != len(expected):
        return False
    for key, item in value.items():
        item = _as_bool(item)
        if key not in expected:
            return False
        want = expected[key]
        if isinstance(want, dict):
            if not _dict_match(item, want):
                return False
            continue
        got = normalise(item) if isinstance(item, str) else item
        want = normalise(want) if isinstance(want, str) else want
        if str(want) not in str(got):
            return False
    return True


def _list_match(value: list, expected: list) -> bool:
    norm = [normalise(v) if isinstance(v, str) else v for v in value]
    return norm == [normalise(v) if isinstance(v, str) else v for v in expected]


class _Uncheckable(Exception):
    """The possible answer or schema has a shape ACEBench's checker cannot handle (it would crash)."""


def _check_call(schema: Mapping[str, Any] | None, got: Call, want: Call) -> Verdict:
    if schema is None:
        raise _Uncheckable("no schema for the function")
    expected = next(iter(want.values()))
    params = schema.get("parameters")
    if params is None:
        raise _Uncheckable("schema without parameters")
    given = next(iter(got.values()))
    if given == {} and params == {}:
        return Verdict(True)
    if given == {} or params == {}:
        return Verdict(False, "no arguments")
    if expected == params.get("properties"):
        return Verdict(True)
    if expected == {}:
        return Verdict(False, "no arguments expected")
    name = schema["name"]
    if name not in got:
        return Verdict(False, f"wrong function: expected {name}")
    props, required = params.get("properties", {}), params.get("required", [])
    for p in required:
        if p not in given:
            return Verdict(False, f"missing required argument {p}")
    for p, value in given.items():
        if p not in props or p not in expected:
            return Verdict(False, f"unexpected argument {p}")
        kind = props[p].get("type")
        if kind not in _TYPES:
            raise _Uncheckable(f"type {kind!r} of {p}")
        py_type, nested = _TYPES[kind], None
        if kind in _NESTED:
            item_kind = (props[p].get("items") or {}).get("type") if isinstance(props[p].get("items"), dict) else None
            if item_kind is None:
                item_kind = "string" if "string" in kind else "enum" if "enum" in kind else "dict"
            if item_kind not in _TYPES:
                raise _Uncheckable(f"item type {item_kind!r} of {p}")
            nested = _TYPES[item_kind]
        if kind == "tuple" and isinstance(value, tuple):
            value = list(value)
        if kind == "float" and type(value) is int:
            value = float(value)
        ok, exempt = _type_ok(value, expected[p], py_type, nested)
        if not ok:
            return Verdict(False, f"wrong type for {p}")
        if exempt:
            continue
        if py_type is dict:
            if not isinstance(expected[p], dict):
                raise _Uncheckable(f"expected value of {p} is not an object")
            if not _dict_match(value, expected[p]):
                return Verdict(False, f"wrong value for {p}")
        elif py_type is list and nested is dict:
            if kind == "objectArray":
                raise _Uncheckable("objectArray")
            if len(value) != len(expected[p]):
                return Verdict(False, f"wrong number of items in {p}")
            if not all(isinstance(w, dict) or _raise_uncheckable(p) for w in expected[p]):
                return Verdict(False, f"wrong value for {p}")
            if not all(_dict_match(v, w) for v, w in zip(value, expected[p])):
                return Verdict(False, f"wrong value for {p}")
        elif py_type is str:
            if normalise(expected[p]) not in normalise(value):
                return Verdict(False, f"wrong value for {p}")
        elif py_type is list:
            if not _list_match(value, expected[p]):
                return Verdict(False, f"wrong value for {p}")
    return Verdict(True)


def _raise_uncheckable(p: str) -> bool:
    raise _Uncheckable(f"expected items of {p} are not objects")


def _schema(functions: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    """The function a possible-answer key names: the first whose name occurs in the key (as ACEBench finds it)."""
    return next((f for f in functions if f["name"] in key), None)


def match_calls(functions: Sequence[Mapping[str, Any]], calls: Sequence[Call], possible: Mapping[str, Any]) -> Verdict:
    """One possible answer (``{Api: {arg: value}}``, repeated calls as ``Api_1``, ``Api_2``) against the calls."""
    if len(calls) != len(possible):
        return Verdict(False, "wrong number of calls")
    wanted = [({re.sub(r"_\d+$", "", key): args}, key) for key, args in possible.items()]
    got_names = Counter(next(iter(c)) for c in calls)
    want_names = Counter(next(iter(w)) for w, _ in wanted)
    if got_names != want_names:
        return Verdict(False, f"functions {dict(got_names)} instead of {dict(want_names)}")
    for want, key in wanted:
        name = next(iter(want))
        schema = _schema(functions, key)
        verdicts = [_check_call(schema, call, want) for call in calls if next(iter(call)) == name]
        if not any(v.valid for v in verdicts):
            return verdicts[-1] if verdicts else Verdict(False, f"no call of {name}")
    return Verdict(True)


def check_normal(functions: Sequence[Mapping[str, Any]], answer: Message | None, possible: Any) -> Verdict:
    """ACEBench's verdict on a normal task's answer (any of the possible answers may match)."""
    if answer is None:
        return Verdict(False, "no answer")
    try:
        calls = answer_calls(answer)
    except AnswerSyntaxError as exc:
        return Verdict(False, f"wrong output format: {exc}")
    last = Verdict(False, "no possible answer")
    for option in possible if isinstance(possible, list) else [possible]:
        try:
            last = match_calls(functions, calls, option)
        except _Uncheckable as exc:
            last = Verdict(False, f"uncheckable by ACEBench's rules: {exc}")
        if last.valid:
            return last
    return last


# ---------------------------------------------------------------- the phrase checks of special tasks

MISSING = "Missing necessary parameters"
INCORRECT = "There is incorrect value"
CANNOT = "the limitations of the function"


def check_special(kind: str, text: str, possible: Any) -> Verdict:
    """``kind``: incomplete | error_param | irrelevant; ``text``: the answer as ACEBench reads it."""
    if kind == "irrelevant":
        return Verdict(CANNOT in text, "" if CANNOT in text else "did not say the request is beyond the functions")
    phrase = MISSING if kind == "incomplete" else INCORRECT
    for name, values in possible.items():
        if phrase not in text:
            return Verdict(False, f"did not say {phrase!r}")
        if kind == "incomplete" and name not in text:
            return Verdict(False, f"did not name the API {name}")
        missing = [v for v in values if v not in text]
        if missing:
            return Verdict(False, f"did not name {missing}")
    return Verdict(True)


def special_answer(kind: str, possible: Any) -> str:
    """A text that states a special task's possible answer in the phrasing the checks look for."""
    if kind == "irrelevant":
        return f"Due to {CANNOT}, I cannot solve this problem."
    if kind == "incomplete":
        return "; ".join(f"{MISSING} ({','.join(values)}) for the api ({name})" for name, values in possible.items())
    return "; ".join(f"{INCORRECT} ({','.join(values)}) for the parameters ({name}) in the conversation history." for name, values in possible.items())


# ---------------------------------------------------------------- the agent category: end state and process


def check_agent(final: Sequence[Mapping[str, Any]], possible: Sequence[Mapping[str, Any]]) -> Verdict:
    """ACEBench's end-to-end verdict: ``final`` is each involved scenario class's saved attributes (empty when the
    agent never made a call), ``possible`` the expected ones. Every attribute compared must equal the expected one;
    of an expected mapping (the inbox, the accounts) only the keys it lists are compared."""
    if len(final) != len(possible):
        return Verdict(False, "wrong number of classes")
    for expected in possible:
        got = next((m for m in final if set(m) == set(expected)), None)
        if got is None:
            continue  # ACEBench keeps the previous class's verdict here
        (name, want), = expected.items()
        for attr, value in next(iter(got.values())).items():
            if attr not in want:
                return Verdict(False, f"{name}.{attr} is not in the possible answer")
            if isinstance(want[attr], dict):
                wrong = [k for k, v in want[attr].items() if k not in value or value[k] != v]
                if wrong:
                    return Verdict(False, f"{name}.{attr} differs at {wrong[:3]}")
            elif want[attr] != value:
                return Verdict(False, f"{name}.{attr} differs")
    return Verdict(True)


def _literal_text(value: Any) -> str:
    """A value as agents write it in ACEBench's call syntax: strings in single quotes, unescaped."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, list):
        return "[" + ", ".join(_literal_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal_text(k)}: {_literal_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def milestone_text(message: Message) -> str:
    """An agent's tool-call message as one step of ACEBench's process (``[api(key='value')]``)."""
    parts = []
    for tc in message.tool_calls or []:
        try:
            args = tc.parsed_arguments()
        except ValueError:  # the loop refused these arguments: the step shows the call without them
            args = {}
        parts.append(f"{tc.name}(" + ", ".join(f"{k}={_literal_text(v)}" for k, v in args.items()) + ")")
    return "[" + ", ".join(parts) + "]"


def process_accuracy(steps: Sequence[str], milestones: Sequence[Any]) -> float:
    """The share of a milestone path found, in order, among the agent's steps (the best path if several). As in
    ACEBench, the share is rounded to three places only when the milestones are a list of paths (to pick the best)."""
    several = bool(milestones) and isinstance(milestones[0], list)
    paths = milestones if several else [milestones]
    best = 0.0
    for path in paths:
        if not path:
            return 1.0
        found, i = 0, 0
        for stone in path:
            while i < len(steps):
                i += 1
                if steps[i - 1].strip() == stone.strip():
                    found += 1
                    break
        best = max(best, round(found / len(path), 3) if several else found / len(path))
    return best


# ---------------------------------------------------------------- the reward


def verdict(task: Task, messages: Sequence[Message]) -> Verdict:
    """ACEBench's verdict on an episode of one of its normal or special entries."""
    answer = first_answer(messages)
    category = task.metadata["category"]
    possible = task.metadata["possible_answer"]
    if category.startswith("special_"):
        return check_special(category.removeprefix("special_"), answer_text(answer), possible)
    return check_normal(task.metadata["functions"], answer, possible)


def acebench_reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
    """1.0 when ACEBench's checker would accept the agent's answer (or, for agent entries, its end state); the answer,
    the reason and an agent entry's process accuracy are in ``details``."""
    if task.metadata["category"].startswith("agent_"):
        return _agent_reward(domain, task, final_hash, messages)
    v = verdict(task, messages)
    return RewardInfo(reward=float(v.valid), success=v.valid, state_match=True, final_hash=final_hash, gold_hash=final_hash,
                      details={"answer": answer_text(first_answer(messages)), "error": v.error})


def _agent_reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message]) -> RewardInfo:
    """End-to-end verdict on the state the agent's calls reached (rebuilt by running them again on the task's
    starting state, which must give the episode's final hash), and process accuracy over its call messages."""
    state = domain.rerun(task, messages)  # type: ignore[attr-defined]
    steps = [milestone_text(m) for m in messages if m.role == "assistant" and m.tool_calls]
    if state.hash() != final_hash:
        v = Verdict(False, "the calls do not reproduce the episode's final state")
    else:
        final = domain.class_view(state, task) if steps else []  # type: ignore[attr-defined]
        v = check_agent(json.loads(json.dumps(final)), task.metadata["possible_answer"])
    process = 1.0 if v.valid else process_accuracy(steps, task.metadata["milestones"])
    return RewardInfo(reward=float(v.valid), success=v.valid, state_match=v.valid, final_hash=final_hash, gold_hash=final_hash,
                      details={"error": v.error, "process_accuracy": process, "steps": steps})
