"""Procedural task generator for the clinic.

A task is one patient with 1 to 5 requests that change records (its difficulty is that count), sometimes a
question whose answer must be told back, sometimes a request the policy forbids (the agent must refuse),
and sometimes a medical question at the end (the agent must transfer). Requests are applied one after the
other to a working state while the task is built, so later requests see earlier changes and every gold action
is known to run; forbidden requests are checked to fail. Train and test tasks draw from disjoint patients and
doctors (see ``data.py``). Each task has its own random stream, so adding tasks never changes earlier ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from muarl.domains.base import Domain, State, ToolError
from muarl.domains.clinic.data import NOW, TIME_FORMAT, SeedDatabase
from muarl.types import Action, Task, UserRequest, UserScenario

_DAY = timedelta(hours=24)
PERSONAS = [
    "You are polite and a little chatty.",
    "You are in a hurry and keep your answers short.",
    "You are anxious and want to be sure things are done right.",
    "You are friendly but not very good with technology.",
    "You are direct and businesslike.",
]
REASON_PHRASES = {
    "checkup": "a checkup", "follow-up": "a follow-up", "new symptoms": "some new symptoms",
    "vaccination": "a vaccination", "test results": "my test results",
}
TRANSFER_QUESTIONS = [
    "I've been dizzy since I started my {drug}; should I take half the dose instead?",
    "I have a bad headache that won't go away. What medicine should I take for it?",
    "My chest feels tight when I climb stairs. Is that something serious?",
    "Can I speak to a nurse about some side effects I'm having?",
]


@dataclass
class Intent:
    request: UserRequest
    actions: list[Action] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return 0 if self.request.outcome != "done" else len(self.actions)


def _when(time: str) -> str:
    """How a person says a time: 'Thursday March 5 at 10:30'."""
    dt = datetime.strptime(time, TIME_FORMAT)
    return f"{dt:%A} {dt:%B} {dt.day} at {dt:%H:%M}"


class _Builder:
    """Intents for one patient on a working state; each method returns None when it does not apply."""

    def __init__(self, domain: Domain, db: SeedDatabase, split: str, state: State, patient_id: str, rng: random.Random):
        self.domain, self.db, self.split, self.state, self.pid, self.rng = domain, db, split, state, patient_id, rng

    @property
    def patient(self) -> dict:
        return self.state.get("patients", self.pid)

    def _doctors(self) -> list[dict]:
        return [d for d in self.state.table("doctors").values() if self.db.split_of[d["doctor_id"]] == self.split]

    def _appointments(self, changeable: bool | None) -> list[dict]:
        """The patient's appointments from the seed data (not ones booked earlier in this task)."""
        out = []
        for aid in self.patient["appointments"]:
            if aid not in self.state.base.tables["appointments"]:
                continue
            a = self.state.get("appointments", aid)
            far = datetime.strptime(a["time"], TIME_FORMAT) - NOW >= _DAY
            if changeable is None or (a["status"] == "scheduled" and far) == changeable:
                out.append(a)
        return out

    def _busy_times(self) -> set[str]:
        return {a["time"] for a in self._appointments(None) if a["status"] == "scheduled"}

    def book(self) -> Intent | None:
        doctor = self.rng.choice(self._doctors())
        free = [s for s in doctor["open_slots"] if s not in self._busy_times()]
        if not free:
            return None
        slot = self.rng.choice(free)
        reason = self.rng.choice(["checkup", "follow-up", "new symptoms", "vaccination", "test results"])
        facts = {"doctor": doctor["name"], "specialty": doctor["specialty"], "time": _when(slot) + f" ({slot})", "reason": reason}
        text = self.rng.choice([
            f"I'd like to book an appointment with {doctor['name']} on {_when(slot)} for {REASON_PHRASES[reason]}.",
            f"I need an appointment with a {doctor['specialty']} doctor.",
            f"Can you get me in to see {doctor['name']}? It's for {REASON_PHRASES[reason]}.",
        ])
        action = Action(name="book_appointment", kwargs={"patient_id": self.pid, "doctor_id": doctor["doctor_id"], "time": slot, "reason": reason})
        return Intent(UserRequest(text=text, facts=facts), [action])

    def cancel(self) -> Intent | None:
        options = self._appointments(changeable=True)
        if not options:
            return None
        a = self.rng.choice(options)
        doctor = self.state.get("doctors", a["doctor_id"])["name"]
        text = self.rng.choice([
            f"Please cancel my appointment with {doctor} on {_when(a['time'])}.",
            f"I can't make it to my appointment with {doctor}, so I'd like to cancel it.",
        ])
        facts = {"appointment": f"the one with {doctor} on {_when(a['time'])}", "doctor": doctor}
        return Intent(UserRequest(text=text, facts=facts), [Action(name="cancel_appointment", kwargs={"appointment_id": a["appointment_id"]})])

    def reschedule(self) -> Intent | None:
        options = self._appointments(changeable=True)
        if not options:
            return None
        a = self.rng.choice(options)
        doctor = self.state.get("doctors", a["doctor_id"])
        free = [s for s in doctor["open_slots"] if s not in self._busy_times()]
        if not free:
            return None
        slot = self.rng.choice(free)
        text = self.rng.choice([
            f"I need to move my appointment with {doctor['name']} on {_when(a['time'])} to {_when(slot)}.",
            f"Could I reschedule my appointment with {doctor['name']}? The current time doesn't work for me.",
        ])
        facts = {"appointment": f"the one with {doctor['name']} on {_when(a['time'])}", "time": _when(slot) + f" ({slot})", "doctor": doctor["name"]}
        action = Action(name="reschedule_appointment", kwargs={"appointment_id": a["appointment_id"], "new_time": slot})
        return Intent(UserRequest(text=text, facts=facts), [action])

    def refill(self) -> Intent | None:
        options = [self.state.get("prescriptions", r) for r in self.patient["prescriptions"]]
        options = [r for r in options if r["status"] == "active" and r["refills_left"] > 0]
        if not options:
            return None
        rx = self.rng.choice(options)
        text = self.rng.choice([f"I need a refill of my {rx['drug']}.", f"Could you refill my {rx['drug'].split()[0]} prescription?"])
        return Intent(UserRequest(text=text, facts={"medication": rx["drug"]}), [Action(name="request_refill", kwargs={"rx_id": rx["rx_id"]})])

    def update_email(self) -> Intent | None:
        p = self.patient
        email = f"{p['first_name'].lower()}.{p['last_name'].lower()}.{self.rng.randrange(100, 999)}@mailbox.org"
        text = self.rng.choice(["I'd like to change the email address on my file.", f"Please update my email to {email}."])
        action = Action(name="update_contact_info", kwargs={"patient_id": self.pid, "email": email})
        return Intent(UserRequest(text=text, facts={"email": email}), [action])

    def update_phone(self) -> Intent | None:
        phone = f"555-{self.rng.randrange(100, 999)}-{self.rng.randrange(1000, 9999)}"
        text = self.rng.choice(["I have a new phone number.", f"Please change my phone number to {phone}."])
        action = Action(name="update_contact_info", kwargs={"patient_id": self.pid, "phone": phone})
        return Intent(UserRequest(text=text, facts={"phone": phone}), [action])

    def update_address(self) -> Intent | None:
        street = f"{self.rng.randrange(1, 999)} {self.rng.choice(['Willow Drive', 'Chestnut Street', 'Lake View Road', 'Hillcrest Avenue'])}"
        city, zip_code = self.rng.choice([("Springfield", "62704"), ("Riverton", "82501"), ("Greenville", "29601"), ("Salem", "97301")])
        if self.patient["address"] == {"street": street, "city": city, "zip": zip_code}:
            return None
        text = self.rng.choice(["I moved recently, so my address needs updating.", f"My new address is {street}, {city} {zip_code}."])
        action = Action(name="update_address", kwargs={"patient_id": self.pid, "street": street, "city": city, "zip": zip_code})
        return Intent(UserRequest(text=text, facts={"address": f"{street}, {city}, zip {zip_code}"}), [action])

    def pay(self) -> Intent | None:
        p = self.patient
        cards = [k for k, m in p["payment_methods"].items() if m["type"] == "credit_card"]
        if p["balance"] <= 0 or not cards:
            return None
        card = self.rng.choice(cards)
        full = self.rng.random() < 0.6
        amount = p["balance"] if full else round(p["balance"] / 2, 2)
        said = "my whole balance" if full else f"${amount:g} of my balance"
        text = self.rng.choice([f"I'd like to pay {said}.", f"I want to pay {said} with my card ending in {card[-4:]}."])
        facts = {"payment": f"my card ending in {card[-4:]}", "amount": "the full balance" if full else f"${amount:g}"}
        action = Action(name="pay_balance", kwargs={"patient_id": self.pid, "payment_method_id": card, "amount": amount})
        return Intent(UserRequest(text=text, facts=facts), [action])

    # requests a correct agent answers, refuses or transfers
    def ask_balance(self) -> Intent | None:
        balance = f"{self.patient['balance']:g}"
        request = UserRequest(text="What is my current balance?", outcome="answered", answer=balance)
        return Intent(request, [Action(name="get_patient_details", kwargs={"patient_id": self.pid})], [balance])

    def ask_fee(self) -> Intent | None:
        doctor = self.rng.choice(self._doctors())
        fee = str(doctor["fee"])
        request = UserRequest(text=f"How much does a visit with {doctor['name']} cost?", facts={"specialty": doctor["specialty"]}, outcome="answered", answer=fee)
        actions = [Action(name="list_doctors", kwargs={"specialty": doctor["specialty"]}), Action(name="get_doctor_details", kwargs={"doctor_id": doctor["doctor_id"]})]
        return Intent(request, actions, [fee])

    def forbidden_cancel(self) -> Intent | None:
        options = [a for a in self._appointments(changeable=False) if a["status"] in ("scheduled", "completed")]
        if not options:
            return None
        a = self.rng.choice(options)
        doctor = self.state.get("doctors", a["doctor_id"])["name"]
        self._must_fail("cancel_appointment", {"appointment_id": a["appointment_id"]})
        return Intent(UserRequest(text=f"Please cancel my appointment with {doctor} on {_when(a['time'])}.", outcome="refused"))

    def forbidden_refill(self) -> Intent | None:
        options = [self.state.get("prescriptions", r) for r in self.patient["prescriptions"]]
        options = [r for r in options if r["status"] != "active" or r["refills_left"] == 0]
        if not options:
            return None
        rx = self.rng.choice(options)
        self._must_fail("request_refill", {"rx_id": rx["rx_id"]})
        return Intent(UserRequest(text=f"Could you refill my {rx['drug']}?", facts={"medication": rx["drug"]}, outcome="refused"))

    def medical_question(self) -> Intent | None:
        drugs = [self.state.get("prescriptions", r)["drug"] for r in self.patient["prescriptions"]] or ["medication"]
        text = self.rng.choice(TRANSFER_QUESTIONS).format(drug=self.rng.choice(drugs))
        action = Action(name="transfer_to_human_agents", kwargs={"summary": f"Patient {self.pid} asks for medical advice: {text}"})
        return Intent(UserRequest(text=text, outcome="transfer"), [action])

    def _must_fail(self, name: str, kwargs: dict) -> None:
        probe = State(self.state.base)
        probe.restore(self.state.snapshot())
        try:
            self.domain.run_tool(probe, name, kwargs)
        except ToolError:
            return
        raise AssertionError(f"forbidden request {name} {kwargs} unexpectedly succeeded")


