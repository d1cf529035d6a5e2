"""ACEBench's normal and special categories as domains: each entry offers its own functions, its answer is the
agent's first message, and the ground-truth policy scores what ACEBench's own checker gives its possible
answers (100% but for the entries listed in docs/evaluation.md, where that checker fails them too)."""

from __future__ import annotations

import asyncio
import json

import pytest

from domain_data import load_or_skip
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.reward import make_reward
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.runner import run_many
from muarl.types import Message
from muarl.users.base import STOP
from muarl.users.scripted import ScriptedUser
from scripted_parties import ScriptAgent, calls

# entries whose possible answer ACEBench's checker itself rejects (bench/acebench_agreement.py), per split
UPSTREAM_REJECTS = {"single_turn_single_function": 8, "single_turn_parallel_function": 14, "multi_turn_user_adjust": 13,
                    "multi_turn_user_switch": 14, "similar_api": 2, "preference": 1, "atom_object_deep": 17}
ONE_RESPONSE = LoopConfig(max_turns=1, parallel_tool_calls=True)


@pytest.fixture(scope="module")
def normal():
    return load_or_skip("acebench-normal")


@pytest.fixture(scope="module")
def special():
    return load_or_skip("acebench-special")


def _solved(domain, agent, split):
    tasks = domain.tasks(split)
    result = asyncio.run(run_many(domain, tasks, agent, ScriptedUser(), config=ONE_RESPONSE, reward_fn=make_reward(), progress=False))
    return len(tasks), result.solved


def test_ground_truth_policy_scores_the_documented_maximum(normal, special):
    for domain in (normal, special):
        for split in domain.splits:
            n, solved = _solved(domain, OracleAgent(), split)
            assert n - solved == UPSTREAM_REJECTS.get(split, 0), split


def test_an_agent_that_only_talks_solves_nothing(normal, special):
    for domain, split in ((normal, "atom_bool"), (special, "irrelevant"), (special, "incomplete")):
        assert _solved(domain, DoNothingAgent(), split)[1] == 0


def test_each_entry_offers_its_own_functions_and_its_first_answer_counts(normal):
    task = normal.tasks("atom_enum")[0]
    (name, args), = task.metadata["possible_answer"].items()
    offered = normal.task_tools(task)
    assert name in offered and offered.names() == [f["name"] for f in task.metadata["functions"]]
    assert normal.task_tools(normal.tasks("atom_enum")[1]).names() != offered.names()
    agent = ScriptAgent([calls(("no_such_api", "{}")), calls((name, json.dumps(args)))])
    ep = asyncio.run(run_episode(normal, task, agent, ScriptedUser(), config=LoopConfig(max_turns=3), reward_fn=make_reward()))
    assert [t.name for t in agent.tools] == offered.names()
    assert ep.tool_executions[0].error_kind == "unknown_tool" and ep.tool_executions[1].error is None
    assert ep.termination == "terminal_tool"
    assert not ep.reward.success  # the first answer was wrong; a later right one does not count


def test_missing_data_is_a_clear_error(tmp_path):
    from muarl.domains.acebench import AceBenchDataError, acebench_normal

    with pytest.raises(AceBenchDataError, match="no ACEBench data under"):
        acebench_normal(str(tmp_path))


@pytest.fixture(scope="module")
def agent_domain():
    return load_or_skip("acebench-agent")


# per split: entries, travel entries among them, and entries whose first milestone path, replayed, does not reach
# the possible answer (all on the phone: a step such as a login is missing from it, or a message's text differs);
# ACEBench's own classes and checker agree on every one
AGENT_SPLITS = {"multi_step": (20, 0, 10), "multi_turn": (30, 10, 9)}


def _is_travel(task) -> bool:
    return task.metadata["involved_classes"] == ["Travel"]


def test_agent_ground_truth_replays_the_milestones_to_the_documented_maximum(agent_domain):
    for split, (n, n_travel, misses) in AGENT_SPLITS.items():
        tasks = agent_domain.tasks(split)
        result = asyncio.run(run_many(agent_domain, tasks, OracleAgent(), ScriptedUser(), config=LoopConfig(parallel_tool_calls=True),
                                      reward_fn=make_reward(), progress=False))
        assert (len(tasks), sum(map(_is_travel, tasks)), len(tasks) - result.solved) == (n, n_travel, misses), split
        assert all(0 <= e.reward.details["process_accuracy"] <= 1 for e in result.episodes)
        by_id = {t.id: t for t in tasks}
        assert all(e.reward.success for e in result.episodes if _is_travel(by_id[e.task_id])), split
    assert agent_domain.base.recompute_digest() == agent_domain.base.digest


