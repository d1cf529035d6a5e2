"""The user's phone in τ²-bench telecom: its settings, and what they mean for service, data and MMS.

The phone is three records of the state's ``phone`` table: ``device`` (the settings the user can see and change:
airplane mode, SIM, mobile data, roaming, network mode, APN, Wi-Fi, VPN, app permissions...),
``surroundings`` (what the user cannot change: where they are, the signal each network technology has there,
and what the carrier's records say about their line, which :func:`sync_with_carrier` copies in after every
call), and ``vpn_server`` (the VPN that ``connect_vpn`` connects to: τ² hands every connection its one default
details object, so when the broken-VPN set-up makes the connected server poor, a VPN the user reconnects is poor
too). The rules below are τ²'s: which network the phone finds when it searches, whether mobile data works, how
fast a speed test runs, whether an MMS can be sent. They are pure functions of the two records, so the
assertions a task makes at the end (:mod:`.checks`) and the tools the user calls (:mod:`.user_tools`) read the
same answer.
"""

from __future__ import annotations

from typing import Any

from muarl.domains.base import State

PHONE = "phone"

APN_DEFAULTS: dict[str, Any] = {
    "apn_name": "internet", "reset_at_reboot": False, "mms_apn": "mms", "mmsc_url": "http://mms.carrier.com/mms/wapenc",
    "mms_proxy": None, "mms_port": None,
}
APN_NAMES = ("internet", "broken")

DEVICE_DEFAULTS: dict[str, Any] = {
    "sim_card_status": "active", "sim_card_missing": False, "airplane_mode": False, "network_signal_strength": "good",
    "network_technology_connected": "5G", "network_connection_status": "connected", "battery_level": 80,
    "data_enabled": True, "roaming_enabled": False, "network_mode_preference": "4g_5g_preferred",
    "active_apn_settings": APN_DEFAULTS, "wifi_enabled": False, "wifi_connected": False, "wifi_ssid": None,
    "wifi_signal_strength": "none", "wifi_calling_enabled": False, "wifi_calling_mms_over_wifi": False,
    "data_saver_mode": False, "vpn_enabled_setting": False, "vpn_connected": False, "vpn_details": None,
    "app_statuses": {
        "messaging": {"app_name": "messaging", "permissions": {"sms": True, "storage": True, "phone": True, "network": False}},
        "browser": {"app_name": "browser", "permissions": {"sms": False, "storage": True, "phone": False, "network": True}},
    },
}

SURROUNDINGS_DEFAULTS: dict[str, Any] = {
    "name": None, "phone_number": None, "is_abroad": False, "roaming_allowed": False,
    "signal_strength": {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"},
    "mobile_data_usage_exceeded": False, "line_active": True, "payment_request": None,
}

NETWORK_MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
_MODE_TECHNOLOGY = {"4g_only": "4G", "3g_only": "3G", "2g_only": "2G"}
VPN_SERVER = "vpn_server"
VPN_DEFAULT_DETAILS = {"server_address": "192.168.1.1", "protocol": "OpenVPN", "server_performance": "excellent"}

# (lowest, highest) Mbps of each technology, and the share of it each signal strength gets
_TECH_SPEED = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0), "none": (0.0, 0.0)}
_SIGNAL_FACTOR = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0, "none": 0.0}
_SPEED_BANDS = ((1, "Very Poor"), (5, "Poor"), (25, "Fair"), (100, "Good"))


def merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` over ``defaults``, nested objects merged key by key (a user_db.toml lists only some settings)."""
    out = dict(defaults)
    for key, value in given.items():
        base = defaults.get(key)
        out[key] = merged(base, value) if isinstance(base, dict) and isinstance(value, dict) else value
    return out


def device(state: State) -> dict[str, Any]:
    return state.get(PHONE, "device")


def surroundings(state: State) -> dict[str, Any]:
    return state.get(PHONE, "surroundings")


def device_to_change(state: State) -> tuple[dict[str, Any], dict[str, Any]]:
    """The device record to change (a private copy) and the surroundings (read-only), for the user's tools and
    the tasks' set-up alike."""
    return state.edit(PHONE, "device"), surroundings(state)


def sim_status(dev: dict[str, Any]) -> str:
    return "missing" if dev["sim_card_missing"] else dev["sim_card_status"]


def _no_service(dev: dict[str, Any]) -> None:
    dev.update(network_connection_status="no_service", network_technology_connected="none", network_signal_strength="none")


def search_network(dev: dict[str, Any], sur: dict[str, Any]) -> None:
    """What the phone connects to after a search: the preferred technology's signal where the user is, or no
    service without a working SIM, in airplane mode, with a broken APN or on a line the carrier does not serve."""
    if sim_status(dev) == "active":
        signals = sur["signal_strength"]
        mode = dev["network_mode_preference"]
        if mode == "4g_5g_preferred":
            tech = "4G" if signals.get("5G", "none") == "none" else "5G"
        else:
            tech = _MODE_TECHNOLOGY.get(mode, "4G")
        dev.update(network_connection_status="connected", network_technology_connected=tech,
                   network_signal_strength=signals.get(tech, "none"))
    else:
        _no_service(dev)
    if dev["airplane_mode"] or dev["active_apn_settings"]["apn_name"] == "broken" or not sur["line_active"]:
        _no_service(dev)


def mobile_data_works(dev: dict[str, Any], sur: dict[str, Any]) -> bool:
    if dev["airplane_mode"] or dev["network_signal_strength"] == "none" or dev["network_connection_status"] == "no_service":
        return False
    if sur["is_abroad"] and not (dev["roaming_enabled"] and sur["roaming_allowed"]):
        return False
    return dev["data_enabled"] and not sur["mobile_data_usage_exceeded"]


def speed_test(dev: dict[str, Any], sur: dict[str, Any]) -> tuple[float | None, str]:
    """(Mbps, band) of a speed test; (None, "No Connection") without working mobile data. A slow VPN server keeps
    a tenth of the speed, data saver a fifth; the technology's mid-range speed is scaled by the signal."""
    if not mobile_data_works(dev, sur):
        return None, "No Connection"
    factor = 1.0
    details = dev["vpn_details"]
    if dev["vpn_connected"] and details and details.get("server_performance") == "poor":
        factor = 0.1
    if dev["data_saver_mode"]:
        factor *= 0.2
    low, high = _TECH_SPEED.get(dev["network_technology_connected"], (0.0, 0.0))
    speed = round((low + high) / 2.0 * _SIGNAL_FACTOR.get(dev["network_signal_strength"], 0.0) * factor, 2)
    band = next((name for limit, name in _SPEED_BANDS if speed < limit), "Excellent")
    return speed, band


def can_send_mms(dev: dict[str, Any], sur: dict[str, Any]) -> bool:
    """MMS needs working mobile data on 3G or better, no MMS-over-Wi-Fi (the carrier does not carry it), an MMSC
    address in the APN, and a messaging app allowed to use SMS and storage."""
    if not mobile_data_works(dev, sur) or dev["network_technology_connected"] == "2G":
        return False
    if dev["wifi_calling_enabled"] and dev["wifi_calling_mms_over_wifi"]:
        return False
    if dev["active_apn_settings"]["mmsc_url"] is None:
        return False
    app = dev["app_statuses"].get("messaging")
    return bool(app and app["permissions"].get("storage") and app["permissions"].get("sms"))


_SIGNAL_ICON = {"none": "no signal", "poor": "signal 1/4 (poor)", "fair": "signal 2/4 (fair)", "good": "signal 3/4 (good)",
                "excellent": "signal 4/4 (excellent)"}


def status_bar(dev: dict[str, Any]) -> str:
    """The icons at the top of the screen, as text."""
    parts = []
    if dev["airplane_mode"]:
        parts.append("airplane mode")
    else:
        parts.append(_SIGNAL_ICON.get(dev["network_signal_strength"], "no signal"))
        connected = dev["network_technology_connected"] != "none"
        if connected:
            parts.append(dev["network_technology_connected"])
        if dev["data_enabled"] and connected:
            parts.append("mobile data on")
            if dev["data_saver_mode"]:
                parts.append("data saver")
        else:
            parts.append("mobile data off")
    if dev["wifi_enabled"] and dev["wifi_connected"]:
        parts.append(f"Wi-Fi: {dev['wifi_ssid']}" if dev["wifi_ssid"] else "Wi-Fi on")
    if dev["vpn_connected"]:
        parts.append("VPN")
    parts.append(f"battery {dev['battery_level']}%")
    return "Status bar: " + " | ".join(parts)


# ---------------------------------------------------------------- the carrier's side


def line_by_phone(state: State, phone_number: str) -> dict[str, Any] | None:
    return next((line for line in state.table("lines").values() if line["phone_number"] == phone_number), None)


def customer_by_phone(state: State, phone_number: str) -> dict[str, Any] | None:
    """The customer whose contact number, or one of whose lines, is ``phone_number`` (the first, in table order)."""
    lines = state.table("lines")
    for customer in state.table("customers").values():
        if customer["phone_number"] == phone_number:
            return customer
        if any(lines.get(lid, {}).get("phone_number") == phone_number for lid in customer["line_ids"]):
            return customer
    return None


def bills_awaiting_payment(state: State, customer: dict[str, Any]) -> list[dict[str, Any]]:
    bills = state.table("bills")
    return [bills[b] for b in customer["bill_ids"] if b in bills and bills[b]["status"] == "Awaiting Payment"]


def sync_with_carrier(state: State) -> None:
    """Bring the phone's surroundings in line with the carrier's records, as τ² does after every step: whether
    the line is active, roaming allowed and the data allowance used up; a payment the user made marks its bill
    paid; a bill awaiting payment shows up on the phone as a payment request. Does nothing before the task has
    said whose phone it is. The phone itself only notices at its next network search (a reboot, a toggle)."""
    sur = surroundings(state)
    number = sur["phone_number"]
    if number is None:
        return
    line = line_by_phone(state, number)
    if line is None:
        raise ValueError(f"no line has the user's phone number {number}")
    plan = state.get("plans", line["plan_id"])
    if plan is None:
        raise ValueError(f"line {line['line_id']} has an unknown plan {line['plan_id']}")
    wanted = {
        "line_active": line["status"] == "Active",
        "roaming_allowed": bool(line["roaming_enabled"]),
        "mobile_data_usage_exceeded": line["data_used_gb"] >= plan["data_limit_gb"] + line["data_refueling_gb"],
    }
    request = sur["payment_request"]
    if request is not None and request["paid"]:
        state.edit("bills", request["bill_id"])["status"] = "Paid"
        request = wanted["payment_request"] = None
    if request is None:
        customer = customer_by_phone(state, number)
        awaiting = bills_awaiting_payment(state, customer) if customer else []
        if awaiting:
            wanted["payment_request"] = {"bill_id": awaiting[0]["bill_id"], "amount_due": awaiting[0]["total_due"], "paid": False}
    if any(sur.get(k) != v for k, v in wanted.items()):
        state.edit(PHONE, "surroundings").update(wanted)
