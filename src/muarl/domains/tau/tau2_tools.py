"""τ²-bench's retail and airline tools: τ-bench's, with the changes τ² made.

Retail: no ``think``; a new ``get_item_details``; address and payment changes also accepted on orders whose
items were already modified; swapping an item for itself refused (and τ²'s pricing quirk on multi-item
swaps kept, see :func:`muarl.domains.tau.retail_tools.swap_pending_items`).
Airline: no ``think``; a new ``get_flight_status``; booking takes seats off the flights; a flight change
updates the cabin; the one-stop search reads each leg on its own date; the airport list is a list of
``{iata, city}``; a fourth certificate is refused instead of silently dropped.

Every tool whose behaviour τ² left as it was is τ-bench's function itself, so both worlds run one code path.
Refusal texts stay τ-bench's wording where the check is shared.
"""

from __future__ import annotations

import json
from typing import Literal

from muarl.domains.base import State, ToolError, tool
from muarl.domains.tau import airline_tools as v1_air
from muarl.domains.tau import retail_tools as v1_retail
from muarl.domains.tau.airline_tools import Cabin, FlightLeg, Passenger, PaymentPart
from muarl.domains.tau.common_tools import calculate, transfer_to_human_agents

_PENDING_ANY = frozenset({"pending", "pending (item modified)"})  # τ²: "pending" in status


# ---------------------------------------------------------------- retail


@tool(kind="read")
def get_item_details(state: State, item_id: str) -> str:
    """Get an item's inventory details (its options, price and availability).

    Args:
        item_id: The item id, such as '6086499569'. An item id is not a product id.
    """
    for product in state.table("products").values():
        variant = product["variants"].get(item_id)
        if variant is not None:
            return json.dumps(variant)
    raise ToolError("item not found")


@tool(kind="write", name="modify_pending_order_address")
def modify_pending_order_address(db: State, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str) -> str:
    """Change the shipping address of a pending order. Explain the change and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        address1: First address line, such as '123 Main St'.
        address2: Second address line, such as 'Apt 1', or ''.
        city: The city, such as 'San Francisco'.
        state: The state, such as 'CA'.
        country: The country, such as 'USA'.
        zip: The zip code, such as '12345'.
    """
    address = {"address1": address1, "address2": address2, "city": city, "state": state, "country": country, "zip": zip}
    return v1_retail.set_order_address(db, order_id, address, _PENDING_ANY)


