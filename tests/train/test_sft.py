"""Cold-start SFT: assistant-only loss mask, packing, and a tiny run whose loss goes down."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from muarl.cli import main
from muarl.models.chat_formats import get_chat_format
from muarl.models.hf_loading import load_causal_lm
from muarl.models.tiny import tiny_random_lm, tiny_tokenizer
from muarl.rollout.config import ConfigError
from muarl.train.config import ModelConfig, SFTConfig
from muarl.train.plot import read_metrics
from muarl.train.sft import (
    backward_nll,
    common_prefix,
    demonstration_examples,
    group_suffixes,
    mean_nll,
    pack,
    read_conversations,
    run_sft,
    tokenize_conversation,
)

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


@pytest.mark.parametrize("row", ['{"messages": "x"}', '{"messages": ["x"]}', '{"messages": [], "tools": "y"}', '{"messages": [], "tools": [1]}',
                                 '["messages"]', '5', '{"messages": {"role": "user"}}', '{"messages": [{"role": "user", "tool_calls": "c"}]}'])
def test_a_row_of_the_wrong_shape_is_one_line_exit_2_on_the_cli(tmp_path, row):
    """Not an AttributeError traceback: the line number and what is wrong, before any model loads."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(CONVERSATION) + "\n" + row + "\n")
    result = CliRunner().invoke(main, ["sft", "--data", str(path), "--model", "tiny-random", "--out", str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    [line] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert "bad.jsonl:2: not a {messages, tools} chat record" in line and result.output.rstrip().endswith(line)
    assert not (tmp_path / "out").exists()


def test_a_model_that_is_not_there_is_one_line_exit_2_in_sft_and_train(tmp_path):
    data = write_jsonl(tmp_path / "c.jsonl", [CONVERSATION])
    runs = {"sft": ["sft", "--data", str(data)], "train": ["train"]}
    for command, args in runs.items():
        out = tmp_path / command
        result = CliRunner().invoke(main, [*args, "--model", str(tmp_path / "nonexistent"), "--out", str(out), "--quiet"])
        assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (command, result.output, result.exception)
        [line] = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert str(tmp_path / "nonexistent") in line and result.output.rstrip().endswith(line), result.output
        assert not (out / "config.yaml").exists()  # nothing written for a run that never started


def conversation(name: str, key: str, answer: str) -> dict:
    """CONVERSATION with another user request and answer: same system turn, different tokens after it."""
    messages = [dict(m) for m in CONVERSATION["messages"]]
    messages[1] = {"role": "user", "content": f"Find {key}, {name} here."}
    messages[2] = {**messages[2], "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"key": key})}}]}
    messages[4] = {"role": "assistant", "content": answer}
    return {"messages": messages, "tools": TOOLS}


def tokenized(rows: list[dict], tmp_path) -> list[tuple[list[int], list[int]]]:
    return demonstration_examples(write_jsonl(tmp_path / "c.jsonl", rows), tiny_tokenizer(), "chatml-hermes")


def test_shared_prefix_gives_the_gradients_of_whole_conversations(tmp_path):
    examples = tokenized([conversation("Ann", "a", "Found a."), conversation("Bob", "bb", "It is there, Bob."),
                          conversation("Cy", "c", "Yes.")], tmp_path)
    cut = common_prefix(examples, SFTConfig(data="-", model=ModelConfig(name="tiny-random")))
    system = len(tiny_tokenizer()(get_chat_format("chatml-hermes").system_text("Be brief.", []), add_special_tokens=False)["input_ids"])
    assert cut > system  # the system turn (and the user turn's opening) is shared
    model, _ = tiny_random_lm(seed=1)

    def grads(rows, prefix_ids):
        model.zero_grad(set_to_none=True)
        loss, n = backward_nll(model, rows, 0, bf16=False, prefix_ids=prefix_ids)
        return loss, n, {name: p.grad.clone() for name, p in model.named_parameters()}

    loss_full, n_full, expected = grads(examples, None)
    loss_shared, n_shared, got = grads([(ids[cut:], mask[cut:]) for ids, mask in examples], examples[0][0][:cut])
    assert n_shared == n_full and loss_shared == pytest.approx(loss_full, rel=1e-5)
    assert expected["model.layers.0.self_attn.q_proj.weight"].abs().sum() > 0
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=2e-5, rtol=1e-4, msg=name)


def test_the_measured_nll_is_the_loss_sft_trains_on_and_leaves_no_gradient(tmp_path):
    examples = tokenized([conversation("Ann", "a", "Found a."), conversation("Bob", "bb", "It is there, Bob.")], tmp_path)
    model, _ = tiny_random_lm(seed=1)
    model.zero_grad(set_to_none=True)
    measured = mean_nll(model, examples, 0, bf16=False)
    assert all(p.grad is None for p in model.parameters())
    trained, _ = backward_nll(model, examples, 0, bf16=False)
    assert measured == pytest.approx(trained, rel=1e-6) and measured > 0


def test_no_sharing_when_turned_off_or_when_conversations_differ_from_the_start(tmp_path):
    examples = tokenized([conversation("Ann", "a", "A."), conversation("Bob", "b", "B.")], tmp_path)
    assert common_prefix(examples, SFTConfig(data="-", share_prefix=False)) == 0
    assert common_prefix(examples[:1], SFTConfig(data="-")) == 0  # one conversation: nothing to share
    other_system = ([7, 8] + examples[1][0][2:], examples[1][1])
    assert common_prefix([examples[0], other_system], SFTConfig(data="-")) == 0


def test_suffix_groups_fill_up_to_the_length_and_cut_long_conversations():
    examples = [([0, 0] + [1] * 3, [0] * 5), ([0, 0] + [2] * 4, [0] * 6), ([0, 0] + [3] * 9, [0] * 11), ([0, 0, 4], [0] * 3)]
    groups = group_suffixes(examples, cut=2, length=8)
    assert [[ids for ids, _ in g] for g in groups] == [[[1] * 3, [2] * 4], [[3] * 6, [4]]]


@pytest.mark.parametrize(("finetune", "share"), [("full", True), ("lora", True), ("full", False)])
def test_tiny_sft_run_lowers_the_loss_and_saves_a_loadable_model(tmp_path, finetune, share):
    data = write_jsonl(tmp_path / "d.jsonl", [CONVERSATION] * 3)
    cfg = SFTConfig(data=str(data), out=str(tmp_path / "run"), epochs=20, lr=1e-2, pack_length=4096, share_prefix=share,
                    model=ModelConfig(name="tiny-random", precision="fp32", finetune=finetune, lora_r=8))
    out = run_sft(cfg, progress=False)
    rows = read_metrics(tmp_path / "run")
    losses = [r["loss"] for r in rows]
    assert len(losses) == 20 and losses[-1] < 0.9 * losses[0]  # from uniform (ln 384)
    assert (rows[0]["shared_prefix_tokens"] > 0) == share
    model, tok = load_causal_lm(str(out))
    assert model.config.vocab_size == len(tok)


def test_each_steps_logged_learning_rate_is_the_one_it_used_under_warmup(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [CONVERSATION] * 3)
    cfg = SFTConfig(data=str(data), out=str(tmp_path / "run"), epochs=3, lr=1e-3, warmup_steps=2, pack_length=4096,
                    model=ModelConfig(name="tiny-random", precision="fp32"))
    run_sft(cfg, progress=False)
    assert [r["lr"] for r in read_metrics(tmp_path / "run")] == pytest.approx([5e-4, 1e-3, 1e-3])


def test_a_cpu_time_limit_stops_on_the_process_clock_not_the_wall_clock(tmp_path, monkeypatch):
    """The compute-matched control's budget: the process's CPU time. With the real clock a tiny budget stops SFT
    after its first step; with the process clock frozen (as if the process got no CPU while the wall clock ran)
    it never stops early, whatever wall time passes."""
    import muarl.train.sft as sft_module

    data = write_jsonl(tmp_path / "d.jsonl", [CONVERSATION] * 3)

    def run(out: str) -> list[dict]:
        cfg = SFTConfig(data=str(data), out=str(tmp_path / out), epochs=3, lr=1e-3, pack_length=4096, cpu_time_limit_minutes=1e-4,
                        model=ModelConfig(name="tiny-random", precision="fp32"))
        run_sft(cfg, progress=False)
        return read_metrics(tmp_path / out)

    rows = run("real")
    assert len(rows) == 1 and rows[0]["cpu_seconds"] > 0 and rows[0]["seconds"] > 0
    monkeypatch.setattr(sft_module.time, "process_time", lambda: 0.0)
    assert len(run("frozen")) == 3


def test_models_are_saved_after_the_steps_that_cross_the_cpu_marks_and_the_last_only_once(tmp_path, monkeypatch):
    """The demo's control is validated at the CPU time GRPO had spent by each of its validated steps. With a process
    clock that advances one minute per step: marks at 1.5 and 2.5 minutes and a 3-minute budget save the model after
    step 2; step 3 crosses the second mark and the budget, so its weights are the final model, saved once."""
    import muarl.train.sft as sft_module
    from muarl.demo.stages import control_candidate

    clock, real = [0.0], sft_module.backward_nll

    def one_minute_a_step(*args, **kwargs):
        clock[0] += 60.0
        return real(*args, **kwargs)

    monkeypatch.setattr(sft_module, "backward_nll", one_minute_a_step)
    monkeypatch.setattr(sft_module.time, "process_time", lambda: clock[0])
    data = write_jsonl(tmp_path / "d.jsonl", [CONVERSATION] * 3)
    cfg = SFTConfig(data=str(data), out=str(tmp_path / "run"), epochs=10, lr=1e-3, pack_length=4096, cpu_time_limit_minutes=3.0,
                    save_at_cpu_minutes=[2.5, 1.5], model=ModelConfig(name="tiny-random", precision="fp32"))
    final = run_sft(cfg, progress=False)
    rows = read_metrics(tmp_path / "run")
    assert [r["cpu_minutes_so_far"] for r in rows] == [1.0, 2.0, 3.0]
    assert sorted(p.name for p in (tmp_path / "run").glob("model*")) == ["model", "model-step-000002"]
    assert control_candidate(tmp_path / "run", rows, 1.5) == str((tmp_path / "run" / "model-step-000002").resolve())
    assert control_candidate(tmp_path / "run", rows, 2.5) == str(final.resolve())
    load_causal_lm(control_candidate(tmp_path / "run", rows, 1.5))  # a whole model, as the final one


def test_a_longer_runs_step_n_weights_are_an_n_step_runs(tmp_path):
    """The quick form's calibration (bench/quick_cold_start.py) scores 3-, 6- and 9-step cold starts from one
    9-step run saved every step: that holds only if the row order and learning rate of step N do not depend on the
    run's length."""
    other = {**CONVERSATION, "messages": [*CONVERSATION["messages"][:-1], {"role": "assistant", "content": "Done, it is found now."}]}
    data = write_jsonl(tmp_path / "d.jsonl", [CONVERSATION, other, CONVERSATION, other, other])

    def run(out: str, steps: int, save_every: int = 0) -> None:
        run_sft(SFTConfig(data=str(data), out=str(tmp_path / out), epochs=10, lr=1e-3, pack_length=600, max_steps=steps,
                          save_every=save_every, share_prefix=False, model=ModelConfig(name="tiny-random", precision="fp32")),
                progress=False)

    run("short", 2)
    run("long", 4, save_every=1)
    short, _ = load_causal_lm(str(tmp_path / "short" / "model"))
    saved, _ = load_causal_lm(str(tmp_path / "long" / "model-step-000002"))
    last, _ = load_causal_lm(str(tmp_path / "long" / "model"))
    assert sorted(p.name for p in (tmp_path / "long").glob("model-step-*")) == [f"model-step-00000{i}" for i in (1, 2, 3)]
    for (name, a), b, c in zip(short.state_dict().items(), saved.state_dict().values(), last.state_dict().values()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(short.state_dict().values(), last.state_dict().values()))
