"""ACEBench's phone scenario as muarl tools: the device, messages, reminders and a food-delivery platform.

Each tool behaves as the scenario's API does in ACEBench: a refusal is a result (``{"status": False,
"message": ...}``) the agent reads, not an error, and changes nothing; what the agent can change is what the
benchmark scores (the device flags, the inbox, the reminders, the food accounts, logins and orders). The state
is a set of copy-on-write tables (:class:`muarl.domains.base.State`):

* ``device``: ``wifi`` and ``logged_in`` (one phone: every app sees the same flags);
* ``contacts``, ``inbox`` (message id -> message), ``reminders`` (id -> reminder), ``counters`` (the last
  message and reminder ids);
* ``food_users`` (name -> account), ``merchants``, ``food_logins`` (``users``: names logged in, in order),
  ``orders`` (``"0"``, ``"1"``...: orders in the order they were placed).

:data:`CLASS_VIEWS` gives the state as ACEBench's checker sees it: each scenario class's saved attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypedDict

from muarl.domains.acebench import phone_data
from muarl.domains.base import State, ToolError, ToolRegistry, tool

Result = dict[str, Any]


def tables() -> dict[str, dict[str, Any]]:
    return {
        "device": {"wifi": False, "logged_in": True},
        "contacts": phone_data.CONTACTS,
        "inbox": phone_data.INBOX,
        "reminders": phone_data.REMINDERS,
        "counters": {"message": len(phone_data.INBOX), "reminder": len(phone_data.REMINDERS)},
        "food_users": phone_data.FOOD_USERS,
        "merchants": phone_data.MERCHANTS,
        "food_logins": {"users": []},
        "orders": {},
    }


def start(state: State, config: dict[str, Any]) -> None:
    """Apply a task's initial configuration. Only the device flags are configurable (``BaseApi``): ACEBench loads
    the base configuration into every app last, so an app's own settings (a food platform's logins) never last."""
    device = config.get("BaseApi", {})
    for flag, default in (("wifi", False), ("logged_in", True)):
        if state.get("device", flag) != device.get(flag, default):
            state.put("device", flag, device.get(flag, default))


def _refuse(message: str) -> Result:
    return {"status": False, "message": message}


def _next_id(state: State, counter: str) -> str:
    value = state.get("counters", counter) + 1
    state.put("counters", counter, value)
    return str(value)


# ---------------------------------------------------------------- device


@tool("write")
def turn_on_wifi(state: State) -> Result:
    """Turn on WiFi connection."""
    state.put("device", "wifi", True)
    return {"status": True, "message": "Wi-Fi has been turned on"}


@tool("write")
def login_device(state: State) -> Result:
    """Log in to the device."""
    state.put("device", "logged_in", True)
    return {"status": True, "message": "Device has been logged in"}


# ---------------------------------------------------------------- messages


@tool("write")
def send_message(state: State, sender_name: str, receiver_name: str, message: str) -> Result:
    """Send a message from one user to another.

    Args:
        sender_name: The name of the user sending the message.
        receiver_name: The name of the user receiving the message.
        message: The content of the message to be sent.
    """
    if not state.get("device", "logged_in"):
        return _refuse("Device not logged in, unable to send message")
    if not state.get("device", "wifi"):
        return _refuse("Wi-Fi is turned off, cannot send messages at this time")
    if len(state.table("inbox")) >= phone_data.MESSAGE_CAPACITY:
        return _refuse("Inbox capacity is full. You need to ask the user which message to delete.")
    contacts = state.table("contacts")
    if sender_name not in contacts or receiver_name not in contacts:
        return _refuse("Sender or receiver does not exist")
    state.put("inbox", _next_id(state, "message"), {
        "sender_id": contacts[sender_name]["user_id"], "receiver_id": contacts[receiver_name]["user_id"], "message": message})
    return {"status": True, "message": f"Message successfully sent to {receiver_name}."}


@tool("write")
def delete_message(state: State, message_id: int) -> Result:
    """Delete a message by its ID.

    Args:
        message_id: The ID of the message to be deleted.
    """
    if not state.get("device", "logged_in"):
        return _refuse("Device not logged in, unable to delete message")
    if str(message_id) not in state.table("inbox"):
        return _refuse("Message ID does not exist")
    state.delete("inbox", str(message_id))
    return {"status": True, "message": f"Message ID {message_id} has been successfully deleted."}


@tool("read")
def view_messages_between_users(state: State, sender_name: str, receiver_name: str) -> Result:
    """Get all the messages sent from one user to another.

    Args:
        sender_name: The name of the user sending the messages.
        receiver_name: The name of the user receiving the messages.
    """
    if not state.get("device", "logged_in"):
        return _refuse("Device not logged in, unable to view message information")
    contacts = state.table("contacts")
    if sender_name not in contacts:
        return _refuse("Sender does not exist")
    if receiver_name not in contacts:
        return _refuse("Receiver does not exist")
    sender, receiver = contacts[sender_name]["user_id"], contacts[receiver_name]["user_id"]
    found = [{"id": int(i), "sender": sender_name, "receiver": receiver_name, "message": m["message"]}
             for i, m in state.table("inbox").items() if m["sender_id"] == sender and m["receiver_id"] == receiver]
    return {"status": True, "messages": found} if found else _refuse("No related message records found")


@tool("read")
def search_messages(state: State, user_name: str, keyword: str) -> Result:
    """Search the messages a user sent or received for a keyword.

    Args:
        user_name: The name of the user whose messages are being searched.
        keyword: The keyword to look for in the messages.
    """
    contacts = state.table("contacts")
    if user_name not in contacts:
        return _refuse("User does not exist")
    user = contacts[user_name]["user_id"]
    found = [{"id": int(i), "sender_id": m["sender_id"], "receiver_id": m["receiver_id"], "message": m["message"]}
             for i, m in state.table("inbox").items()
             if user in (m["sender_id"], m["receiver_id"]) and keyword.lower() in m["message"].lower()]
    return {"status": True, "messages": found} if found else _refuse("No messages found containing the keyword")


def _dated_message(state: State, latest: bool) -> Result:
    """The id of the latest (or earliest) message by date; a message sent during the episode has no date, and
    asking then fails as in ACEBench."""
    which = "latest" if latest else "earliest"
    if not state.get("device", "logged_in"):
        return _refuse(f"Device not logged in, unable to retrieve the {which} sent message ID.")
    if not state.table("inbox"):
        return _refuse("No message records found")
    best_id, best_time = None, None
    for message_id, message in state.table("inbox").items():
        if "time" not in message:
            raise ToolError("'time'")
        when = datetime.strptime(message["time"], "%Y-%m-%d")
        if best_time is None or (when > best_time if latest else when < best_time):
            best_id, best_time = int(message_id), when
    return {"status": True, "message": f"The {which} message ID is {best_id}", "message_id": best_id}


@tool("read")
def get_latest_message_id(state: State) -> Result:
    """Get the ID of the most recently sent message."""
    return _dated_message(state, latest=True)


@tool("read")
def get_earliest_message_id(state: State) -> Result:
    """Get the ID of the earliest sent message."""
    return _dated_message(state, latest=False)


# ---------------------------------------------------------------- reminders


@tool("write")
def add_reminder(state: State, title: str, description: str, time: str) -> Result:
    """Add a new reminder.

    Args:
        title: The title of the reminder.
        description: The description of the reminder.
        time: The time of the reminder, as 'YYYY-MM-DD HH:MM'.
    """
    if not state.get("device", "logged_in"):
        return _refuse("Device not logged in. Unable to add a new reminder.")
    if len(state.table("reminders")) >= phone_data.REMINDER_CAPACITY:
        return _refuse("Reminder capacity is full. Unable to add a new reminder.")
    reminder_id = _next_id(state, "reminder")
    state.put("reminders", reminder_id, {"reminder_id": int(reminder_id), "title": title, "description": description, "time": time, "notified": False})
    return {"status": True, "message": f"Reminder '{title}' was successfully added."}


@tool("read")
def view_reminder_by_title(state: State, title: str) -> Result:
    """View a reminder by its title.

    Args:
        title: The title of the reminder to view.
    """
    if not state.get("device", "logged_in"):
        return _refuse("The device is not logged in, so you cannot view notifications")
    for reminder in state.table("reminders").values():
        if reminder["title"] == title:
            return {"status": True, "reminder": reminder}
    return _refuse(f"No reminder found with the title '{title}'.")


# ---------------------------------------------------------------- food delivery


class OrderItem(TypedDict, total=False):
    """One line of an order.

    Attributes:
        product: The product's name, as on the merchant's menu.
        quantity: How many (default 1).
    """

    product: str
    quantity: int


@tool("write")
def login_food_platform(state: State, username: str, password: str) -> Result:
    """Log a user in to the food delivery platform.

    Args:
        username: The user's username.
        password: The user's password.
    """
    if not state.get("device", "wifi"):
        return _refuse("Wi-Fi is not enabled, unable to login")
    account = state.get("food_users", username)
    if account is None:
        return _refuse("User does not exist")
    if account["password"] != password:
        return _refuse("Incorrect password")
    logged_in = state.get("food_logins", "users")
    if username in logged_in:
        return _refuse(f"{username} is already logged in")
    state.put("food_logins", "users", [*logged_in, username])
    return {"status": True, "message": f"User {username} has successfully logged in!"}


@tool("read")
def check_balance(state: State, user_name: str) -> float:
    """Check a food-platform user's balance.

    Args:
        user_name: The user's username.
    """
    account = state.get("food_users", user_name)
    return account["balance"] if account else 0.0


@tool("write")
def add_food_delivery_order(state: State, username: str, merchant_name: str, items: list[OrderItem]) -> Result:
    """Place a food delivery order for a logged-in user; the total is paid from their balance.

    Args:
        username: The name of the user placing the order.
        merchant_name: The name of the merchant.
        items: The products and quantities to order.
    """
    if username not in state.get("food_logins", "users"):
        return _refuse(f"User {username} is not logged in to the food platform")
    merchant = state.get("merchants", merchant_name)
    if merchant is None:
        return _refuse("Merchant does not exist")
    total, lines = 0.0, []
    for item in items:
        product, quantity = item.get("product"), item.get("quantity", 1)
        if not isinstance(quantity, int) or quantity <= 0:
            return _refuse(f"Invalid quantity {quantity} for product {product}")
        price = next((p["price"] for p in merchant["menu"] if p["product"] == product), None)
        if price is None:
            return _refuse(f"Product {product} does not exist in {merchant_name}'s menu")
        total += price * quantity
        lines.append({"product": product, "quantity": quantity, "price_per_unit": price})
    if total > state.get("food_users", username)["balance"]:
        return _refuse("Insufficient balance to place the order")
    state.edit("food_users", username)["balance"] -= total
    state.put("orders", str(len(state.table("orders"))), {"user_name": username, "merchant_name": merchant_name, "items": lines, "total_price": total})
    return {"status": True, "message": f"Food delivery order successfully placed with {merchant_name}. Total amount: {total} yuan"}


@tool("read")
def get_products(state: State, merchant_name: str) -> Any:
    """Get the products (menu) of a merchant.

    Args:
        merchant_name: The name of the merchant.
    """
    merchant = state.get("merchants", merchant_name)
    return merchant["menu"] if merchant else _refuse(f"Merchant '{merchant_name}' does not exist")


def tools() -> ToolRegistry:
    return ToolRegistry.from_functions([
        turn_on_wifi, login_device, send_message, delete_message, view_messages_between_users, search_messages, get_latest_message_id,
        get_earliest_message_id, add_reminder, view_reminder_by_title, login_food_platform, check_balance, add_food_delivery_order, get_products,
    ])


CLASS_VIEWS: dict[str, Callable[[State], dict[str, Any]]] = {
    "BaseApi": lambda state: {"wifi": state.get("device", "wifi"), "logged_in": state.get("device", "logged_in")},
    "MessageApi": lambda state: {"inbox": dict(state.table("inbox"))},
    "ReminderApi": lambda state: {"reminder_list": dict(state.table("reminders"))},
    "FoodPlatform": lambda state: {"users": dict(state.table("food_users")), "logged_in_users": list(state.get("food_logins", "users")),
                                   "orders": list(state.table("orders").values())},
}
