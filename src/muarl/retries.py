"""The pause before retrying a failed server request, shared by every client that retries (model servers,
MCP tool servers)."""

from __future__ import annotations

import asyncio
import random


async def back_off(attempt: int, backoff: float) -> None:
    """Sleep before attempt number ``attempt`` (0 is the first try and does not wait): exponential in the
    attempt, with jitter so that many episodes failing together do not retry in lockstep."""
    if attempt:
        await asyncio.sleep(backoff * 2 ** (attempt - 1) * (0.5 + random.random()))
