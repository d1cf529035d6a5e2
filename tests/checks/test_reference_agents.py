"""The oracle passes every check it is subject to on the clinic, clinic-lite and τ retail/airline test tasks (a check
that flags the oracle is a wrong check), and its user is never blamed; the do-nothing agent fails, labelled agent."""

from __future__ import annotations

import asyncio

import pytest

from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.rollout.runner import run_many
from muarl.users.scripted import ScriptedUser
from domain_data import load_or_skip

DOMAINS = ["clinic", "clinic-lite", "tau-retail", "tau-airline"]


@pytest.mark.slow
@pytest.mark.parametrize("name", DOMAINS)
def test_the_oracle_passes_every_check_and_the_do_nothing_agent_is_at_fault(name):
    domain = load_or_skip(name)
    tasks = domain.tasks("test")
    oracle = asyncio.run(run_many(domain, tasks, OracleAgent(), ScriptedUser(), progress=False)).episodes
    assert len(oracle) == len(tasks) and all(ep.reward.success for ep in oracle)
    flagged = [(ep.task_id, v.check, v.detail) for ep in oracle for v in ep.checks if v.status in ("fail", "error")]
    assert flagged == []
    applied = {v.check for ep in oracle for v in ep.checks if v.status == "pass"}
    assert {"confirmed_before_write", "turns_after_completion", "turns_vs_oracle"} <= applied
    assert ("grounded_writes" in applied) == domain.grounds_writes

    idle = asyncio.run(run_many(domain, tasks, DoNothingAgent(), ScriptedUser(), progress=False)).episodes
    failed = [ep for ep in idle if not ep.reward.success]
    assert failed and all(ep.attribution.label == "agent" for ep in failed)
