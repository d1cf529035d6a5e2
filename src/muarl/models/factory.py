"""Policies by name, as the CLI and configs spell them: ``oracle``, ``none``, ``openai:MODEL``."""

from __future__ import annotations

import os
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
        from muarl.models.openai_client import ChatClient, OpenAIAgent

        if not base_url:
            raise ValueError(f"agent {spec!r} needs --agent-base-url (an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1)")
        client = ChatClient(base_url, spec.split(":", 1)[1], api_key=os.environ.get(api_key_env), timeout=timeout,
                            max_retries=max_retries, concurrency=concurrency)
        return OpenAIAgent(client, **{k: v for k, v in sampling.items() if v is not None})
    raise ValueError(f"unknown agent {spec!r}: use oracle, none, or openai:MODEL")
