"""The short-horizon clinic profile (``muarl.domains.clinic.lite``, registered as ``clinic-lite``).

Specification: at most 5 tools (the clinic's own code where it has one) and a system turn of at most 600
SmolLM2 tokens as our ``chatml-hermes`` format renders it; short ids; ≥ 1,000 train and ≥ 300 test tasks of
levels 1 (identify + one change) and 2 (+ a doctor's fee that must be told, and that no id, email or number of
the task contains), on patients and doctors that never cross splits; every wording of a request states its details,
and the opening states the patient's email. In about three tasks of four at each level the patient changes their mind
when first asked to confirm (the gold change uses the revised value). The oracle solves every task, against the
scripted user in 4 agent turns (level 1) or 6 (level 2), one more when the patient changes their mind, and
against the cooperative user (final wishes up front) in 4 or 6; the do-nothing agent solves none; generation is
deterministic in its seed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.domains import load_domain
from muarl.domains.base import ToolError
from muarl.domains.clinic import tools as clinic_tools
from muarl.domains.clinic.lite import load
from muarl.models import hf_loading
from muarl.models.chat_formats import get_chat_format
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.rollout.runner import run_many
from muarl.users.scripted import ScriptedUser


@pytest.fixture(scope="module")
def lite():
    return load_domain("clinic-lite")


def test_tools_are_few_and_the_clinics_own(lite):
    assert lite.tools.names() == ["find_patient_by_email", "find_doctor", "update_contact_info"]
    assert lite.tools["update_contact_info"].fn is clinic_tools.update_contact_info
    assert lite.tools["find_patient_by_email"].fn is clinic_tools.find_patient_by_email
    assert [t.name for t in lite.tools if t.kind == "write"] == ["update_contact_info"]
    assert "find_patient_by_email" in lite.system_prompt() and "confirm" in lite.system_prompt()


@pytest.mark.skipif(not (hf_loading.embedded_model_dir() / "config.json").is_file() and not os.environ.get(hf_loading.WHEEL_ENV),
                    reason=f"SmolLM2 not cached and {hf_loading.WHEEL_ENV} not set")
def test_system_turn_fits_600_smollm2_tokens(lite):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_loading.resolve_model(hf_loading.EMBEDDED_MODEL))
    system = get_chat_format("chatml-hermes").system_text(lite.system_prompt(), lite.tools.specs())
    assert len(tokenizer.encode(system)) <= 600


def test_find_doctor(lite):
    state = lite.new_state()
    doctor = next(iter(lite.base.tables["doctors"].values()))
    bare = doctor["name"].removeprefix("Dr. ")
    for name in (doctor["name"], bare.upper(), f"  dr. {bare.lower()} "):
        assert json.loads(lite.run_tool(state, "find_doctor", {"name": name}))["fee"] == doctor["fee"]
    with pytest.raises(ToolError, match="doctor not found"):
        lite.run_tool(state, "find_doctor", {"name": "Dr. Nobody"})


def test_short_ids_and_splits(lite):
    assert all(len(p) <= 4 for p in lite.base.tables["patients"]) and all(len(d) <= 3 for d in lite.base.tables["doctors"])
    train, test = lite.tasks("train"), lite.tasks("test")
    assert len(train) >= 1000 and len(test) >= 300
    for tasks in (train, test):
        levels = Counter(t.difficulty for t in tasks)
        assert set(levels) == {1, 2} and min(levels.values()) > len(tasks) / 3
        kinds = Counter((t.difficulty, t.metadata["changes_mind"]) for t in tasks)
        assert len(kinds) == 4 and min(kinds.values()) > len(tasks) / 12  # 3 in 4 patients change their mind
        for t in tasks:
            assert [a.name for a in t.actions if a.name != "find_doctor"] == ["find_patient_by_email", "update_contact_info"]
            assert len(t.outputs) == t.difficulty - 1 == sum(r.outcome == "answered" for r in t.user.requests)
            change = next(r for r in t.user.requests if r.outcome == "done")
            assert (change.revision is not None) == t.metadata["changes_mind"]
            update = next(a for a in t.actions if a.name == "update_contact_info")
            final = change.revised().facts
            assert {k: v for k, v in update.kwargs.items() if k != "patient_id"} == final
            if change.revision is not None:  # the first value differs from the final one and does not contain it
                assert all(final[k] not in change.facts[k] and change.facts[k] not in final[k] for k in final)
            values = [str(v) for a in t.actions for v in a.kwargs.values()]
            assert not any(fee in v for fee in t.outputs for v in values)  # a fee is told, never found in an id or number

    def touched(tasks):
        return {t.metadata["patient_id"] for t in tasks} | {a.kwargs["name"] for t in tasks for a in t.actions if a.name == "find_doctor"}

    assert touched(train) and touched(test) and not touched(train) & touched(test)
    assert len({t.id for t in train + test}) == len(train) + len(test)


def test_every_wording_states_its_details_and_the_opening_the_email(lite):
    for t in lite.tasks("test"):
        for i, request in enumerate(t.user.requests):
            wordings = [request.text, *request.variants]
            assert len(set(wordings)) >= 3
            for text in wordings:
                assert all(v in text for v in request.facts.values())
                assert (t.user.known_info["email"] in text) == (i == 0)


def test_generation_is_deterministic_in_the_seed(lite):
    again = load(seed=7, n_train=5, n_test=20)
    assert [t.model_dump() for t in again.tasks("test")] == [t.model_dump() for t in lite.tasks("test")[:20]]
    other = load(seed=8, n_train=5, n_test=20)
    assert other.base.digest != lite.base.digest


def test_data_dir_is_refused():
    with pytest.raises(ValueError, match="reads no data directory"):
        load("/tmp")


@pytest.mark.parametrize("split", ["train", "test"])
def test_oracle_solves_every_task_and_doing_nothing_none(lite, split):
    tasks = lite.tasks(split)
    kind = {t.id: (t.difficulty, t.metadata["changes_mind"]) for t in tasks}
    oracle = asyncio.run(run_many(lite, tasks, OracleAgent(), ScriptedUser(), concurrency=16, progress=False)).episodes
    assert all(e.reward.reward == 1.0 and e.malformed_calls == 0 for e in oracle)
    assert {(*kind[e.task_id], e.agent_turns) for e in oracle} == {(1, False, 4), (2, False, 6), (1, True, 5), (2, True, 7)}
    cooperative = asyncio.run(run_many(lite, tasks, OracleAgent(), ScriptedUser(cooperative=True), concurrency=16, progress=False)).episodes
    assert all(e.reward.reward == 1.0 for e in cooperative)
    assert {(kind[e.task_id][0], e.agent_turns) for e in cooperative} == {(1, 4), (2, 6)}
    nothing = asyncio.run(run_many(lite, tasks, DoNothingAgent(), ScriptedUser(), concurrency=16, progress=False)).episodes
    assert len(nothing) == len(tasks) and all(e.reward.reward == 0.0 for e in nothing)
    assert lite.base.recompute_digest() == lite.base.digest


def test_rollout_command(tmp_path):
    for agent, expected in (("oracle", "1.000"), ("none", "0.000")):
        result = CliRunner().invoke(main, ["rollout", "--domain", "clinic-lite", "--split", "test", "--agent", agent, "--limit", "30",
                                           "--out", str(tmp_path / agent), "--quiet"])
        assert result.exit_code == 0, result.output
        assert f"  1     {expected}     {expected}" in result.output
