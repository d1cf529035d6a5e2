"""The embedded clinic domain (``muarl.domains.clinic``).

Specification: a generated world (≥ 10 tools including think, calculate and the terminal transfer; a seed
database of hundreds of records) with ≥ 500 train and ≥ 100 test tasks whose patients and records never
cross splits, of every difficulty 1..5, some with answers to tell, refusals and transfers; generation is
deterministic in its seed; every tool refuses what the policy forbids with a message that says why.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import pytest

from muarl.domains import load_domain
from muarl.domains.base import ToolError
from muarl.domains.clinic import load
from muarl.domains.clinic.data import NOW, TIME_FORMAT


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


@pytest.fixture()
def state(clinic):
    return clinic.new_state()


def rows(clinic, table):
    return list(clinic.base.tables[table].values())


def run(clinic, state, name, **kwargs):
    return clinic.run_tool(state, name, kwargs)


# ---------------------------------------------------------------- world and tasks


def test_tools_and_policy(clinic):
    names = clinic.tools.names()
    assert len(names) >= 10 and {"think", "calculate", "transfer_to_human_agents"} <= set(names)
    assert clinic.tools["transfer_to_human_agents"].terminal and clinic.tools["think"].kind == "think"
    assert [t.name for t in clinic.tools if t.terminal] == ["transfer_to_human_agents"]
    assert {t.name for t in clinic.tools if t.kind == "write"} >= {"book_appointment", "cancel_appointment", "pay_balance"}
    policy = clinic.system_prompt().lower()
    assert "identify the patient" in policy and 'explicit "yes"' in policy
    assert all(t.spec.description and all("description" in p for p in t.spec.parameters["properties"].values()) for t in clinic.tools)


def test_seed_database_size(clinic):
    sizes = {name: len(table) for name, table in clinic.base.tables.items()}
    assert sizes["patients"] >= 200 and sizes["appointments"] >= 300 and sizes["prescriptions"] >= 200 and sizes["doctors"] >= 12
    assert sum(sizes.values()) >= 1000


def test_splits_sizes_difficulties_and_outcomes(clinic):
    train, test = clinic.tasks("train"), clinic.tasks("test")
    assert len(train) >= 500 and len(test) >= 100
    for tasks in (train, test):
        assert {t.difficulty for t in tasks} == {1, 2, 3, 4, 5}
        outcomes = Counter(r.outcome for t in tasks for r in t.user.requests)
        assert all(outcomes[o] > 0 for o in ("done", "answered", "refused", "transfer"))
        assert any(t.outputs for t in tasks)
        assert any(a.name == "transfer_to_human_agents" for t in tasks for a in t.actions)
    assert len({t.id for t in train + test}) == len(train) + len(test)
    assert test[0].id == "clinic-test-0000" and all(t.split == "test" and t.domain == "clinic" for t in test)


def _touched(tasks) -> set[str]:
    ids = set()
    for t in tasks:
        ids.add(t.metadata["patient_id"])
        for a in t.actions:
            ids.update(str(a.kwargs[k]) for k in ("patient_id", "appointment_id", "rx_id", "doctor_id") if k in a.kwargs)
    return ids


def test_splits_are_disjoint_in_patients_and_records(clinic):
    train, test = _touched(clinic.tasks("train")), _touched(clinic.tasks("test"))
    assert train and test and not train & test
    assert any(i.startswith("A") for i in test) and any(i.startswith("RX") for i in test) and any(i.startswith("D") for i in test)


def test_generation_is_deterministic_in_the_seed(clinic):
    again = load(seed=7, n_train=20, n_test=20)
    assert [t.model_dump() for t in again.tasks("test")] == [t.model_dump() for t in clinic.tasks("test")[:20]]
    assert again.base.digest == clinic.base.digest
    other = load(seed=8, n_train=20, n_test=20)
    assert other.base.digest != clinic.base.digest
    assert [t.model_dump() for t in other.tasks("test")] != [t.model_dump() for t in again.tasks("test")]


def test_every_gold_replay_runs_and_changes_the_state(clinic):
    fresh = clinic.new_state().hash()
    for task in clinic.tasks("test"):
        assert clinic.gold_hash(task) != fresh
        assert task.actions[0].name in ("find_patient_by_email", "find_patient_by_name_dob")


def test_data_dir_is_refused():
    with pytest.raises(ValueError, match="reads no data directory"):
        load("/tmp")


# ---------------------------------------------------------------- tools: happy paths


def test_identification(clinic, state):
    p = rows(clinic, "patients")[0]
    assert run(clinic, state, "find_patient_by_email", email=" " + p["email"].upper()) == p["patient_id"]
    assert run(clinic, state, "find_patient_by_name_dob", first_name=p["first_name"].lower(), last_name=p["last_name"],
               date_of_birth=p["date_of_birth"]) == p["patient_id"]
    assert json.loads(run(clinic, state, "get_patient_details", patient_id=p["patient_id"]))["email"] == p["email"]


def test_book_cancel_reschedule_move_slots(clinic, state):
    p = rows(clinic, "patients")[0]
    d = rows(clinic, "doctors")[0]
    slot, other = d["open_slots"][0], d["open_slots"][1]
    booked = json.loads(run(clinic, state, "book_appointment", patient_id=p["patient_id"], doctor_id=d["doctor_id"], time=slot, reason="checkup"))
    aid = booked["appointment_id"]
    assert slot not in state.get("doctors", d["doctor_id"])["open_slots"] and aid in state.get("patients", p["patient_id"])["appointments"]
    run(clinic, state, "reschedule_appointment", appointment_id=aid, new_time=other)
    slots = state.get("doctors", d["doctor_id"])["open_slots"]
    assert slot in slots and other not in slots and slots == sorted(slots)
    assert json.loads(run(clinic, state, "cancel_appointment", appointment_id=aid))["status"] == "cancelled"
    assert sorted(state.get("doctors", d["doctor_id"])["open_slots"]) == sorted(d["open_slots"])


def test_calculate_think_and_transfer(clinic, state):
    assert run(clinic, state, "calculate", expression="(120 - 35.5) * 2") == "169.0"
    assert run(clinic, state, "calculate", expression="-3 + 10 / 4") == "-0.5"
    fresh = state.hash()
    assert run(clinic, state, "think", thought="hmm") == "" and state.hash() == fresh
    assert run(clinic, state, "transfer_to_human_agents", summary="nurse please") == "Transfer successful"
    assert state.hash() != fresh  # the handoff is part of the outcome


# ---------------------------------------------------------------- tools: refusals


def _find(clinic, table, predicate):
    found = [r for r in rows(clinic, table) if predicate(r)]
    assert found, f"the seed database has no {table} record for this case"
    return found[0]


def _hours_ahead(a) -> float:
    return (datetime.strptime(a["time"], TIME_FORMAT) - NOW) / timedelta(hours=1)


def refusal_cases(clinic):
    p = rows(clinic, "patients")[0]
    pid = p["patient_id"]
    d = rows(clinic, "doctors")[0]
    soon = _find(clinic, "appointments", lambda a: a["status"] == "scheduled" and _hours_ahead(a) < 24)
    done = _find(clinic, "appointments", lambda a: a["status"] == "completed")
    later = _find(clinic, "appointments", lambda a: a["status"] == "scheduled" and _hours_ahead(a) >= 24)
    empty = _find(clinic, "prescriptions", lambda r: r["status"] == "active" and r["refills_left"] == 0)
    expired = _find(clinic, "prescriptions", lambda r: r["status"] == "expired")
    hsa_owner = _find(clinic, "patients", lambda q: any(m["type"] == "hsa" and m["balance"] < q["balance"] for m in q["payment_methods"].values()))
    hsa = next(k for k, m in hsa_owner["payment_methods"].items() if m["type"] == "hsa" and m["balance"] < hsa_owner["balance"])
    debtor = _find(clinic, "patients", lambda q: q["balance"] > 0)
    card = next(iter(debtor["payment_methods"]))
    return [
        ("find_patient_by_email", {"email": "nobody@example.com"}, "patient not found"),
        ("find_patient_by_name_dob", {"first_name": p["first_name"], "last_name": p["last_name"], "date_of_birth": "1900-01-01"}, "patient not found"),
        ("get_patient_details", {"patient_id": "P0"}, "patient P0 not found"),
        ("get_appointment_details", {"appointment_id": "A0"}, "appointment A0 not found"),
        ("get_prescription_details", {"rx_id": "RX0"}, "prescription RX0 not found"),
        ("list_doctors", {"specialty": "astrology"}, "no doctors for specialty"),
        ("get_doctor_details", {"doctor_id": "D0"}, "doctor D0 not found"),
        ("book_appointment", {"patient_id": pid, "doctor_id": d["doctor_id"], "time": "2026-03-03 03:00", "reason": "checkup"}, "has no open slot"),
        ("book_appointment", {"patient_id": pid, "doctor_id": d["doctor_id"], "time": "tomorrow", "reason": "checkup"}, "format YYYY-MM-DD HH:MM"),
        ("book_appointment", {"patient_id": pid, "doctor_id": "D0", "time": d["open_slots"][0], "reason": "checkup"}, "doctor D0 not found"),
        ("book_appointment", {"patient_id": "P0", "doctor_id": d["doctor_id"], "time": d["open_slots"][0], "reason": "checkup"}, "patient P0 not found"),
        ("cancel_appointment", {"appointment_id": soon["appointment_id"]}, "less than 24 hours away"),
        ("cancel_appointment", {"appointment_id": done["appointment_id"]}, "is completed, not scheduled"),
        ("cancel_appointment", {"appointment_id": "A0"}, "appointment A0 not found"),
        ("reschedule_appointment", {"appointment_id": soon["appointment_id"], "new_time": d["open_slots"][0]}, "less than 24 hours away"),
        ("reschedule_appointment", {"appointment_id": done["appointment_id"], "new_time": d["open_slots"][0]}, "not scheduled"),
        ("reschedule_appointment", {"appointment_id": later["appointment_id"], "new_time": "2026-03-03 03:00"}, "has no open slot"),
        ("request_refill", {"rx_id": empty["rx_id"]}, "has no refills left"),
        ("request_refill", {"rx_id": expired["rx_id"]}, "is expired and cannot be refilled"),
        ("request_refill", {"rx_id": "RX0"}, "prescription RX0 not found"),
        ("update_contact_info", {"patient_id": pid}, "give a new email or a new phone number"),
        ("update_contact_info", {"patient_id": pid, "email": "not-an-email"}, "is not an email address"),
        ("update_contact_info", {"patient_id": pid, "email": "a b@example.com"}, "is not an email address"),
        ("update_address", {"patient_id": pid, "street": "1 Elm Lane", "city": "Salem", "zip": "9730"}, "must be five digits"),
        ("update_address", {"patient_id": pid, "street": "1 Elm Lane", "city": "Salem", "zip": "97a01"}, "must be five digits"),
        ("pay_balance", {"patient_id": debtor["patient_id"], "payment_method_id": "bitcoin_1", "amount": 1.0}, "payment method bitcoin_1 not found"),
        ("pay_balance", {"patient_id": debtor["patient_id"], "payment_method_id": card, "amount": debtor["balance"] + 0.01}, "at most the balance"),
        ("pay_balance", {"patient_id": debtor["patient_id"], "payment_method_id": card, "amount": 0}, "more than 0"),
        ("pay_balance", {"patient_id": hsa_owner["patient_id"], "payment_method_id": hsa, "amount": hsa_owner["balance"]}, "is not enough"),
        ("calculate", {"expression": "__import__('os')"}, "only numbers"),
        ("calculate", {"expression": "(1).real"}, "only numbers"),
        ("calculate", {"expression": "2 ** 10"}, "only numbers"),
        ("calculate", {"expression": "1 / 0"}, "cannot calculate"),
        ("calculate", {"expression": "1 +"}, "cannot calculate"),
    ]


def test_tools_refuse_what_the_rules_forbid_and_change_nothing(clinic):
    for name, kwargs, message in refusal_cases(clinic):
        state = clinic.new_state()
        with pytest.raises(ToolError, match=message):
            clinic.run_tool(state, name, kwargs)
        assert state.hash() == clinic.new_state().hash(), f"{name} {kwargs} changed the state while refusing"


def test_double_booking_the_same_time_is_refused(clinic, state):
    a = _find(clinic, "appointments", lambda a: a["status"] == "scheduled" and _hours_ahead(a) >= 24)
    doctor = _find(clinic, "doctors", lambda d: d["doctor_id"] != a["doctor_id"])
    slot = doctor["open_slots"][0]
    patient = clinic.base.tables["patients"][a["patient_id"]]
    own = state.edit("appointments", a["appointment_id"])  # put the patient's appointment at the slot's time
    own["time"] = slot
    with pytest.raises(ToolError, match="already has appointment"):
        run(clinic, state, "book_appointment", patient_id=patient["patient_id"], doctor_id=doctor["doctor_id"], time=slot, reason="checkup")
