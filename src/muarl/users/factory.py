"""User simulators by name: ``scripted``, ``scripted:cooperative`` (states its final wishes up front),
``scripted:faulty[:RATE[:KINDS]]`` (leaves its instruction on purpose, recording each fault),
``llm:MODEL`` (over an OpenAI-compatible endpoint) or ``local:PATH``
(an LLM user whose model runs in this process, frozen)."""

from __future__ import annotations

from typing import Any

from muarl.models.precision import Precision
from muarl.users.base import UserSimulator
from muarl.users.scripted import ScriptedUser


def make_user(spec: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
              max_retries: int = 3, concurrency: int = 8, strategy: str = "llm", precision: Precision = "auto",
              max_context: int | None = None, **sampling: Any) -> UserSimulator:
    """``precision`` and ``max_context`` apply to ``local:`` users only; the sampling options (temperature,
    max_tokens...; value None: the model's default) go with every completion."""
    if spec == "scripted":
        return ScriptedUser()
    if spec == "scripted:cooperative":
        return ScriptedUser(cooperative=True)
    if spec == "scripted:faulty" or spec.startswith("scripted:faulty:"):
        from muarl.users.faulty import FaultyUser, parse_faulty_spec

        rate, kinds = parse_faulty_spec(spec)
        return FaultyUser(rate, kinds)
    from muarl.users.llm import LLMUser

    sampling = {k: v for k, v in sampling.items() if v is not None}
    if spec.startswith("llm:"):
        from muarl.models.openai_client import client_for

        client = client_for(spec, base_url, "--user-base-url", api_key_env, timeout=timeout, max_retries=max_retries, concurrency=concurrency)
        return LLMUser(client, strategy=strategy, **sampling)
    if spec.startswith("local:"):
        from muarl.models.local_chat import LocalChatClient
        from muarl.models.local_spec import local_policy

        policy = local_policy(spec.removeprefix("local:"), max_context=max_context, precision=precision)
        return LLMUser(LocalChatClient(policy), strategy=strategy, name=policy.name, **sampling)
    raise ValueError(f"unknown user {spec!r}: use scripted, scripted:cooperative, scripted:faulty[:RATE[:KINDS]], llm:MODEL or local:PATH")
