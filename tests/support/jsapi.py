"""Small helpers the JetStream integration tests share: a connected client and raw API calls."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nats


async def connect(srv: Any, timeout: float = 5.0) -> tuple[Any, Any]:
    """A nats-py connection to ``srv`` and its JetStream context."""
    nc = await nats.connect(srv.url)
    return nc, nc.jetstream(timeout=timeout)


@asynccontextmanager
async def jetstream(srv: Any, timeout: float = 5.0) -> AsyncIterator[tuple[Any, Any]]:
    """``connect`` for the length of a block: ``async with jetstream(srv) as (nc, js):``."""
    nc, js = await connect(srv, timeout)
    try:
        yield nc, js
    finally:
        await nc.close()


async def api(nc: Any, subject: str, body: dict | bytes | None = None) -> dict:
    """One raw JetStream API request; the decoded JSON reply."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(subject, payload, timeout=5)
    return json.loads(msg.data)
