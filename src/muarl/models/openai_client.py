"""Chat-level policies over any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp's server, OpenAI).

:class:`ChatClient` owns one pooled HTTP connection, a concurrency bound, per-request timeouts and retries
with exponential backoff for what is worth retrying (connection failures, timeouts, 408, 429, 5xx); other
4xx answers fail at once with the server's message, since repeating a bad request cannot help. A 200 whose
body is not a chat completion (not JSON, no choices, ``tool_calls`` that are strings rather than call
objects) is the server failing to give one, so it is retried too; it is not shown to the agent as a
malformed call, which is kept for calls the model wrote badly (unparsable arguments, unknown tools). After
the last retry it raises :class:`ModelError`, which the episode loop records as an errored episode. A 400
that says the prompt outgrew the model's context raises :class:`ContextFull` instead: for a policy that is
its own failure (the episode ends ``context_full`` and is scored), not the server's.

A reply is made writable where it enters: lone UTF-16 surrogates (which a server's JSON can carry as
``\\ud800`` escapes) are replaced in every string of the decoded body, ids, names, arguments and content alike,
so that no model output can make its episode impossible to write.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import httpx

from muarl.models.base import CONTEXT_FULL_CODE, Agent, AgentSession, AgentTurn, ContextFull, ModelError
from muarl.retries import back_off
from muarl.types import Message, Task, ToolSpec, Usage, valid_unicode

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
# How vLLM, SGLang, llama.cpp's server and OpenAI say a request's prompt outgrew the model's context (HTTP 400).
_CONTEXT_FULL = re.compile(r"context[_ ]length|maximum context|context window|exceeds? the (?:model'?s? )?context|prompt is too long", re.I)


def _error_code(response: httpx.Response) -> str | None:
    """The ``error.code`` of an OpenAI-style JSON error body (``muarl serve`` and OpenAI set it), else None."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


class ChatClient:
    """Async client for ``POST {base_url}/chat/completions``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
        backoff: float = 0.5,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.usage = Usage()
        self._semaphore = asyncio.Semaphore(concurrency)
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), headers=headers,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )

    async def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, **sampling: Any) -> AgentTurn:
        """One chat completion; the assistant message comes back with tool-call arguments as raw text."""
        body: dict[str, Any] = {"model": self.model, "messages": [m.to_openai() for m in messages], **sampling}
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        data, message = await self._post(body)
        raw_usage = data.get("usage") or {}
        usage = Usage(prompt_tokens=raw_usage.get("prompt_tokens", 0) or 0, completion_tokens=raw_usage.get("completion_tokens", 0) or 0, requests=1)
        self.usage.add(usage)
        return AgentTurn(message=message, usage=usage)

    async def _post(self, body: dict[str, Any]) -> tuple[dict[str, Any], Message]:
        """The response body and its assistant message, retrying failures, including a 200 whose body is not
        a chat completion (a server that breaks the format this once may not the next time)."""
        url = f"{self.base_url}/chat/completions"
        problem = ""
        for attempt in range(self.max_retries + 1):
            await back_off(attempt, self.backoff)
            try:
                async with self._semaphore:
                    response = await self._http.post(url, json=body)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code == 200:
                try:
                    data = valid_unicode(response.json())
                except ValueError:
                    problem = f"invalid JSON body: {response.text[:200]!r}"
                    continue
                try:
                    return data, assistant_message(data)
                except ValueError as exc:
                    problem = str(exc)
                    continue
            problem = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code == 400 and (_error_code(response) == CONTEXT_FULL_CODE or _CONTEXT_FULL.search(response.text)):
                raise ContextFull(f"{url}: {problem}")
            if response.status_code not in _RETRYABLE_STATUS:
                break
        raise ModelError(f"{url} failed after {attempt + 1} attempt(s): {problem}")

    async def aclose(self) -> None:
        await self._http.aclose()


def assistant_message(data: Any) -> Message:
    """The assistant message of a chat-completion body; ValueError when the body is not one."""
    try:
        choice = data["choices"][0]["message"]
        return Message.from_openai({**choice, "role": "assistant"})
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"response is not a chat completion ({exc}): {str(data)[:300]}") from None


def client_for(spec: str, base_url: str | None, flag: str, api_key_env: str = "OPENAI_API_KEY", **options: Any) -> ChatClient:
    """The client for ``PREFIX:MODEL`` (``openai:…`` agents, ``llm:…`` users) at ``base_url``; the key comes
    from the environment variable ``api_key_env`` so that it never appears in a config or a run directory."""
    if not base_url:
        raise ValueError(f"{spec!r} needs {flag} (an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1)")
    return ChatClient(base_url, spec.split(":", 1)[1], api_key=os.environ.get(api_key_env), **options)


class _ChatSession(AgentSession):
    def __init__(self, agent: OpenAIAgent, tools: list[ToolSpec]):
        self.agent = agent
        self.tools = tools

    async def act(self, messages: list[Message]) -> AgentTurn:
        return await self.agent.client.complete(messages, self.tools, **self.agent.sampling)


class OpenAIAgent(Agent):
    """A policy served behind an OpenAI-compatible endpoint; ``sampling`` goes into every request."""

    def __init__(self, client: ChatClient, **sampling: Any):
        self.client = client
        self.sampling = sampling
        self.name = f"openai:{client.model}"

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> AgentSession:
        return _ChatSession(self, tools)

    async def aclose(self) -> None:
        await self.client.aclose()
