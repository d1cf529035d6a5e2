"""The 30 tools the user has in τ²-bench telecom: looking at and changing their own phone.

The simulated user calls them inside its turn (the agent cannot: it can only ask the user to). Each works on
the state's ``phone`` records through the rules of :mod:`.phone`; a change that makes the phone search for a
network again (airplane mode, SIM, mobile data, roaming, network mode, APN, reboot) re-runs that search. Most
changes end with the status bar, so the user can tell the agent what the phone now shows. Outputs are in our
own words; what they report and what they change follow τ².
"""

from __future__ import annotations

from typing import Any

from muarl.domains.base import State, ToolError, tool
from muarl.domains.tau.telecom.phone import (
    APN_DEFAULTS,
    APN_NAMES,
    NETWORK_MODES,
    PHONE,
    VPN_SERVER,
    can_send_mms as mms_possible,
    device,
    device_to_change,
    merged,
    search_network,
    sim_status,
    speed_test,
    status_bar,
    surroundings,
)


def _on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


@tool(kind="read")
def check_status_bar(state: State) -> str:
    """Look at the status bar at the top of your phone's screen: signal, network type, mobile data, data saver,
    Wi-Fi, VPN and battery."""
    return status_bar(device(state))


@tool(kind="read")
def check_network_status(state: State) -> str:
    """See your phone's connection details: airplane mode, SIM, cellular connection, signal and network type,
    whether mobile data and data roaming are on, and Wi-Fi."""
    dev = device(state)
    lines = [
        f"Airplane mode: {_on_off(dev['airplane_mode'])}",
        f"SIM: {sim_status(dev)}",
        f"Cellular connection: {dev['network_connection_status']}",
        f"Signal: {dev['network_signal_strength']}",
        f"Network type: {dev['network_technology_connected']}",
        f"Mobile data: {_on_off(dev['data_enabled'])}",
        f"Data roaming: {_on_off(dev['roaming_enabled'])}",
        f"Wi-Fi: {_on_off(dev['wifi_enabled'])}, {'connected to ' + str(dev['wifi_ssid']) if dev['wifi_connected'] else 'not connected'}",
    ]
    return "\n".join(lines)


@tool(kind="read")
def check_network_mode_preference(state: State) -> str:
    """See which kind of cellular network your phone prefers (for example 4G/5G, or 3G only)."""
    return f"Preferred network mode: {device(state)['network_mode_preference']}"


@tool(kind="write")
def set_network_mode_preference(state: State, mode: str) -> str:
    """Choose which kind of cellular network your phone prefers; faster networks (4G/5G) give faster data.

    Args:
        mode: One of '4g_5g_preferred', '4g_only', '3g_only', '2g_only'.
    """
    if mode not in NETWORK_MODES:
        return f"Could not set the network mode: {mode!r} is not one of {', '.join(NETWORK_MODES)}.\n{status_bar(device(state))}"
    dev, sur = device_to_change(state)
    dev["network_mode_preference"] = mode
    search_network(dev, sur)
    return f"Preferred network mode is now {mode}.\n{status_bar(dev)}"


@tool(kind="read")
def run_speed_test(state: State) -> str:
    """Measure your mobile internet download speed."""
    speed, band = speed_test(device(state), surroundings(state))
    if speed is None:
        return f"Speed test failed: {band.lower()}."
    return f"Speed test: {speed:.2f} Mbps ({band})."


@tool(kind="write")
def toggle_airplane_mode(state: State) -> str:
    """Turn airplane mode on or off. When on, every radio is off: no cellular network, no Wi-Fi."""
    dev, sur = device_to_change(state)
    flip_airplane_mode(dev, sur)
    return f"Airplane mode is now {_on_off(dev['airplane_mode'])}.\n{status_bar(dev)}"


