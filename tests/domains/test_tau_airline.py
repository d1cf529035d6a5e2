"""τ-bench airline: gold replays score 1, wrong trajectories 0, every tool's checks and effects as τ-bench's."""

from __future__ import annotations

import json

import pytest
from tau_oracle import oracle_messages, score

from muarl.domains.base import ToolError
from muarl.reward import outcome_reward
from muarl.types import Action

REQUIRED = {
    "book_reservation": ["user_id", "origin", "destination", "flight_type", "cabin", "flights", "passengers",
                         "payment_methods", "total_baggages", "nonfree_baggages", "insurance"],
    "calculate": ["expression"],
    "cancel_reservation": ["reservation_id"],
    "get_reservation_details": ["reservation_id"],
    "get_user_details": ["user_id"],
    "list_all_airports": [],
    "search_direct_flight": ["origin", "destination", "date"],
    "search_onestop_flight": ["origin", "destination", "date"],
    "send_certificate": ["user_id", "amount"],
    "think": ["thought"],
    "transfer_to_human_agents": ["summary"],
    "update_reservation_baggages": ["reservation_id", "total_baggages", "nonfree_baggages", "payment_id"],
    "update_reservation_flights": ["reservation_id", "cabin", "flights", "payment_id"],
    "update_reservation_passengers": ["reservation_id", "passengers"],
}

MIA = "mia_li_3668"  # certificates 7504069 (250) and 4856383 (100), cards 4421486 and 1955700
BOOKING = {
    "user_id": MIA, "origin": "JFK", "destination": "SEA", "flight_type": "one_way", "cabin": "economy",
    "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}, {"flight_number": "HAT039", "date": "2024-05-20"}],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "payment_methods": [{"payment_id": "certificate_7504069", "amount": 250}, {"payment_id": "credit_card_4421486", "amount": 5}],
    "total_baggages": 3, "nonfree_baggages": 0, "insurance": "no",
}


def call(domain, db, name, **kwargs):
    return domain.run_tool(db, name, kwargs)


def test_tools_match_tau_bench_interface(airline):
    assert airline.tools.names() == list(REQUIRED)
    for t in airline.tools:
        assert t.spec.parameters["required"] == REQUIRED[t.name], t.name
    params = airline.tools["book_reservation"].spec.parameters["properties"]
    assert params["cabin"]["enum"] == ["basic_economy", "economy", "business"]
    assert params["flights"]["items"]["required"] == ["flight_number", "date"]
    assert params["passengers"]["items"]["required"] == ["first_name", "last_name", "dob"]
    assert params["payment_methods"]["items"]["properties"]["amount"]["type"] == "number"
    assert params["flights"]["items"]["properties"]["date"]["description"]
    assert airline.tools["transfer_to_human_agents"].terminal


def test_gold_replay_scores_one_on_every_task(airline):
    tasks = airline.tasks("test")
    assert len(tasks) == 50
    for task in tasks:
        assert score(airline, task, task.actions).reward == 1.0, task.id
    assert airline.base.recompute_digest() == airline.base.digest


def test_talking_only_scores_zero_whenever_the_task_needs_a_write(airline):
    fresh = airline.new_state().hash()
    needing = [t for t in airline.tasks("test") if airline.gold_hash(t) != fresh]
    assert len(needing) >= 30
    for task in needing:
        assert outcome_reward(airline, task, fresh, oracle_messages(task, [])).reward == 0.0, task.id


def test_perturbed_gold_actions_score_zero(airline):
    task = airline.task("test-0")
    assert task.actions[0].kwargs == BOOKING
    other_payment = [Action(name="book_reservation", kwargs={**BOOKING, "payment_methods": [
        {"payment_id": "certificate_7504069", "amount": 250}, {"payment_id": "credit_card_1955700", "amount": 5}]})]
    assert score(airline, task, other_payment).reward == 0.0
    other_cabin_flight = [Action(name="book_reservation", kwargs={**BOOKING, "insurance": "yes", "payment_methods": [
        {"payment_id": "certificate_7504069", "amount": 250}, {"payment_id": "credit_card_4421486", "amount": 35}]})]
    assert score(airline, task, other_cabin_flight).reward == 0.0
    assert score(airline, task, []).reward == 0.0
    extra = task.actions + [Action(name="send_certificate", kwargs={"user_id": MIA, "amount": 50})]
    assert score(airline, task, extra).reward == 0.0