def test_travel_entries_offer_the_travel_tools_under_the_airline_policy(agent_domain):
    """Their tools' schemas, derived from our code, agree with the functions the entries list (whose reserve_flight
    requires "payment_methods", a parameter it does not have: ACEBench's class takes payment_method)."""
    from muarl.domains.acebench import acebench_dir
    from muarl.domains.acebench.agent import POLICY, TRAVEL_POLICY

    rows = [json.loads(line) for line in (acebench_dir() / "data_agent_multi_turn.json").read_text().splitlines() if line.strip()]
    row = next(r for r in rows if "find_transfer_flights" in {f["name"] for f in r["function"]})
    task = agent_domain.task(row["id"])
    listed = {f["name"]: f["parameters"] for f in row["function"]}
    offered = {t.name: t.spec.parameters for t in agent_domain.task_tools(task)}
    assert set(offered) == set(listed)
    for name, params in offered.items():
        assert set(params["properties"]) == set(listed[name]["properties"]), name
        assert set(params["required"]) ^ set(listed[name]["required"]) == ({"payment_method", "payment_methods"} if name == "reserve_flight" else set())
    assert agent_domain.system_prompt(task) == TRAVEL_POLICY
    assert agent_domain.system_prompt(agent_domain.tasks("multi_turn")[0]) == POLICY
    assert POLICY in agent_domain.system_prompt(None) and TRAVEL_POLICY in agent_domain.system_prompt(None)


def test_multi_step_user_is_absent_as_in_acebench_and_the_oracle_finishes_the_conversation(agent_domain):
    """ACEBench's multi-step runner answers a message holding no call with its "carry on" line and stops at
    "finish conversation"; the oracle confirms nothing (nobody is there) and ends with that phrase."""
    from muarl.domains.acebench.agent import CARRY_ON, FINISH

    task = agent_domain.tasks("multi_step")[0]
    assert task.user.absent is not None and (task.user.absent.reply, task.user.absent.end) == (CARRY_ON, FINISH)
    assert all(t.user.absent is None for t in agent_domain.tasks("multi_turn"))
    assert not task.user.rules  # nobody there to follow them
    travel = [t for t in agent_domain.tasks("multi_turn") if "Travel" in t.metadata["involved_classes"]]
    assert travel and all(any("round-trip" in r for r in t.user.rules) for t in travel)  # ACEBench's travel user rule
    talker = ScriptAgent([Message(role="assistant", content="Shall I go ahead?"), Message(role="assistant", content=f"Done. {FINISH}")])
    ep = asyncio.run(run_episode(agent_domain, task, talker, ScriptedUser(), config=LoopConfig(max_turns=5)))
    assert [m.content for m in ep.messages if m.role == "user"][1:] == [CARRY_ON, STOP] and ep.termination == "user_stop"
    oracle = asyncio.run(run_episode(agent_domain, task, OracleAgent(), ScriptedUser(), config=LoopConfig(max_turns=30)))
    said = [m.content or "" for m in oracle.messages if m.role == "assistant" and not m.tool_calls]
    assert said and FINISH in said[-1] and not any("confirm" in s.lower() for s in said) and oracle.termination == "user_stop"


def test_agent_tool_schemas_are_derived_from_code_and_match_the_entries(agent_domain):
    """Our phone tools' schemas come from their signatures; each name and argument agrees with the functions ACEBench's
    entries list (search_reminders, listed but absent from ACEBench's classes, is not offered)."""
    from muarl.domains.acebench import acebench_dir

    row = json.loads((acebench_dir() / "data_agent_multi_step.json").read_text().splitlines()[0])
    listed = {f["name"]: f["parameters"] for f in row["function"]}
    offered = {t.name: t.spec.parameters for t in agent_domain.task_tools(agent_domain.task(row["id"]))}
    assert set(listed) - set(offered) == {"search_reminders"}
    for name, params in offered.items():
        assert set(params["properties"]) == set(listed[name]["properties"]), name
        assert set(params["required"]) == set(listed[name]["required"]), name


def test_agent_entries_start_from_their_own_device_flags(agent_domain):
    offline = next(t for t in agent_domain.tasks("multi_step") if t.metadata["initial_config"].get("BaseApi", {}).get("logged_in") is False)
    state = agent_domain.new_state(offline)
    assert state.get("device", "logged_in") is False
    assert agent_domain.new_state().get("device", "logged_in") is True


def test_an_agent_entry_of_a_scenario_muarl_lacks_is_a_clear_error(tmp_path):
    from muarl.domains.acebench import AceBenchDataError
    from muarl.domains.acebench.agent import acebench_agent

    (tmp_path / "possible_answer").mkdir()
    row = {"id": "agent_multi_step_0", "question": "q", "function": [], "initial_config": {}, "involved_classes": ["Finance"]}
    (tmp_path / "data_agent_multi_step.json").write_text(json.dumps(row) + "\n")
    (tmp_path / "possible_answer" / "data_agent_multi_step.json").write_text(json.dumps({"id": row["id"], "ground_truth": [], "mile_stone": []}) + "\n")
    with pytest.raises(AceBenchDataError, match=r"agent_multi_step_0 involves scenario class\(es\) \['Finance'\], which muarl does not have"):
        acebench_agent(str(tmp_path)).tasks("multi_step")
