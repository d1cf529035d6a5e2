"""τ-bench airline: booking, changing and cancelling flight reservations over users, reservations and flights.

Behaviour follows τ-bench's tools check for check, including what they do *not* do (booking takes no seats
off the flight, a cabin change is priced but the reservation keeps its old cabin, the one-stop search reads
the second leg's prices on the first leg's date). τ²-bench fixed some of these; its variants live in
:mod:`muarl.domains.tau.tau2_tools` and share the pricing and payment code below through keyword switches.

Arguments an agent passes (passenger lists, payment lists) are copied before they are stored, so a task's
gold arguments are never aliased into a state and then changed by a later tool.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, TypedDict

from muarl.domains.base import State, ToolError, clone, tool
from muarl.domains.tau.common_tools import calculate, think, transfer_to_human_agents

Cabin = Literal["basic_economy", "economy", "business"]
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")  # τ-bench's ids for up to three new bookings per task
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
BOOKING_TIME = "2024-05-15T15:00:00"  # the benchmark's fixed "now"

AIRPORTS = {
    "SFO": "San Francisco", "JFK": "New York", "LAX": "Los Angeles", "ORD": "Chicago", "DFW": "Dallas",
    "DEN": "Denver", "SEA": "Seattle", "ATL": "Atlanta", "MIA": "Miami", "BOS": "Boston", "PHX": "Phoenix",
    "IAH": "Houston", "LAS": "Las Vegas", "MCO": "Orlando", "EWR": "Newark", "CLT": "Charlotte",
    "MSP": "Minneapolis", "DTW": "Detroit", "PHL": "Philadelphia", "LGA": "LaGuardia",
}


class FlightLeg(TypedDict):
    """One flight of an itinerary.

    Attributes:
        flight_number: The flight number, such as 'HAT001'.
        date: The flight's date as 'YYYY-MM-DD', such as '2024-05-01'.
    """

    flight_number: str
    date: str


class Passenger(TypedDict):
    """A traveller.

    Attributes:
        first_name: The passenger's first name, such as 'Noah'.
        last_name: The passenger's last name, such as 'Brown'.
        dob: The passenger's date of birth as 'YYYY-MM-DD', such as '1990-01-01'.
    """

    first_name: str
    last_name: str
    dob: str


class PaymentPart(TypedDict):
    """How much one stored payment method pays.

    Attributes:
        payment_id: A payment id from the user's profile, such as 'credit_card_7815826', 'gift_card_7815826'
            or 'certificate_7815826'.
        amount: The amount this method pays.
    """

    payment_id: str
    amount: float


def _need_keys(items: list[dict[str, Any]], keys: tuple[str, ...], what: str) -> None:
    """τ-bench would fail with a bare KeyError on a missing field; say which field is missing instead."""
    for i, item in enumerate(items):
        missing = [k for k in keys if k not in item]
        if missing:
            raise ToolError(f"{what} {i} is missing {missing}")


def reservation_or_fail(state: State, reservation_id: str) -> dict[str, Any]:
    reservation = state.get("reservations", reservation_id)
    if reservation is None:
        raise ToolError("reservation not found")
    return reservation


def user_or_fail(state: State, user_id: str) -> dict[str, Any]:
    user = state.get("users", user_id)
    if user is None:
        raise ToolError("user not found")
    return user


def bookable_leg(state: State, flight_number: str, date: str, cabin: str, seats: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(flight, that date's record) for a leg that can take ``seats`` more passengers in ``cabin``."""
    flight = state.get("flights", flight_number)
    if flight is None:
        raise ToolError(f"flight {flight_number} not found")
    day = flight["dates"].get(date)
    if day is None:
        raise ToolError(f"flight {flight_number} not found on date {date}")
    if day["status"] != "available":
        raise ToolError(f"flight {flight_number} not available on date {date}")
    if day["available_seats"][cabin] < seats:
        raise ToolError(f"not enough seats on flight {flight_number}")
    return flight, day


def take_seats(state: State, legs: list[dict[str, Any]], cabin: str, seats: int) -> None:
    """Remove booked seats from the flights (τ² does this when booking; τ-bench does not)."""
    for leg in legs:
        day = state.edit("flights", leg["flight_number"])["dates"][leg["date"]]
        day["available_seats"][cabin] -= seats


