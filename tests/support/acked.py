"""A JetStream publisher that keeps going through faults and records every acknowledgement.

Each message carries a ``Nats-Msg-Id``: a publish retried after a timeout (the server may have
stored it and lost only the ack, or died before answering) is stored once, and its ack names the
sequence of the first store. ``acks`` holds every (message id, acknowledged sequence): what a fault test may
require downstream.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors


@dataclass
class AckedPublisher:
    """Publishes ``<prefix>-<i>`` to ``subject`` on ``url``, one at a time, ``interval`` apart,
    until ``stop()``; a publish is retried (same id) until acknowledged."""

    url: str
    subject: str
    prefix: str
    interval: float = 0.005
    ack_timeout: float = 1.0
    give_up_after: float = 60.0  # one message unacknowledged this long: the test fails
    duplicates: int = 0  # acks that said "duplicate": a retry of a stored message
    acks: list[tuple[str, int]] = field(default_factory=list)  # (msg id, its sequence)
    retries: dict[str, int] = field(default_factory=dict)  # error type -> count
    connection_errors: int = 0  # reported by the client while it reconnects (not logged)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def acked(self) -> list[int]:
        """The acknowledged stream sequences, in publish order."""
        return [seq for _id, seq in self.acks]

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        nc = await nats.connect(
            self.url,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
            connect_timeout=2,
            allow_reconnect=True,
            error_cb=self._connection_error,
        )
        try:
            js = nc.jetstream(timeout=self.ack_timeout)
            i = 0
            while not self._stop.is_set():
                await self._publish_until_acked(js, i)
                i += 1
                await asyncio.sleep(self.interval)
        finally:
            await nc.close()

    async def _connection_error(self, _e: Exception) -> None:
        self.connection_errors += 1

    async def _publish_until_acked(self, js: Any, i: int) -> None:
        msg_id = f"{self.prefix}-{i}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.give_up_after
        while True:
            try:
                ack = await js.publish(self.subject, msg_id.encode(), headers={"Nats-Msg-Id": msg_id})
            except (TimeoutError, nats.errors.Error) as e:
                # a timeout, no responders (the server restarting), a reconnect in progress
                name = type(e).__name__
                self.retries[name] = self.retries.get(name, 0) + 1
                if loop.time() > deadline:
                    raise AssertionError(f"{msg_id} unacknowledged for {self.give_up_after}s: {e!r}") from e
                await asyncio.sleep(0.05)
                continue
            if ack.duplicate:
                self.duplicates += 1
            self.acks.append((msg_id, ack.seq))
            return
