"""Use any Model Context Protocol server as an episode's tool backend.

A target is written ``mcp:CMD`` (a command line started as a stdio subprocess, e.g.
``mcp:muarl serve-mcp --domain clinic``) or ``mcp:URL`` (a streamable-HTTP endpoint, e.g.
``mcp:http://127.0.0.1:8765/mcp``). Each :class:`MCPToolBackend` opens its own MCP session on its first
call and closes it in ``aclose``, so one episode is one session; against ``muarl serve-mcp`` that means
one fresh state per episode (for stdio, one subprocess per episode: about a second of start-up each).

Error results are turned back into the exceptions the episode loop expects: ``ArgumentError`` when the
server marks the error ``bad_arguments`` (muarl servers do), ``ToolError`` otherwise, with a leading
``"Error: "`` removed so the agent sees the same observation as in process. A server that cannot be
reached, breaks the protocol, does not answer within the timeout, dies or forgets the session mid-episode
raises :class:`~muarl.rollout.backends.BackendError`: the episode errors rather than the agent being blamed.

The final state hash is read from the ``muarl://state/hash`` resource; a server that does not offer it
(any non-muarl server) yields ``""``, which never equals a gold hash, so only muarl servers can be scored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from muarl.domains.base import ArgumentError, BaseData, Domain, Tool, ToolError, ToolRegistry
from muarl.integrations.mcp_server import META_ERROR_KIND, META_KIND, META_TERMINAL, STATE_HASH_URI
from muarl.retries import back_off
from muarl.rollout.backends import BackendError, BackendFactory, LocalToolBackend, ToolBackend
from muarl.types import Task, ToolKind, ToolSpec

from mcp import ClientSession, McpError, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

T = TypeVar("T")

# the SDK's error codes for a connection that closed, and for a session an HTTP server no longer knows (404,
# e.g. expired while idle): the episode's state is gone, which is the server's failure, not a tool refusal
SESSION_GONE = frozenset({mcp_types.CONNECTION_CLOSED, 32600})


@dataclass(frozen=True)
class MCPTarget:
    """Where an MCP server is: a command to spawn (stdio) or an HTTP URL (streamable HTTP)."""

    command: tuple[str, ...] = ()
    url: str | None = None

    @classmethod
    def parse(cls, spec: str) -> MCPTarget:
        """Read ``mcp:CMD`` or ``mcp:URL``; a ValueError that shows both forms otherwise."""
        if not spec.startswith("mcp:") or not spec[4:].strip():
            raise ValueError(f"bad MCP target {spec!r}: write mcp:COMMAND (stdio) or mcp:http://HOST:PORT/mcp (HTTP)")
        rest = spec[4:].strip()
        if rest.startswith(("http://", "https://")):
            return cls(url=rest)
        return cls(command=tuple(shlex.split(rest)))

    def __str__(self) -> str:
        return "mcp:" + (self.url or shlex.join(self.command))


class OncePerKind(logging.Handler):
    """Shows the SDK's log records one line per kind (logger, message, exception type), the first time each
    happens; later ones of a kind are counted in ``seen``, not shown. A command that is not an MCP server (``mcp:yes
    hello``) makes the SDK log a traceback for every line it prints, megabytes a second, while the failure itself
    reaches the user as errored episodes."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: Counter[tuple[str, str, str]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        kind = (record.name, str(record.msg), type(exc).__name__ if exc else "")
        self.seen[kind] += 1
        if self.seen[kind] == 1:
            cause = " ".join(describe(exc).split())[:300] if exc else ""
            sys.stderr.write(f"{record.name}: {record.getMessage()}{f' ({cause})' if cause else ''} [shown once]\n")


SDK_LOGS = OncePerKind()


def _show_sdk_logs_once() -> None:
    """Route the MCP SDK's logs through :data:`SDK_LOGS` (once per process; the SDK's loggers are all under "mcp")."""
    sdk = logging.getLogger("mcp")
    if SDK_LOGS not in sdk.handlers:
        sdk.addHandler(SDK_LOGS)
        sdk.propagate = False


@contextlib.asynccontextmanager
async def connect(target: MCPTarget) -> AsyncIterator[tuple[ClientSession, mcp_types.InitializeResult]]:
    """An initialised MCP client session to ``target`` and the server's initialisation answer (name,
    instructions, capabilities); closed, and its subprocess ended, on exit."""
    _show_sdk_logs_once()
    async with contextlib.AsyncExitStack() as stack:
        if target.url:
            read, write, _ = await stack.enter_async_context(streamable_http_client(target.url))
        else:
            params = StdioServerParameters(command=target.command[0], args=list(target.command[1:]))
            read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(ClientSession(read, write))
        yield session, await session.initialize()