def book(state: State, args: dict[str, Any], *, seats_taken: bool) -> dict[str, Any]:
    """Create a reservation and charge it; shared by τ-bench and τ² (``seats_taken``)."""
    user_id, cabin = args["user_id"], args["cabin"]
    flights, passengers, payments = args["flights"], args["passengers"], args["payment_methods"]
    user = user_or_fail(state, user_id)
    _need_keys(flights, ("flight_number", "date"), "flight")
    _need_keys(payments, ("payment_id", "amount"), "payment method")
    reservation_id = next((r for r in NEW_RESERVATION_IDS if ("reservations", r) not in state), NEW_RESERVATION_IDS[-1])
    legs = clone(flights)  # stored as given (whatever it is), each leg priced in place, as τ-bench does
    total = 0
    for leg in legs:
        flight, day = bookable_leg(state, leg["flight_number"], leg["date"], cabin, len(passengers))
        leg.update(price=day["prices"][cabin], origin=flight["origin"], destination=flight["destination"])
        total += leg["price"] * len(passengers)
    if args["insurance"] == "yes":
        total += 30 * len(passengers)
    total += 50 * args["nonfree_baggages"]
    for part in payments:
        method = user["payment_methods"].get(part["payment_id"])
        if method is None:
            raise ToolError(f"payment method {part['payment_id']} not found")
        if method["source"] in ("gift_card", "certificate") and method["amount"] < part["amount"]:
            raise ToolError(f"not enough balance in payment method {part['payment_id']}")
    paid = sum(part["amount"] for part in payments)
    if paid != total:
        raise ToolError(f"payment amount does not add up, total price is {total}, but paid {paid}")
    methods = state.edit("users", user_id)["payment_methods"]
    for part in payments:
        source = methods[part["payment_id"]]["source"]
        if source == "gift_card":
            methods[part["payment_id"]]["amount"] -= part["amount"]
        elif source == "certificate":
            del methods[part["payment_id"]]
    if seats_taken:
        take_seats(state, legs, cabin, len(passengers))
    reservation = {
        "reservation_id": reservation_id, "user_id": user_id, "origin": args["origin"], "destination": args["destination"],
        "flight_type": args["flight_type"], "cabin": cabin, "flights": legs, "passengers": clone(passengers),
        "payment_history": clone(payments), "created_at": BOOKING_TIME, "total_baggages": args["total_baggages"],
        "nonfree_baggages": args["nonfree_baggages"], "insurance": args["insurance"],
    }
    state.put("reservations", reservation_id, reservation)
    state.edit("users", user_id)["reservations"].append(reservation_id)
    return reservation


