"""The clinic's tools. Each is a typed function of the state; its docstring is what the agent reads."""

from __future__ import annotations

import ast
import operator
from datetime import datetime, timedelta
from typing import Literal

from muarl.domains.base import State, ToolError, tool
from muarl.domains.clinic.data import NOW, TIME_FORMAT

Reason = Literal["checkup", "follow-up", "new symptoms", "vaccination", "test results"]


def _record(state: State, table: str, key: str, what: str) -> dict:
    """The record, or the refusal every tool gives for an unknown id ("appointment A1 not found")."""
    record = state.get(table, key)
    if record is None:
        raise ToolError(f"{what} {key} not found")
    return record


def _patient(state: State, patient_id: str) -> dict:
    return _record(state, "patients", patient_id, "patient")


def _scheduled_appointment(state: State, appointment_id: str) -> dict:
    record = _record(state, "appointments", appointment_id, "appointment")
    if record["status"] != "scheduled":
        raise ToolError(f"appointment {appointment_id} is {record['status']}, not scheduled")
    return record


def _parse_time(value: str) -> datetime:
    try:
        return datetime.strptime(value, TIME_FORMAT)
    except ValueError:
        raise ToolError(f"time {value!r} is not in the format YYYY-MM-DD HH:MM") from None


def _check_notice(appointment: dict) -> None:
    if _parse_time(appointment["time"]) - NOW < timedelta(hours=24):
        raise ToolError(f"appointment {appointment['appointment_id']} is less than 24 hours away and cannot be changed")


def _take_slot(state: State, doctor_id: str, time: str) -> None:
    doctor = _record(state, "doctors", doctor_id, "doctor")
    _parse_time(time)
    if time not in doctor["open_slots"]:
        raise ToolError(f"{doctor['name']} has no open slot at {time}")
    state.edit("doctors", doctor_id)["open_slots"].remove(time)


def _release_slot(state: State, doctor_id: str, time: str) -> None:
    slots = state.edit("doctors", doctor_id)["open_slots"]
    slots.append(time)
    slots.sort()


@tool("read")
def find_patient_by_email(state: State, email: str) -> str:
    """Find a patient's id by their email address.

    Args:
        email: The patient's email, such as 'jane.doe12@example.com'.
    """
    wanted = email.strip().lower()
    for patient in state.table("patients").values():
        if patient["email"] == wanted:
            return patient["patient_id"]
    raise ToolError("patient not found")


@tool("read")
def find_patient_by_name_dob(state: State, first_name: str, last_name: str, date_of_birth: str) -> str:
    """Find a patient's id by full name and date of birth.

    Args:
        first_name: The patient's first name, such as 'Jane'.
        last_name: The patient's last name, such as 'Doe'.
        date_of_birth: The date of birth in the format YYYY-MM-DD.
    """
    key = (first_name.strip().lower(), last_name.strip().lower(), date_of_birth.strip())
    for patient in state.table("patients").values():
        if (patient["first_name"].lower(), patient["last_name"].lower(), patient["date_of_birth"]) == key:
            return patient["patient_id"]
    raise ToolError("patient not found")


@tool("read")
def get_patient_details(state: State, patient_id: str) -> dict:
    """Get a patient's profile: contact details, insurance, balance, payment methods, appointment and prescription ids.

    Args:
        patient_id: The patient's id, such as 'P10013'.
    """
    return _patient(state, patient_id)


@tool("read")
def get_appointment_details(state: State, appointment_id: str) -> dict:
    """Get an appointment: patient, doctor, time, status and reason.

    Args:
        appointment_id: The appointment id, such as 'A200011'.
    """
    return _record(state, "appointments", appointment_id, "appointment")


@tool("read")
def get_prescription_details(state: State, rx_id: str) -> dict:
    """Get a prescription: drug, status, refills left and date last filled.

    Args:
        rx_id: The prescription id, such as 'RX5003'.
    """
    return _record(state, "prescriptions", rx_id, "prescription")


@tool("read")
def list_doctors(state: State, specialty: str) -> list:
    """List the doctors of a specialty with their ids and names.

    Args:
        specialty: One of 'family medicine', 'cardiology', 'dermatology', 'pediatrics', 'orthopedics', 'neurology'.
    """
    wanted = specialty.strip().lower()
    found = [{"doctor_id": d["doctor_id"], "name": d["name"]} for d in state.table("doctors").values() if d["specialty"] == wanted]
    if not found:
        raise ToolError(f"no doctors for specialty {specialty!r}")
    return found


@tool("read")
def get_doctor_details(state: State, doctor_id: str) -> dict:
    """Get a doctor's specialty, visit fee and open appointment slots.

    Args:
        doctor_id: The doctor's id, such as 'D1007'.
    """
    return _record(state, "doctors", doctor_id, "doctor")


@tool("write")
def book_appointment(state: State, patient_id: str, doctor_id: str, time: str, reason: Reason) -> dict:
    """Book an open slot with a doctor for a patient.

    Args:
        patient_id: The patient's id.
        doctor_id: The doctor's id.
        time: One of the doctor's open slots, in the format YYYY-MM-DD HH:MM.
        reason: Why the patient is coming.
    """
    _patient(state, patient_id)
    for appointment_id in state.get("patients", patient_id)["appointments"]:
        other = state.get("appointments", appointment_id)
        if other["status"] == "scheduled" and other["time"] == time:
            raise ToolError(f"patient already has appointment {appointment_id} at {time}")
    _take_slot(state, doctor_id, time)
    appointment_id = f"A{200000 + len(state.table('appointments')) * 11}"
    record = {"appointment_id": appointment_id, "patient_id": patient_id, "doctor_id": doctor_id, "time": time, "status": "scheduled", "reason": reason}
    state.put("appointments", appointment_id, record)
    state.edit("patients", patient_id)["appointments"].append(appointment_id)
    return record


