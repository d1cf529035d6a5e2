"""Cold-start SFT: assistant-only loss mask, packing, and a tiny run whose loss goes down."""

from __future__ import annotations

import json

import pytest

from muarl.models.chat_formats import get_chat_format
from muarl.models.hf_loading import load_causal_lm
from muarl.models.tiny import tiny_tokenizer
from muarl.rollout.config import ConfigError
from muarl.train.config import ModelConfig, SFTConfig
from muarl.train.plot import read_metrics
from muarl.train.sft import pack, read_conversations, run_sft, tokenize_conversation

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up.", "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}]
CONVERSATION = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Find a."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\": \"a\"}"}}]},
        {"role": "tool", "tool_call_id": "c0", "name": "lookup", "content": "found"},
        {"role": "assistant", "content": "It is found."},
    ],
    "tools": TOOLS,
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loss_mask_covers_assistant_bodies_and_end_of_turn_only(tmp_path):
    tok = tiny_tokenizer()
    fmt = get_chat_format("chatml-hermes")
    ((messages, tools),) = read_conversations(write_jsonl(tmp_path / "d.jsonl", [CONVERSATION]))
    ids, mask = tokenize_conversation(messages, tools, fmt, lambda s: tok(s, add_special_tokens=False)["input_ids"])
    assert tok.decode(ids) == fmt.system_text("Be brief.", tools) + fmt.render_delta(messages[1:])
    supervised = tok.decode([i for i, m in zip(ids, mask) if m])
    assert supervised == ('<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call><|im_end|>'
                          "It is found.<|im_end|>")


def test_pack_fills_rows_and_cuts_long_examples():
    rows = pack([([1] * 3, [1] * 3), ([2] * 4, [0] * 4), ([3] * 9, [1] * 9), ([4] * 2, [1] * 2)], length=8)
    assert [r[0] for r in rows] == [[1, 1, 1, 2, 2, 2, 2], [3] * 8, [4, 4]]


def test_bad_data_is_reported_with_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(CONVERSATION) + "\n" + '{"messages": [{"content": "x"}]}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        read_conversations(path)


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_tiny_sft_run_lowers_the_loss_and_saves_a_loadable_model(tmp_path, finetune):
    data = write_jsonl(tmp_path / "d.jsonl", [CONVERSATION] * 3)
    cfg = SFTConfig(data=str(data), out=str(tmp_path / "run"), epochs=20, lr=1e-2, pack_length=4096,
                    model=ModelConfig(name="tiny-random", bf16=False, finetune=finetune, lora_r=8))
    out = run_sft(cfg, progress=False)
    losses = [r["loss"] for r in read_metrics(tmp_path / "run")]
    assert len(losses) == 20 and losses[-1] < 0.9 * losses[0]  # from uniform (ln 384)
    model, tok = load_causal_lm(str(out))
    assert model.config.vocab_size == len(tok)