# Agent turns a policy-following agent needs per request (ask for details, look up every id it will use,
# confirm, act, report), and the most a task may need: tasks must be solvable within the loop's default
# 30 turns with room to spare, or a perfect agent would be cut off.
TURN_COST = {
    "book": 7, "cancel": 5, "reschedule": 6, "refill": 5, "update_email": 5, "update_phone": 5, "update_address": 5,
    "pay": 5, "ask_balance": 2, "ask_fee": 3, "forbidden_cancel": 1, "forbidden_refill": 1, "medical_question": 1,
}
IDENTIFY_TURNS = 2
TURN_BUDGET = 28
WRITE_INTENTS = ["book", "cancel", "reschedule", "refill", "update_email", "update_phone", "update_address", "pay"]
QUESTION_INTENTS = ["ask_balance", "ask_fee"]
FORBIDDEN_INTENTS = ["forbidden_cancel", "forbidden_refill"]


def _identify(patient: dict, rng: random.Random) -> tuple[dict[str, str], Action]:
    known = {"name": f"{patient['first_name']} {patient['last_name']}", "date_of_birth": patient["date_of_birth"]}
    if rng.random() < 0.5:
        known["email"] = patient["email"]
        return known, Action(name="find_patient_by_email", kwargs={"email": patient["email"]})
    kwargs = {"first_name": patient["first_name"], "last_name": patient["last_name"], "date_of_birth": patient["date_of_birth"]}
    return known, Action(name="find_patient_by_name_dob", kwargs=kwargs)