def charge_for_update(state: State, user_id: str, payment_id: str, amount: float) -> None:
    """Check that a stored method can pay ``amount`` for a change, and take it off a gift card."""
    method = state.get("users", user_id)["payment_methods"].get(payment_id)
    if method is None:
        raise ToolError("payment method not found")
    if method["source"] == "certificate":
        raise ToolError("certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < amount:
        raise ToolError("gift card balance is not enough")
    if method["source"] == "gift_card":
        state.edit("users", user_id)["payment_methods"][payment_id]["amount"] -= amount


def change_flights(state: State, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str, *, tau2: bool) -> dict[str, Any]:
    """Replace a reservation's itinerary, charging or refunding the fare difference. With ``tau2`` the new legs are
    stored as clean records and the reservation takes the new cabin (τ-bench keeps the old cabin)."""
    reservation = reservation_or_fail(state, reservation_id)
    _need_keys(flights, ("flight_number", "date"), "flight")
    seats = len(reservation["passengers"])
    legs = [] if tau2 else clone(flights)  # τ-bench stores its copy of the argument, whatever it is, priced in place
    total = 0
    for i, given in enumerate(flights):
        kept = next((f for f in reservation["flights"] if f["flight_number"] == given["flight_number"]
                     and f["date"] == given["date"] and cabin == reservation["cabin"]), None)
        if kept is not None:
            priced = {"price": kept["price"], "origin": kept["origin"], "destination": kept["destination"]}
        else:
            flight, day = bookable_leg(state, given["flight_number"], given["date"], cabin, seats)
            priced = {"price": day["prices"][cabin], "origin": flight["origin"], "destination": flight["destination"]}
        if tau2:
            legs.append({"flight_number": given["flight_number"], "date": given["date"], **priced})
        else:
            legs[i].update(priced)
        total += priced["price"] * seats
    total -= sum(f["price"] for f in reservation["flights"]) * seats
    charge_for_update(state, reservation["user_id"], payment_id, total)
    reservation = state.edit("reservations", reservation_id)
    reservation["flights"] = legs
    if tau2:
        reservation["cabin"] = cabin
    if total != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": total})
    return reservation


def search_direct(state: State, origin: str | None, destination: str | None, date: str, leave_after: str | None = None) -> list[dict[str, Any]]:
    """Available flights on ``date`` as flat records (the flight without its calendar, plus that date's status,
    seats and prices)."""
    results = []
    for flight in state.table("flights").values():
        if (origin is None or flight["origin"] == origin) and (destination is None or flight["destination"] == destination):
            day = flight["dates"].get(date)
            if day is not None and day["status"] == "available" and (leave_after is None or flight["scheduled_departure_time_est"] >= leave_after):
                results.append({**{k: v for k, v in flight.items() if k != "dates"}, **day})
    return results


def next_day(date: str) -> str:
    """τ-bench's date arithmetic for overnight legs: it only works within May 2024, like the benchmark's data."""
    return f"2024-05-{int(date[-2:]) + 1}"


# ---------------------------------------------------------------- reads


@tool(kind="read")
def get_user_details(state: State, user_id: str) -> str:
    """Get a user's details, including their reservations and payment methods.

    Args:
        user_id: The user id, such as 'sara_doe_496'.
    """
    return json.dumps(user_or_fail(state, user_id))


@tool(kind="read")
def get_reservation_details(state: State, reservation_id: str) -> str:
    """Get a reservation's details.

    Args:
        reservation_id: The reservation id, such as '8JX2WO'.
    """
    reservation = state.get("reservations", reservation_id)
    if reservation is None:
        raise ToolError("user not found")  # sic: τ-bench's message for an unknown reservation
    return json.dumps(reservation)


@tool(kind="read")
def list_all_airports(state: State) -> str:
    """List every airport's IATA code with its city."""
    return json.dumps(AIRPORTS)


@tool(kind="read")
def search_direct_flight(state: State, origin: str, destination: str, date: str) -> str:
    """Search direct flights between two airports on a date.

    Args:
        origin: The origin airport's three-letter code, such as 'JFK'.
        destination: The destination airport's three-letter code, such as 'LAX'.
        date: The flight date as 'YYYY-MM-DD', such as '2024-01-01'.
    """
    if origin is None or destination is None:  # no flight's airport equals null in τ-bench; here None means "any"
        return json.dumps([])
    return json.dumps(search_direct(state, origin, destination, date))


@tool(kind="read")
def search_onestop_flight(state: State, origin: str, destination: str, date: str) -> str:
    """Search itineraries with one stop between two airports, leaving on a date.

    Args:
        origin: The origin airport's three-letter code, such as 'JFK'.
        destination: The destination airport's three-letter code, such as 'LAX'.
        date: The departure date as 'YYYY-MM-DD', such as '2024-05-01'.
    """
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):  # next_day reads the day digits: refuse what it cannot read
        raise ToolError(f"date must be 'YYYY-MM-DD', such as '2024-05-01', not {date!r}")
    flights = state.table("flights")
    results = []
    for first in flights.values():
        if first["origin"] != origin:
            continue
        for second in flights.values():
            if second["destination"] != destination or first["destination"] != second["origin"]:
                continue
            date2 = next_day(date) if "+1" in first["scheduled_arrival_time_est"] else date
            if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
                continue
            if (date in first["dates"] and date2 in second["dates"] and first["dates"][date]["status"] == "available"
                    and second["dates"][date2]["status"] == "available"):
                leg1 = {**{k: v for k, v in first.items() if k != "dates"}, **first["dates"][date], "date": date}
                if date not in second["dates"]:  # τ-bench reads the second leg's day record on the first leg's date
                    raise ToolError(repr(date))
                leg2 = {**{k: v for k, v in second.items() if k != "dates"}, **second["dates"][date], "date": date2}
                results.append([leg1, leg2])
    return json.dumps(results)


# ---------------------------------------------------------------- writes


