"""Re-scoring recorded trajectories in each file format, through the library and through ``muarl replay``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tau_oracle import oracle_messages

from muarl.cli import main
from muarl.evals.replay import ReplayInputError, read_trajectories, replay_all
from muarl.types import Episode, Message, RewardInfo, ToolCall, ToolExecution


def _openai(messages):
    return [m.to_openai() for m in messages]


def test_tau_bench_results_file(tmp_path, retail):
    good = retail.task("test-0")
    records = [
        {"task_id": 0, "trial": 0, "reward": 1.0, "traj": _openai(oracle_messages(good))},
        {"task_id": 0, "trial": 1, "reward": 1.0, "traj": _openai(oracle_messages(good, good.actions[:-1]))},  # recorded wrongly
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(records))
    results = replay_all(retail, read_trajectories(path, retail))
    assert [(r.task_id, r.trial, r.reward.reward, r.agrees) for r in results] == [("test-0", 0, 1.0, True), ("test-0", 1, 0.0, False)]
    assert results[0].calls == len(good.actions)


def test_unanswered_calls_are_not_replayed(tmp_path, retail):
    task = retail.task("test-0")
    messages = oracle_messages(task)
    write = messages[-3]  # the exchange call, answered by the tool message after it
    assert write.tool_calls[0].name == "exchange_delivered_order_items"
    del messages[-2]  # drop its answer: in τ-bench's record the call never ran
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(_openai(messages)))
    [result] = replay_all(retail, read_trajectories(path, retail, task_id="test-0"))
    assert result.reward.reward == 0.0 and result.calls == len(task.actions) - 1


def test_muarl_episodes_jsonl_skips_calls_the_loop_did_not_run(tmp_path, retail):
    task = retail.task("test-0")
    messages = oracle_messages(task)
    extra = ToolCall(id="skipped", name="modify_user_address", arguments=json.dumps({
        "user_id": "yusuf_rossi_9620", "address1": "x", "address2": "", "city": "c", "state": "s", "country": "USA", "zip": "1"}))
    messages[-3] = Message(role="assistant", tool_calls=[messages[-3].tool_calls[0], extra])
    messages.insert(-1, Message(role="tool", tool_call_id="skipped", name=extra.name, content="Error: skipped"))
    executions = [ToolExecution(turn=0, call_id="skipped", name=extra.name, output="Error: skipped", error="skipped", error_kind="not_executed")]
    reward = RewardInfo(reward=1.0, state_match=True, final_hash="", gold_hash="")
    lines = [
        Episode(task_id=task.id, domain=retail.name, split="test", trial=t, messages=messages, tool_executions=executions,
                termination="user_stop", reward=reward).model_dump_json()
        for t in range(2)
    ]
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    results = replay_all(retail, read_trajectories(path, retail))
    assert [(r.trial, r.reward.reward, r.agrees) for r in results] == [(0, 1.0, True), (1, 1.0, True)]


def test_tau2_results_file_is_scored_by_tau2_criteria(tmp_path, tau2_airline):
    task = next(t for t in tau2_airline.tasks("test") if t.metadata["tau2"]["communicate_info"])
    said = "; ".join(task.metadata["tau2"]["communicate_info"])
    sims = {"simulations": [
        {"task_id": task.id, "trial": 0, "messages": _openai(oracle_messages(task, say=said)), "reward_info": {"reward": 1.0}},
        {"task_id": task.id, "trial": 1, "messages": _openai(oracle_messages(task, say="nothing")), "reward_info": {"reward": 1.0}},
    ]}
    path = tmp_path / "tau2.json"
    path.write_text(json.dumps(sims))
    results = replay_all(tau2_airline, read_trajectories(path, tau2_airline))
    assert [r.reward.reward for r in results] == [1.0, 0.0]


def test_bad_inputs_say_what_is_wrong(tmp_path, retail):
    path = tmp_path / "x.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    with pytest.raises(ReplayInputError, match="--task"):
        read_trajectories(path, retail)
    path.write_text(json.dumps({"what": 1}))
    with pytest.raises(ReplayInputError, match="not a known trajectory format"):
        read_trajectories(path, retail)
    path.write_text(json.dumps({"task_id": "test-9999", "messages": []}))
    with pytest.raises(ReplayInputError, match="no task"):
        replay_all(retail, read_trajectories(path, retail))


def test_cli(tmp_path, retail):
    task = retail.task("test-0")
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"task_id": 0, "trial": 0, "reward": 0.0, "traj": _openai(oracle_messages(task))}]))
    out = CliRunner().invoke(main, ["replay", str(path), "--domain", "tau-retail", "--json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output.strip().splitlines()[0])
    assert row["task_id"] == "test-0" and row["reward"] == 1.0 and row["recorded_reward"] == 0.0 and row["agrees"] is False
    out = CliRunner().invoke(main, ["replay", str(path), "--domain", "tau-retail"])
    assert out.exit_code == 0 and "agreeing with the record: 0/1" in out.output
    out = CliRunner().invoke(main, ["replay", str(path), "--domain", "tau-retail", "--data-dir", str(tmp_path)])
    assert out.exit_code != 0 and "--data-dir" in out.output
