"""Tools, state and gold replay (``muarl.domains.base``), on a small world built here.

Specification: a tool's JSON schema comes from its signature and Google-style docstring (types, Optional →
nullable and not required, Literal → enum, list[str] → array of strings, descriptions from Args); calls
whose arguments do not fit are refused with a message naming the problem; a State is a copy-on-write view
that never changes the BaseData, whose hash depends only on the records' content; gold replay fails loudly
on a broken task, and gold hashes are computed once.
"""

from __future__ import annotations

from typing import Literal, Optional

import pytest

from muarl.domains.base import (
    ArgumentError, BaseData, Domain, GoldReplayError, State, ToolError, ToolRegistry, make_tool, parse_docstring, tool,
)
from muarl.types import Action, Task, UserScenario

REPLAYS = []


@tool("write")
def set_color(state: State, item_id: str, color: Literal["red", "blue"], tags: list[str], note: Optional[str] = None,
              count: int = 1, weight: float = 1.0, urgent: bool = False) -> dict:
    """Paint an item.

    Longer explanation that is part of the description.

    Args:
        item_id: The item's id,
            continued on a second line.
        color: The new color.
        tags: Labels to attach.
        note: Why, if anyone asks.
        count: How many coats.
        weight: Paint weight.
        urgent: Whether it is urgent.

    Returns:
        The item.
    """
    REPLAYS.append(item_id)
    if ("items", item_id) not in state:
        raise ToolError(f"no item {item_id}")
    record = state.edit("items", item_id)
    record["color"] = color
    return record


@tool("read")
def get_item(state: State, item_id: str) -> dict:
    """Look an item up.

    Args:
        item_id: The item's id.
    """
    return state.get("items", item_id)


@tool("generic", terminal=True, name="hand_over")
def _hand_over(state: State) -> str:
    """Give up."""
    return "bye"


def base() -> BaseData:
    return BaseData({"items": {"i1": {"color": "red", "tags": ["a"]}, "i2": {"color": "blue", "tags": []}}, "logs": {}})


def world(actions: list[Action]) -> Domain:
    task = Task(id="t1", domain="w", split="test", user=UserScenario(instruction="x"), actions=actions)
    return Domain(name="w", base=base(), tools=ToolRegistry.from_functions([set_color, get_item, _hand_over]),
                  policy="Be nice.", task_loader=lambda split: [task])


# ---------------------------------------------------------------- schema derivation


def test_schema_is_derived_from_signature_and_docstring():
    spec = make_tool(set_color, kind="write").spec
    assert spec.name == "set_color" and spec.kind == "write" and not spec.terminal
    assert spec.description == "Paint an item. Longer explanation that is part of the description."
    props = spec.parameters["properties"]
    assert spec.parameters["type"] == "object"
    assert spec.parameters["required"] == ["item_id", "color", "tags"]
    assert props["item_id"] == {"type": "string", "description": "The item's id, continued on a second line."}
    assert props["color"] == {"type": "string", "enum": ["red", "blue"], "description": "The new color."}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "Labels to attach."}
    assert props["note"] == {"type": "string", "nullable": True, "description": "Why, if anyone asks."}
    assert props["count"]["type"] == "integer" and props["weight"]["type"] == "number" and props["urgent"]["type"] == "boolean"
    assert "state" not in props


def test_registry_reads_decorator_metadata_and_keeps_order():
    reg = ToolRegistry.from_functions([set_color, get_item, _hand_over])
    assert reg.names() == ["set_color", "get_item", "hand_over"] and len(reg) == 3
    assert reg["hand_over"].terminal and reg["hand_over"].spec.parameters == {"type": "object", "properties": {}, "required": []}
    assert reg["get_item"].kind == "read" and "nope" not in reg and reg.get("nope") is None
    with pytest.raises(ValueError, match="duplicate tool name"):
        reg.add(make_tool(get_item))
    with pytest.raises(TypeError, match="not marked with @tool"):
        ToolRegistry.from_functions([base])


def test_an_unlisted_tool_runs_but_is_not_offered():
    reg = ToolRegistry.from_functions([set_color, get_item])
    held_out = ToolRegistry(reg, unlisted=["get_item"])
    assert [s.name for s in held_out.specs()] == ["set_color"]
    assert "get_item" in held_out and held_out.names() == ["set_color", "get_item"]