def user_instruction(known: dict[str, str], persona: str, intents: list[Intent]) -> str:
    who = f"You are {known['name']}, born {known['date_of_birth']}"
    who += f", email {known['email']}." if "email" in known else ". You do not remember which email you gave the clinic."
    steps = []
    for i, intent in enumerate(intents, 1):
        details = "; ".join(f"{k}: {v}" for k, v in intent.request.facts.items())
        steps.append(f"{i}. {intent.request.text}" + (f" (details to give only when asked: {details})" if details else ""))
        if intent.request.revision is not None:
            steps[-1] += f" The first time the agent asks you to confirm this, change your mind and say: {intent.request.revision.text}"
    return (
        f"{who} You are contacting Riverside Clinic's patient services. {persona}\n"
        "In this order, you want:\n" + "\n".join(steps) + "\n"
        "Bring up one request at a time. Give a detail only when the agent asks for it, and never invent one. "
        "If the agent says something cannot be done, accept it and move on."
    )


def generate_task(domain: Domain, db: SeedDatabase, split: str, index: int, seed: int) -> Task:
    """Task ``index`` of ``split``; retries with the next random draw until the patient admits the plan."""
    rng = random.Random(f"clinic/{seed}/{split}/{index}")
    patients = sorted(p for p in db.tables["patients"] if db.split_of[p] == split)
    difficulty = rng.randint(1, 5)
    for _ in range(200):
        task = _try_task(domain, db, split, index, rng.choice(patients), difficulty, rng)
        if task is not None:
            return task
    raise RuntimeError(f"could not generate clinic task {split}/{index}")


