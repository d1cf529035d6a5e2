"""``clinic-lite``: a short-horizon profile of the clinic, sized for a 135M-parameter model on a CPU.

The clinic's 17 tools and long policy make a 2,536-token system turn and 6-12 agent turns per episode; too
long a horizon for a small model to succeed often enough for a binary reward to carry any gradient. This
profile keeps the clinic's rules and tool code (identify by email, confirm before a change, one call a turn)
but only three tools, a short policy, a small database with short ids (patients ``P100``..., doctors
``D10``...), and tasks of two levels (see ``lite_tasks.py``): the patient gives their email in the opening,
so a policy-following agent needs 4 turns for level 1 and 6 for level 2.
"""

from __future__ import annotations

import random

from muarl.domains.base import Domain, State, ToolError, ToolRegistry, tool
from muarl.domains.clinic import generated_domain
from muarl.domains.clinic import tools as clinic_tools
from muarl.domains.clinic.data import FIRST_NAMES, LAST_NAMES, SPECIALTIES, SeedDatabase
from muarl.domains.clinic.lite_tasks import generate_task


@tool("read")
def find_doctor(state: State, name: str) -> dict:
    """Find a doctor by name: id, specialty and visit fee.

    Args:
        name: The doctor's full name, such as 'Dr. Jane Doe'.
    """
    wanted = name.strip().lower().removeprefix("dr.").strip()
    for doctor in state.table("doctors").values():
        if doctor["name"].lower().removeprefix("dr. ") == wanted:
            return doctor
    raise ToolError("doctor not found")


TOOLS = [clinic_tools.find_patient_by_email, find_doctor, clinic_tools.update_contact_info]


def generate(seed: int = 7, n_patients: int = 800, doctors_per_specialty: int = 4, test_share: float = 0.35) -> SeedDatabase:
    """Patients (name, date of birth, email, phone) and doctors (specialty, fee); about ``test_share`` of the
    patients and half the doctors of each specialty belong to the test split."""
    rng = random.Random(f"clinic-lite/{seed}")
    split_of: dict[str, str] = {}
    doctors: dict[str, dict] = {}
    names: set[str] = set()
    for specialty in SPECIALTIES:
        for k in range(doctors_per_specialty):
            name = f"Dr. {rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            while name in names:
                name = f"Dr. {rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            names.add(name)
            doctor_id = f"D{10 + len(doctors)}"
            doctors[doctor_id] = {"doctor_id": doctor_id, "name": name, "specialty": specialty, "fee": rng.randrange(100, 400, 5)}
            split_of[doctor_id] = "test" if k % 2 else "train"
    patients: dict[str, dict] = {}
    emails: set[str] = set()
    for i in range(n_patients):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        email = f"{first.lower()}.{last.lower()}{rng.randrange(10, 99)}@example.com"
        if email in emails:
            email = f"{first.lower()}.{last.lower()}{100 + i}@example.com"
        emails.add(email)
        patient_id = f"P{100 + i}"
        patients[patient_id] = {
            "patient_id": patient_id, "first_name": first, "last_name": last,
            "date_of_birth": f"{rng.randrange(1940, 2005)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
            "email": email, "phone": f"555-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
        }
        split_of[patient_id] = "test" if rng.random() < test_share else "train"
    return SeedDatabase(tables={"patients": patients, "doctors": doctors}, split_of=split_of)


def load(data_dir: str | None = None, *, seed: int = 7, n_train: int = 1000, n_test: int = 300) -> Domain:
    """The clinic-lite domain; like the clinic, generated from ``seed`` and reading no data directory."""
    return generated_domain(
        "clinic-lite", data_dir, generate(seed), ToolRegistry.from_functions(TOOLS), "lite_policy.md", generate_task,
        {"train": n_train, "test": n_test}, seed,
        "Riverside Clinic contact desk (embedded, short horizon): contact changes and doctors' fees.",
    )
