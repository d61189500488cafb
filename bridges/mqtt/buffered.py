"""paho-mqtt reading whole chunks from its socket instead of a few bytes per system call.

paho reads each packet with at least three ``recv`` calls (the command byte, the length bytes one by
one, then the body) and a ``select`` before each packet: four system calls per inbound PUBLISH, which
was the largest cost of its network thread. :class:`BufferedSocket` serves those small reads from one
large read, and says how much it holds through ``pending()`` - the method paho already consults for
TLS sockets, so its loop neither sleeps in ``select`` while a packet waits in our buffer nor stalls
on one. :class:`BufferedClient` installs it and drains the buffer in one ``loop_read``.
"""

from __future__ import annotations

from typing import Any

from paho.mqtt.client import MQTT_ERR_SUCCESS, Client, MQTTErrorCode

CHUNK = 65536
# Packets read per loop_read before paho's loop gets its turn to write (our PUBACKs, PINGREQ) and to
# check the keepalive. Unbounded, a broker streaming a backlog kept paho reading for tens of seconds
# without sending a byte, and the broker timed the session out.
BURST = 64


class BufferedSocket:
    """A socket (plain or TLS) whose ``recv`` is served from a buffer; everything else passes through."""

    __slots__ = ("_buf", "_pos", "_sock")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._buf = b""
        self._pos = 0

    def recv(self, n: int) -> bytes:
        buf, pos = self._buf, self._pos
        if pos >= len(buf):
            data = self._sock.recv(max(n, CHUNK))  # raises BlockingIOError etc. exactly as before
            if len(data) <= n:
                return data
            self._buf, self._pos = data, n
            return data[:n]
        end = pos + n
        if end >= len(buf):
            self._buf, self._pos = b"", 0
            return buf[pos:]
        self._pos = end
        return buf[pos:end]

    def pending(self) -> int:
        inner = self._sock.pending() if hasattr(self._sock, "pending") else 0
        return len(self._buf) - self._pos + inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class BufferedClient(Client):
    """A paho ``Client`` on a :class:`BufferedSocket`."""

    def _create_socket(self) -> Any:  # paho's (private) socket factory, called on every (re)connect
        return BufferedSocket(super()._create_socket())

    def loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        # paho reads one packet per call; keep going while packets may wait in the buffer, up to BURST.
        # Packets left over are not forgotten: pending() makes paho's next select() return at once.
        rc = super().loop_read(max_packets)
        sock = self._sock
        if not isinstance(sock, BufferedSocket):
            return rc
        ours: BufferedSocket = sock
        for _ in range(BURST):
            if rc != MQTT_ERR_SUCCESS or not ours.pending() or ours is not self._sock:
                break
            rc = super().loop_read(max_packets)
        return rc
