"""``muarl serve-mcp``'s protocol hygiene: an HTTP session left idle is closed and its state freed while a
live one keeps its state, and a request for a method MCP does not define gets JSON-RPC -32601."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import time
import weakref

import httpx
import pytest

pytest.importorskip("mcp")

from muarl.domains.base import State  # noqa: E402
from muarl.integrations.mcp_server import http_app  # noqa: E402
from servers import PYTHONPATH, SERVE, in_process_http_server  # noqa: E402
from shop_world import load  # noqa: E402


class TrackedState(State):
    __slots__ = ("__weakref__",)


def recording_domain(created: list[weakref.ref[State]]):  # noqa: ANN201
    """The shop world, noting (weakly) every state the server creates, in order."""
    domain = load()

    def recorded() -> State:
        state = TrackedState(domain.base)
        created.append(weakref.ref(state))
        return state

    domain.new_state = recorded
    return domain


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
UNKNOWN = {"jsonrpc": "2.0", "id": 2, "method": "muarl/frobnicate", "params": {}}
PING = {"jsonrpc": "2.0", "id": 3, "method": "ping"}


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def open_session(client: httpx.Client, url: str) -> dict[str, str]:
    """Initialise an MCP session over plain HTTP POSTs (no notification stream, which would count as a
    request in flight); the headers that address it."""
    session = {"Mcp-Session-Id": client.post(url, json=INITIALIZE).headers["mcp-session-id"]}
    client.post(url, json=INITIALIZED, headers=session)
    return session


def call_tool(client: httpx.Client, url: str, session: dict[str, str], name: str, arguments: dict) -> str:
    request = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return client.post(url, json=request, headers=session).json()["result"]["content"][0]["text"]


def test_an_abandoned_http_session_is_freed_and_a_live_one_is_not():
    created: list[weakref.ref[State]] = []
    # 3 s: the live session is polled every 0.2 s, and a starved CPU (helpers' test runs beside it) once stretched
    # a poll past a 1.5 s timeout, expiring the live session too
    app = http_app(recording_domain(created), session_idle_timeout=3.0)
    with in_process_http_server(app) as url, httpx.Client(headers=HEADERS, timeout=10) as client:
        abandoned, live = open_session(client, url), open_session(client, url)
        for session in (abandoned, live):  # each writes to its own state
            call_tool(client, url, session, "cancel_order", {"order_id": "#W1", "reason": "r"})
        deadline = time.monotonic() + 9.0  # three idle timeouts of the abandoned session
        while time.monotonic() < deadline:
            assert '"status": "cancelled"' in call_tool(client, url, live, "get_order", {"order_id": "#W1"})
            time.sleep(0.2)
        gc.collect()
        assert len(created) == 2 and created[0]() is None, "the abandoned session's state is still held"
        assert created[1]() is not None
        assert client.post(url, json=PING, headers=abandoned).status_code == 404  # its id is forgotten
        assert '"status": "cancelled"' in call_tool(client, url, live, "get_order", {"order_id": "#W1"})


def test_an_unknown_method_gets_method_not_found_over_http():
    with in_process_http_server(http_app(load())) as url, httpx.Client(headers=HEADERS, timeout=10) as client:
        session = open_session(client, url)
        error = client.post(url, json=UNKNOWN, headers=session).json()
        assert error["id"] == 2 and error["error"]["code"] == -32601, error
        assert "muarl/frobnicate" in error["error"]["message"]
        assert client.post(url, json=PING, headers=session).json() == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_an_unknown_method_gets_method_not_found_over_stdio():
    lines = "".join(json.dumps(m) + "\n" for m in (INITIALIZE, INITIALIZED, UNKNOWN))
    done = subprocess.run(SERVE, input=lines, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["result"]["serverInfo"]["name"] == "muarl-shop"
    assert answers[2]["error"]["code"] == -32601
