"""``muarl serve``: a local model (anything ``local:PATH`` names) behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import click

from muarl.cli.train import need_training_extras, prepare_threads


@click.command()
@click.argument("path")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to bind.")
@click.option("--precision", type=click.Choice(["auto", "bf16", "fp32"]), default="auto", show_default=True,
              help="bf16 autocast or fp32 (auto: bf16 where the hardware has it).")
@click.option("--max-context", type=click.IntRange(min=64), help="Tokens per request, prompt and completion [the model's context length].")
@click.option("--max-tokens", default=256, show_default=True, type=click.IntRange(min=1), help="Completion tokens when a request sets no max_tokens.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seeds the sampling of requests that carry no seed.")
def serve(path: str, host: str, port: int, precision: str, max_context: int | None, max_tokens: int, seed: int) -> None:
    """Serve PATH (smollm2, tiny-random, or a model, adapter, checkpoint or run directory) at
    http://HOST:PORT/v1 (POST /v1/chat/completions, GET /v1/models)."""
    prepare_threads()
    need_training_extras()
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"serving needs the mcp extra ({exc.name} is missing): pip install 'muarl[mcp]'") from None
    from muarl.models.local_chat import LocalChatClient
    from muarl.models.local_spec import local_policy
    from muarl.models.openai_server import LocalModelServer

    # a PATH that names no model is an InputError: one line, exit 2
    policy = local_policy(path.removeprefix("local:"), max_new_tokens=max_tokens, max_context=max_context, precision=precision)
    try:
        server = LocalModelServer(LocalChatClient(policy, seed=seed), host=host, port=port)
    except OSError as exc:
        raise click.ClickException(f"cannot bind {host}:{port}: {exc}") from None
    click.echo(f"serving {policy.name} at {server.base_url} (Ctrl-C to stop)", err=True)
    server.serve_forever()
