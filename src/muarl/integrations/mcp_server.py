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

The server's ``instructions`` are the domain policy (the agent's system prompt).

Input is validated by the domain itself (not by the SDK's jsonschema pass), so argument errors read the
same as in process.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

from muarl.domains.base import ArgumentError, Domain, State, ToolError

try:
    import mcp.types as mcp_types
    from mcp.server.lowlevel import Server
    from mcp.server.lowlevel.helper_types import ReadResourceContents
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the MCP integration needs the 'mcp' extra: pip install 'muarl[mcp]'") from exc

STATE_HASH_URI = "muarl://state/hash"
META_KIND = "muarl/kind"
META_TERMINAL = "muarl/terminal"
META_ERROR_KIND = "muarl/error_kind"


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


def build_server(domain: Domain) -> Server:
    """An MCP server over ``domain`` keeping one fresh state per MCP session."""
    server: Server = Server(f"muarl-{domain.name}", instructions=domain.system_prompt(None))
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


def http_app(domain: Domain, path: str = "/mcp") -> Any:
    """A Starlette app serving streamable HTTP at ``path`` with stateful sessions (one state each)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(app=build_server(domain), stateless=False, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route(path, endpoint=_SessionManagerEndpoint(manager))], lifespan=lifespan)


async def serve_http(domain: Domain, host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp") -> None:
    """Serve streamable HTTP on ``host:port`` until cancelled."""
    import uvicorn

    config = uvicorn.Config(http_app(domain, path), host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
