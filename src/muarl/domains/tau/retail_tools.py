"""τ-bench retail: an online shop's customer-service tools over users, orders and products.

Each tool behaves as τ-bench's does: same name, arguments, checks (in the same order, so the first failing
check gives the same message), and the same changes to the records, including their quirks (a price
difference that is not rounded when pending items are modified, refunds to a gift card detected by the
payment id containing ``gift_card``). Refusals raise :class:`ToolError` with τ-bench's text; the episode loop
shows them to the agent as ``Error: <text>``, which is exactly what τ-bench returns.

Records are edited only through ``state.edit`` so a reset costs nothing (see :mod:`muarl.domains.base`).
The few pieces τ²-bench's retail shares but changes slightly are parameterised here and reused by
:mod:`muarl.domains.tau.tau2_tools`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, Literal

from muarl.domains.base import State, ToolError, clone, tool
from muarl.domains.tau.common_tools import calculate, think, transfer_to_human_agents

_ORDER_ID = "The order id, such as '#W0000000' (note the leading '#')."
_PAYMENT_ID = (
    "The payment method id that pays or is refunded, such as 'gift_card_0000000' or 'credit_card_0000000'; "
    "look it up in the user's or the order's details."
)
_PENDING = frozenset({"pending"})


def order_or_fail(state: State, order_id: str) -> dict[str, Any]:
    order = state.get("orders", order_id)
    if order is None:
        raise ToolError("order not found")
    return order


def _check_items_in_order(order: dict[str, Any], item_ids: list[str], message: str) -> None:
    """Every id (with repetitions) must be present that many times in the order."""
    present = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > present.count(item_id):
            raise ToolError(message.format(item_id=item_id))


def _price_difference(state: State, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str]) -> float:
    """New minus old price of the swapped items; each new item must be an available variant of the old one's product."""
    if len(item_ids) != len(new_item_ids):
        raise ToolError("the number of items to be exchanged should match")
    diff = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        variant = state.get("products", item["product_id"])["variants"].get(new_item_id)
        if variant is None or not variant["available"]:
            raise ToolError(f"new item {new_item_id} not found or available")
        diff += variant["price"] - item["price"]
    return diff


def _user_payment_method(state: State, user_id: str, payment_method_id: str) -> dict[str, Any]:
    method = state.get("users", user_id)["payment_methods"].get(payment_method_id)
    if method is None:
        raise ToolError("payment method not found")
    return method


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
    return {"address1": address1, "address2": address2, "city": city, "state": state, "country": country, "zip": zip}


# ---------------------------------------------------------------- reads


@tool(kind="read")
def find_user_id_by_email(state: State, email: str) -> str:
    """Find a user's id from their email address (case-insensitive). Fails when no user has that email.

    Args:
        email: The user's email, such as 'someone@example.com'.
    """
    wanted = email.lower()
    for user_id, user in state.table("users").items():
        if user["email"].lower() == wanted:
            return user_id
    raise ToolError("user not found")


@tool(kind="read")
def find_user_id_by_name_zip(state: State, first_name: str, last_name: str, zip: str) -> str:
    """Find a user's id from their first name, last name and zip code. Fails when nobody matches. Look users up
    by email first; use this only when the email is unknown or finds nobody.

    Args:
        first_name: The customer's first name, such as 'John'.
        last_name: The customer's last name, such as 'Doe'.
        zip: The customer's zip code, such as '12345'.
    """
    for user_id, user in state.table("users").items():
        name = user["name"]
        # compared lazily, user by user, as τ-bench does: a last name that is not text fails only once a first name matches
        if name["first_name"].lower() == first_name.lower() and name["last_name"].lower() == last_name.lower() and user["address"]["zip"] == zip:
            return user_id
    raise ToolError("user not found")


@tool(kind="read")
def get_order_details(state: State, order_id: str) -> str:
    """Get an order's status and details.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
    """
    return json.dumps(order_or_fail(state, order_id))


@tool(kind="read")
def get_product_details(state: State, product_id: str) -> str:
    """Get a product's inventory details: every variant (item) with its options, price and availability.

    Args:
        product_id: The product id, such as '6086499569'. A product id is not an item id.
    """
    product = state.get("products", product_id)
    if product is None:
        raise ToolError("product not found")
    return json.dumps(product)


@tool(kind="read")
def get_user_details(state: State, user_id: str) -> str:
    """Get a user's details, including their orders and payment methods.

    Args:
        user_id: The user id, such as 'sara_doe_496'.
    """
    user = state.get("users", user_id)
    if user is None:
        raise ToolError("user not found")
    return json.dumps(user)