def test_unannotated_or_unsupported_parameters_are_rejected():
    def untyped(state, x):
        """Nope."""

    def weird(state, x: set):
        """Nope."""

    with pytest.raises(TypeError, match="needs a type annotation"):
        make_tool(untyped)
    with pytest.raises(TypeError, match="cannot derive a JSON schema"):
        make_tool(weird)


def test_parse_docstring_stops_args_at_the_next_section():
    summary, args = parse_docstring("Do it.\n\nArgs:\n    a (int): First.\n    b: Second\n        more.\n\nRaises:\n    c: not an arg\n")
    assert summary == "Do it." and args == {"a": "First.", "b": "Second more."}


# ---------------------------------------------------------------- argument validation


@pytest.mark.parametrize(("arguments", "message"), [
    ({"item_id": "i1", "color": "red", "tags": [], "size": 3}, r"unexpected argument\(s\) \['size'\]"),
    ({"item_id": "i1", "tags": []}, r"missing required argument\(s\) \['color'\]"),
    ({"item_id": 5, "color": "red", "tags": []}, "'item_id' of set_color: expected string, got int"),
    ({"item_id": "i1", "color": "green", "tags": []}, "'green' is not one of \\['red', 'blue'\\]"),
    ({"item_id": "i1", "color": "red", "tags": ["a", 2]}, "item 1: expected string"),
    ({"item_id": "i1", "color": "red", "tags": "a"}, "expected array"),
    ({"item_id": "i1", "color": "red", "tags": [], "count": True}, "expected integer, got bool"),
    ({"item_id": "i1", "color": "red", "tags": [], "count": 1.5}, "expected integer, got float"),
    ({"item_id": "i1", "color": "red", "tags": [], "weight": False}, "expected number, got bool"),
    ({"item_id": "i1", "color": "red", "tags": [], "urgent": 1}, "expected boolean"),
    ({"item_id": None, "color": "red", "tags": []}, "expected string, got null"),
])
def test_misfitting_arguments_are_refused_with_the_reason(arguments, message):
    with pytest.raises(ArgumentError, match=message):
        make_tool(set_color)(State(base()), arguments)


def test_fitting_arguments_run_and_render_json():
    t = make_tool(set_color)
    state = State(base())
    out = t(state, {"item_id": "i1", "color": "blue", "tags": ["x"], "note": None, "count": 2, "weight": 3, "urgent": True})
    assert out == '{"color": "blue", "tags": ["a"]}'  # ints are numbers; None is fine where nullable
    assert make_tool(_hand_over)(state, {}) == "bye"  # strings are returned as they are


def test_an_untyped_tool_runs_on_any_values_and_refuses_what_its_code_cannot_take():
    t = make_tool(set_color, typed=False)
    state = State(base())
    assert t(state, {"item_id": "i1", "color": 7, "tags": "x"}) == '{"color": 7, "tags": ["a"]}'  # stored as given
    with pytest.raises(ToolError, match="^unhashable type: 'list'$") as err:  # the code's own failure is the refusal
        t(state, {"item_id": ["i1"], "color": "red", "tags": []})
    assert type(err.value) is ToolError
    with pytest.raises(ArgumentError, match="missing required argument"):  # names are still checked
        t(state, {"item_id": "i1"})
    with pytest.raises(ArgumentError, match="expected string"):  # and validate() is still the whole schema
        t.validate({"item_id": "i1", "color": 7, "tags": []})


# ---------------------------------------------------------------- state


def test_edits_are_private_to_the_state():
    b = base()
    s1, s2 = State(b), State(b)
    s1.edit("items", "i1")["color"] = "green"
    s1.edit("items", "i1")["tags"].append("b")
    s1.put("logs", "l1", {"msg": "hi"})
    assert s1.get("items", "i1") == {"color": "green", "tags": ["a", "b"]}
    assert s2.get("items", "i1") == {"color": "red", "tags": ["a"]} == b.tables["items"]["i1"]
    assert ("logs", "l1") in s1 and ("logs", "l1") not in s2 and b.tables["logs"] == {}
    assert b.recompute_digest() == b.digest
    with pytest.raises(KeyError, match="no record 'zz'"):
        s1.edit("items", "zz")
    with pytest.raises(KeyError, match="no table 'nope'"):
        s1.table("nope")


