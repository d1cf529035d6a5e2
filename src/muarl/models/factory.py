"""Policies by name, as the CLI and configs spell them: ``oracle``, ``none``, ``openai:MODEL``."""

from __future__ import annotations

from typing import Any

from muarl.models.base import Agent
from muarl.models.oracle import DoNothingAgent, OracleAgent


def make_agent(spec: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
               max_retries: int = 3, concurrency: int = 8, **sampling: Any) -> Agent:
    """Build the agent named by ``spec``; sampling options with value None are left to the server."""
    if spec == "oracle":
        return OracleAgent()
    if spec == "none":
        return DoNothingAgent()
    if spec.startswith("openai:"):
        from muarl.models.openai_client import OpenAIAgent, client_for

        client = client_for(spec, base_url, "--agent-base-url", api_key_env, timeout=timeout, max_retries=max_retries, concurrency=concurrency)
        return OpenAIAgent(client, **{k: v for k, v in sampling.items() if v is not None})
    raise ValueError(f"unknown agent {spec!r}: use oracle, none, or openai:MODEL")