def flip_airplane_mode(dev: dict[str, Any], sur: dict[str, Any]) -> None:
    """Airplane mode on drops Wi-Fi and the VPN; off starts a search (Wi-Fi must reconnect itself)."""
    was_on = dev["airplane_mode"]
    dev["airplane_mode"] = not was_on
    if was_on:
        dev["network_connection_status"] = "searching"
    if not was_on or dev["wifi_enabled"]:
        dev.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")
    if not was_on and dev["vpn_connected"]:
        dev.update(vpn_connected=False, vpn_details=None)
    search_network(dev, sur)


@tool(kind="read")
def check_sim_status(state: State) -> str:
    """See whether your SIM card works, is missing, or is locked by a PIN or PUK code."""
    return {
        "active": "The SIM card is active and working.",
        "missing": "No SIM card is detected.",
        "locked_pin": "The SIM card is locked: it asks for its PIN code.",
        "locked_puk": "The SIM card is locked: it asks for its PUK code.",
    }.get(sim_status(device(state)), f"SIM card status: {sim_status(device(state))}")


@tool(kind="write")
def reseat_sim_card(state: State) -> str:
    """Take the SIM card out and put it back in; this can fix a SIM the phone does not detect."""
    dev, sur = device_to_change(state)
    dev["sim_card_missing"] = False
    search_network(dev, sur)
    return f"The SIM card was taken out and put back in.\n{status_bar(dev)}"


@tool(kind="write")
def toggle_data(state: State) -> str:
    """Turn mobile data on or off (internet over the cellular network when there is no Wi-Fi)."""
    dev, sur = device_to_change(state)
    dev["data_enabled"] = not dev["data_enabled"]
    search_network(dev, sur)
    return f"Mobile data is now {_on_off(dev['data_enabled'])}.\n{status_bar(dev)}"


@tool(kind="write")
def toggle_roaming(state: State) -> str:
    """Turn data roaming on or off (mobile data on other carriers' networks, such as abroad)."""
    dev, sur = device_to_change(state)
    dev["roaming_enabled"] = not dev["roaming_enabled"]
    search_network(dev, sur)
    return f"Data roaming is now {_on_off(dev['roaming_enabled'])}.\n{status_bar(dev)}"


@tool(kind="read")
def check_data_restriction_status(state: State) -> str:
    """See whether a data-limiting feature (data saver) is on."""
    return f"Data saver is {_on_off(device(state)['data_saver_mode'])}."


@tool(kind="write")
def toggle_data_saver_mode(state: State) -> str:
    """Turn data saver on or off. Data saver uses less data and makes mobile internet slower."""
    dev = state.edit(PHONE, "device")
    dev["data_saver_mode"] = not dev["data_saver_mode"]
    return f"Data saver is now {_on_off(dev['data_saver_mode'])}.\n{status_bar(dev)}"


@tool(kind="read")
def check_apn_settings(state: State) -> str:
    """See the APN settings your phone uses for mobile data and picture messages (MMS)."""
    apn = device(state)["active_apn_settings"]
    return f"APN name: {apn['apn_name'] or 'not set'}\nMMSC URL (picture messages): {apn['mmsc_url'] or 'not set'}"


@tool(kind="write")
def set_apn_settings(state: State, apn_settings: dict) -> str:
    """Replace the APN settings; fields left out take their default values.

    Args:
        apn_settings: The settings: apn_name ('internet' or 'broken'), reset_at_reboot, mms_apn, mmsc_url,
            mms_proxy, mms_port.
    """
    unknown = sorted(set(apn_settings) - set(APN_DEFAULTS))
    if unknown:
        raise ToolError(f"unknown APN setting(s) {unknown}; the settings are {sorted(APN_DEFAULTS)}")
    if apn_settings.get("apn_name", "internet") not in APN_NAMES:
        raise ToolError(f"apn_name must be one of {list(APN_NAMES)}")
    dev, sur = device_to_change(state)
    dev["active_apn_settings"] = merged(APN_DEFAULTS, apn_settings)
    search_network(dev, sur)
    return f"APN settings saved ({dev['active_apn_settings']['apn_name']}).\n{status_bar(dev)}"


