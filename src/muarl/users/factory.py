"""User simulators by name: ``scripted`` or ``llm:MODEL``."""

from __future__ import annotations

from typing import Any

from muarl.users.base import UserSimulator
from muarl.users.scripted import ScriptedUser


def make_user(spec: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
              max_retries: int = 3, concurrency: int = 8, strategy: str = "llm", **sampling: Any) -> UserSimulator:
    if spec == "scripted":
        return ScriptedUser()
    if spec.startswith("llm:"):
        from muarl.models.openai_client import client_for
        from muarl.users.llm import LLMUser

        client = client_for(spec, base_url, "--user-base-url", api_key_env, timeout=timeout, max_retries=max_retries, concurrency=concurrency)
        return LLMUser(client, strategy=strategy, **{k: v for k, v in sampling.items() if v is not None})
    raise ValueError(f"unknown user {spec!r}: use scripted or llm:MODEL")
