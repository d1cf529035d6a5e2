"""How a model family writes a conversation as text, and how its tool calls are read back.

A local policy never re-renders the whole history: it renders the system prompt once, then only the
*delta* of each new message (a user reply, tool results) and appends those tokens to the ids it already
has. So a chat format is asked for pieces, not for a whole conversation:

- ``system_text(prompt, tools)``: the system turn, with the tool schemas written into it (SmolLM2's
  template ignores ``tools=``, and even for Qwen we want the exact text under our control);
- ``render(message)``: one non-sampled message as it appears in the context (user, tool result, or an
  assistant message the policy did not sample, such as a domain greeting or an SFT target);
- ``generation_prompt``: what opens an assistant turn; ``end_of_turn`` is the token the policy emits to
  close it and ``after_end`` the text the template puts after that token, which the model never generates
  (for ChatML a newline) and which must therefore be appended before the next delta;
- ``parse(text)``: the assistant's generated text as a :class:`~muarl.types.Message`. Tool calls are
  Hermes-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks. A block that is not
  valid JSON still becomes a :class:`~muarl.types.ToolCall` whose ``arguments`` is the raw text, so that the
  episode loop shows "could not parse arguments" to the policy instead of silently dropping the call.

Every format also writes itself as a Jinja chat template (``jinja_template``), generated from the same
fields, so a saved model's tokenizer renders with ``apply_chat_template`` (and hence vLLM or any other
server) exactly the text this class renders: the format stays the single source of truth, and the
template is what checkpoints carry so that anyone can load them.

Formats are registered by name in :data:`CHAT_FORMATS`; add one by subclassing :class:`ChatFormat` and
registering it with :func:`register_chat_format`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from muarl.types import Message, ToolCall, ToolSpec

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME_IN_BROKEN_JSON = re.compile(r'"name"\s*:\s*"([^"]*)"')
_ARGUMENTS_IN_BROKEN_JSON = re.compile(r'"arguments"\s*:\s*(.*)\}\s*\Z', re.DOTALL)


class ChatFormatError(ValueError):
    """A message cannot be rendered in this format (e.g. a role the format does not know)."""


def _parse_call_body(body: str, call_id: str) -> ToolCall:
    """One ``<tool_call>`` body as a ToolCall. When the body is not JSON, the name and the raw arguments text
    are recovered by pattern where possible (else the whole body becomes the arguments), so the loop can
    report the malformed arguments by tool name."""
    raw = body.strip()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        args = value.get("arguments", value.get("parameters", {}))
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return ToolCall(id=call_id, name=value["name"], arguments=arguments)
    name = _NAME_IN_BROKEN_JSON.search(raw)
    args = _ARGUMENTS_IN_BROKEN_JSON.search(raw)
    return ToolCall(id=call_id, name=name.group(1) if name else "", arguments=args.group(1).strip() if args and name else raw)


# The conversation-walking part of every format's Jinja template; ChatFormat.jinja_template prepends the
# format's constants. Kept beside ChatFormat's rendering methods, which it mirrors line by line.
_TEMPLATE_BODY = r"""{%- if messages and messages[0].role == "system" -%}
{%- set system = messages[0].content or "" -%}{%- set rest = messages[1:] -%}
{%- else -%}{%- set system = "" -%}{%- set rest = messages -%}{%- endif -%}
{{- turn_start ~ "system\n" ~ system -}}
{%- if tools -%}
{{- tools_header -}}{%- for tool in tools -%}{{- "\n" ~ (tool | tojson) -}}{%- endfor -%}{{- tools_footer -}}
{%- endif -%}
{{- end_of_turn ~ after_end -}}
{%- for message in rest -%}
{%- if message.role == "assistant" -%}
{{- generation_prompt -}}{%- set ns = namespace(sep="") -%}
{%- if message.content -%}{{- message.content -}}{%- set ns.sep = "\n" -%}{%- endif -%}
{%- for call in message.tool_calls or [] -%}
{%- set fn = call.function if call.function is defined else call -%}
{{- ns.sep ~ "<tool_call>\n{\"name\": " ~ (fn.name | tojson(ensure_ascii=true)) ~ ", \"arguments\": " -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- "}\n</tool_call>" -}}{%- set ns.sep = "\n" -%}
{%- endfor -%}
{{- end_of_turn ~ after_end -}}
{%- elif message.role == "tool" -%}
{%- if not group_tool_results or loop.first or loop.previtem.role != "tool" -%}
{{- turn_start ~ tool_role ~ "\n" -}}
{%- else -%}{{- "\n" -}}{%- endif -%}
{{- "<tool_response>\n" ~ (message.content or "") ~ "\n</tool_response>" -}}
{%- if not group_tool_results or loop.last or loop.nextitem.role != "tool" -%}{{- end_of_turn ~ after_end -}}{%- endif -%}
{%- elif message.role in ["user", "system"] -%}
{{- turn_start ~ message.role ~ "\n" ~ (message.content or "") ~ end_of_turn ~ after_end -}}
{%- else -%}{{- raise_exception("format " ~ format_name ~ " cannot render role " ~ message.role) -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- generation_prompt -}}{%- endif -%}"""


@dataclass(frozen=True)
class ChatFormat:
    """ChatML with Hermes-style tool calls (SmolLM2 and other plain-ChatML models)."""

    name: str = "chatml-hermes"
    turn_start: str = "<|im_start|>"
    end_of_turn: str = "<|im_end|>"
    after_end: str = "\n"
    tool_role: str = "tool"  # the role tool results are written under
    group_tool_results: bool = False  # consecutive tool results share one turn (Qwen)
    tools_header: str = (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    )
    tools_footer: str = (
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )

    # ---------------------------------------------------------------- rendering
    def turn(self, role: str, content: str) -> str:
        return f"{self.turn_start}{role}\n{content}{self.end_of_turn}{self.after_end}"

    def system_text(self, prompt: str, tools: list[ToolSpec] | None) -> str:
        """The rendered system turn; tool schemas (OpenAI function format, one JSON per line) are inlined."""
        content = prompt
        if tools:
            schemas = "".join("\n" + json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
            content = f"{prompt}{self.tools_header}{schemas}{self.tools_footer}"
        return self.turn("system", content)

    @property
    def generation_prompt(self) -> str:
        return f"{self.turn_start}assistant\n"

    def assistant_body(self, message: Message) -> str:
        """What the policy would generate for ``message``, up to but not including ``end_of_turn``."""
        parts = [message.content] if message.content else []
        for call in message.tool_calls or []:
            try:
                args = json.dumps(json.loads(call.arguments), ensure_ascii=False)
            except json.JSONDecodeError:
                args = call.arguments
            parts.append(f'<tool_call>\n{{"name": {json.dumps(call.name)}, "arguments": {args}}}\n</tool_call>')
        return "\n".join(parts)

    def render(self, message: Message) -> str:
        """One whole message as it sits in the context, including its end-of-turn and ``after_end``."""
        if message.role == "assistant":
            return self.generation_prompt + self.assistant_body(message) + self.end_of_turn + self.after_end
        if message.role == "tool":
            return self.turn(self.tool_role, f"<tool_response>\n{message.content or ''}\n</tool_response>")
        if message.role in ("user", "system"):
            return self.turn(message.role, message.content or "")
        raise ChatFormatError(f"format {self.name!r} cannot render role {message.role!r}")

    def render_delta(self, messages: list[Message]) -> str:
        """Several consecutive non-sampled messages, e.g. the tool results and user reply after a turn."""
        out: list[str] = []
        i = 0
        while i < len(messages):
            if self.group_tool_results and messages[i].role == "tool":
                j = i
                while j < len(messages) and messages[j].role == "tool":
                    j += 1
                body = "\n".join(f"<tool_response>\n{m.content or ''}\n</tool_response>" for m in messages[i:j])
                out.append(self.turn(self.tool_role, body))
                i = j
            else:
                out.append(self.render(messages[i]))
                i += 1
        return "".join(out)

    # ---------------------------------------------------------------- as a Jinja chat template
    @property
    def jinja_template(self) -> str:
        """This format as a Hugging Face chat template: ``apply_chat_template(messages, tools=...,
        add_generation_prompt=True)`` renders what :meth:`system_text`, :meth:`render_delta` and
        :attr:`generation_prompt` render (OpenAI-format messages and tool schemas). As here, a conversation
        without a system message still opens with an (empty) system turn. Tool-call arguments given as a
        dict are written as JSON; given as a string (the OpenAI wire form) they are written verbatim, which matches
        our rendering (it re-serialises them) when the string is ``json.dumps`` output, as our parser returns."""
        constants = {"turn_start": self.turn_start, "end_of_turn": self.end_of_turn, "after_end": self.after_end,
                     "tools_header": self.tools_header, "tools_footer": self.tools_footer,
                     "generation_prompt": self.generation_prompt, "tool_role": self.tool_role,
                     "group_tool_results": self.group_tool_results, "format_name": self.name}
        # JSON literals are Jinja literals too (strings with backslash escapes, true/false)
        return "".join(f"{{%- set {k} = {json.dumps(v)} -%}}\n" for k, v in constants.items()) + _TEMPLATE_BODY

    # ---------------------------------------------------------------- parsing
    def parse(self, text: str, call_id_prefix: str = "call") -> Message:
        """Generated text (without the end-of-turn token) as an assistant message with parsed tool calls."""
        calls = [_parse_call_body(m.group(1), f"{call_id_prefix}_{i}") for i, m in enumerate(_TOOL_CALL.finditer(text))]
        content = _TOOL_CALL.sub("", text).strip()
        return Message(role="assistant", content=content or (None if calls else ""), tool_calls=calls or None)


@dataclass(frozen=True)
class Qwen3Format(ChatFormat):
    """Qwen3 (and Qwen2.5): tool results go in a user turn; without thinking an empty think block opens each turn."""

    name: str = "qwen3"
    tool_role: str = "user"
    group_tool_results: bool = True
    thinking: bool = False

    @property
    def generation_prompt(self) -> str:
        return f"{self.turn_start}assistant\n" + ("" if self.thinking else "<think>\n\n</think>\n\n")

    def parse(self, text: str, call_id_prefix: str = "call") -> Message:
        visible = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
        return super().parse(visible, call_id_prefix)


CHAT_FORMATS: dict[str, ChatFormat] = {}


def register_chat_format(fmt: ChatFormat) -> None:
    if fmt.name in CHAT_FORMATS:
        raise ValueError(f"chat format {fmt.name!r} is already registered")
    CHAT_FORMATS[fmt.name] = fmt


def get_chat_format(name: str) -> ChatFormat:
    try:
        return CHAT_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown chat format {name!r}; known formats: {sorted(CHAT_FORMATS)}") from None


def format_of_template(template: str | None) -> ChatFormat | None:
    """The registered format whose Jinja template is exactly ``template`` (a saved tokenizer's), if any."""
    return next((fmt for fmt in CHAT_FORMATS.values() if template and fmt.jinja_template == template), None)


register_chat_format(ChatFormat())
register_chat_format(Qwen3Format())
register_chat_format(Qwen3Format(name="qwen3-thinking", thinking=True))