@tool(kind="write")
def reset_apn_settings(state: State) -> str:
    """Reset the APN settings to the defaults; the reset happens at the next reboot."""
    dev, sur = device_to_change(state)
    dev["active_apn_settings"] = {**dev["active_apn_settings"], "reset_at_reboot": True}
    search_network(dev, sur)
    return f"The APN settings will be reset to the defaults when the phone restarts.\n{status_bar(dev)}"


@tool(kind="read")
def check_wifi_status(state: State) -> str:
    """See whether Wi-Fi is on, which network it is connected to and how strong it is."""
    dev = device(state)
    if not dev["wifi_enabled"]:
        return "Wi-Fi is OFF."
    if dev["wifi_connected"]:
        return f"Wi-Fi is ON, connected to '{dev['wifi_ssid']}' (signal {dev['wifi_signal_strength']})."
    return "Wi-Fi is ON but not connected to a network."


@tool(kind="write")
def toggle_wifi(state: State) -> str:
    """Turn the Wi-Fi radio on or off."""
    if device(state)["airplane_mode"]:
        return f"Wi-Fi cannot be changed while airplane mode is ON.\n{status_bar(device(state))}"
    dev = state.edit(PHONE, "device")
    dev["wifi_enabled"] = not dev["wifi_enabled"]
    if not dev["wifi_enabled"]:
        dev.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")
    return f"Wi-Fi is now {_on_off(dev['wifi_enabled'])}.\n{status_bar(dev)}"


@tool(kind="read")
def check_wifi_calling_status(state: State) -> str:
    """See whether Wi-Fi calling (calls over Wi-Fi instead of the cellular network) is on."""
    return f"Wi-Fi calling is {_on_off(device(state)['wifi_calling_enabled'])}."


@tool(kind="write")
def toggle_wifi_calling(state: State) -> str:
    """Turn Wi-Fi calling on or off."""
    dev = state.edit(PHONE, "device")
    dev["wifi_calling_enabled"] = not dev["wifi_calling_enabled"]
    return f"Wi-Fi calling is now {_on_off(dev['wifi_calling_enabled'])}.\n{status_bar(dev)}"


@tool(kind="read")
def check_vpn_status(state: State) -> str:
    """See whether a VPN is connected, and its details."""
    dev = device(state)
    if dev["vpn_connected"]:
        return f"A VPN is connected: {dev['vpn_details']}" if dev["vpn_details"] else "A VPN is connected."
    if dev["vpn_enabled_setting"]:
        return "A VPN is set up in the settings but not connected."
    return "No VPN is on."


@tool(kind="write")
def connect_vpn(state: State) -> str:
    """Connect your VPN."""
    if device(state)["vpn_connected"]:
        return "The VPN is already connected."
    dev = state.edit(PHONE, "device")
    dev.update(vpn_connected=True, vpn_details=dict(state.get(PHONE, VPN_SERVER)))
    return f"VPN connected.\n{status_bar(dev)}"


@tool(kind="write")
def disconnect_vpn(state: State) -> str:
    """Disconnect the VPN, so traffic no longer goes through a VPN server."""
    if not device(state)["vpn_connected"]:
        return f"No VPN is connected.\n{status_bar(device(state))}"
    dev = state.edit(PHONE, "device")
    dev.update(vpn_connected=False, vpn_details=None)
    return f"VPN disconnected.\n{status_bar(dev)}"


@tool(kind="read")
def check_installed_apps(state: State) -> str:
    """List the apps installed on your phone."""
    return "Installed apps: " + ", ".join(device(state)["app_statuses"])


def _granted(app: dict[str, Any]) -> list[str]:
    return [name for name, allowed in app["permissions"].items() if allowed]


