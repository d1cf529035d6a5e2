"""An OpenAI-compatible chat-completions server over the local engine (``muarl serve``).

Routes: ``POST /v1/chat/completions`` and ``GET /v1/models``. A request carries OpenAI-format ``messages``
(tool calls and tool results included) and ``tools``, and optionally ``temperature``, ``top_p``,
``max_tokens`` (or ``max_completion_tokens``), ``seed`` and ``return_token_ids``. The conversation is
rendered by the model's chat format exactly as the engine renders it in training, so a served checkpoint
sees the layout it was trained on. Concurrent requests are decoded together by the engine's batched
generator (requests with the same sampling options share a batch; :mod:`muarl.models.local_chat`).

With ``"return_token_ids": true`` the response also holds the exact token ids: ``prompt_token_ids`` (top
level: the rendered conversation and generation prompt) and ``choices[0].token_ids`` (the sampled tokens,
the end-of-turn token included when the turn ended by itself). The names are vLLM's.

Not supported (a 400 says so): streaming, ``n`` other than 1. ``model`` and ``tool_choice`` are accepted
and ignored: one model is served. Every error is a JSON ``{"error": {"message", "type", "code"}}``, never a
traceback: 400 for a request that cannot be served (bad fields, a role the chat format cannot render, a
conversation longer than the context: code ``context_length_exceeded``, as OpenAI says it), 500 for a failure of
the server itself.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muarl.models.base import CONTEXT_FULL_CODE, ContextFull
from muarl.models.local_chat import LocalChatClient
from muarl.types import Message, ToolSpec


class BadRequest(ValueError):
    """A request the server cannot serve; answered with 400 and this message."""


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


def _number(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise BadRequest(f"{key} must be {'a number' if kind is float else 'an integer'}, got {value!r}")
    return kind(value)


def parse_request(body: Any) -> tuple[list[Message], list[ToolSpec], dict[str, Any], bool]:
    """(messages, tools, sampling options for LocalChatClient.generate, return_token_ids) of a request body."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if body.get("stream"):
        raise BadRequest("streaming is not supported")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise BadRequest("messages must be a non-empty list")
    try:
        messages = [Message.from_openai(m) for m in raw_messages]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BadRequest(f"messages: not OpenAI chat messages ({type(exc).__name__}: {str(exc)[:200]})") from None
    raw_tools = body.get("tools") or []
    try:
        tools = [ToolSpec.from_openai(t) for t in raw_tools]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BadRequest(f"tools: not OpenAI function tools ({type(exc).__name__}: {str(exc)[:200]})") from None
    max_tokens = _number(body, "max_tokens", int)
    sampling = {"temperature": _number(body, "temperature", float), "top_p": _number(body, "top_p", float),
                "max_tokens": _number(body, "max_completion_tokens", int) if max_tokens is None else max_tokens,
                "seed": _number(body, "seed", int)}
    return messages, tools, sampling, bool(body.get("return_token_ids", False))


def create_app(client: LocalChatClient) -> Starlette:
    """The ASGI app serving ``client``'s model under the name ``client.model``."""
    ids = itertools.count(1)

    async def completions(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        try:
            messages, tools, sampling, with_ids = parse_request(body)
            done = await client.generate(messages, tools, **sampling)
        except ContextFull as exc:  # in OpenAI's words and code, which muarl's client (and others) read as the policy's doing
            return _error(400, f"the conversation exceeds the model's maximum context length: {exc}", code=CONTEXT_FULL_CODE)
        except (BadRequest, ValueError) as exc:  # ValueError: sampling out of range, unrenderable role
            return _error(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - the client gets a JSON error, never a traceback
            return _error(500, f"{type(exc).__name__}: {exc}", "server_error")
        choice: dict[str, Any] = {"index": 0, "message": done.message.to_openai(), "finish_reason": done.finish_reason}
        usage = {"prompt_tokens": len(done.prompt_ids), "completion_tokens": len(done.completion_ids),
                 "total_tokens": len(done.prompt_ids) + len(done.completion_ids)}
        response: dict[str, Any] = {"id": f"chatcmpl-{next(ids)}", "object": "chat.completion", "created": int(time.time()),
                                    "model": client.model, "choices": [choice], "usage": usage}
        if with_ids:
            response["prompt_token_ids"] = done.prompt_ids
            choice["token_ids"] = done.completion_ids
        return JSONResponse(response)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": client.model, "object": "model", "owned_by": "muarl"}]})

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, exc.detail)

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"])],
                     exception_handlers={HTTPException: http_error})


class LocalModelServer:
    """``create_app(client)`` under uvicorn on ``host:port`` (port 0: a free one). ``serve_forever()`` serves in
    the calling thread (the CLI); as a context manager it serves from a background thread (tests)."""

    def __init__(self, client: LocalChatClient, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self._socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        config = uvicorn.Config(create_app(client), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    def serve_forever(self) -> None:
        self._server.run(sockets=[self._socket])

    def __enter__(self) -> LocalModelServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[self._socket])), daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server stopped while starting")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()