@tool(kind="read")
def list_all_product_types(state: State) -> str:
    """List every product type's name with its product id (the shop has 50), sorted by name. Each product type
    comes in several items, each with its own item id and options."""
    names = {p["name"]: p["product_id"] for p in state.table("products").values()}
    return json.dumps(dict(sorted(names.items())))


# ---------------------------------------------------------------- writes


@tool(kind="write")
def cancel_pending_order(state: State, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> str:
    """Cancel a pending order (processed or delivered orders cannot be cancelled). Explain the cancellation and get
    an explicit yes from the user first. Every payment is refunded: at once onto a gift card, otherwise within
    5-7 business days. Returns the order after cancellation.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        reason: Why the order is cancelled: 'no longer needed' or 'ordered by mistake'.
    """
    order = order_or_fail(state, order_id)
    if order["status"] != "pending":
        raise ToolError("non-pending order cannot be cancelled")
    if reason not in ("no longer needed", "ordered by mistake"):
        raise ToolError("invalid reason")
    order = state.edit("orders", order_id)
    refunds = []
    for payment in order["payment_history"]:
        method_id = payment["payment_method_id"]
        refunds.append({"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": method_id})
        if "gift_card" in method_id:
            card = state.edit("users", order["user_id"])["payment_methods"][method_id]
            card["balance"] = round(card["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return json.dumps(order)


@tool(kind="write")
def exchange_delivered_order_items(state: State, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> str:
    """Exchange items of a delivered order for other items of the same product. A delivered order can be returned
    or exchanged only once. Explain the exchange and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        item_ids: The ids of the items to exchange, such as '1008292230'; an id may repeat.
        new_item_ids: The ids of the items to get instead, position by position, each of the same product as
            the item it replaces; an id may repeat.
        payment_method_id: The payment method id that pays or is refunded, such as 'gift_card_0000000' or
            'credit_card_0000000'; look it up in the user's or the order's details.
    """
    order = order_or_fail(state, order_id)
    if order["status"] != "delivered":
        raise ToolError("non-delivered order cannot be exchanged")
    _check_items_in_order(order, item_ids, "{item_id} not found")
    diff = round(_price_difference(state, order, item_ids, new_item_ids), 2)
    method = _user_payment_method(state, order["user_id"], payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < diff:
        raise ToolError("insufficient gift card balance to pay for the price difference")
    order = state.edit("orders", order_id)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff
    return json.dumps(order)


def set_order_address(state: State, order_id: str, address: dict[str, str], statuses: Collection[str]) -> str:
    """Replace a pending order's shipping address (τ² also accepts orders whose items were modified)."""
    order = order_or_fail(state, order_id)
    if order["status"] not in statuses:
        raise ToolError("non-pending order cannot be modified")
    order = state.edit("orders", order_id)
    order["address"] = address
    return json.dumps(order)


# The address tools take an argument called ``state`` (the US state), so their first parameter, the muarl
# State that every tool receives positionally, is called ``db`` instead.


@tool(kind="write")
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
    return set_order_address(db, order_id, _address(address1, address2, city, state, country, zip), _PENDING)


def swap_pending_items(state: State, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str, *, tau2: bool = False) -> str:
    """Swap items of a pending order and settle the price difference. ``tau2`` selects τ²-bench's variant:
    it refuses swapping an item for itself and, as τ² does, gives every swapped item the price and options of
    the *last* new item (a τ² quirk kept so scores match)."""
    order = order_or_fail(state, order_id)
    if order["status"] != "pending":
        raise ToolError("non-pending order cannot be modified")
    _check_items_in_order(order, item_ids, "{item_id} not found")
    if tau2 and any(a == b for a, b in zip(item_ids, new_item_ids)):
        raise ToolError("the new item id should be different from the old item id")
    diff = _price_difference(state, order, item_ids, new_item_ids)
    method = _user_payment_method(state, order["user_id"], payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < diff:
        raise ToolError("insufficient gift card balance to pay for the new item")
    order = state.edit("orders", order_id)
    order["payment_history"].append(
        {"transaction_type": "payment" if diff > 0 else "refund", "amount": abs(diff), "payment_method_id": payment_method_id}
    )
    if method["source"] == "gift_card":
        card = state.edit("users", order["user_id"])["payment_methods"][payment_method_id]
        card["balance"] = round(card["balance"] - diff, 2)
    variants = [state.get("products", next(i for i in order["items"] if i["item_id"] == old)["product_id"])["variants"][new]
                for old, new in zip(item_ids, new_item_ids)]
    for (old, new), variant in zip(zip(item_ids, new_item_ids), variants):
        item = next(i for i in order["items"] if i["item_id"] == old)
        chosen = variants[-1] if tau2 else variant
        item["item_id"] = new
        item["price"] = chosen["price"]
        item["options"] = clone(chosen["options"])
    order["status"] = "pending (item modified)"
    return json.dumps(order)


@tool(kind="write")
def modify_pending_order_items(state: State, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str) -> str:
    """Swap items of a pending order for other items of the same product; an order's items can be modified only
    once. Explain the change and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        item_ids: The ids of the items to modify, such as '1008292230'; an id may repeat.
        new_item_ids: The ids of the items to get instead, position by position, each of the same product as
            the item it replaces; an id may repeat.
        payment_method_id: The payment method id that pays or is refunded, such as 'gift_card_0000000' or
            'credit_card_0000000'; look it up in the user's or the order's details.
    """
    return swap_pending_items(state, order_id, item_ids, new_item_ids, payment_method_id)


def change_order_payment(state: State, order_id: str, payment_method_id: str, statuses: Collection[str]) -> str:
    """Pay a pending order with another method: a new payment, a refund of the old one, gift cards settled at once."""
    order = order_or_fail(state, order_id)
    if order["status"] not in statuses:
        raise ToolError("non-pending order cannot be modified")
    method = _user_payment_method(state, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("there should be exactly one payment for a pending order")
    old_id = history[0]["payment_method_id"]
    if old_id == payment_method_id:
        raise ToolError("the new payment method should be different from the current one")
    amount = history[0]["amount"]
    if method["source"] == "gift_card" and method["balance"] < amount:
        raise ToolError("insufficient gift card balance to pay for the order")
    order = state.edit("orders", order_id)
    order["payment_history"].extend([
        {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
        {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
    ])
    methods = state.edit("users", order["user_id"])["payment_methods"]
    if method["source"] == "gift_card":
        methods[payment_method_id]["balance"] = round(methods[payment_method_id]["balance"] - amount, 2)
    if "gift_card" in old_id:
        methods[old_id]["balance"] = round(methods[old_id]["balance"] + amount, 2)
    return json.dumps(order)


@tool(kind="write")
def modify_pending_order_payment(state: State, order_id: str, payment_method_id: str) -> str:
    """Pay a pending order with another payment method. Explain the change and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        payment_method_id: The new payment method id, such as 'gift_card_0000000' or 'credit_card_0000000';
            look it up in the user's details.
    """
    return change_order_payment(state, order_id, payment_method_id, _PENDING)


@tool(kind="write")
def modify_user_address(db: State, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str) -> str:
    """Change a user's default address. Explain the change and get an explicit yes from the user first.

    Args:
        user_id: The user id, such as 'sara_doe_496'.
        address1: First address line, such as '123 Main St'.
        address2: Second address line, such as 'Apt 1', or ''.
        city: The city, such as 'San Francisco'.
        state: The state, such as 'CA'.
        country: The country, such as 'USA'.
        zip: The zip code, such as '12345'.
    """
    if ("users", user_id) not in db:
        raise ToolError("user not found")
    user = db.edit("users", user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(user)


@tool(kind="write")
def return_delivered_order_items(state: State, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
    """Ask to return items of a delivered order; its status becomes 'return requested' and the user gets an email
    on how to send them back. Explain the return and get an explicit yes from the user first.

    Args:
        order_id: The order id, such as '#W0000000' (note the leading '#').
        item_ids: The ids of the items to return, such as '1008292230'; an id may repeat.
        payment_method_id: Where the refund goes: the order's original payment method or a gift card, such as
            'gift_card_0000000' or 'credit_card_0000000'.
    """
    order = order_or_fail(state, order_id)
    if order["status"] != "delivered":
        raise ToolError("non-delivered order cannot be returned")
    _user_payment_method(state, order["user_id"], payment_method_id)
    if "gift_card" not in payment_method_id and payment_method_id != order["payment_history"][0]["payment_method_id"]:
        raise ToolError("payment method should be either the original payment method or a gift card")
    _check_items_in_order(order, item_ids, "some item not found")
    order = state.edit("orders", order_id)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return json.dumps(order)


# τ-bench's order of the retail tools (alphabetical), which is the order they are offered to the model in
TOOLS = [
    calculate, cancel_pending_order, exchange_delivered_order_items, find_user_id_by_email, find_user_id_by_name_zip,
    get_order_details, get_product_details, get_user_details, list_all_product_types, modify_pending_order_address,
    modify_pending_order_items, modify_pending_order_payment, modify_user_address, return_delivered_order_items,
    think, transfer_to_human_agents,
]
