"""How a τ²-bench telecom task breaks the world before the conversation, and what it checks at the end.

A task's ``initialization_actions`` name functions of either side (``env_type`` ``user``: the phone,
``assistant``: the carrier's records) that no party can call as a tool: put the user's SIM out, turn data off,
suspend their line for an unpaid bill... Its ``env_assertions`` name read-only checks of the final state (can
the phone send an MMS, is the speed excellent, was 2 GB refuelled) and the value each must return. Both are
looked up by name here; an unknown name is a data error, never silently skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from muarl.domains.base import State, ToolError
from muarl.domains.tau.telecom import user_tools as ut
from muarl.domains.tau.telecom.agent_tools import TODAY, owned_line
from muarl.domains.tau.telecom.phone import (
    PHONE,
    VPN_SERVER,
    can_send_mms,
    device,
    device_to_change,
    mobile_data_works,
    search_network,
    speed_test,
    surroundings,
)


def set_user_info(state: State, name: str, phone_number: str) -> None:
    state.edit(PHONE, "surroundings").update(name=name, phone_number=phone_number)


def set_user_location(state: State, abroad: bool) -> None:
    state.edit(PHONE, "surroundings")["is_abroad"] = abroad


def _toggle_until(state: State, toggle: Callable[[State, dict], None], key: str, wanted: bool) -> None:
    """Toggle a setting, and toggle again if that did not give ``wanted`` (τ² sets these by toggling, so turning on
    what is already on goes off and on again, with both toggles' side effects)."""
    toggle(state, device_to_change(state)[0])
    if device(state)[key] != wanted:
        toggle(state, device_to_change(state)[0])


def _airplane(state: State, dev: dict) -> None:
    ut.flip_airplane_mode(dev, surroundings(state))


def _data(state: State, dev: dict) -> None:
    dev["data_enabled"] = not dev["data_enabled"]
    search_network(dev, surroundings(state))


def _roaming(state: State, dev: dict) -> None:
    dev["roaming_enabled"] = not dev["roaming_enabled"]
    search_network(dev, surroundings(state))


def _data_saver(state: State, dev: dict) -> None:
    dev["data_saver_mode"] = not dev["data_saver_mode"]


def simulate_network_search(state: State) -> None:
    search_network(*device_to_change(state))


def unseat_sim_card(state: State) -> None:
    dev, sur = device_to_change(state)
    dev["sim_card_missing"] = True
    search_network(dev, sur)


def lock_sim_card(state: State, mode: str) -> None:
    dev, sur = device_to_change(state)
    dev["sim_card_status"] = {"pin": "locked_pin", "puk": "locked_puk"}[mode]
    search_network(dev, sur)


def break_apn_settings(state: State) -> None:
    dev, sur = device_to_change(state)
    dev["active_apn_settings"]["apn_name"] = "broken"
    search_network(dev, sur)


def break_apn_mms_setting(state: State) -> None:
    device_to_change(state)[0]["active_apn_settings"]["mmsc_url"] = None


def break_vpn(state: State) -> None:
    """Connect the VPN and make its server poor: the server every later connection of the episode gets too."""
    ut.connect_vpn(state)
    device_to_change(state)[0]["vpn_details"]["server_performance"] = "poor"
    state.edit(PHONE, VPN_SERVER)["server_performance"] = "poor"


def remove_app_permission(state: State, app_name: str, permission: str) -> None:
    app = device_to_change(state)[0]["app_statuses"][app_name]
    app["permissions"][permission.lower()] = False


def set_network_mode_preference(state: State, mode: str) -> None:
    ut.set_network_mode_preference(state, mode=mode)


def set_wifi_calling(state: State, enabled: bool, mms_over_wifi: bool | None = None) -> None:
    dev = device_to_change(state)[0]
    dev["wifi_calling_enabled"] = enabled
    if mms_over_wifi is not None:
        dev["wifi_calling_mms_over_wifi"] = mms_over_wifi


def set_data_usage(state: State, customer_id: str, line_id: str, data_used_gb: float) -> None:
    owned_line(state, customer_id, line_id)
    state.edit("lines", line_id)["data_used_gb"] = data_used_gb


def _roaming_on_line(on: bool) -> Callable[..., None]:
    def set_roaming(state: State, customer_id: str, line_id: str) -> None:
        owned_line(state, customer_id, line_id)
        state.edit("lines", line_id)["roaming_enabled"] = on

    return set_roaming


def suspend_line_for_overdue_bill(state: State, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool) -> None:
    """Last month's plan charge becomes an overdue bill and the line is suspended for it."""
    line = state.get("lines", line_id)
    if line is None or line["status"] != "Active":
        raise ValueError(f"line {line_id} must be active to be suspended for an unpaid bill")
    price = state.get("plans", line["plan_id"])["price_per_month"]
    customer = state.get("customers", customer_id)
    if any(state.get("bills", b, {}).get("status") == "Overdue" for b in customer["bill_ids"]):
        raise ValueError(f"customer {customer_id} already has an overdue bill")
    last_day = TODAY.replace(day=1) - dt.timedelta(days=1)
    first_day = last_day.replace(day=1)
    state.put("bills", new_bill_id, {
        "bill_id": new_bill_id, "customer_id": customer_id, "period_start": first_day.isoformat(), "period_end": last_day.isoformat(),
        "issue_date": first_day.isoformat(), "total_due": price, "due_date": first_day.replace(day=15).isoformat(),
        "line_items": [{"description": f"Charge for line {line_id}", "amount": price, "date": TODAY.isoformat(), "item_type": "Charge"}],
        "status": "Overdue",
    })
    state.edit("customers", customer_id)["bill_ids"].append(new_bill_id)
    line = state.edit("lines", line_id)
    line.update(status="Suspended", suspension_start_date=TODAY.isoformat())
    if contract_ended:
        line["contract_end_date"] = last_day.isoformat()


SETUP: dict[str, dict[str, Callable[..., None]]] = {
    "user": {
        "set_user_info": set_user_info,
        "set_user_location": set_user_location,
        "turn_airplane_mode_on": lambda s: _toggle_until(s, _airplane, "airplane_mode", True),
        "turn_airplane_mode_off": lambda s: _toggle_until(s, _airplane, "airplane_mode", False),
        "turn_data_off": lambda s: _toggle_until(s, _data, "data_enabled", False),
        "turn_data_on": lambda s: device_to_change(s)[0].update(data_enabled=True),
        "turn_roaming_on": lambda s: _toggle_until(s, _roaming, "roaming_enabled", True),
        "turn_roaming_off": lambda s: _toggle_until(s, _roaming, "roaming_enabled", False),
        "turn_data_saver_mode_on": lambda s: _toggle_until(s, _data_saver, "data_saver_mode", True),
        "turn_data_saver_mode_off": lambda s: _toggle_until(s, _data_saver, "data_saver_mode", False),
        "simulate_network_search": simulate_network_search,
        "unseat_sim_card": unseat_sim_card,
        "lock_sim_card": lock_sim_card,
        "break_apn_settings": break_apn_settings,
        "break_apn_mms_setting": break_apn_mms_setting,
        "break_vpn": break_vpn,
        "remove_app_permission": remove_app_permission,
        "set_network_mode_preference": set_network_mode_preference,
        "set_wifi_calling": set_wifi_calling,
    },
    "assistant": {
        "set_data_usage": set_data_usage,
        "enable_roaming": _roaming_on_line(True),
        "disable_roaming": _roaming_on_line(False),
        "suspend_line_for_overdue_bill": suspend_line_for_overdue_bill,
    },
}


def _speed_at_least(state: State, expected_speed: float, expected_desc: str | None = None) -> bool:
    speed, band = speed_test(device(state), surroundings(state))
    return (speed or 0.0) >= expected_speed and (expected_desc is None or band.lower() == expected_desc.lower())


def _no_overdue_bill(state: State, overdue_bill_id: str) -> bool:
    bill = state.get("bills", overdue_bill_id)
    return bill is None or bill["status"] == "Paid"


ASSERTIONS: dict[str, dict[str, Callable[..., bool]]] = {
    "user": {
        "assert_airplane_mode_status": lambda s, expected_status: device(s)["airplane_mode"] == expected_status,
        "assert_service_status": lambda s, expected_status: device(s)["network_connection_status"] == expected_status,
        "assert_mobile_data_status": lambda s, expected_status: mobile_data_works(device(s), surroundings(s)) == expected_status,
        "assert_mobile_roaming_status": lambda s, expected_status: device(s)["roaming_enabled"] == expected_status,
        "assert_mobile_data_saver_mode_status": lambda s, expected_status: device(s)["data_saver_mode"] == expected_status,
        "assert_internet_speed": _speed_at_least,
        "assert_internet_not_excellent": lambda s: speed_test(device(s), surroundings(s))[1].lower() != "excellent",
        "assert_can_send_mms": lambda s, expected_status: can_send_mms(device(s), surroundings(s)) == expected_status,
        "assert_mobile_data_usage_exceeded": lambda s, expected_status: surroundings(s)["mobile_data_usage_exceeded"] == expected_status,
    },
    "assistant": {
        "assert_data_refueling_amount": lambda s, customer_id, line_id, expected_amount:
            abs(owned_line(s, customer_id, line_id)["data_refueling_gb"] - expected_amount) < 1e-6,
        "assert_line_status": lambda s, customer_id, line_id, expected_status: owned_line(s, customer_id, line_id)["status"] == expected_status,
        "assert_no_overdue_bill": _no_overdue_bill,
    },
}


def lookup(table: dict[str, dict[str, Callable[..., Any]]], call: dict[str, Any], what: str) -> Callable[..., Any]:
    """The function a task's ``{env_type, func_name}`` names; ValueError for a name this world does not have."""
    fn = table.get(call.get("env_type", ""), {}).get(call.get("func_name", ""))
    if fn is None:
        raise ValueError(f"unknown telecom {what} {call.get('env_type')}.{call.get('func_name')}")
    return fn


def holds(state: State, assertion: dict[str, Any]) -> bool:
    """Whether an env assertion gives its expected value; a check that cannot run (an unknown line) fails."""
    check = lookup(ASSERTIONS, assertion, "assertion")
    try:
        value = check(state, **assertion.get("arguments", {}))
    except (ToolError, KeyError, TypeError, ValueError):
        return False
    return value == assertion.get("assert_value", True)
