"""``muarl serve-mcp``: serve a domain's tools over MCP (stdio or streamable HTTP), one fresh state per session."""

from __future__ import annotations

import asyncio

import click


@click.command("serve-mcp")
@click.option("--domain", "domain_spec", default="clinic", show_default=True, help="registered domain name, or package.module:factory marked @domain_factory")
@click.option("--data-dir", default=None, help="the domain's data directory (for domains built from files)")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address")
@click.option("--port", default=8765, show_default=True, type=int, help="HTTP port")
@click.option("--path", default="/mcp", show_default=True, help="HTTP endpoint path")
@click.option("--session-idle-timeout", type=click.FloatRange(min=0, min_open=True), default=1800.0, show_default=True,
              help="HTTP: seconds without a request after which a session is closed and its state freed")
def serve_mcp(domain_spec: str, data_dir: str | None, transport: str, host: str, port: int, path: str,
              session_idle_timeout: float) -> None:
    """Serve DOMAIN's tools as an MCP server; read the state hash at resource muarl://state/hash."""
    from muarl.domains.spec import load_domain_spec
    from muarl.integrations.mcp_server import serve_http, serve_stdio

    domain = load_domain_spec(domain_spec, data_dir)
    if transport == "stdio":
        asyncio.run(serve_stdio(domain))
    else:
        click.echo(f"serving {domain.name} over MCP at http://{host}:{port}{path}", err=True)
        asyncio.run(serve_http(domain, host, port, path, session_idle_timeout))
