"""Serve a muarl domain's tools as a Model Context Protocol server, so other agent frameworks can use our
worlds and a muarl rollout can run its tools in another process.

What a client sees:

- ``tools/list``: every agent tool of the domain with its derived JSON schema as ``inputSchema``; the
  tool's muarl kind and terminal flag ride in ``_meta`` (``muarl/kind``, ``muarl/terminal``) and the
  read/write kind also as the standard ``readOnlyHint`` annotation.
- ``tools/call``: runs the tool on the *session's* state. Each MCP session (one stdio connection, or one
  ``Mcp-Session-Id`` over HTTP) gets a fresh copy-on-write :class:`~muarl.domains.base.State`, so one
  session is one episode and sessions never see each other's writes. A refusal comes back as an MCP error
  result (``isError: true``) whose text is exactly the observation the in-process loop would show,
  ``"Error: <message>"``, with ``_meta["muarl/error_kind"]`` (``bad_arguments``, ``unknown_tool`` or
  ``tool``) so a muarl client can count malformed calls the same way.
- resource ``muarl://state/hash``: the session state's hash, the one number the outcome reward needs, so a
  rollout that ran its tools remotely is scored exactly like an in-process one.

The server's ``instructions`` are the domain policy (the agent's system prompt). A request for a method
MCP does not define is answered with JSON-RPC's "Method not found" (-32601). Over HTTP, a session with no
request for ``session_idle_timeout`` seconds is closed and its state freed, so clients that vanish without
ending their session do not pile up.

Input is validated by the domain itself (not by the SDK's jsonschema pass), so argument errors read the
same as in process.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any, get_args

from muarl.domains.base import ArgumentError, Domain, State, ToolError

try:
    import anyio
    import mcp.types as mcp_types
    from mcp.server.lowlevel import Server
    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from mcp.shared.message import SessionMessage
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the MCP integration needs the 'mcp' extra: pip install 'muarl[mcp]'") from exc

STATE_HASH_URI = "muarl://state/hash"
META_KIND = "muarl/kind"
META_TERMINAL = "muarl/terminal"
META_ERROR_KIND = "muarl/error_kind"
DEFAULT_SESSION_IDLE_TIMEOUT = 1800.0  # seconds; well above the longest pause of a live episode between tool calls

# every request method a client may send, as the SDK's request union spells them
CLIENT_METHODS = frozenset(
    method for request in get_args(mcp_types.ClientRequest.model_fields["root"].annotation)
    for method in get_args(request.model_fields["method"].annotation)
)


def error_result(message: str, kind: str) -> mcp_types.CallToolResult:
    """An MCP tool error carrying the same text the in-process loop would show the agent."""
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=f"Error: {message}")],
        isError=True,
        _meta={META_ERROR_KIND: kind},
    )


def mcp_tools(domain: Domain) -> list[mcp_types.Tool]:
    """The domain's agent tools as MCP tool descriptions."""
    tools = []
    for t in domain.tools:
        spec = t.spec
        annotations = mcp_types.ToolAnnotations(readOnlyHint=spec.kind == "read")
        tools.append(
            mcp_types.Tool(
                name=spec.name, description=spec.description, inputSchema=spec.parameters, annotations=annotations,
                _meta={META_KIND: spec.kind, META_TERMINAL: spec.terminal},
            )
        )
    return tools


class _DomainServer(Server):
    """The SDK's low-level server, except that a request for a method MCP does not define gets "Method not
    found" (-32601). SDK 1.x answers it "Invalid request parameters" (-32602), which tells a client to fix
    arguments that no fix can help; so requests are screened before the SDK's session reads them."""

    async def run(self, read_stream: Any, write_stream: Any, *args: Any, **kwargs: Any) -> None:
        forward, screened = anyio.create_memory_object_stream[Any](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_screen_methods, read_stream, forward, write_stream)
            await super().run(screened, write_stream, *args, **kwargs)
            tg.cancel_scope.cancel()


