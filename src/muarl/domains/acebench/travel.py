"""ACEBench's travel scenario as muarl tools: an airline's flights, its users' accounts and their reservations.

Each tool behaves as the scenario's Travel class does in ACEBench, quirks included, because the benchmark's verdict
is the state those quirks produce: a cancellation refunds the ticket to the user's cash but keeps the reservation;
a cabin change is priced on the reservation's flight before any flight change in the same call, and is made even
when the balance cannot pay the difference; added bags are charged for every bag over the allowance, those already
checked included; a booking takes the first available flight of that number. A refusal ACEBench returns as a
result (a message, or ``{"status": "error", ...}``) is a result here too and changes nothing; a call ACEBench's
code fails on (a booking for an unknown flight, a wrong password, or a cabin it has no allowance for) is a
:class:`~muarl.domains.base.ToolError` with the text of ACEBench's exception, also changing nothing. The state:

* ``travel_users``: user id -> account (name, password, cash and bank balances, membership level);
* ``flights``: ``"0"``, ``"1"``... in ACEBench's order (flight numbers repeat, so they are not keys); a booking
  takes a seat from its flight;
* ``reservations``: reservation id -> reservation, in the order they were made (ids are ``res_<count + 1>``:
  none is ever removed).

:data:`CLASS_VIEWS` gives the state as ACEBench's checker sees it: the Travel class's saved attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from muarl.domains.acebench import travel_data
from muarl.domains.base import State, ToolError, ToolRegistry, tool

Result = dict[str, Any]
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
AIRLINE_CANCELLED = "The airline has canceled the flight."  # the one reason that always refunds in full


def tables() -> dict[str, dict[str, Any]]:
    return {
        "travel_users": travel_data.USERS,
        "flights": {str(i): flight for i, flight in enumerate(travel_data.FLIGHTS)},
        "reservations": {r["reservation_id"]: r for r in travel_data.RESERVATIONS},
    }


def _first_flight(state: State, flight_no: str, available: bool = False) -> tuple[str, dict[str, Any]] | None:
    """(key, record) of the first flight with that number (and, if asked, available), None if there is none."""
    for key, flight in state.table("flights").items():
        if flight["flight_no"] == flight_no and (not available or flight["status"] == "available"):
            return key, flight
    return None


def _user_reservation(state: State, user_id: str, reservation_id: str) -> dict[str, Any] | None:
    reservation = state.get("reservations", reservation_id)
    return reservation if reservation is not None and reservation["user_id"] == user_id else None


def _pay(state: State, user_id: str, method: str, amount: float) -> bool:
    """Add ``amount`` (negative: a charge) to the user's cash or bank balance; False, changing nothing, if the balance
    would go below zero. Any other method is accepted and changes nothing, as in ACEBench."""
    field = {"cash": "cash_balance", "bank": "bank_balance"}.get(method)
    if field is None:
        return True
    if state.get("travel_users", user_id)[field] + amount < 0:
        return False
    state.edit("travel_users", user_id)[field] += amount
    return True


# ---------------------------------------------------------------- looking up


@tool("read")
def get_user_details(state: State, user_id: str, password: str) -> Result:
    """Retrieve user details based on user ID and password.

    Args:
        user_id: The id of the user.
        password: The password of the user.
    """
    user = state.get("travel_users", user_id)
    if user is None or user["password"] != password:
        return {"status": "error", "message": "Incorrect username or password."}
    return {k: v for k, v in user.items() if k != "password"}


@tool("read")
def get_flight_details(state: State, origin: str | None = None, destination: str | None = None) -> Any:
    """Retrieve flight details based on origin and destination.

    Args:
        origin: The origin city of the flight.
        destination: The destination city of the flight.
    """
    found = [f for f in state.table("flights").values()
             if (not origin or f["origin"] == origin) and (not destination or f["destination"] == destination)]
    return found or "There are no direct flights that meet the criteria."


@tool("read")
def get_reservation_details(state: State, reservation_id: str | None = None, user_id: str | None = None) -> Any:
    """Retrieve reservation details, with each reservation's flight, based on reservation ID or user ID.

    Args:
        reservation_id: The reservation ID of the booking.
        user_id: The ID of the user.
    """
    if reservation_id:
        found = [r for r in state.table("reservations").values() if r["reservation_id"] == reservation_id]
    elif user_id:
        found = [r for r in state.table("reservations").values() if r["user_id"] == user_id]
    else:
        return {"status": "error", "message": "Please provide a valid reservation ID or user ID"}
    details = []
    for reservation in found:
        flight = _first_flight(state, reservation["flight_no"])
        details.append({**reservation, "flight_info": flight[1] if flight else None})
    return details


@tool("read")
def find_transfer_flights(state: State, origin_city: str, transfer_city: str, destination_city: str) -> Any:
    """Find transfer flights from an origin city to a destination city with a stopover in a transfer city, ensuring the
    first flight arrives before the second flight departs.

    Args:
        origin_city: The starting city for the flight.
        transfer_city: The city where the transfer takes place.
        destination_city: The final destination city for the flight.
    """
    available = [f for f in state.table("flights").values() if f["status"] == "available"]
    pairs = [{"first_leg": first, "second_leg": second}
             for first in available if first["origin"] == origin_city and first["destination"] == transfer_city
             for second in available if second["origin"] == transfer_city and second["destination"] == destination_city
             and datetime.strptime(first["arrival_time"], TIME_FORMAT) < datetime.strptime(second["depart_time"], TIME_FORMAT)]
    return pairs or "No connecting flights that meet the criteria were found."


# ---------------------------------------------------------------- booking, changing, cancelling


@tool("write")
def reserve_flight(state: State, user_id: str, password: str, flight_no: str, cabin: str, payment_method: str, baggage_count: int) -> str:
    """Book a flight for the user, paying the ticket and any bags over the free allowance from the chosen balance.

    Args:
        user_id: The ID of the user making the reservation.
        password: The password of the user for authentication.
        flight_no: The flight number the user wants to book.
        cabin: The cabin class, 'Economy Class' or 'Business Class'.
        payment_method: The payment method, 'cash' or 'bank'.
        baggage_count: The total number of checked baggage items.
    """
    user = state.get("travel_users", user_id)
    found = _first_flight(state, flight_no, available=True)
    if found is None:  # ACEBench's code fails on these three; the texts are its exceptions'
        raise ToolError("'NoneType' object is not subscriptable")
    key, flight = found
    if user is None or user["password"] != password:
        raise ToolError("'membership_level'")
    if cabin not in travel_data.FREE_BAGS[user["membership_level"]]:
        raise ToolError(repr(cabin))
    price = flight["economy_price"] if cabin == "Economy Class" else flight["business_price"]
    total = price + max(baggage_count - travel_data.FREE_BAGS[user["membership_level"]][cabin], 0) * travel_data.BAG_FEE
    if payment_method not in ("cash", "bank"):
        return "Invalid payment method"
    if total > user[f"{payment_method}_balance"]:
        return f"Your {payment_method} balance is insufficient. Please consider using another payment method."
    state.edit("travel_users", user_id)[f"{payment_method}_balance"] -= total
    state.edit("flights", key)["seats_available"] -= 1
    reservation_id = f"res_{len(state.table('reservations')) + 1}"
    state.put("reservations", reservation_id, {"reservation_id": reservation_id, "user_id": user_id, "flight_no": flight_no,
                                               "payment_method": payment_method, "cabin": cabin, "baggage": baggage_count})
    return f"Booking successful. Reservation ID: {reservation_id}. Total cost: {total} yuan (including baggage fees)."


@tool("write")
def modify_flight(state: State, user_id: str, reservation_id: str, new_flight_no: str | None = None, new_cabin: str | None = None,
                  add_baggage: int = 0, new_payment_method: str | None = None) -> str:
    """Modify a flight reservation: change the flight (same origin and destination), the cabin class (paying or refunded
    the price difference) or add checked baggage (paying for bags over the free allowance).

    Args:
        user_id: The ID of the user making the modification.
        reservation_id: The reservation ID of the booking to be modified.
        new_flight_no: The new flight number to change to (optional).
        new_cabin: The new cabin class to change to (optional).
        add_baggage: The number of additional checked baggage items to add (default is 0).
        new_payment_method: The payment method for any charge or refund, 'cash' or 'bank'; the reservation's own if not given.
    """
    reservation = _user_reservation(state, user_id, reservation_id)
    if reservation is None:
        return "Reservation not found or user ID does not match."
    found = _first_flight(state, reservation["flight_no"])
    if found is None:
        return "Flight information not found."
    current = found[1]
    method = new_payment_method or reservation["payment_method"]
    done = []
    if new_flight_no and new_flight_no != reservation["flight_no"]:
        new = _first_flight(state, new_flight_no)
        if new is None or (new[1]["origin"], new[1]["destination"]) != (current["origin"], current["destination"]):
            return "Flight change failed: Invalid new flight number or destination does not match."
        state.edit("reservations", reservation_id)["flight_no"] = new_flight_no
        done.append("Flight number has been changed.")
    if new_cabin and new_cabin != reservation.get("cabin"):
        prices = {"Economy Class": current["economy_price"], "Business Class": current["business_price"]}
        difference = prices.get(new_cabin, 0) - prices.get(reservation["cabin"], 0)
        state.edit("reservations", reservation_id)["cabin"] = new_cabin
        if difference > 0:
            done.append(f"Cabin change successful. Price difference paid: {difference}." if _pay(state, user_id, method, -difference)
                        else "Insufficient balance to pay the cabin price difference.")
        elif difference < 0:
            _pay(state, user_id, method, -difference)
            done.append(f"Cabin change successful. Price difference refunded: {-difference}.")
    if add_baggage > 0:
        reservation = state.get("reservations", reservation_id)
        free = travel_data.FREE_BAGS.get(state.get("travel_users", user_id)["membership_level"], {}).get(reservation["cabin"], 0)
        total = reservation.get("baggage", 0) + add_baggage
        cost = max(0, total - free) * travel_data.BAG_FEE
        if cost > 0:
            done.append(f"Baggage has been added. Additional fee to be paid: {cost}." if _pay(state, user_id, method, -cost)
                        else "Insufficient balance to pay the additional baggage fees.")
        state.edit("reservations", reservation_id)["baggage"] = total
    return " ".join(done) or "Modification completed with no additional fees."


@tool("write")
def cancel_reservation(state: State, user_id: str, reservation_id: str, reason: str) -> str:
    """Cancel a flight reservation; the refund goes to the user's cash balance.

    Args:
        user_id: The ID of the user who made the reservation.
        reservation_id: The ID of the reservation to cancel.
        reason: Reason for cancellation (e.g., 'schedule change', 'The airline has canceled the flight.', 'other').
    """
    if state.get("travel_users", user_id) is None:
        return "Invalid user ID."
    reservation = _user_reservation(state, user_id, reservation_id)
    if reservation is None:
        return "Invalid reservation ID or it does not belong to the user."
    found = _first_flight(state, reservation["flight_no"])
    if found is None:
        return "Invalid flight information."
    flight = found[1]
    now, departure = datetime.strptime(travel_data.NOW, TIME_FORMAT), datetime.strptime(flight["depart_time"], TIME_FORMAT)
    if now > departure:
        return "The flight segment has been used and cannot be canceled."
    price = flight["economy_price"] if reservation["cabin"] == "Economy Class" else flight["business_price"]
    if reason == AIRLINE_CANCELLED:
        _pay(state, user_id, "cash", price)
        return f"The flight has been canceled. Your reservation will be canceled free of charge, and {price} yuan has been refunded."
    if departure - now > timedelta(days=1):
        _pay(state, user_id, "cash", price)
        return f"More than 24 hours before departure. Free cancellation successful, {price} yuan has been refunded."
    fee = price * 0.1
    _pay(state, user_id, "cash", price - fee)
    return f"Less than 24 hours before departure. A cancellation fee of {fee} yuan has been deducted, and {price - fee} yuan has been refunded."


def tools() -> ToolRegistry:
    return ToolRegistry.from_functions([
        get_user_details, get_flight_details, get_reservation_details, find_transfer_flights, reserve_flight, modify_flight, cancel_reservation,
    ])


CLASS_VIEWS: dict[str, Callable[[State], dict[str, Any]]] = {
    "Travel": lambda state: {"users": dict(state.table("travel_users")), "reservations": list(state.table("reservations").values())},
}