def tool_kind(tool: mcp_types.Tool) -> ToolKind:
    """muarl's kind for an MCP tool: from muarl's own ``_meta`` when present, else from the read-only hint."""
    meta = tool.meta or {}
    if meta.get(META_KIND) in ("read", "write", "think", "generic"):
        return meta[META_KIND]
    if tool.annotations is not None and tool.annotations.readOnlyHint is not None:
        return "read" if tool.annotations.readOnlyHint else "write"
    return "generic"


def tool_spec(tool: mcp_types.Tool) -> ToolSpec:
    return ToolSpec(
        name=tool.name, description=tool.description or "", parameters=tool.inputSchema,
        kind=tool_kind(tool), terminal=bool((tool.meta or {}).get(META_TERMINAL, False)),
    )


def result_text(result: mcp_types.CallToolResult) -> str:
    """The observation text of a tool result: its text blocks, else its structured content as JSON."""
    parts = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False))
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    return "\n".join(parts)


class MCPToolBackend(ToolBackend):
    """One episode's tools on an MCP server, over one MCP session opened at the first use.

    Every request waits at most ``timeout`` seconds, and a session whose connection ends (the server died)
    fails its pending and later requests at once, both as :class:`BackendError`. Opening the session (connect,
    initialise, list the tools) is tried ``max_retries`` more times with backoff, since it changes nothing on
    the server. A tool call that times out or loses its connection is not repeated: the server may have run
    it, and a new session would start from a fresh state, so the episode errors instead.

    The SDK's transports run task groups that must be entered and left by one task, so the session lives in
    a task of its own (``_hold``); requests are awaited next to that task, so a transport that crashes ends
    them instead of hanging them or cancelling the episode.
    """

    def __init__(self, target: MCPTarget, *, expected_tools: Iterable[str] = (), timeout: float = 60.0,
                 max_retries: int = 3, backoff: float = 0.5):
        self.target = target
        self.expected_tools = list(expected_tools)
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.tools: list[mcp_types.Tool] = []  # as the server listed them, once open
        self.instructions = ""
        self._holder: asyncio.Task[None] | None = None
        self._release: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._has_state_hash = False

    async def open(self) -> ClientSession:
        """The open session, opening it (with retries) on the first use."""
        if self._session is not None:
            return self._session
        problem = ""
        for attempt in range(self.max_retries + 1):
            await back_off(attempt, self.backoff)
            try:
                self._session = await self._open_once()
                return self._session
            except BackendError:  # the server answered but does not serve the domain: asking again cannot help
                raise
            except Exception as exc:  # noqa: BLE001 - any failure to connect is the server's, not the agent's
                problem = describe(exc)
        raise BackendError(f"cannot open an MCP session with {self.target} after {attempt + 1} attempt(s): {problem}")

    async def _open_once(self) -> ClientSession:
        opened: asyncio.Future[tuple[ClientSession, mcp_types.InitializeResult]] = asyncio.get_running_loop().create_future()
        self._release = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(opened, self._release))
        try:
            session, init = await self._answer(opened, "initialize")
            self.tools = (await self._answer(session.list_tools(), "tools/list")).tools
            listed = {t.name for t in self.tools}
            missing = [n for n in self.expected_tools if n not in listed]
            if missing:
                raise BackendError(f"MCP server {self.target} lacks the domain's tools {missing}; it serves {sorted(listed)}")
            if init.capabilities.resources is not None:
                resources = (await self._answer(session.list_resources(), "resources/list")).resources
                self._has_state_hash = any(str(r.uri) == STATE_HASH_URI for r in resources)
        except BaseException:
            await self._end(polite=opened.done() and not opened.cancelled())
            raise
        self.instructions = init.instructions or ""
        return session

    async def _hold(self, opened: asyncio.Future[Any], release: asyncio.Event) -> None:
        """Keep the session's transport open until ``release`` is set (runs as its own task, see the class)."""
        async with connect(self.target) as session_and_init:
            if not opened.done():
                opened.set_result(session_and_init)
            await release.wait()

    async def _answer(self, request: Awaitable[T], what: str) -> T:
        """``request``'s result, unless the session's connection ends first or ``timeout`` passes."""
        holder = self._holder
        if holder is None:
            raise ConnectionError("the session is closed")
        pending = asyncio.ensure_future(request)
        try:
            done, _ = await asyncio.wait({pending, holder}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not pending.done():
                pending.cancel()
        if pending in done:
            return pending.result()
        if holder in done:
            reason = "it was closed" if holder.cancelled() or holder.exception() is None else describe(holder.exception())
            raise ConnectionError(f"the connection ended during {what}: {reason}")
        raise TimeoutError(f"no answer to {what} within {self.timeout:g} s")

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        session = await self.open()
        try:
            result = await self._answer(session.call_tool(name, arguments), f"tools/call {name}")
        except McpError as exc:
            if exc.error.code in SESSION_GONE:
                raise BackendError(f"MCP call {name} to {self.target} failed: {exc.error.message}") from None
            raise ToolError(str(exc.error.message)) from None  # a JSON-RPC error answer: the server refused this call
        except Exception as exc:  # noqa: BLE001 - transport failure or no answer in time
            raise BackendError(f"MCP call {name} to {self.target} failed: {describe(exc)}") from exc
        text = result_text(result)
        if not result.isError:
            return text
        message = text[len("Error: "):] if text.startswith("Error: ") else text
        if (result.meta or {}).get(META_ERROR_KIND) == "bad_arguments":
            raise ArgumentError(message)
        raise ToolError(message)

    async def state_hash(self) -> str:
        session = await self.open()
        if not self._has_state_hash:
            return ""
        try:
            contents = (await self._answer(session.read_resource(STATE_HASH_URI), "resources/read")).contents  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"cannot read {STATE_HASH_URI} from {self.target}: {describe(exc)}") from exc
        return "".join(getattr(c, "text", "") for c in contents)

    async def aclose(self) -> None:
        """End the session. Never raises: a server that died or hangs has nothing left to release, and the
        request that met the failure has reported it."""
        await self._end(polite=True)

    async def _end(self, polite: bool) -> None:
        """Stop the session's task: politely (the transport closes the session; at most ``timeout`` seconds)
        or at once by cancelling it (for a session that never opened)."""
        holder, release = self._holder, self._release
        self._holder = self._release = self._session = None
        if holder is None or release is None:
            return
        release.set()
        try:
            if polite:
                await asyncio.wait({holder}, timeout=self.timeout)
        finally:
            if not holder.done():
                holder.cancel()
                await asyncio.wait({holder}, timeout=self.timeout)
        if holder.done() and not holder.cancelled():
            holder.exception()  # retrieved, so asyncio does not report it again