def test_booking_effects(airline):
    s = airline.new_state()
    reservation = json.loads(call(airline, s, "book_reservation", **BOOKING))
    assert reservation["reservation_id"] == "HATHAT" and reservation["created_at"] == "2024-05-15T15:00:00"
    assert reservation["flights"][0] == {"flight_number": "HAT136", "date": "2024-05-20", "price": 152, "origin": "JFK", "destination": "ATL"}
    user = s.get("users", MIA)
    assert "certificate_7504069" not in user["payment_methods"] and user["reservations"][-1] == "HATHAT"
    assert s.get("flights", "HAT136")["dates"]["2024-05-20"]["available_seats"]["economy"] == 14  # τ-bench takes no seats
    second = json.loads(call(airline, s, "book_reservation", **{**BOOKING, "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 255}]}))
    assert second["reservation_id"] == "HATHAU"
    # stored lists are copies: changing the reservation later leaves the caller's arguments alone
    call(airline, s, "update_reservation_baggages", reservation_id="HATHAU", total_baggages=2, nonfree_baggages=1, payment_id="credit_card_4421486")
    assert BOOKING["payment_methods"] == [{"payment_id": "certificate_7504069", "amount": 250}, {"payment_id": "credit_card_4421486", "amount": 5}]


@pytest.mark.parametrize("change,message", [
    ({"user_id": "nobody_1"}, "user not found"),
    ({"flights": [{"flight_number": "HAT999", "date": "2024-05-20"}]}, "flight HAT999 not found"),
    ({"flights": [{"flight_number": "HAT136", "date": "2024-07-20"}]}, "flight HAT136 not found on date 2024-07-20"),
    ({"flights": [{"flight_number": "HAT136", "date": "2024-05-01"}]}, "flight HAT136 not available on date 2024-05-01"),
    ({"cabin": "business", "flights": [{"flight_number": "HAT002", "date": "2024-05-25"}]}, "not enough seats on flight HAT002"),
    ({"payment_methods": [{"payment_id": "gift_card_1", "amount": 255}]}, "payment method gift_card_1 not found"),
    ({"payment_methods": [{"payment_id": "certificate_4856383", "amount": 255}]}, "not enough balance in payment method certificate_4856383"),
    ({"payment_methods": [{"payment_id": "credit_card_4421486", "amount": 200}]}, "payment amount does not add up, total price is 255, but paid 200"),
    ({"flights": [{"flight_number": "HAT136"}]}, "flight 0 is missing ['date']"),
])
def test_booking_refusals(airline, change, message):
    s = airline.new_state()
    with pytest.raises(ToolError) as err:
        call(airline, s, "book_reservation", **{**BOOKING, **change})
    assert str(err.value) == message
    assert s.hash() == airline.new_state().hash()  # a refused booking changes nothing


def test_wrongly_typed_values_tau_bench_accepts_change_the_state_as_there(airline):
    """As in τ-bench, whose tools take the model's JSON unchecked (issue 11, item 14)."""
    s = airline.new_state()
    with pytest.raises(ToolError, match="^'first'$"):  # τ-bench's KeyError on the seat map
        call(airline, s, "book_reservation", **{**BOOKING, "cabin": "first"})
    booked = json.loads(call(airline, s, "book_reservation", **{**BOOKING, "cabin": "first", "flights": "", "payment_methods": [],
                                                                "total_baggages": "three"}))
    assert (booked["cabin"], booked["flights"], booked["payment_history"], booked["total_baggages"]) == ("first", "", [], "three")
    moved = json.loads(call(airline, s, "update_reservation_flights", reservation_id="NO6JO3", cabin="premium", flights=[],
                            payment_id="credit_card_1955700"))
    assert moved["flights"] == [] and moved["cabin"] == "business"
    assert moved["payment_history"][-1] == {"payment_id": "credit_card_1955700", "amount": -(483 + 1991)}
    bags = json.loads(call(airline, s, "update_reservation_baggages", reservation_id="NO6JO3", total_baggages="2", nonfree_baggages=1.0,
                           payment_id="credit_card_1955700"))
    assert (bags["total_baggages"], bags["nonfree_baggages"], bags["payment_history"][-1]["amount"]) == ("2", 1.0, 50.0)
    renamed = json.loads(call(airline, s, "update_reservation_passengers", reservation_id="NO6JO3", passengers="X"))  # one passenger
    assert renamed["passengers"] == "X"
    assert "with amount 100." in call(airline, s, "send_certificate", user_id=MIA, amount="100")
    assert call(airline, s, "search_direct_flight", origin=None, destination="SEA", date="2024-05-20") == "[]"
    with pytest.raises(ToolError, match=r"^unsupported operand type\(s\) for \+=: 'int' and 'str'$"):
        call(airline, s, "book_reservation", **{**BOOKING, "nonfree_baggages": "1"})


def test_updates_and_their_refusals(airline):
    s = airline.new_state()
    with pytest.raises(ToolError, match="^reservation not found$"):
        call(airline, s, "cancel_reservation", reservation_id="ZZZZZZ")
    with pytest.raises(ToolError, match="^user not found$"):  # sic, τ-bench's message
        call(airline, s, "get_reservation_details", reservation_id="ZZZZZZ")
    with pytest.raises(ToolError, match="^certificate cannot be used to update reservation$"):
        call(airline, s, "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3, nonfree_baggages=1, payment_id="certificate_4856383")
    with pytest.raises(ToolError, match="^payment method not found$"):
        call(airline, s, "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3, nonfree_baggages=1, payment_id="paypal_1")
    with pytest.raises(ToolError, match="^gift card balance is not enough$"):  # mei_hernandez_8984's card holds 98
        call(airline, s, "update_reservation_baggages", reservation_id="R9QDGB", total_baggages=3, nonfree_baggages=3, payment_id="gift_card_5309492")
    res = json.loads(call(airline, s, "update_reservation_baggages", reservation_id="R9QDGB", total_baggages=1, nonfree_baggages=1, payment_id="gift_card_5309492"))
    assert res["payment_history"][-1] == {"payment_id": "gift_card_5309492", "amount": 50}
    assert s.get("users", "mei_hernandez_8984")["payment_methods"]["gift_card_5309492"]["amount"] == 48
    with pytest.raises(ToolError, match="^number of passengers does not match$"):
        call(airline, s, "update_reservation_passengers", reservation_id="NO6JO3", passengers=[])
    cancelled = json.loads(call(airline, s, "cancel_reservation", reservation_id="NO6JO3"))
    assert cancelled["status"] == "cancelled" and cancelled["payment_history"][-1] == {"payment_id": "credit_card_1955700", "amount": -2504}


def test_flight_change_keeps_cabin_and_prices_the_difference(airline):
    s = airline.new_state()
    legs = [{"flight_number": "HAT083", "date": "2024-05-16"}, {"flight_number": "HAT221", "date": "2024-05-16"}]
    unchanged = json.loads(call(airline, s, "update_reservation_flights", reservation_id="NO6JO3", cabin="business", flights=legs, payment_id="credit_card_1955700"))
    assert len(unchanged["payment_history"]) == 1  # same flights, same cabin: nothing to pay
    downgraded = json.loads(call(airline, s, "update_reservation_flights", reservation_id="NO6JO3", cabin="economy", flights=legs, payment_id="credit_card_1955700"))
    assert downgraded["cabin"] == "business"  # τ-bench prices the new cabin but does not record it
    assert downgraded["payment_history"][-1]["amount"] < 0


def test_certificates_and_reads(airline):
    s = airline.new_state()
    messages = [call(airline, s, "send_certificate", user_id=MIA, amount=100) for _ in range(4)]
    assert messages[0] == f"Certificate certificate_3221322 added to user {MIA} with amount 100."
    assert messages[3] == "null"  # τ-bench returns nothing once its three certificate ids are used
    with pytest.raises(ToolError, match="^user not found$"):
        call(airline, s, "send_certificate", user_id="nobody_1", amount=1)
    assert json.loads(call(airline, s, "list_all_airports"))["LGA"] == "LaGuardia"
    direct = json.loads(call(airline, s, "search_direct_flight", origin="JFK", destination="ATL", date="2024-05-20"))
    assert any(f["flight_number"] == "HAT136" and f["prices"]["economy"] == 152 and "dates" not in f for f in direct)
    onestop = json.loads(call(airline, s, "search_onestop_flight", origin="JFK", destination="SEA", date="2024-05-20"))
    assert any([a["flight_number"], b["flight_number"]] == ["HAT136", "HAT039"] for a, b in onestop)
    for bad_date in ("tomorrow", "05/20/2024"):  # LGA has overnight first legs, whose next day needs the digits
        with pytest.raises(ToolError, match="^date must be 'YYYY-MM-DD'"):
            call(airline, s, "search_onestop_flight", origin="LGA", destination="SFO", date=bad_date)
    assert "certificate_3221324" in json.loads(call(airline, s, "get_user_details", user_id=MIA))["payment_methods"]