@tool(kind="read")
def check_app_status(state: State, app_name: str) -> str:
    """See an app's details, such as the permissions it has.

    Args:
        app_name: The app's name, such as 'messaging'.
    """
    app = device(state)["app_statuses"].get(app_name)
    if app is None:
        return f"There is no app '{app_name}' on this phone."
    granted = _granted(app)
    return f"App {app_name}: permissions granted: {', '.join(granted) if granted else 'none'}."


@tool(kind="read")
def check_app_permissions(state: State, app_name: str) -> str:
    """See which permissions an app has (such as sms, storage, phone, network).

    Args:
        app_name: The app's name, such as 'messaging'.
    """
    app = device(state)["app_statuses"].get(app_name)
    if app is None:
        return f"There is no app '{app_name}' on this phone."
    granted = _granted(app)
    return f"App '{app_name}' may use: {', '.join(granted)}." if granted else f"App '{app_name}' has no permissions."


@tool(kind="write")
def grant_app_permission(state: State, app_name: str, permission: str) -> str:
    """Allow an app a permission it needs (such as sms or storage).

    Args:
        app_name: The app's name, such as 'messaging'.
        permission: The permission, in lower case, such as 'storage'.
    """
    apps = device(state)["app_statuses"]
    permission = permission.lower()
    if app_name not in apps:
        return f"Failed: there is no app '{app_name}' on this phone.\n{status_bar(device(state))}"
    if permission not in apps[app_name]["permissions"]:
        known = list(apps[app_name]["permissions"])
        return f"Failed: '{app_name}' has no permission '{permission}'; its permissions are {known}.\n{status_bar(device(state))}"
    dev = state.edit(PHONE, "device")
    dev["app_statuses"][app_name]["permissions"][permission] = True
    return f"Done: '{app_name}' may now use {permission}.\n{status_bar(dev)}"


@tool(kind="read")
def can_send_mms(state: State) -> str:
    """Check whether your messaging app can send picture messages (MMS)."""
    ok = mms_possible(device(state), surroundings(state))
    return "The messaging app can send MMS messages." if ok else "The messaging app cannot send MMS messages."


@tool(kind="write")
def reboot_device(state: State) -> str:
    """Restart your phone; this applies a pending APN reset and reconnects to the network."""
    dev, sur = device_to_change(state)
    notes = []
    if dev["active_apn_settings"]["reset_at_reboot"]:
        dev["active_apn_settings"] = dict(APN_DEFAULTS)
        notes.append("APN settings reset to the defaults.")
    dev["network_connection_status"] = "searching"
    search_network(dev, sur)
    return "\n".join(["The phone restarted.", *notes, status_bar(dev)])


@tool(kind="read")
def check_payment_request(state: State) -> str:
    """See whether the agent has sent you a request to pay a bill."""
    request = surroundings(state)["payment_request"]
    if request is None:
        return "There is no payment request."
    return f"Payment request: bill {request['bill_id']}, {request['amount_due']} USD."


@tool(kind="write")
def make_payment(state: State) -> str:
    """Pay the bill the agent sent you a payment request for."""
    if surroundings(state)["payment_request"] is None:
        return "There is no payment request to pay."
    request = state.edit(PHONE, "surroundings")["payment_request"]
    request["paid"] = True
    return f"Paid {request['amount_due']} USD for bill {request['bill_id']}."


USER_TOOLS = [
    check_status_bar, check_network_status, check_network_mode_preference, set_network_mode_preference, run_speed_test,
    toggle_airplane_mode, check_sim_status, reseat_sim_card, toggle_data, toggle_roaming, check_data_restriction_status,
    toggle_data_saver_mode, check_apn_settings, set_apn_settings, reset_apn_settings, check_wifi_status, toggle_wifi,
    check_wifi_calling_status, toggle_wifi_calling, check_vpn_status, connect_vpn, disconnect_vpn, check_installed_apps,
    check_app_status, check_app_permissions, grant_app_permission, can_send_mms, reboot_device, check_payment_request,
    make_payment,
]
