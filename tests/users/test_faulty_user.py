"""The fault-injecting user: seeded, recorded faults of the kinds asked for, and clear errors for a bad spec."""

from __future__ import annotations

import asyncio

import pytest

from muarl.domains import load_domain
from muarl.models.oracle import OracleAgent
from muarl.rollout.runner import run_many
from muarl.users.factory import make_user
from muarl.users.faulty import FAULT_KINDS, parse_faulty_spec

LITE = load_domain("clinic-lite")
TASKS = LITE.tasks("test")[:40]


def run(spec: str, seed: int = 0):
    return asyncio.run(run_many(LITE, TASKS, OracleAgent(), make_user(spec), seed=seed, progress=False)).episodes


def test_faults_are_seeded_recorded_at_user_messages_and_of_the_kinds_asked_for():
    first, again = run("scripted:faulty:0.5:stop,wrong_value"), run("scripted:faulty:0.5:stop,wrong_value")
    assert [ep.injected_faults for ep in first] == [ep.injected_faults for ep in again]
    faults = [(ep, f) for ep in first for f in ep.injected_faults]
    assert faults and {f.kind for _, f in faults} == {"stop", "wrong_value"}
    for ep, fault in faults:
        said = ep.messages[fault.index]
        assert said.role == "user"
        if fault.kind == "stop":
            assert "###STOP###" in said.content and fault.index == len(ep.messages) - 1
        else:
            wrong = fault.detail.split("'")[1]
            assert wrong in said.content
    assert [ep.injected_faults for ep in run("scripted:faulty:0.5:stop,wrong_value", seed=1)] != [ep.injected_faults for ep in first]


def test_rate_zero_is_the_scripted_user_and_stops_make_the_oracle_fail():
    clean = run("scripted:faulty:0")
    assert all(not ep.injected_faults and ep.reward.success for ep in clean)
    assert [ep.messages for ep in clean] == [ep.messages for ep in run("scripted")]
    stopped = run("scripted:faulty:1:stop")
    assert all(ep.injected_faults[0].kind == "stop" and not ep.reward.success for ep in stopped)
    assert all(ep.attribution.label == "user" for ep in stopped)


def test_spec_parsing():
    assert parse_faulty_spec("scripted:faulty") == (0.2, FAULT_KINDS)
    assert parse_faulty_spec("scripted:faulty:0.4:invent") == (0.4, ("invent",))
    for bad, says in [("scripted:faulty:lots", "bad fault rate"), ("scripted:faulty:2", r"not in \[0, 1\]"),
                      ("scripted:faulty:0.1:shout", "choose among")]:
        with pytest.raises(ValueError, match=says):
            make_user(bad)
