"""Chat formats render deltas the way the template would, and turn generated text into messages."""

from __future__ import annotations

import json

import pytest

from muarl.models.chat_formats import CHAT_FORMATS, ChatFormat, get_chat_format, register_chat_format
from muarl.types import Message, ToolCall, ToolSpec

SPEC = ToolSpec(name="lookup", description="Look up a key.", parameters={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})


def test_system_text_inlines_tool_schemas_one_json_per_line():
    fmt = get_chat_format("chatml-hermes")
    text = fmt.system_text("Be kind.", [SPEC])
    assert text.startswith("<|im_start|>system\nBe kind.\n\n# Tools") and text.endswith("</tool_call><|im_end|>\n")
    inside = text.split("<tools>\n")[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in inside.splitlines()] == [SPEC.to_openai()]
    assert fmt.system_text("Be kind.", []) == "<|im_start|>system\nBe kind.<|im_end|>\n"


def test_chatml_renders_each_role():
    fmt = get_chat_format("chatml-hermes")
    assert fmt.render(Message(role="user", content="hi")) == "<|im_start|>user\nhi<|im_end|>\n"
    assert fmt.render(Message(role="tool", content="{}", tool_call_id="c", name="lookup")) == (
        "<|im_start|>tool\n<tool_response>\n{}\n</tool_response><|im_end|>\n"
    )
    call = Message(role="assistant", content="Sure.", tool_calls=[ToolCall(id="c", name="lookup", arguments='{"key":"a"}')])
    assert fmt.render(call) == (
        '<|im_start|>assistant\nSure.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call><|im_end|>\n'
    )


def test_qwen3_groups_tool_results_in_one_user_turn_and_opens_with_empty_think():
    fmt = get_chat_format("qwen3")
    tools = [Message(role="tool", content="a", tool_call_id="1"), Message(role="tool", content="b", tool_call_id="2")]
    assert fmt.render_delta(tools + [Message(role="user", content="ok")]) == (
        "<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nok<|im_end|>\n"
    )
    assert fmt.generation_prompt == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert get_chat_format("qwen3-thinking").generation_prompt == "<|im_start|>assistant\n"
    msg = fmt.parse('<think>hmm <tool_call>no</tool_call></think>Done.')
    assert msg.content == "Done." and msg.tool_calls is None


def test_parse_text_and_calls():
    fmt = get_chat_format("chatml-hermes")
    assert fmt.parse("Hello there.") == Message(role="assistant", content="Hello there.")
    msg = fmt.parse('Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>\n'
                    '<tool_call>{"name": "lookup", "arguments": "{\\"key\\": \\"b\\"}"}</tool_call>', "call_3")
    assert msg.content == "Let me check."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [
        ("call_3_0", "lookup", {"key": "a"}), ("call_3_1", "lookup", {"key": "b"})
    ]


@pytest.mark.parametrize(
    ("body", "name", "arguments"),
    [
        ('{"name": "lookup", "arguments": {key: a}}', "lookup", "{key: a}"),  # broken arguments, name recovered
        ('{"name": "lookup", "arguments": {"key": "a"', "lookup", '{"name": "lookup", "arguments": {"key": "a"'),  # cut
        ("lookup(key='a')", "", "lookup(key='a')"),  # not JSON at all
        ('["lookup"]', "", '["lookup"]'),  # JSON, but not a call object
    ],
)
def test_malformed_calls_keep_their_raw_text(body, name, arguments):
    msg = get_chat_format("chatml-hermes").parse(f"<tool_call>\n{body}\n</tool_call>")
    (call,) = msg.tool_calls
    assert (call.name, call.arguments) == (name, arguments)
    with pytest.raises(ValueError):
        call.parsed_arguments()


def test_unclosed_tool_call_at_end_of_generation_is_still_a_call():
    msg = get_chat_format("chatml-hermes").parse('<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}')
    assert msg.tool_calls[0].parsed_arguments() == {"key": "a"} and msg.content is None


def test_registry_rejects_unknown_and_duplicate_names():
    with pytest.raises(ValueError, match="unknown chat format 'nope'"):
        get_chat_format("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_chat_format(ChatFormat())
    assert {"chatml-hermes", "qwen3"} <= set(CHAT_FORMATS)