@tool("write")
def cancel_appointment(state: State, appointment_id: str) -> dict:
    """Cancel a scheduled appointment at least 24 hours ahead; its slot is released.

    Args:
        appointment_id: The appointment id.
    """
    appointment = _scheduled_appointment(state, appointment_id)
    _check_notice(appointment)
    record = state.edit("appointments", appointment_id)
    record["status"] = "cancelled"
    _release_slot(state, record["doctor_id"], record["time"])
    return record


@tool("write")
def reschedule_appointment(state: State, appointment_id: str, new_time: str) -> dict:
    """Move a scheduled appointment, at least 24 hours ahead, to another open slot of the same doctor.

    Args:
        appointment_id: The appointment id.
        new_time: One of the same doctor's open slots, in the format YYYY-MM-DD HH:MM.
    """
    appointment = _scheduled_appointment(state, appointment_id)
    _check_notice(appointment)
    _take_slot(state, appointment["doctor_id"], new_time)
    record = state.edit("appointments", appointment_id)
    _release_slot(state, record["doctor_id"], record["time"])
    record["time"] = new_time
    return record


@tool("write")
def request_refill(state: State, rx_id: str) -> dict:
    """Refill an active prescription that has refills left.

    Args:
        rx_id: The prescription id.
    """
    rx = _record(state, "prescriptions", rx_id, "prescription")
    if rx["status"] != "active":
        raise ToolError(f"prescription {rx_id} is {rx['status']} and cannot be refilled")
    if rx["refills_left"] <= 0:
        raise ToolError(f"prescription {rx_id} has no refills left")
    record = state.edit("prescriptions", rx_id)
    record["refills_left"] -= 1
    record["last_filled"] = NOW.strftime("%Y-%m-%d")
    return record


@tool("write")
def update_contact_info(state: State, patient_id: str, email: str | None = None, phone: str | None = None) -> dict:
    """Change a patient's email and/or phone number.

    Args:
        patient_id: The patient's id.
        email: The new email address, if it changes.
        phone: The new phone number in the format 555-123-4567, if it changes.
    """
    _patient(state, patient_id)
    if email is None and phone is None:
        raise ToolError("give a new email or a new phone number")
    if email is not None and ("@" not in email or " " in email.strip()):
        raise ToolError(f"{email!r} is not an email address")
    record = state.edit("patients", patient_id)
    if email is not None:
        record["email"] = email.strip().lower()
    if phone is not None:
        record["phone"] = phone.strip()
    return record


@tool("write")
def update_address(state: State, patient_id: str, street: str, city: str, zip: str) -> dict:
    """Change a patient's postal address.

    Args:
        patient_id: The patient's id.
        street: Street and number, such as '12 Oak Street'.
        city: The city.
        zip: The five-digit zip code.
    """
    _patient(state, patient_id)
    if not (len(zip) == 5 and zip.isdigit()):
        raise ToolError(f"zip code {zip!r} must be five digits")
    record = state.edit("patients", patient_id)
    record["address"] = {"street": street.strip(), "city": city.strip(), "zip": zip}
    return record


@tool("write")
def pay_balance(state: State, patient_id: str, payment_method_id: str, amount: float) -> dict:
    """Pay some or all of a patient's outstanding balance with a payment method on file.

    Args:
        patient_id: The patient's id.
        payment_method_id: A payment method id from the patient's profile, such as 'card_1234'.
        amount: The amount in dollars; more than 0 and at most the balance.
    """
    patient = _patient(state, patient_id)
    method = patient["payment_methods"].get(payment_method_id)
    if method is None:
        raise ToolError(f"payment method {payment_method_id} not found for patient {patient_id}")
    if amount <= 0 or amount > patient["balance"] + 1e-9:
        raise ToolError(f"amount must be more than 0 and at most the balance of {patient['balance']:.2f}")
    if method["type"] == "hsa" and method["balance"] < amount:
        raise ToolError(f"health savings account balance {method['balance']:.2f} is not enough")
    record = state.edit("patients", patient_id)
    record["balance"] = round(record["balance"] - amount, 2)
    if method["type"] == "hsa":
        record["payment_methods"][payment_method_id]["balance"] = round(method["balance"] - amount, 2)
    return record


@tool("think")
def think(state: State, thought: str) -> str:
    """Think about something without changing anything or learning anything new; use it to reason step by step.

    Args:
        thought: The thought.
    """
    return ""


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ToolError("only numbers, + - * / and parentheses are allowed")


@tool("generic")
def calculate(state: State, expression: str) -> str:
    """Calculate an arithmetic expression with numbers, + - * / and parentheses.

    Args:
        expression: The expression, such as '120 - 35.5 * 2'.
    """
    try:
        value = _evaluate(ast.parse(expression, mode="eval"))
    except (SyntaxError, ZeroDivisionError) as exc:
        raise ToolError(f"cannot calculate {expression!r}: {exc}") from None
    return str(round(value, 2))


@tool("generic", terminal=True)
def transfer_to_human_agents(state: State, summary: str) -> str:
    """Hand the patient over to a human staff member (a nurse for medical questions); ends the conversation.

    Args:
        summary: A short summary of the patient's issue for the human agent.
    """
    state.put("handoffs", "transfer", True)
    return "Transfer successful"
