"""Checkpoints anyone can load: GRPO checkpoints and SFT models carry the chat template they were trained
with, LoRA adapters name a loadable base, and ``muarl export`` writes a model that transformers' own loaders
read (full weights, template included)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from saved_runs import grpo_run
from test_trainer import config, toy_registered  # noqa: F401 - the toy domain fixture comes along

from muarl.cli import main
from muarl.models.chat_formats import get_chat_format
from muarl.models.hf_loading import load_causal_lm
from muarl.models.local_spec import load_local_model, resolve_local_model
from muarl.train.config import ModelConfig, SFTConfig
from muarl.train.model_setup import load_trainable
from muarl.train.sft import run_sft
from muarl.train.trainer import GRPOTrainer
from muarl.types import Message, ToolCall, ToolSpec

TOOL = ToolSpec(name="lookup", description="Look up a key.", parameters={"type": "object", "properties": {"key": {"type": "string"}}})
CONVERSATION = [Message(role="system", content="Be brief."), Message(role="user", content="Find a."),
                Message(role="assistant", tool_calls=[ToolCall(id="c0", name="lookup", arguments='{"key": "a"}')]),
                Message(role="tool", content="found", tool_call_id="c0"), Message(role="user", content="And?")]


def trained_run(tmp_path, finetune: str, chat_format: str):
    """A one-step GRPO run of the real trainer."""
    model = ModelConfig(name="tiny-random", precision="fp32", finetune=finetune, chat_format=chat_format, lora_r=4)
    trainer = GRPOTrainer(config(tmp_path / f"run-{finetune}", model=model, steps=1), progress=False)
    trainer.start()
    trainer.train()
    return trainer.run_dir


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([[1, 5, 9, 40, 2]])).logits[0]


def rendered_by_template(tokenizer) -> str:
    return tokenizer.apply_chat_template([m.to_openai() for m in CONVERSATION], tools=[TOOL.to_openai()],
                                         add_generation_prompt=True, tokenize=False)


def ours(fmt_name: str) -> str:
    fmt = get_chat_format(fmt_name)
    return fmt.system_text("Be brief.", [TOOL]) + fmt.render_delta(CONVERSATION[1:]) + fmt.generation_prompt


def test_grpo_checkpoints_carry_the_configured_chat_template(tmp_path):
    run = trained_run(tmp_path, "full", chat_format="qwen3")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run / "checkpoints" / "step-000001" / "model")
    assert tokenizer.chat_template == get_chat_format("qwen3").jinja_template
    assert rendered_by_template(tokenizer) == ours("qwen3")
    # moved out of its run (no config.yaml beside it), the template alone still names the format
    moved = tmp_path / "elsewhere"
    (run / "checkpoints" / "step-000001" / "model").rename(moved)
    assert resolve_local_model(str(moved)).chat_format is None and load_local_model(resolve_local_model(str(moved)))[2] == "qwen3"


def test_sft_model_carries_the_chat_template(tmp_path):
    data = tmp_path / "d.jsonl"
    row = {"messages": [m.to_openai() for m in CONVERSATION] + [{"role": "assistant", "content": "Done."}], "tools": [TOOL.to_openai()]}
    data.write_text(json.dumps(row) + "\n")
    out = run_sft(SFTConfig(data=str(data), out=str(tmp_path / "sft"), max_steps=1, pack_length=2048,
                            model=ModelConfig(name="tiny-random", precision="fp32")), progress=False)
    _, tokenizer = load_causal_lm(str(out))
    assert tokenizer.chat_template == get_chat_format("chatml-hermes").jinja_template
    assert rendered_by_template(tokenizer) == ours("chatml-hermes")


def test_lora_base_is_an_absolute_path_for_a_model_directory(tmp_path, monkeypatch):
    lm, tok = load_causal_lm("tiny-random", seed=2)
    lm.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    monkeypatch.chdir(tmp_path)
    model, _ = load_trainable(ModelConfig(name="base", finetune="lora", lora_r=4))  # relative, as a config may say
    model.save_pretrained(tmp_path / "adapter")
    base = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(tmp_path / "base")
    monkeypatch.chdir("/")
    assert resolve_local_model(str(tmp_path / "adapter")).weights == base


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_export_merge_writes_a_model_transformers_loads_on_its_own(tmp_path, finetune):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = grpo_run(tmp_path / "run", finetune, seed=3)
    ckpt = run / "checkpoints" / "step-000010"
    out = tmp_path / "exported"
    result = CliRunner().invoke(main, ["export", str(ckpt), "--merge", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not (out / "adapter_config.json").exists() and (out / "config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    trained, _, _ = load_local_model(resolve_local_model(str(ckpt)))
    initial, _ = load_causal_lm("tiny-random", seed=3)
    assert torch.allclose(logits(model), logits(trained), atol=1e-5)
    assert not torch.allclose(logits(model), logits(initial), atol=1e-4)  # the training is in the weights
    assert rendered_by_template(tokenizer) == ours("chatml-hermes")
    again = CliRunner().invoke(main, ["export", str(ckpt), "--merge", "--out", str(out)])
    assert again.exit_code == 2 and "not an empty directory" in again.output


def test_export_without_merge_keeps_a_lora_adapter_and_bad_sources_are_usage_errors(tmp_path):
    run = grpo_run(tmp_path / "run", "lora")
    result = CliRunner().invoke(main, ["export", f"local:{run}", "--out", str(tmp_path / "adapter")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny-random"
    bad = CliRunner().invoke(main, ["export", str(tmp_path / "nowhere"), "--merge", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "no such directory" in bad.output
