"""The 13 tools the agent has in τ²-bench telecom: the carrier's customer, line, bill and plan records.

Records are returned whole, as the carrier's system holds them. Today is fixed (2025-02-25, as in τ²), so bills
and suspension dates do not depend on when an episode runs. A charge goes on the customer's draft bill, which is
created (for next month) when there is none; its id is derived from the bills that exist, where τ² draws a
random one, so the same episode always reaches the same state.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from muarl.domains.base import State, ToolError, tool
from muarl.domains.tau.common_tools import transfer_to_human_agents
from muarl.domains.tau.telecom.phone import bills_awaiting_payment, customer_by_phone

TODAY = dt.date(2025, 2, 25)

_PREFIXES = {"L": "lines", "D": "devices", "B": "bills", "C": "customers", "P": "plans"}


def _customer(state: State, customer_id: str) -> dict[str, Any]:
    customer = state.get("customers", customer_id)
    if customer is None:
        raise ToolError(f"customer {customer_id} not found")
    return customer


def _record(state: State, table: str, key: str, what: str) -> dict[str, Any]:
    record = state.get(table, key)
    if record is None:
        raise ToolError(f"{what} {key} not found")
    return record


def owned_line(state: State, customer_id: str, line_id: str) -> dict[str, Any]:
    """The line, once it is known to be the customer's; ToolError otherwise."""
    if line_id not in _customer(state, customer_id)["line_ids"]:
        raise ToolError(f"line {line_id} does not belong to customer {customer_id}")
    return _record(state, "lines", line_id, "line")


@tool(kind="read")
def get_customer_by_phone(state: State, phone_number: str) -> dict:
    """Find the customer whose contact number, or one of whose lines, is a phone number.

    Args:
        phone_number: The phone number, such as '555-123-2002'.
    """
    customer = customer_by_phone(state, phone_number)
    if customer is None:
        raise ToolError(f"no customer has the phone number {phone_number}")
    return customer


@tool(kind="read")
def get_customer_by_id(state: State, customer_id: str) -> dict:
    """Get a customer's record by their id.

    Args:
        customer_id: The customer id, such as 'C1001'.
    """
    return _customer(state, customer_id)


@tool(kind="read")
def get_customer_by_name(state: State, full_name: str, dob: str) -> list:
    """Find customers by full name (any case) and date of birth; there may be several.

    Args:
        full_name: The customer's full name.
        dob: The date of birth as YYYY-MM-DD.
    """
    return [c for c in state.table("customers").values() if c["full_name"].lower() == full_name.lower() and c["date_of_birth"] == dob]


@tool(kind="read")
def get_details_by_id(state: State, id: str) -> dict:
    """Get the record of a customer, line, device, bill or plan by its id (ids start with C, L, D, B or P).

    Args:
        id: The id, such as 'L1002' or 'B1001'.
    """
    table = _PREFIXES.get(id[:1])
    if table is None:
        raise ToolError(f"unknown id format: {id}")
    return _record(state, table, id, table[:-1])


@tool(kind="write")
def suspend_line(state: State, customer_id: str, line_id: str, reason: str) -> dict:
    """Suspend an active line (for at most 6 months; a $5 monthly holding fee applies).

    Args:
        customer_id: The id of the customer who owns the line.
        line_id: The id of the line.
        reason: Why the line is suspended.
    """
    if owned_line(state, customer_id, line_id)["status"] != "Active":
        raise ToolError("only an active line can be suspended")
    line = state.edit("lines", line_id)
    line.update(status="Suspended", suspension_start_date=TODAY.isoformat())
    return {"message": "Line suspended. A $5 monthly holding fee applies.", "line": line}


@tool(kind="write")
def resume_line(state: State, customer_id: str, line_id: str) -> dict:
    """Resume a suspended (or pending activation) line.

    Args:
        customer_id: The id of the customer who owns the line.
        line_id: The id of the line.
    """
    if owned_line(state, customer_id, line_id)["status"] not in ("Suspended", "Pending Activation"):
        raise ToolError("only a suspended line can be resumed")
    line = state.edit("lines", line_id)
    line.update(status="Active", suspension_start_date=None)
    return {"message": "Line resumed.", "line": line}


@tool(kind="read")
def get_bills_for_customer(state: State, customer_id: str, limit: int = 12) -> list:
    """List a customer's bills, newest first.

    Args:
        customer_id: The customer id.
        limit: At most this many bills.
    """
    bills = [_record(state, "bills", b, "bill") for b in _customer(state, customer_id)["bill_ids"]]
    return sorted(bills, key=lambda b: b["issue_date"], reverse=True)[:limit]


