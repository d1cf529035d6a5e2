"""Real servers for tests: ``muarl serve-mcp`` on the shop test world (a subprocess over stdio or streamable
HTTP on loopback, or any ASGI app in a thread), and raw loopback servers that misbehave: one that never
answers, one that answers every request with the same JSON (not MCP, not a chat completion), and a file server
that can cut a body short."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import muarl

TESTS_DIR = Path(__file__).resolve().parent
SERVE = [sys.executable, "-c", "from muarl.cli import main; main()", "serve-mcp", "--domain", "shop_world:load"]
# the test world, and the muarl under test (not whichever one is installed)
PYTHONPATH = os.pathsep.join([str(TESTS_DIR), str(Path(muarl.__file__).resolve().parents[1])])


def stdio_spec(prefix: tuple[str, ...] = ()) -> str:
    """``mcp:…`` for a stdio server; the SDK starts servers with a minimal environment, so the test world's
    path is passed explicitly. ``prefix`` runs before it (e.g. a shell that records the server's pid)."""
    return "mcp:" + shlex.join([*prefix, "env", f"PYTHONPATH={PYTHONPATH}", *SERVE])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError(f"no server on port {port}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def http_server(*options: str, port: int | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """``muarl serve-mcp --transport http`` on a loopback port (a free one by default): the process and its
    endpoint URL."""
    port = port or free_port()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    proc = subprocess.Popen([*SERVE, "--transport", "http", "--port", str(port), *options], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield proc, f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


@contextlib.contextmanager
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A loopback TCP server that accepts connections and never sends a byte: its URL, and the connections
    it accepted (one per attempt a client makes)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


@contextlib.contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free loopback port from a thread, for the ``with`` block; yields the base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def file_server(files: dict[str, bytes], cut: set[str] = frozenset()) -> Iterator[str]:
    """A loopback HTTP server answering ``GET /<path>`` with ``files[path]`` (404 for other paths); for a path in
    ``cut`` it announces the whole length, sends half the body and closes the connection."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
            path = self.path.lstrip("/")
            if path not in files:
                self.send_error(404)
                return
            body = files[path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if path in cut else body)
            if path in cut:
                self.close_connection = True

    with _serving(Handler) as base:
        yield base


@contextlib.contextmanager
def json_server(payload: dict) -> Iterator[str]:
    """A loopback HTTP server answering every request, whatever its path, with ``payload`` as JSON (200)."""
    body = json.dumps(payload).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET = do_DELETE = _answer

    with _serving(Handler) as base:
        yield f"{base}/mcp"


@contextlib.contextmanager
def in_process_http_server(app) -> Iterator[str]:  # noqa: ANN001
    """Serve an ASGI ``app`` (e.g. ``mcp_server.http_app(domain)``) with uvicorn in a thread of this process,
    so a test can look at the server's objects; yields the endpoint URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