@tool(kind="write")
def book_reservation(
    state: State, user_id: str, origin: str, destination: str, flight_type: Literal["one_way", "round_trip"], cabin: Cabin,
    flights: list[FlightLeg], passengers: list[Passenger], payment_methods: list[PaymentPart], total_baggages: int,
    nonfree_baggages: int, insurance: Literal["yes", "no"],
) -> str:
    """Book a reservation.

    Args:
        user_id: The id of the user who books, such as 'sara_doe_496'.
        origin: The origin city's IATA code, such as 'SFO'.
        destination: The destination city's IATA code, such as 'JFK'.
        flight_type: 'one_way' or 'round_trip'.
        cabin: The cabin class.
        flights: Every flight of the itinerary.
        passengers: Every passenger.
        payment_methods: How the total is split between the user's stored payment methods.
        total_baggages: The total number of checked bags on the reservation.
        nonfree_baggages: How many of those bags are paid for.
        insurance: Whether travel insurance is bought: 'yes' or 'no'.
    """
    args = {"user_id": user_id, "origin": origin, "destination": destination, "flight_type": flight_type, "cabin": cabin,
            "flights": flights, "passengers": passengers, "payment_methods": payment_methods,
            "total_baggages": total_baggages, "nonfree_baggages": nonfree_baggages, "insurance": insurance}
    return json.dumps(book(state, args, seats_taken=False))


@tool(kind="write")
def cancel_reservation(state: State, reservation_id: str) -> str:
    """Cancel a whole reservation: every payment is refunded.

    Args:
        reservation_id: The reservation id, such as 'ZFA04Y'.
    """
    reservation_or_fail(state, reservation_id)
    reservation = state.edit("reservations", reservation_id)
    refunds = [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return json.dumps(reservation)


def add_certificate(state: State, user_id: str, amount: float) -> str | None:
    """Give a user the first free certificate id; None when all three are taken (τ-bench returns nothing then)."""
    user_or_fail(state, user_id)
    for payment_id in NEW_CERTIFICATE_IDS:
        if payment_id not in state.get("users", user_id)["payment_methods"]:
            methods = state.edit("users", user_id)["payment_methods"]
            methods[payment_id] = {"source": "certificate", "amount": amount, "id": payment_id}
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    return None


@tool(kind="write")
def send_certificate(state: State, user_id: str, amount: float) -> str:
    """Send a travel certificate to a user. Use with care.

    Args:
        user_id: The id of the user who gets the certificate, such as 'sara_doe_496'.
        amount: The certificate's amount.
    """
    return add_certificate(state, user_id, amount) or "null"


@tool(kind="write")
def update_reservation_baggages(state: State, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str) -> str:
    """Change the number of checked bags of a reservation; each added paid bag costs 50.

    Args:
        reservation_id: The reservation id, such as 'ZFA04Y'.
        total_baggages: The new total number of checked bags.
        nonfree_baggages: The new number of paid bags.
        payment_id: A payment id from the user's profile, such as 'credit_card_7815826' or 'gift_card_7815826'.
    """
    reservation = reservation_or_fail(state, reservation_id)
    price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    charge_for_update(state, reservation["user_id"], payment_id, price)
    reservation = state.edit("reservations", reservation_id)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    if price != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": price})
    return json.dumps(reservation)


@tool(kind="write")
def update_reservation_flights(state: State, reservation_id: str, cabin: Cabin, flights: list[FlightLeg], payment_id: str) -> str:
    """Change the flights of a reservation.

    Args:
        reservation_id: The reservation id, such as 'ZFA04Y'.
        cabin: The cabin class.
        flights: Every flight of the whole new itinerary, including the legs that do not change.
        payment_id: A payment id from the user's profile, such as 'credit_card_7815826' or 'gift_card_7815826'.
    """
    return json.dumps(change_flights(state, reservation_id, cabin, flights, payment_id, tau2=False))


@tool(kind="write")
def update_reservation_passengers(state: State, reservation_id: str, passengers: list[Passenger]) -> str:
    """Change the passengers' details of a reservation; their number cannot change.

    Args:
        reservation_id: The reservation id, such as 'ZFA04Y'.
        passengers: Every passenger, in the new version.
    """
    reservation = reservation_or_fail(state, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise ToolError("number of passengers does not match")
    reservation = state.edit("reservations", reservation_id)
    reservation["passengers"] = clone(passengers)
    return json.dumps(reservation)


# τ-bench's order of the airline tools, which is the order they are offered to the model in
TOOLS = [
    book_reservation, calculate, cancel_reservation, get_reservation_details, get_user_details, list_all_airports,
    search_direct_flight, search_onestop_flight, send_certificate, think, transfer_to_human_agents,
    update_reservation_baggages, update_reservation_flights, update_reservation_passengers,
]
