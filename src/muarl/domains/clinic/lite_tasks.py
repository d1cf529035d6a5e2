"""Tasks of ``clinic-lite``: one patient, one contact change, and at level 2 a question about a doctor's fee.

- Level 1: the patient opens with their email and one change (new phone number or new email address), every
  detail given up front. A policy-following agent: look up the email, confirm, change, report (4 turns).
- Level 2: the same plus a question, before or after the change, about what a visit with a named doctor costs;
  the fee must be told back (a required output). Two more turns: look the doctor up, tell the fee.
- In three tasks of four at either level, the patient changes their mind (``UserRequest.revision``): asked to confirm
  the change, they give another value instead, and only that value is right. A careful agent confirms again
  (two more turns). The cooperative user (``scripted:cooperative``) asks for the final value from the start.

Each request comes in several wordings (``UserRequest.variants``, all stating the same details); the scripted
user picks one per episode seed, so a policy cannot learn one sentence by heart. Train and test tasks draw
from disjoint patients and doctors. Each task has its own random stream, as in the clinic.
"""

from __future__ import annotations

import random

from muarl.domains.base import Domain
from muarl.domains.clinic.data import SeedDatabase
from muarl.domains.clinic.tasks import PERSONAS, Intent, user_instruction
from muarl.types import Action, Revision, Task, UserRequest, UserScenario

IDENTITY = ["I'm {name}, my email is {email}.", "I'm {name} ({email}).", "I am {name} and my email address is {email}."]
NEW_PHONE = [
    "Please change my phone number to {value}.",
    "I have a new phone number, {value}. Can you update it?",
    "Could you update my phone number? The new one is {value}.",
]
NEW_EMAIL = [
    "Please change my email address to {value}.",
    "I have a new email address, {value}. Can you update it?",
    "Could you update my email? The new one is {value}.",
]
CHANGE_OF_MIND = [
    "Actually, wait: make it {value} instead.",
    "Sorry, I changed my mind. Please use {value} instead.",
    "Hold on, the right one is {value}, not that one.",
]
CHANGES_MIND = 0.75  # share of tasks whose patient changes their mind
FEE_QUESTION = [
    "How much does a visit with {doctor} cost?",
    "What is the visit fee of {doctor}?",
    "What would I pay for a visit with {doctor}?",
]


def _change(patient: dict, rng: random.Random) -> Intent:
    if rng.random() < 0.5:
        field, value, wordings = "phone", f"555-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}", NEW_PHONE
    else:
        field, wordings = "email", NEW_EMAIL
        value = f"{patient['first_name'].lower()}.{patient['last_name'].lower()}{rng.randrange(100, 999)}@mailbox.org"
    action = Action(name="update_contact_info", kwargs={"patient_id": patient["patient_id"], field: value})
    return Intent(UserRequest(text="", variants=[w.format(value=value) for w in wordings], facts={field: value}), [action])


def _change_of_mind(intent: Intent, rng: random.Random) -> Intent:
    """The change as a patient who first asks for another value: the gold action keeps the final one."""
    (field, final), = intent.request.facts.items()
    first = f"555-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}" if field == "phone" else final.replace("@", f"{rng.randrange(10, 99)}@")
    revision = Revision(text=CHANGE_OF_MIND[0].format(value=final), variants=[w.format(value=final) for w in CHANGE_OF_MIND[1:]],
                        facts={field: final})
    request = intent.request.model_copy(update={"variants": [v.replace(final, first) for v in intent.request.variants],
                                                "facts": {field: first}, "revision": revision})
    return Intent(request, intent.actions, intent.outputs)


def _fee_question(doctor: dict) -> Intent:
    fee = str(doctor["fee"])
    request = UserRequest(text="", variants=[w.format(doctor=doctor["name"]) for w in FEE_QUESTION], facts={"doctor": doctor["name"]},
                          outcome="answered", answer=fee)
    return Intent(request, [Action(name="find_doctor", kwargs={"name": doctor["name"]})], [fee])


def _worded(request: UserRequest, rng: random.Random, prefixes: list[str]) -> UserRequest:
    """The request worded every prefix x wording way (``_change`` and ``_fee_question`` leave their bare
    wordings in ``variants``): one drawn as ``text``, the others its variants."""
    wordings = [f"{p} {w}".strip() for p in prefixes for w in request.variants]
    rng.shuffle(wordings)
    return request.model_copy(update={"text": wordings[0], "variants": wordings[1:]})


def generate_task(domain: Domain, db: SeedDatabase, split: str, index: int, seed: int) -> Task:
    """Task ``index`` of ``split``: level 1 or 2 with equal chance, a patient and a doctor of that split."""
    rng = random.Random(f"clinic-lite/{seed}/{split}/{index}")
    patient = db.tables["patients"][rng.choice(sorted(p for p in db.tables["patients"] if db.split_of[p] == split))]
    level = rng.choice([1, 2])
    intents = [_change(patient, rng)]
    changes_mind = random.Random(f"clinic-lite/{seed}/{split}/{index}/mind")  # a stream of its own: other draws stay as they were
    revised = changes_mind.random() < CHANGES_MIND
    if revised:
        intents[0] = _change_of_mind(intents[0], changes_mind)
    if level == 2:
        # a fee that is part of an id, email or number of the task would count as told without being told
        said = " ".join([patient["email"], *intents[0].request.facts.values(), *(str(v) for v in intents[0].actions[0].kwargs.values())])
        doctors = sorted(d for d, doc in db.tables["doctors"].items() if db.split_of[d] == split and str(doc["fee"]) not in said)
        intents.insert(rng.randrange(2), _fee_question(db.tables["doctors"][rng.choice(doctors)]))
    known = {"name": f"{patient['first_name']} {patient['last_name']}", "date_of_birth": patient["date_of_birth"], "email": patient["email"]}
    identity = [p.format(**known) for p in IDENTITY]
    for i, intent in enumerate(intents):
        intent.request = _worded(intent.request, rng, identity if i == 0 else [""])
    identify = Action(name="find_patient_by_email", kwargs={"email": patient["email"]})
    actions = [identify] + [a.model_copy(update={"request": i}) for i, it in enumerate(intents) for a in it.actions]
    requests = [it.request for it in intents]
    persona = rng.choice(PERSONAS)
    user = UserScenario(persona=persona, known_info=known, goal="; ".join(r.text for r in requests),
                        instruction=user_instruction(known, persona, intents), requests=requests)
    task = Task(id=f"clinic-lite-{split}-{index:04d}", domain="clinic-lite", split=split, difficulty=level, user=user, actions=actions,
                outputs=[o for it in intents for o in it.outputs], metadata={"patient_id": patient["patient_id"], "level": level,
                          "changes_mind": revised})
    if domain.gold_hash(task) == domain.new_state().hash():
        raise AssertionError(f"task {task.id}: its change changes nothing")
    return task