@tool(kind="write", name="modify_pending_order_items")
def modify_pending_order_items(state: State, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> str:
    """Swap items of a pending order for other items of the same product; an order's items can be modified only
    once. Explain the change and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        item_ids: The ids of the items to modify, such as '1008292230'; an id may repeat.
        new_item_ids: The ids of the items to get instead, position by position, each of the same product as
            the item it replaces and different from it; an id may repeat.
        payment_method_id: The payment method id that pays or is refunded, such as 'gift_card_0000000' or
            'credit_card_0000000'; look it up in the user's or the order's details.
    """
    return v1_retail.swap_pending_items(state, order_id, item_ids, new_item_ids, payment_method_id, tau2=True)


@tool(kind="write", name="modify_pending_order_payment")
def modify_pending_order_payment(state: State, order_id: str, payment_method_id: str) -> str:
    """Pay a pending order with another payment method. Explain the change and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        payment_method_id: The new payment method id, such as 'gift_card_0000000' or 'credit_card_0000000';
            look it up in the user's details.
    """
    return v1_retail.change_order_payment(state, order_id, payment_method_id, _PENDING_ANY)


RETAIL_TOOLS = [
    calculate, v1_retail.cancel_pending_order, v1_retail.exchange_delivered_order_items, v1_retail.find_user_id_by_email,
    v1_retail.find_user_id_by_name_zip, get_item_details, v1_retail.get_order_details, v1_retail.get_product_details,
    v1_retail.get_user_details, v1_retail.list_all_product_types, modify_pending_order_address, modify_pending_order_items,
    modify_pending_order_payment, v1_retail.modify_user_address, v1_retail.return_delivered_order_items,
    transfer_to_human_agents,
]


# ---------------------------------------------------------------- airline


@tool(kind="write", name="book_reservation")
def book_reservation(
    state: State, user_id: str, origin: str, destination: str, flight_type: Literal["one_way", "round_trip"], cabin: Cabin,
    flights: list[FlightLeg], passengers: list[Passenger], payment_methods: list[PaymentPart], total_baggages: int,
    nonfree_baggages: int, insurance: Literal["yes", "no"],
) -> str:
    """Book a reservation; its seats are taken off the flights.

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
    if all(("reservations", r) in state for r in v1_air.NEW_RESERVATION_IDS):
        raise ToolError("too many reservations")
    args = {"user_id": user_id, "origin": origin, "destination": destination, "flight_type": flight_type, "cabin": cabin,
            "flights": flights, "passengers": passengers, "payment_methods": payment_methods,
            "total_baggages": total_baggages, "nonfree_baggages": nonfree_baggages, "insurance": insurance}
    return json.dumps(v1_air.book(state, args, seats_taken=True))


@tool(kind="read", name="list_all_airports")
def list_all_airports(state: State) -> str:
    """List every airport's IATA code with its city."""
    return json.dumps([{"iata": code, "city": city} for code, city in v1_air.AIRPORTS.items()])


@tool(kind="read", name="search_onestop_flight")
def search_onestop_flight(state: State, origin: str, destination: str, date: str) -> str:
    """Search itineraries with one stop between two airports, leaving on a date.

    Args:
        origin: The origin airport's three-letter code, such as 'JFK'.
        destination: The destination airport's three-letter code, such as 'LAX'.
        date: The departure date as 'YYYY-MM-DD', such as '2024-05-01'.
    """
    results = []
    for first in v1_air.search_direct(state, origin, None, date):
        date2 = v1_air.next_day(date) if "+1" in first["scheduled_arrival_time_est"] else date
        for second in v1_air.search_direct(state, first["destination"], destination, date2, first["scheduled_arrival_time_est"]):
            results.append([{**first, "date": date}, {**second, "date": date2}])
    return json.dumps(results)


@tool(kind="write", name="send_certificate")
def send_certificate(state: State, user_id: str, amount: float) -> str:
    """Send a travel certificate to a user. Use with care.

    Args:
        user_id: The id of the user who gets the certificate, such as 'sara_doe_496'.
        amount: The certificate's amount.
    """
    message = v1_air.add_certificate(state, user_id, amount)
    if message is None:
        raise ToolError("too many certificates")
    return message


@tool(kind="write", name="update_reservation_flights")
def update_reservation_flights(state: State, reservation_id: str, cabin: Cabin, flights: list[FlightLeg], payment_id: str) -> str:
    """Change the flights (and cabin) of a reservation.

    Args:
        reservation_id: The reservation id, such as 'ZFA04Y'.
        cabin: The cabin class of the whole new itinerary.
        flights: Every flight of the whole new itinerary, including the legs that do not change.
        payment_id: A payment id from the user's profile, such as 'credit_card_7815826' or 'gift_card_7815826'.
    """
    return json.dumps(v1_air.change_flights(state, reservation_id, cabin, flights, payment_id, tau2=True))


@tool(kind="read")
def get_flight_status(state: State, flight_number: str, date: str) -> str:
    """Get a flight's status on a date (such as 'available', 'delayed', 'landed', 'cancelled').

    Args:
        flight_number: The flight number, such as 'HAT001'.
        date: The date as 'YYYY-MM-DD'.
    """
    flight = state.get("flights", flight_number)
    if flight is None:
        raise ToolError(f"flight {flight_number} not found")
    day = flight["dates"].get(date)
    if day is None:
        raise ToolError(f"flight {flight_number} not found on date {date}")
    return day["status"]


AIRLINE_TOOLS = [
    book_reservation, calculate, v1_air.cancel_reservation, get_flight_status, v1_air.get_reservation_details,
    v1_air.get_user_details, list_all_airports, v1_air.search_direct_flight, search_onestop_flight, send_certificate,
    transfer_to_human_agents, v1_air.update_reservation_baggages, update_reservation_flights,
    v1_air.update_reservation_passengers,
]
