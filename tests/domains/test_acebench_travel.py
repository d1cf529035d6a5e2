"""ACEBench's travel scenario as muarl tools: each call gives ACEBench's Travel class's result and state change, worked
out by hand here from its rules (fares, free-bag allowances, the 50-yuan bag fee, refunds to cash, its clock), quirks
included, since its checker scores the state those quirks leave."""

from __future__ import annotations

import json

import pytest

from muarl.domains.acebench import travel
from muarl.domains.base import BaseData, State, ToolError

BASE = BaseData(travel.tables())
TOOLS = travel.tools()


def call(state: State, name: str, **arguments):
    out = TOOLS[name](state, arguments)
    return json.loads(out) if out[:1] in "[{" else out


def user(state: State, user_id: str) -> dict:
    return state.get("travel_users", user_id)


@pytest.fixture
def state() -> State:
    return State(BASE)


def test_a_booking_pays_fare_and_extra_bags_takes_a_seat_and_adds_a_reservation(state):
    # Frank is silver: 2 free bags in economy, so 3 bags cost one fee; CA1234's economy fare is 1200
    out = call(state, "reserve_flight", user_id="user2", password="password456", flight_no="CA1234", cabin="Economy Class",
               payment_method="bank", baggage_count=3)
    assert out == "Booking successful. Reservation ID: res_5. Total cost: 1250 yuan (including baggage fees)."
    assert user(state, "user2")["bank_balance"] == 6750.0 and user(state, "user2")["cash_balance"] == 8000.0
    assert state.get("flights", "0")["seats_available"] == 4
    assert travel.CLASS_VIEWS["Travel"](state)["reservations"][-1] == {
        "reservation_id": "res_5", "user_id": "user2", "flight_no": "CA1234", "payment_method": "bank", "cabin": "Economy Class", "baggage": 3}


def test_a_booking_takes_the_first_flight_of_a_repeated_number(state):
    call(state, "reserve_flight", user_id="user3", password="password789", flight_no="CZ1765", cabin="Economy Class",
         payment_method="bank", baggage_count=1)
    assert [f["seats_available"] for f in state.table("flights").values() if f["flight_no"] == "CZ1765"] == [7, 8]


@pytest.mark.parametrize(("arguments", "result"), [
    ({"password": "password789", "cabin": "Business Class", "payment_method": "cash"},
     "Your cash balance is insufficient. Please consider using another payment method."),
    ({"password": "password789", "cabin": "Economy Class", "payment_method": "card"}, "Invalid payment method"),
])
def test_refused_bookings_change_nothing(state, arguments, result):
    before = state.hash()
    assert call(state, "reserve_flight", user_id="user3", flight_no="MU1566", baggage_count=1, **arguments) == result
    assert state.hash() == before


@pytest.mark.parametrize(("arguments", "error"), [
    ({"flight_no": "XX0000", "password": "password789", "cabin": "Economy Class"}, "'NoneType' object is not subscriptable"),
    ({"flight_no": "MU1566", "password": "wrong", "cabin": "Economy Class"}, "'membership_level'"),
    ({"flight_no": "MU1566", "password": "password789", "cabin": "Economy"}, "'Economy'"),
])
def test_bookings_acebench_fails_on_are_errors_with_its_text(state, arguments, error):
    before = state.hash()
    with pytest.raises(ToolError) as exc:
        call(state, "reserve_flight", user_id="user3", payment_method="bank", baggage_count=1, **arguments)
    assert str(exc.value) == error and state.hash() == before


def test_a_flight_and_cabin_change_is_priced_on_the_old_flight(state):
    # res_2: Eve, MU5678 in business (3000); its economy fare is 1900, so the refund is 1100, whatever CZ4352 costs
    out = call(state, "modify_flight", user_id="user1", reservation_id="res_2", new_flight_no="CZ4352", new_cabin="Economy Class")
    assert out == "Flight number has been changed. Cabin change successful. Price difference refunded: 1100."
    assert user(state, "user1")["bank_balance"] == 51100.0
    assert state.get("reservations", "res_2") == {**BASE.tables["reservations"]["res_2"], "flight_no": "CZ4352", "cabin": "Economy Class"}


