"""τ²-bench telecom (dual control): the tools of both sides, τ²'s split, the phone's rules, and gold episodes.

Specification: the agent has τ²'s 13 tools and the user 30 of its phone; the splits are τ²'s (74 train, 40
test) and its small (20) and full task sets where the data holds their files; every task starts broken (its assertions fail on the initial state) and an episode in which the oracle
agent asks for the task's user actions and the scripted user does them on its phone scores 1.0 by τ²'s criteria,
with the user's calls recorded as the user's; an agent that only talks scores 0.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.domains.tau.telecom import scenario
from muarl.domains.tau.telecom.phone import sync_with_carrier
from muarl.domains.tau.tau2_criteria import evaluate_tau2
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.reward import make_reward
from muarl.rollout.episode import run_episode
from muarl.types import NOT_EXECUTED_OUTPUT, Message, ToolCall, executed_calls
from muarl.users.scripted import ScriptedUser

AGENT_TOOLS = {
    "get_customer_by_phone", "get_customer_by_id", "get_customer_by_name", "get_details_by_id", "suspend_line", "resume_line",
    "get_bills_for_customer", "send_payment_request", "get_data_usage", "enable_roaming", "disable_roaming",
    "transfer_to_human_agents", "refuel_data",
}


def all_tasks(domain):
    return [t for split in domain.splits for t in domain.tasks(split)]


def test_tools_and_split(tau2_telecom):
    assert set(tau2_telecom.tools.names()) == AGENT_TOOLS
    assert len(tau2_telecom.user_tools) == 30 and not set(tau2_telecom.user_tools.names()) & AGENT_TOOLS
    assert tau2_telecom.splits == ("train", "test", "small")  # the shared data has no tasks_full.json
    assert [len(tau2_telecom.tasks(s)) for s in ("train", "test", "small")] == [74, 40, 20]
    assert len({t.id for t in all_tasks(tau2_telecom)}) == 134
    assert "τ² task sets not in it: full (tasks_full.json)" in tau2_telecom.description


def test_the_full_task_set_is_a_split_where_the_data_holds_it(tmp_path, tau2_telecom):
    """τ²'s full set comes in tasks_full.json; a data folder that has it offers the split (here a copy of the shared
    folder whose full set is the base tasks), one that lacks it says which file is missing. (The fixture skips
    the test where no τ² data is installed.)"""
    from muarl.domains.tau.loader import read_json, tau2_dir, tau2_tasks
    from muarl.domains.tau.telecom import tau2_telecom as load_telecom

    shared = tau2_dir("telecom")
    folder = tmp_path / "tau2-bench" / "telecom"
    shutil.copytree(shared, folder)
    with pytest.raises(ValueError, match="tasks_full.json is not in the data"):
        tau2_tasks("telecom", "tau2-telecom", "full", tmp_path)
    base = read_json(shared / "tasks.json")
    splits = read_json(shared / "split_tasks.json")
    (folder / "split_tasks.json").write_text(json.dumps({**splits, "full": [t["id"] for t in reversed(base)]}))
    (folder / "tasks_full.json").write_text(json.dumps(base))
    domain = load_telecom(tmp_path)
    assert domain.splits == ("train", "test", "small", "full") and "not in it" not in domain.description
    assert [t.id for t in domain.tasks("full")] == [t["id"] for t in reversed(base)]


def test_a_tau2_run_on_the_small_set_replays_against_the_shipped_tasks(tmp_path, tau2_telecom):
    """A τ² results file of the small set names tasks only tasks_small.json holds; --shipped-tasks finds them."""
    task = tau2_telecom.tasks("small")[0]
    assert task.id not in {t.id for s in ("train", "test") for t in tau2_telecom.tasks(s)}
    said = [{"role": "assistant", "content": "Hi! How can I help you today?"}, {"role": "user", "content": "My phone has no service."},
            {"role": "assistant", "content": "Please restart your phone."}]
    results = {"tasks": [], "simulations": [{"task_id": task.id, "trial": 0, "messages": said, "termination_reason": "user_stop",
                                              "reward_info": {"reward": 0.0}}]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    out = CliRunner().invoke(main, ["replay", str(path), "--domain", "tau2-telecom", "--shipped-tasks"])
    assert out.exit_code == 0 and "agreeing with the record: 1/1" in out.output, out.output


def test_every_task_starts_broken(tau2_telecom):
    for task in all_tasks(tau2_telecom):
        if "ACTION" in task.metadata["tau2"]["reward_basis"]:
            continue  # transfer tasks: what they assert already holds; the transfer is what they check
        state = tau2_telecom.new_state(task)
        checks = [scenario.holds(state, a) for a in task.metadata["tau2"]["env_assertions"]]
        assert checks and not all(checks), task.id
    assert tau2_telecom.base.recompute_digest() == tau2_telecom.base.digest  # set-ups never touch the seed data


def episode(domain, task, agent):
    return asyncio.run(run_episode(domain, task, agent, ScriptedUser(), reward_fn=make_reward("tau2")))


def test_gold_episodes_score_one_and_record_the_users_calls(tau2_telecom):
    for task in all_tasks(tau2_telecom):
        ep = episode(tau2_telecom, task, OracleAgent())
        assert ep.reward is not None and ep.reward.reward == 1.0, (task.id, ep.termination, ep.reward and ep.reward.details)
        assert all(ep.reward.details["env_assertions"].values())
        gold_user = [(a.name, a.kwargs) for a in task.actions if a.requestor == "user"]
        done_by_user = [(e.name, e.arguments) for e in ep.tool_executions if e.requestor == "user"]
        assert done_by_user == gold_user and all(e.error is None for e in ep.tool_executions), task.id
        assert not any(m.tool_calls and m.role == "user" for m in ep.messages)  # the agent never sees the phone


def test_talking_only_scores_zero(tau2_telecom):
    for task in tau2_telecom.tasks("test"):
        ep = episode(tau2_telecom, task, DoNothingAgent())
        assert ep.reward.reward == 0.0, task.id


def test_action_criterion_counts_the_users_calls(tau2_telecom):
    task = next(t for t in all_tasks(tau2_telecom) if any(a.requestor == "user" for a in t.actions))
    criteria = {**task.metadata["tau2"], "reward_basis": ["ENV_ASSERTION", "ACTION"]}
    task = task.model_copy(update={"metadata": {**task.metadata, "tau2": criteria}})
    ep = episode(tau2_telecom, task, OracleAgent())
    assert ep.reward.components == {"ENV_ASSERTION": 1.0, "ACTION": 1.0}
    info = evaluate_tau2(tau2_telecom, task, ep.reward.final_hash, ep.messages)  # the agent's view: no user calls in it
    assert info.details["checks"]["ACTION"] == 0.0 and info.details["checks"]["ENV_ASSERTION"] == 0.0 and info.reward == 0.0


def call(domain, state, name, user=True, **kwargs):
    return (domain.run_user_tool if user else domain.run_tool)(state, name, kwargs)


@pytest.mark.parametrize(("name", "arguments"), [("set_network_mode_preference", {"mode": 2}),
                                                 ("set_network_mode_preference", {"mode": None}),
                                                 ("set_apn_settings", {"apn_settings": "internet"})])
def test_a_wrongly_typed_phone_setting_is_refused_and_changes_nothing(tau2_telecom, name, arguments):
    """A departure from τ², kept on purpose and measured in docs/tau-bench.md: τ² stores these values on the phone
    (which changes its reward on some tasks, and crashes its evaluator for the APN string); muarl refuses the call."""
    from muarl.domains.base import ArgumentError

    task = next(t for t in all_tasks(tau2_telecom) if any(a.requestor == "user" for a in t.actions))
    state = tau2_telecom.new_state(task)
    before = state.hash()
    with pytest.raises(ArgumentError):
        call(tau2_telecom, state, name, **arguments)
    assert state.hash() == before


def test_a_paid_bill_and_resumed_line_serve_the_phone_after_a_reboot(tau2_telecom):
    state = tau2_telecom.new_state()
    for name, args in [("set_user_info", {"name": "John Smith", "phone_number": "555-123-2002"}),
                       ("suspend_line_for_overdue_bill", {"customer_id": "C1001", "line_id": "L1002", "new_bill_id": "B9", "contract_ended": False}),
                       ("simulate_network_search", {})]:
        env = "assistant" if name.startswith("suspend") else "user"
        scenario.lookup(scenario.SETUP, {"env_type": env, "func_name": name}, "set-up")(state, **args)
        sync_with_carrier(state)
    assert state.get("phone", "device")["network_connection_status"] == "no_service"
    call(tau2_telecom, state, "send_payment_request", user=False, customer_id="C1001", bill_id="B9")
    assert "B9" in call(tau2_telecom, state, "check_payment_request")  # the request reaches the phone
    call(tau2_telecom, state, "make_payment")
    assert state.get("bills", "B9")["status"] == "Paid"  # the carrier sees the payment
    call(tau2_telecom, state, "resume_line", user=False, customer_id="C1001", line_id="L1002")
    assert state.get("phone", "device")["network_connection_status"] == "no_service"  # not until it searches again
    call(tau2_telecom, state, "reboot_device")
    assert state.get("phone", "device")["network_connection_status"] == "connected"


@pytest.mark.parametrize("saver,expected", [(False, "220.00 Mbps (Excellent)"), (True, "44.00 Mbps (Good)")])
def test_speed_follows_technology_signal_and_data_saver(tau2_telecom, saver, expected):
    state = tau2_telecom.new_state()
    if saver:
        call(tau2_telecom, state, "toggle_data_saver_mode")
    assert expected in call(tau2_telecom, state, "run_speed_test")


def test_a_vpn_reconnected_after_the_broken_vpn_set_up_is_poor_too(tau2_telecom):
    """τ² connects every VPN to one default server object, which ``break_vpn`` makes poor: reconnecting does not
    fix the speed within that episode, while another episode's VPN is excellent."""
    broken = tau2_telecom.new_state()
    scenario.lookup(scenario.SETUP, {"env_type": "user", "func_name": "break_vpn"}, "set-up")(broken)
    call(tau2_telecom, broken, "disconnect_vpn")
    assert "220.00 Mbps" in call(tau2_telecom, broken, "run_speed_test")
    call(tau2_telecom, broken, "connect_vpn")
    assert broken.get("phone", "device")["vpn_details"]["server_performance"] == "poor"
    assert "22.00 Mbps" in call(tau2_telecom, broken, "run_speed_test")
    fresh = tau2_telecom.new_state()
    call(tau2_telecom, fresh, "connect_vpn")
    assert "220.00 Mbps" in call(tau2_telecom, fresh, "run_speed_test")