def describe(exc: BaseException) -> str:
    """One line for a failure, looking inside the exception groups the SDK's task groups raise."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}"


def backend_factory_from_spec(spec: str, *, timeout: float = 60.0, max_retries: int = 3) -> BackendFactory:
    """``local`` (in-process tools) or ``mcp:CMD`` / ``mcp:URL``; the server must serve the domain's tools.
    ``timeout`` bounds each MCP request (seconds); ``max_retries`` is how often opening a session is retried."""
    if spec == "local":
        return LocalToolBackend
    target = MCPTarget.parse(spec)

    def factory(domain: Domain, task: Task) -> ToolBackend:
        return MCPToolBackend(target, expected_tools=domain.tools.names(), timeout=timeout, max_retries=max_retries)

    return factory


async def list_tool_specs(target: MCPTarget, *, timeout: float = 60.0, max_retries: int = 3) -> tuple[list[ToolSpec], str]:
    """The server's tools as ToolSpecs, and its instructions (empty when it gives none)."""
    backend = MCPToolBackend(target, timeout=timeout, max_retries=max_retries)
    try:
        await backend.open()
    finally:
        await backend.aclose()
    return [tool_spec(t) for t in backend.tools], backend.instructions


def _runs_remotely(name: str) -> Any:
    def run(state: Any, **arguments: Any) -> str:
        raise ToolError(f"tool {name!r} runs on an MCP server; use an MCP tool backend to call it")

    return run


def remote_domain(name: str, specs: list[ToolSpec], policy: str, tasks: list[Task], splits: tuple[str, ...] = ("train", "test")) -> Domain:
    """A Domain whose tools live on an MCP server: schemas (for the agent and rule validation) but no code.

    Its gold hash is meaningless (there is no local state), so score such episodes as unscored.
    """
    tools = ToolRegistry(Tool(fn=_runs_remotely(s.name), spec=s, required=frozenset(s.parameters.get("required", []))) for s in specs)
    return Domain(
        name=name, base=BaseData({}), tools=tools, policy=policy, splits=splits,
        task_loader=lambda split: [t for t in tasks if t.split == split],
    )
