"""Use any Model Context Protocol server as an episode's tool backend.

A target is written ``mcp:CMD`` (a command line started as a stdio subprocess, e.g.
``mcp:muarl serve-mcp --domain clinic``) or ``mcp:URL`` (a streamable-HTTP endpoint, e.g.
``mcp:http://127.0.0.1:8765/mcp``). Each :class:`MCPToolBackend` opens its own MCP session on its first
call and closes it in ``aclose``, so one episode is one session; against ``muarl serve-mcp`` that means
one fresh state per episode (for stdio, one subprocess per episode: about a second of start-up each).

Error results are turned back into the exceptions the episode loop expects: ``ArgumentError`` when the
server marks the error ``bad_arguments`` (muarl servers do), ``ToolError`` otherwise, with a leading
``"Error: "`` removed so the agent sees the same observation as in process. A server that cannot be
reached or breaks the protocol raises :class:`~muarl.rollout.backends.BackendError`: the episode errors
rather than the agent being blamed.

The final state hash is read from the ``muarl://state/hash`` resource; a server that does not offer it
(any non-muarl server) yields ``""``, which never equals a gold hash, so only muarl servers can be scored.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from muarl.domains.base import ArgumentError, BaseData, Domain, Tool, ToolError, ToolRegistry
from muarl.integrations.mcp_server import META_ERROR_KIND, META_KIND, META_TERMINAL, STATE_HASH_URI
from muarl.rollout.backends import BackendError, BackendFactory, LocalToolBackend, ToolBackend
from muarl.types import Task, ToolKind, ToolSpec

from mcp import ClientSession, McpError, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


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


@contextlib.asynccontextmanager
async def connect(target: MCPTarget) -> AsyncIterator[tuple[ClientSession, mcp_types.InitializeResult]]:
    """An initialised MCP client session to ``target`` and the server's initialisation answer (name,
    instructions, capabilities); closed, and its subprocess ended, on exit."""
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
    """One episode's tools on an MCP server, over one MCP session opened at the first use."""

    def __init__(self, target: MCPTarget, *, expected_tools: Iterable[str] = ()):
        self.target = target
        self.expected_tools = list(expected_tools)
        self._stack: contextlib.AsyncExitStack | None = None
        self._session: ClientSession | None = None
        self._has_state_hash = False

    async def _open(self) -> ClientSession:
        if self._session is not None:
            return self._session
        self._stack = contextlib.AsyncExitStack()
        try:
            session, init = await self._stack.enter_async_context(connect(self.target))
            listed = {t.name for t in (await session.list_tools()).tools}
            missing = [n for n in self.expected_tools if n not in listed]
            if missing:
                raise BackendError(f"MCP server {self.target} lacks the domain's tools {missing}; it serves {sorted(listed)}")
            if init.capabilities.resources is not None:
                resources = (await session.list_resources()).resources
                self._has_state_hash = any(str(r.uri) == STATE_HASH_URI for r in resources)
        except BackendError:
            await self.aclose()
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the server's, not the agent's
            await self.aclose()
            raise BackendError(f"cannot open an MCP session with {self.target}: {type(exc).__name__}: {exc}") from exc
        self._session = session
        return session

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        session = await self._open()
        try:
            result = await session.call_tool(name, arguments)
        except McpError as exc:  # a JSON-RPC error answer: the server refused this call
            raise ToolError(str(exc.error.message)) from None
        except Exception as exc:  # noqa: BLE001 - transport failure
            raise BackendError(f"MCP call {name} to {self.target} failed: {type(exc).__name__}: {exc}") from exc
        text = result_text(result)
        if not result.isError:
            return text
        message = text[len("Error: "):] if text.startswith("Error: ") else text
        if (result.meta or {}).get(META_ERROR_KIND) == "bad_arguments":
            raise ArgumentError(message)
        raise ToolError(message)

    async def state_hash(self) -> str:
        session = await self._open()
        if not self._has_state_hash:
            return ""
        try:
            contents = (await session.read_resource(STATE_HASH_URI)).contents  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"cannot read {STATE_HASH_URI} from {self.target}: {exc}") from exc
        return "".join(getattr(c, "text", "") for c in contents)

    async def aclose(self) -> None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            await stack.aclose()


def backend_factory_from_spec(spec: str) -> BackendFactory:
    """``local`` (in-process tools) or ``mcp:CMD`` / ``mcp:URL``; the server must serve the domain's tools."""
    if spec == "local":
        return LocalToolBackend
    target = MCPTarget.parse(spec)

    def factory(domain: Domain, task: Task) -> ToolBackend:
        return MCPToolBackend(target, expected_tools=domain.tools.names())

    return factory


async def list_tool_specs(target: MCPTarget) -> tuple[list[ToolSpec], str]:
    """The server's tools as ToolSpecs, and its instructions (empty when it gives none)."""
    try:
        async with connect(target) as (session, init):
            tools = (await session.list_tools()).tools
    except Exception as exc:  # noqa: BLE001
        raise BackendError(f"cannot list the tools of {target}: {type(exc).__name__}: {exc}") from exc
    return [tool_spec(t) for t in tools], init.instructions or ""


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