def test_calls_the_loop_skipped_are_not_replayed():
    skipped = Message(role="tool", tool_call_id="b", content=NOT_EXECUTED_OUTPUT)
    turn = Message(role="assistant", tool_calls=[ToolCall(id="a", name="x"), ToolCall(id="b", name="y")])
    assert [c.id for _, c in executed_calls([turn, Message(role="tool", tool_call_id="a", content="ok"), skipped])] == ["a"]


def test_recorded_episodes_replay_to_the_same_verdict(tau2_telecom, tmp_path):
    """The episode file keeps the user's tool traffic, so re-scoring runs the user's calls again too."""
    from muarl.evals.replay import read_trajectories, replay_all

    path = tmp_path / "episodes.jsonl"
    tasks = tau2_telecom.tasks("test")[:6]
    with path.open("w") as f:
        for task in tasks:
            for agent in (OracleAgent(), DoNothingAgent()):
                f.write(episode(tau2_telecom, task, agent).model_dump_json() + "\n")
    results = replay_all(tau2_telecom, read_trajectories(path, tau2_telecom))
    assert [r.reward.reward for r in results] == [1.0, 0.0] * len(tasks)
    assert all(r.agrees for r in results)


def test_synthesis_rules_pair_the_agents_calls_with_their_own_executions(tau2_telecom):
    """The user's executions sit between the agent's in the record; the rules must not pair an agent call with one."""
    from muarl.synth.validate import RuleConfig, check_rules

    rules = RuleConfig(check_invented_ids=False)  # the oracle knows the task's ids without looking them up
    for task in [t for t in tau2_telecom.tasks("test") if any(a.requestor == "user" for a in t.actions)]:
        ep = episode(tau2_telecom, task, OracleAgent())
        verdict = check_rules(ep, tau2_telecom, task, rules)
        assert verdict.status == "pass", (task.id, verdict.rejections)
