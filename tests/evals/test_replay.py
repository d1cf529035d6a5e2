"""Re-scoring recorded trajectories in each file format, through the library and through ``muarl replay``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tau_oracle import oracle_messages

from muarl.cli import main
from muarl.domains.base import ToolError
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


def test_text_after_a_transfer_is_not_scored(tmp_path, retail):
    """τ-bench scores at ``transfer_to_human_agents``: outputs said only afterwards do not count (issue 11, item 15)."""
    task = retail.task("test-19")  # a return whose refunds (outputs) the agent must tell the user
    assert task.outputs
    transfer = ToolCall(id="handoff", name="transfer_to_human_agents", arguments=json.dumps({"summary": "wants a human"}))

    def conversation(say_first: bool):
        messages = oracle_messages(task, say="; ".join(task.outputs))
        told = messages.pop()
        handoff = [Message(role="assistant", tool_calls=[transfer]),
                   Message(role="tool", tool_call_id="handoff", name=transfer.name, content="Transfer successful")]
        return messages + ([told] + handoff if say_first else handoff + [told])

    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"task_id": 19, "trial": t, "traj": _openai(conversation(say_first=t == 0))} for t in range(2)]))
    before, after = replay_all(retail, read_trajectories(path, retail))
    assert before.reward.reward == 1.0 and before.calls == len(task.actions) + 1
    assert after.calls == len(task.actions) + 1 and after.reward.state_match
    assert after.reward.reward == 0.0 and not any(after.reward.outputs_found.values())


# ---------------------------------------------------------------- τ² results in τ²'s own format


def _tau2_messages(domain, task_actions, said: str) -> list[dict]:
    """A τ² conversation as τ² writes it: a call is ``{id, name, arguments: {...}, requestor}``, its answer a tool
    message that names the call in ``id`` (not ``tool_call_id``)."""
    state = domain.new_state()
    stamp = {"timestamp": "2025-06-01T12:00:00.000000", "cost": 0.0, "usage": None, "raw_data": None}
    messages = [{"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None, "turn_idx": 0, **stamp},
                {"role": "user", "content": "I need some help with my account.", "tool_calls": None, "turn_idx": 1, **stamp}]
    for i, action in enumerate(task_actions):
        call_id = f"call_{i:04d}"
        call = {"id": call_id, "name": action["name"], "arguments": action["arguments"], "requestor": "assistant"}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call], "turn_idx": len(messages), **stamp})
        try:
            content, error = domain.run_tool(state, action["name"], action["arguments"]), False
        except ToolError as exc:
            content, error = f"Error: {exc}", True
        messages.append({"id": call_id, "role": "tool", "content": content, "requestor": "assistant", "error": error,
                         "turn_idx": len(messages), "timestamp": stamp["timestamp"]})
    messages.append({"role": "assistant", "content": said, "tool_calls": None, "turn_idx": len(messages), **stamp})
    messages.append({"role": "user", "content": "Thanks! ###STOP###", "tool_calls": None, "turn_idx": len(messages), **stamp})
    return messages


def _simulation(task_id: str, trial: int, messages: list[dict], reward: float, termination: str = "user_stop") -> dict:
    return {
        "id": f"sim-{task_id}-{trial}", "task_id": task_id, "timestamp": "2025-06-01T12:00:00.000000",
        "start_time": "2025-06-01T12:00:00.000000", "end_time": "2025-06-01T12:01:00.000000", "duration": 60.0,
        "termination_reason": termination, "agent_cost": 0.01, "user_cost": 0.002,
        "reward_info": {"reward": reward, "db_check": {"db_match": reward == 1.0, "db_reward": reward}, "env_assertions": None,
                        "action_checks": None, "nl_assertions": None, "communicate_checks": None,
                        "reward_basis": ["DB"], "reward_breakdown": {"DB": reward}, "info": None},
        "messages": messages, "trial": trial, "seed": 300 + trial,
    }


def test_tau2_results_in_tau2s_own_format_agree_with_their_rewards(tmp_path, tau2_retail):
    """A results file as τ² writes it replays every call and scores as τ² did, against the tasks it embeds (issue 11, item 13)."""
    from muarl.domains.tau.loader import read_json, tau2_dir

    shipped = {str(t["id"]): t for t in read_json(tau2_dir("retail") / "tasks.json")}
    moved = json.loads(json.dumps(shipped["33"]))  # the file's version of task 33 gives the user another new address
    [address_change] = [a for a in moved["evaluation_criteria"]["actions"] if a["name"] == "modify_user_address"]
    address_change["arguments"]["address1"] = "1 Replay Lane"
    gold = moved["evaluation_criteria"]["actions"]
    other = shipped["17"]
    simulations = [
        _simulation("33", 0, _tau2_messages(tau2_retail, gold, "Your address is updated."), 1.0),
        _simulation("33", 1, _tau2_messages(tau2_retail, gold[:-1], "Your address is updated."), 0.0),  # the write never made
        _simulation("33", 2, _tau2_messages(tau2_retail, gold, "Your address is updated."), 0.0, termination="max_steps"),
        _simulation("17", 0, _tau2_messages(tau2_retail, other["evaluation_criteria"]["actions"], "Done."), 1.0),
    ]
    results = {"timestamp": "2025-06-01T12:05:00.000000", "info": {"num_trials": 3, "max_steps": 200, "seed": 300},
               "tasks": [moved, other], "simulations": simulations}
    path = tmp_path / "tau2_results.json"
    path.write_text(json.dumps(results))

    replayed = replay_all(tau2_retail, read_trajectories(path, tau2_retail))
    assert [(r.task_id, r.reward.reward, r.agrees) for r in replayed] == [
        ("33", 1.0, True), ("33", 0.0, True), ("33", 0.0, True), ("17", 1.0, True)]
    assert [r.calls for r in replayed] == [len(gold), len(gold) - 1, len(gold), len(other["evaluation_criteria"]["actions"])]

    shipped_only = replay_all(tau2_retail, read_trajectories(path, tau2_retail, embedded_tasks=False))
    assert [r.reward.reward for r in shipped_only] == [0.0, 0.0, 0.0, 1.0]  # the shipped task 33 wants another address

    out = CliRunner().invoke(main, ["replay", str(path), "--domain", "tau2-retail"])
    assert out.exit_code == 0 and "agreeing with the record: 4/4" in out.output, out.output
    out = CliRunner().invoke(main, ["replay", str(path), "--domain", "tau2-retail", "--shipped-tasks"])
    assert out.exit_code == 0 and "agreeing with the record: 3/4" in out.output, out.output


@pytest.mark.parametrize(("tasks", "message"), [(5, "'tasks' must be a list"), ([{"description": "no id"}], "task 0 is not a τ² task")])
def test_embedded_tasks_that_are_not_tau2_tasks_are_named(tmp_path, tau2_retail, tasks, message):
    path = tmp_path / "tau2_results.json"
    path.write_text(json.dumps({"tasks": tasks, "simulations": []}))
    with pytest.raises(ReplayInputError, match=message):
        read_trajectories(path, tau2_retail)
    assert read_trajectories(path, tau2_retail, embedded_tasks=False) == []  # not read when the shipped ones are asked for
