"""A two-tool booking world and a user that says fixed lines, for driving the real episode loop in model
and training tests (importable from every test folder: ``tests`` is on the pytest path)."""

from __future__ import annotations

from muarl.domains.base import BaseData, Domain, ToolError, ToolRegistry, tool
from muarl.types import Action, Task, UserScenario
from muarl.users.base import STOP, UserSession, UserSimulator, UserTurn


@tool("read")
def find_patient(state, name: str) -> dict:
    """Find a patient by full name.

    Args:
        name: The patient's full name.
    """
    for pid, record in state.table("patients").items():
        if record["name"] == name:
            return {"patient_id": pid, **record}
    raise ToolError(f"no patient named {name!r}")


@tool("write")
def book(state, patient_id: str, slot: str) -> str:
    """Book an appointment slot for a patient.

    Args:
        patient_id: The patient's id.
        slot: The slot, e.g. "mon-9".
    """
    if (("patients", patient_id)) not in state:
        raise ToolError(f"no patient {patient_id!r}")
    state.put("appointments", slot, {"patient_id": patient_id})
    return f"booked {slot}"


def toy_domain() -> Domain:
    task = Task(
        id="t0", domain="toy", split="train", user=UserScenario(instruction="Book mon-9 for Ann Lee."),
        actions=[Action(name="book", kwargs={"patient_id": "p1", "slot": "mon-9"})],
    )
    return Domain(
        name="toy", base=BaseData({"patients": {"p1": {"name": "Ann Lee"}}, "appointments": {}}),
        tools=ToolRegistry.from_functions([find_patient, book]), policy="You book appointments.",
        task_loader=lambda split: [task],
    )


class ListUser(UserSimulator):
    """Says its lines in order; the last line should contain a stop token."""

    name = "list"

    def __init__(self, lines: list[str]):
        self.lines = lines

    def new_session(self, task, seed):
        lines = iter(self.lines)

        class _Session(UserSession):
            async def reply(self, history):
                text = next(lines)
                return UserTurn(text=text, done="user_stop" if STOP in text else None)

        return _Session()


def load(data_dir: str | None = None) -> Domain:
    """Domain-registry factory, for code that looks domains up by name (``DOMAINS["toy"] = "booking_world:load"``)."""
    return toy_domain()