@tool(kind="write")
def send_payment_request(state: State, customer_id: str, bill_id: str) -> str:
    """Send the customer a request to pay one of their bills; it then awaits payment. Check first that the bill
    is not already paid: this tool does not.

    Args:
        customer_id: The id of the customer who owns the bill.
        bill_id: The bill's id.
    """
    customer = _customer(state, customer_id)
    if bills_awaiting_payment(state, customer):
        raise ToolError("another bill of this customer is already awaiting payment")
    if bill_id not in customer["bill_ids"]:
        raise ToolError(f"bill {bill_id} is not a bill of customer {customer_id}")
    _record(state, "bills", bill_id, "bill")
    state.edit("bills", bill_id)["status"] = "Awaiting Payment"
    return f"A payment request for bill {bill_id} was sent to the customer."


@tool(kind="read")
def get_data_usage(state: State, customer_id: str, line_id: str) -> dict:
    """Get a line's data usage this billing cycle: used, plan limit, data refuelled, and when the cycle ends.

    Args:
        customer_id: The id of the customer who owns the line.
        line_id: The id of the line.
    """
    line = owned_line(state, customer_id, line_id)
    plan = _record(state, "plans", line["plan_id"], "plan")
    cycle_end = dt.date(TODAY.year + TODAY.month // 12, TODAY.month % 12 + 1, 1) - dt.timedelta(days=1)
    return {"line_id": line_id, "data_used_gb": line["data_used_gb"], "data_limit_gb": plan["data_limit_gb"],
            "data_refueling_gb": line["data_refueling_gb"], "cycle_end_date": cycle_end.isoformat()}


@tool(kind="write")
def enable_roaming(state: State, customer_id: str, line_id: str) -> str:
    """Turn on international roaming for a line.

    Args:
        customer_id: The id of the customer who owns the line.
        line_id: The id of the line.
    """
    if owned_line(state, customer_id, line_id)["roaming_enabled"]:
        return "Roaming was already enabled."
    state.edit("lines", line_id)["roaming_enabled"] = True
    return "Roaming enabled."


@tool(kind="write")
def disable_roaming(state: State, customer_id: str, line_id: str) -> str:
    """Turn off international roaming for a line.

    Args:
        customer_id: The id of the customer who owns the line.
        line_id: The id of the line.
    """
    if not owned_line(state, customer_id, line_id)["roaming_enabled"]:
        return "Roaming was already disabled."
    state.edit("lines", line_id)["roaming_enabled"] = False
    return "Roaming disabled."


@tool(kind="write")
def refuel_data(state: State, customer_id: str, line_id: str, gb_amount: float) -> dict:
    """Add data to a line for this cycle; it is charged at the plan's refuelling price on the next bill.

    Args:
        customer_id: The id of the customer who owns the line.
        line_id: The id of the line.
        gb_amount: How many GB to add (positive).
    """
    line = owned_line(state, customer_id, line_id)
    if gb_amount <= 0:
        raise ToolError("the amount to refuel must be positive")
    plan = _record(state, "plans", line["plan_id"], "plan")
    price = plan["data_refueling_price_per_gb"]
    charge = gb_amount * price
    line = state.edit("lines", line_id)
    line["data_refueling_gb"] += gb_amount
    add_charge(state, customer_id, charge, f"Data refueling: {gb_amount} GB at ${price}/GB")
    return {"message": f"Added {gb_amount} GB to line {line_id} for ${charge:.2f}.", "new_data_refueling_gb": line["data_refueling_gb"],
            "charge": charge}


def add_charge(state: State, customer_id: str, amount: float, description: str) -> None:
    """Put a charge (or, negative, a credit) on the customer's draft bill, opening next month's if there is none."""
    customer = _customer(state, customer_id)
    bills = state.table("bills")
    draft = next((b for b in customer["bill_ids"] if b in bills and bills[b]["status"] == "Draft"), None)
    if draft is None:
        start = (TODAY.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1) - dt.timedelta(days=1)
        draft = next(f"B{n:07d}" for n in range(len(bills) + 1, 10**7) if f"B{n:07d}" not in bills)
        state.put("bills", draft, {
            "bill_id": draft, "customer_id": customer_id, "period_start": start.isoformat(), "period_end": end.isoformat(),
            "issue_date": start.isoformat(), "total_due": 0, "due_date": (start + dt.timedelta(days=14)).isoformat(),
            "line_items": [], "status": "Draft",
        })
        state.edit("customers", customer_id)["bill_ids"].append(draft)
    bill = state.edit("bills", draft)
    bill["line_items"].append({"description": description, "amount": amount, "date": TODAY.isoformat(),
                               "item_type": "Credit" if amount < 0 else "Charge"})
    bill["total_due"] += amount


AGENT_TOOLS = [
    get_customer_by_phone, get_customer_by_id, get_customer_by_name, get_details_by_id, suspend_line, resume_line,
    get_bills_for_customer, send_payment_request, get_data_usage, enable_roaming, disable_roaming,
    transfer_to_human_agents, refuel_data,
]
