"""The cold-start pipeline end to end: `muarl synth`'s offline export on the embedded domain is what `muarl sft`
trains on, without edits (issue: synthesis feeds SFT)."""

from __future__ import annotations

import asyncio

import pytest

from muarl.config import ConfigError
from muarl.synth.generate import SynthConfig, synthesize
from muarl.train.config import ModelConfig, SFTConfig
from muarl.train.plot import read_metrics
from muarl.train.sft import read_conversations, run_sft


def test_offline_clinic_synthesis_trains_with_sft_unchanged(tmp_path):
    synth_out = tmp_path / "synth"
    report = asyncio.run(synthesize(SynthConfig(domain="clinic", split="train", limit=2, out=str(synth_out), parquet=False), progress=False))
    assert report["accepted"] == 2
    data = synth_out / "sft_train.jsonl"
    conversations = read_conversations(data)
    assert conversations and all(any(m.role == "assistant" and m.tool_calls for m in msgs) for msgs, _ in conversations)
    cfg = SFTConfig(data=str(data), out=str(tmp_path / "sft"), epochs=1, pack_length=12288,  # the tiny tokenizer is byte-level: ~10k tokens a dialogue
                    model=ModelConfig(name="tiny-random", precision="fp32"))
    run_sft(cfg, progress=False)
    losses = [r["loss"] for r in read_metrics(tmp_path / "sft")]
    assert losses and all(loss > 0 for loss in losses)


def test_a_pack_length_that_leaves_no_assistant_token_is_refused_not_trained_at_zero_loss(tmp_path):
    asyncio.run(synthesize(SynthConfig(domain="clinic", split="train", limit=2, out=str(tmp_path / "synth"), parquet=False), progress=False))
    cfg = SFTConfig(data=str(tmp_path / "synth" / "sft_train.jsonl"), out=str(tmp_path / "sft"), pack_length=512,
                    model=ModelConfig(name="tiny-random", precision="fp32"))
    with pytest.raises(ConfigError, match="raise pack_length"):
        run_sft(cfg, progress=False)


def test_test_split_dialogues_reach_sft_only_when_allowed_at_both_ends(tmp_path):
    """`muarl synth --split test` is refused, and so is `muarl sft` on what it exported, unless each is told
    --allow-test-split: the split of the tasks travels with every exported line (task_split)."""
    from click.testing import CliRunner

    from muarl.cli import main

    synth_out = tmp_path / "synth"
    refused = CliRunner().invoke(main, ["synth", "--split", "test", "--limit", "1", "--out", str(synth_out), "--quiet"])
    assert refused.exit_code == 2 and "split 'test'" in refused.output and not synth_out.exists()
    with pytest.raises(ConfigError, match="split 'test'"):
        SynthConfig.load(split="test")
    allowed = CliRunner().invoke(main, ["synth", "--split", "test", "--allow-test-split", "--limit", "2", "--validation-fraction", "0",
                                        "--no-parquet", "--out", str(synth_out), "--quiet"])
    assert allowed.exit_code == 0, allowed.output
    data = synth_out / "sft_train.jsonl"
    with pytest.raises(ConfigError, match=rf"{data}:1: a dialogue of task split 'test'"):
        read_conversations(data)
    assert len(read_conversations(data, allow_test_split=True)) == 2
    sft = CliRunner().invoke(main, ["sft", "--data", str(data), "--out", str(tmp_path / "sft"), "--model", "tiny-random"])
    assert sft.exit_code == 2 and "--allow-test-split" in sft.output and not (tmp_path / "sft").exists()