def test_added_bags_are_kept_even_when_their_fee_cannot_be_paid(state):
    # Eve (regular) upgrades res_1 to business from cash: 3000 - 1200 = 1800 of her 2000
    out = call(state, "modify_flight", user_id="user1", reservation_id="res_1", new_cabin="Business Class", new_payment_method="cash")
    assert out == "Cabin change successful. Price difference paid: 1800." and user(state, "user1")["cash_balance"] == 200.0
    # business allows 2 free bags: 1 + 6 = 7 bags owe 5 fees (250), more than the 200 left
    out = call(state, "modify_flight", user_id="user1", reservation_id="res_1", add_baggage=6, new_payment_method="cash")
    assert out == "Insufficient balance to pay the additional baggage fees."
    assert user(state, "user1")["cash_balance"] == 200.0 and state.get("reservations", "res_1")["baggage"] == 7


@pytest.mark.parametrize(("arguments", "result"), [
    ({"user_id": "user1", "reservation_id": "res_3"}, "Reservation not found or user ID does not match."),
    ({"user_id": "user2", "reservation_id": "res_4", "add_baggage": 1}, "Flight information not found."),  # its MU2616 has no record
    ({"user_id": "user1", "reservation_id": "res_2", "new_flight_no": "CA1234"},
     "Flight change failed: Invalid new flight number or destination does not match."),
    ({"user_id": "user1", "reservation_id": "res_2", "new_flight_no": "MU5678"}, "Modification completed with no additional fees."),
])
def test_modifications_that_change_nothing(state, arguments, result):
    before = state.hash()
    assert call(state, "modify_flight", **arguments) == result
    assert state.hash() == before


def test_a_cancellation_refunds_to_cash_by_the_time_left_and_keeps_the_reservation(state):
    # the clock is 2024-07-14 06:00: CA1234 leaves 26 hours later, so the economy fare comes back in full
    out = call(state, "cancel_reservation", user_id="user1", reservation_id="res_1", reason="change of plans")
    assert out == "More than 24 hours before departure. Free cancellation successful, 1200 yuan has been refunded."
    assert user(state, "user1")["cash_balance"] == 3200.0 and "res_1" in state.table("reservations")
    out = call(state, "cancel_reservation", user_id="user1", reservation_id="res_2", reason=travel.AIRLINE_CANCELLED)
    assert out == "The flight has been canceled. Your reservation will be canceled free of charge, and 3000 yuan has been refunded."
    state.edit("flights", "0")["depart_time"] = "2024-07-14 18:00:00"  # within a day: 10% is kept
    out = call(state, "cancel_reservation", user_id="user1", reservation_id="res_1", reason="other")
    assert out == "Less than 24 hours before departure. A cancellation fee of 120.0 yuan has been deducted, and 1080.0 yuan has been refunded."
    assert user(state, "user1")["cash_balance"] == 7280.0
    state.edit("flights", "0")["depart_time"] = "2024-07-14 05:00:00"
    assert call(state, "cancel_reservation", user_id="user1", reservation_id="res_1", reason="other") == \
        "The flight segment has been used and cannot be canceled."
    assert call(state, "cancel_reservation", user_id="user9", reservation_id="res_1", reason="other") == "Invalid user ID."


def test_lookups(state):
    assert call(state, "get_user_details", user_id="user3", password="password789") == {
        "user_name": "Grace", "cash_balance": 1000.0, "bank_balance": 5000.0, "membership_level": "gold"}
    assert call(state, "get_user_details", user_id="user3", password="x") == {"status": "error", "message": "Incorrect username or password."}
    assert [f["flight_no"] for f in call(state, "get_flight_details", origin="Shanghai", destination="Beijing")] == ["MU5678", "CZ4321", "CZ4352"]
    assert len(call(state, "get_flight_details", destination="Shenzhen")) == 2
    assert call(state, "get_flight_details", origin="Beijing", destination="Shenzhen") == "There are no direct flights that meet the criteria."
    found = call(state, "get_reservation_details", user_id="user2")
    assert [(r["reservation_id"], (r["flight_info"] or {}).get("origin")) for r in found] == [("res_3", "Xiamen"), ("res_4", None)]
    assert call(state, "get_reservation_details") == {"status": "error", "message": "Please provide a valid reservation ID or user ID"}
    # only the 07-18 12:30 CZ1765 leaves Nanjing after MU3561 lands (10:00); MU1566 lands at 22:00
    pairs = call(state, "find_transfer_flights", origin_city="Beijing", transfer_city="Nanjing", destination_city="Shenzhen")
    assert [(p["first_leg"]["flight_no"], p["second_leg"]["depart_time"]) for p in pairs] == [("MU3561", "2024-07-18 12:30:00")]
    assert call(state, "find_transfer_flights", origin_city="Beijing", transfer_city="Xiamen", destination_city="Chengdu") == \
        "No connecting flights that meet the criteria were found."
    assert BASE.recompute_digest() == BASE.digest
