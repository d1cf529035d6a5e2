"""Policies by name, as the CLI and configs spell them: ``oracle``, ``none``, ``openai:MODEL``, ``local:PATH``."""

from __future__ import annotations

from typing import Any

from muarl.models.base import Agent
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.models.precision import Precision


def make_agent(spec: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
               max_retries: int = 3, concurrency: int = 8, precision: Precision = "auto", max_context: int | None = None,
               **sampling: Any) -> Agent:
    """Build the agent named by ``spec``; sampling options with value None are left to the server (or, for a
    local model, to its defaults). ``precision`` and ``max_context`` apply to local models only."""
    if spec == "oracle":
        return OracleAgent()
    if spec == "none":
        return DoNothingAgent()
    sampling = {k: v for k, v in sampling.items() if v is not None}
    if spec.startswith("openai:"):
        from muarl.models.openai_client import OpenAIAgent, client_for

        client = client_for(spec, base_url, "--agent-base-url", api_key_env, timeout=timeout, max_retries=max_retries, concurrency=concurrency)
        return OpenAIAgent(client, **sampling)
    if spec.startswith("local:"):
        from muarl.models.local_spec import local_policy

        if "max_tokens" in sampling:
            sampling["max_new_tokens"] = sampling.pop("max_tokens")
        return local_policy(spec.removeprefix("local:"), precision=precision, max_context=max_context, **sampling)
    raise ValueError(f"unknown agent {spec!r}: use oracle, none, openai:MODEL or local:PATH")
