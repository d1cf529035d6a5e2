"""The clinic's seed database, generated from a seed so it ships as code, not as a data file.

Deterministic: ``random.Random(seed)`` draws the same sequence on every platform, so the same seed gives the
same patients, doctors, appointments and prescriptions everywhere. Every record belongs to one split (its
``split`` is known to the task generator, not stored in the record), so train and test tasks never touch the
same patient, doctor, appointment or prescription.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

NOW = datetime(2026, 3, 2, 9, 0)  # "now" in the clinic's world: Monday 2 March 2026, 09:00
TIME_FORMAT = "%Y-%m-%d %H:%M"

FIRST_NAMES = [
    "Amara", "Bruno", "Chen", "Dalia", "Emil", "Fatima", "Gustavo", "Hana", "Ivan", "Jasmine", "Kofi", "Lena",
    "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Ximena",
    "Yusuf", "Zoe", "Aiko", "Benedikt", "Carmen", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas",
]
LAST_NAMES = [
    "Abara", "Bergstrom", "Castillo", "Dubois", "Eriksen", "Fontaine", "Garcia", "Haddad", "Ivanova", "Jensen",
    "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Quintero", "Rahman", "Silva", "Tanaka",
    "Ueda", "Varga", "Weber", "Xu", "Yilmaz", "Zielinski", "Almeida", "Brennan", "Chowdhury", "Delgado",
]
STREETS = ["Oak Street", "Maple Avenue", "Harbor Road", "Elm Lane", "Cedar Court", "Birch Way", "Mill Road", "Park Row"]
CITIES = [("Springfield", "62701"), ("Riverton", "82501"), ("Lakewood", "80226"), ("Fairview", "97024"), ("Ashland", "41101")]
SPECIALTIES = ["family medicine", "cardiology", "dermatology", "pediatrics", "orthopedics", "neurology"]
DRUGS = [
    "atorvastatin 20mg", "lisinopril 10mg", "metformin 500mg", "levothyroxine 50mcg", "amlodipine 5mg",
    "omeprazole 20mg", "sertraline 50mg", "albuterol inhaler", "montelukast 10mg", "losartan 50mg",
]
REASONS = ["checkup", "follow-up", "new symptoms", "vaccination", "test results"]
PLANS = {"Bronze": 40, "Silver": 25, "Gold": 10}


def fmt(dt: datetime) -> str:
    return dt.strftime(TIME_FORMAT)


@dataclass
class SeedDatabase:
    tables: dict[str, dict[str, dict]]
    split_of: dict[str, str] = field(default_factory=dict)  # record id -> "train" | "test"


def generate(seed: int = 7, n_patients: int = 320, doctors_per_specialty: int = 4, test_share: float = 0.3) -> SeedDatabase:
    """Build the database. About ``test_share`` of patients and half the doctors of each specialty are test."""
    rng = random.Random(seed)
    split_of: dict[str, str] = {}
    doctors: dict[str, dict] = {}
    used_names: set[tuple[str, str]] = set()

    def unique_name() -> tuple[str, str]:
        while True:
            name = (rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES))
            if name not in used_names:
                used_names.add(name)
                return name

    # working days of the next three weeks, four morning and four afternoon slots a day
    slot_times = [
        NOW.replace(hour=h) + timedelta(days=d)
        for d in range(1, 22)
        if (NOW + timedelta(days=d)).weekday() < 5
        for h in (9, 10, 11, 12, 14, 15, 16, 17)
    ]
    n = 0
    for specialty in SPECIALTIES:
        for k in range(doctors_per_specialty):
            n += 1
            first, last = unique_name()
            doctor_id = f"D{1000 + n * 7}"
            slots = sorted(rng.sample(slot_times, 14))
            doctors[doctor_id] = {
                "doctor_id": doctor_id, "name": f"Dr. {first} {last}", "specialty": specialty,
                "fee": rng.choice([90, 120, 150, 180]), "open_slots": [fmt(s) for s in slots],
            }
            split_of[doctor_id] = "test" if k % 2 else "train"

    patients: dict[str, dict] = {}
    appointments: dict[str, dict] = {}
    prescriptions: dict[str, dict] = {}
    for i in range(n_patients):
        first, last = unique_name()
        patient_id = f"P{10000 + i * 13}"
        split = "test" if rng.random() < test_share else "train"
        split_of[patient_id] = split
        city, zip_code = rng.choice(CITIES)
        birth = datetime(1940, 1, 1) + timedelta(days=rng.randrange(0, 365 * 62))
        methods = {}
        for _ in range(rng.choice([1, 1, 2])):
            last4 = f"{rng.randrange(10000):04d}"
            methods[f"card_{last4}"] = {"type": "credit_card", "last4": last4}
        if rng.random() < 0.35:
            methods[f"hsa_{patient_id[1:]}"] = {"type": "hsa", "balance": float(rng.choice([0, 25, 60, 150, 400]))}
        plan = rng.choice([None, "Bronze", "Silver", "Gold"])
        patients[patient_id] = {
            "patient_id": patient_id, "first_name": first, "last_name": last, "date_of_birth": birth.strftime("%Y-%m-%d"),
            "email": f"{first.lower()}.{last.lower()}{rng.randrange(10, 99)}@example.com",
            "phone": f"555-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
            "address": {"street": f"{rng.randrange(1, 999)} {rng.choice(STREETS)}", "city": city, "zip": zip_code},
            "insurance": None if plan is None else {"plan": plan, "copay": PLANS[plan]},
            "balance": float(rng.choice([0, 0, 35, 60, 85, 120, 210])),
            "payment_methods": methods, "appointments": [], "prescriptions": [],
        }
        own_doctors = [d for d in doctors if split_of[d] == split]
        for _ in range(rng.choice([1, 2, 2, 3])):
            appointment_id = f"A{200000 + len(appointments) * 11}"
            doctor_id = rng.choice(own_doctors)
            roll = rng.random()
            if roll < 0.35:  # in the past
                when, status = NOW - timedelta(days=rng.randrange(3, 200), hours=rng.choice([0, 2, 5])), "completed"
            elif roll < 0.47:  # within the next 24 hours: cannot be cancelled or moved
                when, status = NOW + timedelta(hours=rng.choice([2, 5, 7, 23])), "scheduled"
            else:
                when, status = rng.choice(slot_times) + timedelta(minutes=30), "scheduled"
            appointments[appointment_id] = {
                "appointment_id": appointment_id, "patient_id": patient_id, "doctor_id": doctor_id,
                "time": fmt(when), "status": status, "reason": rng.choice(REASONS),
            }
            patients[patient_id]["appointments"].append(appointment_id)
            split_of[appointment_id] = split
        for drug in rng.sample(DRUGS, rng.choice([0, 1, 1, 2, 3])):
            rx_id = f"RX{5000 + len(prescriptions) * 3}"
            status = "expired" if rng.random() < 0.15 else "active"
            prescriptions[rx_id] = {
                "rx_id": rx_id, "patient_id": patient_id, "drug": drug, "status": status,
                "refills_left": rng.choice([0, 1, 2, 3, 5]),
                "last_filled": (NOW - timedelta(days=rng.randrange(5, 90))).strftime("%Y-%m-%d"),
            }
            patients[patient_id]["prescriptions"].append(rx_id)
            split_of[rx_id] = split
    tables = {"patients": patients, "doctors": doctors, "appointments": appointments, "prescriptions": prescriptions}
    return SeedDatabase(tables=tables, split_of=split_of)
