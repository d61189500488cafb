"""What the shells of a server-to-server connection share, whatever they carry: a leaf link
(federation/leafnode/link.py) and a route (hub/routes/route.py).

- ``read_first_info``: the dialling side's first read, until the peer's INFO;
- ``PeerPinger``: the pinger that keeps such a connection honest, and the round trip its PONG
  measures (the reference's ``rtt`` in /leafz and /routez).
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from anyio.abc import ByteStream

from core.errors import ProtocolError
from core.protocol import encoder
from core.protocol.events import Err, Info
from core.protocol.parser import _Parser

_READ_SIZE = 65536
FIRST_PING_DELAY = 1.0  # the reference pings a new link about a second after the handshake


async def read_first_info(
    stream: ByteStream,
    parser: _Parser,
    timeout: float,
    closed: type[Exception],
    *,
    peer: str,
    port: str,
) -> dict[str, Any]:
    """The options of the first INFO ``stream`` brings within ``timeout``. The parser stops after
    it (what follows stays buffered in ``parser``). Anything else ends the connection with
    ``closed(reason)``: the peer closing, bytes that are not this protocol (not a ``port`` port),
    the peer's -ERR, or no INFO in time. ``peer`` names the other side in the reason."""
    with anyio.move_on_after(timeout):
        while True:
            try:
                data = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                raise closed(f"the {peer} closed the connection before its INFO") from None
            try:
                events = parser.feed(data, stop_after=Info)
            except ProtocolError as e:
                raise closed(f"not a {port} port: {e.message or 'protocol error'}") from None
            for ev in events:
                if type(ev) is Info:
                    return ev.options
                if type(ev) is Err:
                    raise closed(f"the {peer} said: {ev.message}")
    raise closed(f"no INFO from the {peer} within {timeout:g}s")


class PeerPinger:
    """Mixin: a PING ``FIRST_PING_DELAY`` after the handshake, then every ``_ping_interval()``;
    more than ``cfg.ping_max`` unanswered close the connection as stale. ``_on_pong`` resets the
    count and measures the round trip of the last PING."""

    _connected: anyio.Event
    cfg: Any  # core.config.ServerConfig

    def _init_pings(self) -> None:
        self.pings_out = 0
        self.rtt: float | None = None
        self._ping_sent_at: float | None = None

    def _ping_interval(self) -> float:
        raise NotImplementedError

    def _send(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self, reason: str, err: str | None = None) -> None:
        raise NotImplementedError

    async def _pinger(self) -> None:
        await self._connected.wait()
        interval = FIRST_PING_DELAY
        while True:
            await anyio.sleep(interval)
            interval = self._ping_interval()
            if self.pings_out >= self.cfg.ping_max:
                self.close("stale connection", "Stale Connection")
                return
            self.pings_out += 1
            self._ping_sent_at = time.monotonic()
            self._send(encoder.PING)

    def _on_pong(self) -> None:
        self.pings_out = 0
        if self._ping_sent_at is not None:
            self.rtt = time.monotonic() - self._ping_sent_at
            self._ping_sent_at = None
