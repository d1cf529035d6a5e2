"""τ² tasks' own assertions reported as checks through the domain hook (``TauDomain.conduct_checks``)."""

from __future__ import annotations

import asyncio

from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.reward import make_reward
from muarl.rollout.episode import run_episode
from muarl.users.scripted import ScriptedUser
from domain_data import load_or_skip


def verdicts(episode):
    return {v.check: v for v in episode.checks if v.check.startswith("tau2_")}


def test_tau2_actions_and_nl_assertions_are_checks():
    domain = load_or_skip("tau2-retail")
    task = next(t for t in domain.tasks("test") if t.metadata["tau2"]["actions"] and t.metadata["tau2"]["nl_assertions"])
    oracle = asyncio.run(run_episode(domain, task, OracleAgent(), ScriptedUser(), reward_fn=make_reward("tau2")))
    found = verdicts(oracle)
    assert found["tau2_actions"].status == "pass" and found["tau2_nl_assertions"].status == "not_applicable"  # no judge

    idle = asyncio.run(run_episode(domain, task, DoNothingAgent(), ScriptedUser(), reward_fn=make_reward("tau2")))
    assert verdicts(idle)["tau2_actions"].status == "fail"

    judged = oracle.model_copy(deep=True)
    judged.reward.details["nl_assertions"] = [{"assertion": "Agent says sorry", "met": False, "reasoning": "it never did"}]
    found = verdicts(judged.model_copy(update={"checks": domain.conduct_checks(task, judged)}))
    assert found["tau2_nl_assertions"].status == "fail" and "Agent says sorry" in found["tau2_nl_assertions"].detail

    outcome = asyncio.run(run_episode(domain, task, OracleAgent(), ScriptedUser()))  # scored otherwise: nothing to report
    assert verdicts(outcome) == {}