def _try_task(domain: Domain, db: SeedDatabase, split: str, index: int, patient_id: str, difficulty: int, rng: random.Random) -> Task | None:
    state = domain.new_state()
    builder = _Builder(domain, db, split, state, patient_id, rng)
    known, identify = _identify(state.get("patients", patient_id), rng)
    plan = [rng.choice(WRITE_INTENTS) for _ in range(difficulty)]
    if rng.random() < 0.35:
        plan.insert(rng.randrange(len(plan) + 1), rng.choice(QUESTION_INTENTS))
    if rng.random() < 0.25:
        plan.insert(rng.randrange(len(plan) + 1), rng.choice(FORBIDDEN_INTENTS))
    if rng.random() < 0.15:
        plan.append("medical_question")
    if IDENTIFY_TURNS + sum(TURN_COST[k] for k in plan) > TURN_BUDGET:
        return None
    if len(set(plan)) < len(plan) and any(plan.count(k) > 1 for k in ("update_email", "update_phone", "update_address", "pay")):
        return None  # the same contact change twice reads as a confused user
    intents: list[Intent] = []
    for kind in plan:
        make: Callable[[], Intent | None] = getattr(builder, kind)
        intent = make()
        if intent is None:
            return None
        for action in intent.actions:
            before = state.hash()
            domain.run_tool(state, action.name, action.kwargs)
            if domain.tools[action.name].kind == "write" and state.hash() == before:
                return None  # a write that changes nothing cannot be told apart from doing nothing
        intents.append(intent)
    actions = [identify]
    for i, intent in enumerate(intents):
        actions += [a.model_copy(update={"request": i}) for a in intent.actions]
    requests = [it.request for it in intents]
    persona = rng.choice(PERSONAS)
    user = UserScenario(
        persona=persona, known_info=known, goal="; ".join(r.text for r in requests),
        instruction=user_instruction(known, persona, intents), requests=requests,
    )
    task = Task(
        id=f"clinic-{split}-{index:04d}", domain="clinic", split=split, difficulty=difficulty, user=user,
        actions=actions, outputs=[o for it in intents for o in it.outputs], metadata={"patient_id": patient_id, "plan": plan},
    )
    replayed = domain.new_state()
    domain.replay(replayed, task.actions)
    assert replayed.hash() == state.hash() != domain.new_state().hash(), f"task {task.id}: replay does not reproduce the plan"
    return task
