"""A real OpenAI-compatible HTTP server on 127.0.0.1 that answers with a policy you give it.

For testing and benchmarking the harness without a model: the client, the retries and the episode loop
all run over real HTTP, and the server's answers are whatever ``policy(request_json)`` returns (an
assistant message dict in OpenAI format). A policy that raises :class:`HTTPFailure` makes the server answer
with that status, to exercise retries; one that raises :class:`RawReply` makes it send those bytes as the body
(a truncated or otherwise broken reply, as a failing server might send). Runs in a background thread
(stdlib only); use as a context manager.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Policy = Callable[[dict[str, Any]], dict[str, Any]]


class HTTPFailure(Exception):
    def __init__(self, status: int, message: str = "injected failure"):
        super().__init__(message)
        self.status = status


class RawReply(Exception):
    """Answer with exactly ``body`` (status ``status``) instead of a chat completion."""

    def __init__(self, body: bytes, status: int = 200):
        super().__init__(f"raw reply of {len(body)} bytes")
        self.body = body
        self.status = status


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (e.g. after its timeout) is the client's business, not a server error to print."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _approx_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


class LoopbackServer:
    def __init__(self, policy: Policy, host: str = "127.0.0.1", port: int = 0, model: str = "loopback"):
        self.policy = policy
        self.model = model
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes: without this, each
            # kept-alive request waits ~40 ms for the client's delayed ACK

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict[str, Any] | bytes) -> None:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                server.requests += 1
                try:
                    message = server.policy(request)
                except HTTPFailure as exc:
                    self._send(exc.status, {"error": {"message": str(exc)}})
                    return
                except RawReply as exc:
                    self._send(exc.status, exc.body)
                    return
                except Exception as exc:  # noqa: BLE001 - a broken policy is a server error, as a real server's would be
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
                    return
                usage = {"prompt_tokens": _approx_tokens(request.get("messages", [])), "completion_tokens": _approx_tokens(message)}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._send(200, {
                    "id": f"chatcmpl-{server.requests}", "object": "chat.completion", "created": int(time.time()),
                    "model": request.get("model", server.model),
                    "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                    "usage": usage,
                })

        self._httpd = _Server((host, port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def serve_forever(self) -> None:
        """Serve in the calling thread (for a server in its own process)."""
        self._httpd.serve_forever()

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
