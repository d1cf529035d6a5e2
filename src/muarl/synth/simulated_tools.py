"""Tools answered by an LLM in character, for scenarios that exist only as data.

Each call is checked against the tool's JSON schema first (a misfit is an ``ArgumentError``, exactly as with
real tools), then the tool LLM is shown the scenario, the seed database, the tool's schema and every
earlier call of *this* dialogue with its answer, so that reads agree with the seed data and with earlier
writes. It must answer one JSON object, ``{"result": ...}`` or ``{"error": "..."}``; an error becomes the
agent's ``Error: ...`` observation. A tool LLM that twice fails to answer that JSON raises
``BackendError``: the episode errors rather than the agent seeing garbage.

There is no real state, so the "state hash" is a hash of the successful write calls; these episodes are
not scored by state comparison (synthesis marks them ``unscored``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from muarl.domains.base import Domain, ToolError, canonical_json
from muarl.models.base import ModelError
from muarl.rollout.backends import BackendError, ToolBackend
from muarl.synth.validate import Completer, first_json_object
from muarl.types import Message

SYSTEM = """You are the backend of the tools of a service called "{name}". {description}
You are not an assistant: you return exactly what the tool would return, nothing else.

The service's policy (for context):
{policy}

The service's database before this conversation (JSON):
{seed}

Rules:
- Stay consistent with the database and with the earlier calls of this conversation: a write changes what later reads return.
- Never contradict the database; if a record does not exist or the call is not allowed, answer an error.
- Answer with one JSON object only: {{"result": <the tool's output: object, list, string or number>}} or {{"error": "<short message>"}}."""


def render_call(name: str, arguments: dict[str, Any]) -> str:
    return f"{name}({json.dumps(arguments, ensure_ascii=False, sort_keys=True)})"


class SimulatedToolBackend(ToolBackend):
    """One dialogue's tools, simulated by ``client`` over ``domain`` (a scenario's schemas and seed data)."""

    attempts = 2  # tool-LLM answers tried per call before the backend gives up

    def __init__(self, domain: Domain, client: Completer, **sampling: Any):
        self.domain = domain
        self.client = client
        self.sampling = {"temperature": 0.0, **sampling}
        self.log: list[tuple[str, dict[str, Any], str, bool]] = []  # name, arguments, answer, ok
        self.system = SYSTEM.format(
            name=domain.name, description=domain.description, policy=domain.system_prompt(None),
            seed=json.dumps(domain.base.tables, ensure_ascii=False, indent=1),
        )

    def prompt(self, name: str, arguments: dict[str, Any]) -> list[Message]:
        spec = self.domain.tools[name].spec
        earlier = "\n".join(
            f"{i}. {render_call(n, a)} -> {'result' if ok else 'error'}: {out}" for i, (n, a, out, ok) in enumerate(self.log, 1)
        )
        body = (
            f"Tool schema: {json.dumps({'name': spec.name, 'description': spec.description, 'kind': spec.kind, 'parameters': spec.parameters})}\n\n"
            f"Earlier calls in this conversation:\n{earlier or '(none)'}\n\nNow answer: {render_call(name, arguments)}"
        )
        return [Message(role="system", content=self.system), Message(role="user", content=body)]

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        self.domain.tools[name].validate(arguments)  # ArgumentError, as a real tool would raise
        messages = self.prompt(name, arguments)
        answer, text = None, ""
        for _ in range(self.attempts):
            try:
                turn = await self.client.complete(messages, **self.sampling)
            except ModelError as exc:
                raise BackendError(f"tool LLM failed on {name}: {exc}") from exc
            text = turn.message.content or ""
            answer = first_json_object(text)
            if answer is not None and ("result" in answer or "error" in answer):
                break
            answer = None
        if answer is None:
            raise BackendError(f"tool LLM gave no {{'result'|'error'}} JSON for {name} after {self.attempts} tries: {text[:200]!r}")
        if "error" in answer and answer["error"]:
            message = str(answer["error"])
            self.log.append((name, arguments, message, False))
            raise ToolError(message)
        result = answer.get("result")
        output = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        self.log.append((name, arguments, output, True))
        return output

    async def state_hash(self) -> str:
        writes = [(n, a) for n, a, _, ok in self.log if ok and self.domain.tools[n].kind == "write"]
        return "simulated:" + hashlib.sha256(canonical_json(writes).encode()).hexdigest()
