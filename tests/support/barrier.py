"""A barrier for tests that subscribe on one connection and publish on another."""

from __future__ import annotations

from typing import Any


async def subscriptions_sent(nc: Any) -> None:
    """Return once the server has processed every SUB ``nc`` was asked to send.

    One ``flush()`` is not that barrier in nats-py 2.16: a SUB waits in the client's pending
    buffer for its flusher task, while ``flush()`` writes its PING straight to the socket, so the
    server can answer the PONG before it reads the SUB (seen against the reference in about 1 run
    in 17). While the first flush waits for its PONG the flusher writes the SUB, so the second
    PING follows it on the wire."""
    await nc.flush()
    await nc.flush()