async def _screen_methods(incoming: Any, forward: Any, replies: Any) -> None:
    """Pass ``incoming`` messages on to ``forward``, answering requests for unknown methods on ``replies``."""
    gone = (anyio.ClosedResourceError, anyio.BrokenResourceError)  # the transport ended the session
    async with incoming, forward:
        with contextlib.suppress(*gone):
            async for message in incoming:
                request = message.message.root if isinstance(message, SessionMessage) else None
                if not isinstance(request, mcp_types.JSONRPCRequest) or request.method in CLIENT_METHODS:
                    await forward.send(message)
                    continue
                error = mcp_types.ErrorData(code=mcp_types.METHOD_NOT_FOUND, message=f"Method not found: {request.method}")
                reply = mcp_types.JSONRPCError(jsonrpc="2.0", id=request.id, error=error)
                await replies.send(SessionMessage(mcp_types.JSONRPCMessage(reply)))


def build_server(domain: Domain) -> Server:
    """An MCP server over ``domain`` keeping one fresh state per MCP session."""
    server: Server = _DomainServer(f"muarl-{domain.name}", instructions=domain.system_prompt(None))
    # keyed by the SDK's per-connection session object: a state lives exactly as long as its session
    states: weakref.WeakKeyDictionary[Any, State] = weakref.WeakKeyDictionary()

    def session_state() -> State:
        session = server.request_context.session
        state = states.get(session)
        if state is None:
            state = states[session] = domain.new_state()
        return state

    @server.list_tools()
    async def list_tools() -> list[mcp_types.Tool]:
        return mcp_tools(domain)

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        if name not in domain.tools:
            return error_result(f"unknown tool {name!r}; available tools: {domain.tools.names()}", "unknown_tool")
        try:
            output = domain.run_tool(session_state(), name, arguments)
        except ArgumentError as exc:
            return error_result(str(exc), "bad_arguments")
        except ToolError as exc:
            return error_result(str(exc), "tool")
        except Exception as exc:  # noqa: BLE001 - a crashing tool is an observation, as in process
            return error_result(f"{type(exc).__name__}: {exc}", "tool")
        return [mcp_types.TextContent(type="text", text=output)]

    @server.list_resources()
    async def list_resources() -> list[mcp_types.Resource]:
        return [
            mcp_types.Resource(
                uri=STATE_HASH_URI, name="state-hash", mimeType="text/plain",
                description="Hash of this session's database state (what muarl's outcome reward compares).",
            )
        ]

    @server.read_resource()
    async def read_resource(uri: Any) -> list[ReadResourceContents]:
        if str(uri) != STATE_HASH_URI:
            raise ValueError(f"unknown resource {uri}; this server offers {STATE_HASH_URI}")
        return [ReadResourceContents(content=session_state().hash(), mime_type="text/plain")]

    return server


async def serve_stdio(domain: Domain) -> None:
    """Serve one session over stdin/stdout until the client closes the pipe."""
    from mcp.server.stdio import stdio_server

    server = build_server(domain)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class _SessionManagerEndpoint:
    """ASGI endpoint handing every request to the SDK's session manager (a class, so Starlette's Route
    passes it raw ASGI calls instead of wrapping it as a request/response function)."""

    def __init__(self, manager: Any):
        self.manager = manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.manager.handle_request(scope, receive, send)


def http_app(domain: Domain, path: str = "/mcp", session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT) -> Any:
    """A Starlette app serving streamable HTTP at ``path`` with stateful sessions (one state each); a
    session idle for ``session_idle_timeout`` seconds is closed and its state freed."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(app=build_server(domain), stateless=False, json_response=True,
                                           session_idle_timeout=session_idle_timeout)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route(path, endpoint=_SessionManagerEndpoint(manager))], lifespan=lifespan)


async def serve_http(domain: Domain, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp",
                     session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT) -> None:
    """Serve streamable HTTP on ``host:port`` until cancelled."""
    import uvicorn

    config = uvicorn.Config(http_app(domain, path, session_idle_timeout), host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