def test_hash_depends_only_on_record_content():
    b = base()
    fresh = State(b).hash()
    s = State(b)
    s.edit("items", "i1")["color"] = "green"
    changed = s.hash()
    assert changed != fresh
    s.edit("items", "i1")["color"] = "red"  # reverted
    assert s.hash() == fresh
    s.put("items", "i2", {"color": "blue", "tags": []})  # the same content, put anew
    assert s.hash() == fresh

    a, c = State(b), State(b)  # the same changes in another order
    a.edit("items", "i1")["color"] = "green"
    a.put("logs", "x", 1)
    c.put("logs", "x", 1)
    c.edit("items", "i1")["color"] = "green"
    assert a.hash() == c.hash() != fresh
    assert [t for t, _, _ in a.changes()] == ["items", "logs"]


def test_delete_and_put_back():
    b = base()
    fresh = State(b).hash()
    s = State(b)
    s.delete("items", "i2")
    assert ("items", "i2") not in s and s.hash() != fresh
    assert list(s.changes()) == [("items", "i2", None)]
    s.put("items", "i2", {"color": "blue", "tags": []})
    assert s.hash() == fresh
    assert "i2" in b.tables["items"]


def test_snapshot_and_restore():
    b = base()
    s = State(b)
    s.edit("items", "i1")["color"] = "green"
    snap = s.snapshot()
    at_snapshot = s.hash()
    s.edit("items", "i1")["color"] = "blue"
    s.edit("items", "i2")["tags"].append("z")
    s.delete("items", "i1")
    s.put("logs", "l", 1)
    s.restore(snap)
    assert s.hash() == at_snapshot and s.get("items", "i1")["color"] == "green" and s.get("logs", "l") is None
    s.edit("items", "i1")["color"] = "blue"  # the snapshot stays usable after the state changes again
    s.restore(snap)
    assert s.hash() == at_snapshot
    other = State(b)
    other.restore(snap)
    assert other.hash() == at_snapshot and other.to_dict()["items"]["i2"] == {"color": "blue", "tags": []}
    assert b.recompute_digest() == b.digest


# ---------------------------------------------------------------- domain, replay


def test_replay_runs_gold_actions_and_gold_hash_is_cached():
    actions = [Action(name="set_color", kwargs={"item_id": "i2", "color": "red", "tags": []})]
    d = world(actions)
    task = d.tasks("test")[0]
    REPLAYS.clear()
    gold = d.gold_hash(task)
    assert d.gold_hash(task) == gold and REPLAYS == ["i2"]  # replayed once
    expected = d.new_state()
    expected.edit("items", "i2")["color"] = "red"
    assert gold == expected.hash() != d.new_state().hash()
    assert d.task("t1") is task and d.system_prompt(task) == "Be nice."


def test_gold_hash_is_cached_by_the_actions_not_the_task_id():
    d = world([])
    red, blue = ([Action(name="set_color", kwargs={"item_id": "i2", "color": c, "tags": []})] for c in ("red", "blue"))
    same_id = [Task(id="t1", domain="w", split="test", user=UserScenario(instruction="x"), actions=a) for a in (red, blue)]
    assert d.gold_hash(same_id[0]) != d.gold_hash(same_id[1])  # e.g. a results file's version of a shipped task


@pytest.mark.parametrize("action", [
    Action(name="set_color", kwargs={"item_id": "i9", "color": "red", "tags": []}),  # the tool refuses
    Action(name="set_color", kwargs={"item_id": "i1"}),  # the arguments do not fit
    Action(name="paint_everything", kwargs={}),  # no such tool
])
def test_a_broken_task_fails_gold_replay_loudly(action):
    d = world([action])
    with pytest.raises(GoldReplayError, match="gold action 0"):
        d.gold_hash(d.tasks("test")[0])


def test_unknown_split_and_task_are_clear_errors():
    d = world([])
    with pytest.raises(ValueError, match="no split 'dev'"):
        d.tasks("dev")
    with pytest.raises(KeyError, match="no task 'zz'"):
        d.task("zz")
    with pytest.raises(ToolError, match="unknown tool 'zz'"):
        d.run_tool(d.new_state(), "zz", {})
