"""Fill a stream fast, every publish acknowledged, without a future per message.

nats-py's ``publish_async`` keeps a future and an inbox per message; for a million messages that
is most of the time (and, kept all at once, most of the memory). Here every publish names one
shared reply subject and a callback counts the acks: at most ``window`` unacknowledged at a time,
so a server's ingest queue never overflows (the reference drops past 100,000 queued messages).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class FillError(Exception):
    pass


async def fill_stream(
    nc: Any,
    subject: str | Callable[[int], str],
    n: int,
    payload: Callable[[int], bytes],
    *,
    window: int = 5000,
    ack_timeout: float = 60.0,
) -> None:
    """Publish ``payload(i)`` for i in 0..n-1 to ``subject`` (or ``subject(i)``; bound to a
    stream), waiting for every ack; FillError if one is a JetStream error or the acks stop for
    ``ack_timeout``."""
    subject_of = subject if callable(subject) else lambda _i: subject
    inbox = nc.new_inbox()
    acked = 0
    errors: list[bytes] = []
    room = asyncio.Event()  # set while fewer than ``window`` acks are outstanding

    async def on_ack(msg: Any) -> None:
        nonlocal acked
        acked += 1
        if b'"error"' in msg.data:
            errors.append(msg.data)
        if sent - acked <= window // 2:
            room.set()

    sub = await nc.subscribe(inbox, cb=on_ack, pending_msgs_limit=4 * window)
    sent = 0
    try:
        for i in range(n):
            if sent - acked >= window:
                room.clear()
                await nc.flush()
                try:
                    await asyncio.wait_for(room.wait(), ack_timeout)
                except TimeoutError:
                    raise FillError(f"acks stopped: {acked} of {sent}") from None
            await nc.publish(subject_of(i), payload(i), reply=inbox)
            sent += 1
        await nc.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ack_timeout
        while acked < n:
            if loop.time() > deadline:
                raise FillError(f"acks stopped: {acked} of {n}")
            await asyncio.sleep(0.01)
    finally:
        await sub.unsubscribe()
    if errors:
        raise FillError(f"{len(errors)} publishes refused, e.g. {errors[0]!r}")
