"""A small synchronous NATS client on a raw socket, for attacks and for the checks after them.

Synchronous on purpose: the attacks send exact bytes (a frame cut at any offset, a socket closed
with RST), and the bystander runs in its own thread with its own socket, so a stall of the
server shows up as a late PONG and never as a stall of the test's event loop.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
_inboxes = itertools.count(1)
OPEN: list[Raw] = []  # closed by the abuse conftest after each test, whatever the test did


class Closed(Exception):
    """The server closed the connection (EOF or RST)."""


@dataclass(frozen=True, slots=True)
class Frame:
    op: bytes  # MSG, HMSG, -ERR, +OK, INFO, ...
    line: bytes  # the whole control line, without CRLF
    headers: bytes | None = None
    payload: bytes = b""

    @property
    def subject(self) -> bytes:
        return self.line.split()[1]


def connect_json(**fields: object) -> bytes:
    base = {"verbose": False, "pedantic": False, "headers": True, **fields}
    return b"CONNECT " + json.dumps(base).encode() + b"\r\n"


def rst_close(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER on, timeout 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Raw:
    """One client connection: reads INFO, optionally upgrades to TLS, sends CONNECT."""

    def __init__(
        self,
        port: int,
        *,
        connect: bytes | None = CONNECT,
        tls: ssl.SSLContext | None = None,
        timeout: float = 5.0,
        rcvbuf: int | None = None,
    ) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        OPEN.append(self)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""
        self.info = self.read_line(timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        if connect:
            self.send(connect)

    # -- bytes ----------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no data from the server in time")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError) as e:
            raise Closed(str(e)) from e
        except TimeoutError as e:  # TimeoutError on 3.10+, ssl's own on some paths
            raise TimeoutError("no data from the server in time") from e
        if not chunk:
            raise Closed("EOF")
        self.buf += chunk

    def recv_some(self, timeout: float) -> bytes:
        """What the server sends next (what was buffered first); Closed, or TimeoutError."""
        if not self.buf:
            self._fill(time.monotonic() + timeout)
        data, self.buf = self.buf, b""
        return data

    def read_line(self, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buf:
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read_exact(self, n: int, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            self._fill(deadline)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_frame(self, timeout: float = 5.0) -> Frame:
        """The next frame; answers the server's PINGs on the way."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.read_line(max(0.0, deadline - time.monotonic()))
            op = line.split(b" ", 1)[0].upper()
            if op == b"PING":
                self.send(b"PONG\r\n")
                continue
            left = max(0.0, deadline - time.monotonic())
            if op == b"MSG":
                size = int(line.split()[-1])
                body = self.read_exact(size + 2, left)
                return Frame(op, line, None, body[:-2])
            if op == b"HMSG":
                parts = line.split()
                hsize, total = int(parts[-2]), int(parts[-1])
                body = self.read_exact(total + 2, left)
                return Frame(op, line, body[:hsize], body[hsize:total])
            return Frame(op, line)

    def drain_until_closed(self, timeout: float) -> bytes:
        """Everything the server sends until it closes; TimeoutError if it keeps the socket."""
        deadline = time.monotonic() + timeout
        out, self.buf = self.buf, b""
        while True:
            try:
                self._fill(deadline)
            except Closed:
                return out + self.buf
            out += self.buf
            self.buf = b""

    # -- protocol -------------------------------------------------------------------------------
    def ping(self, timeout: float = 5.0) -> float:
        """One PING/PONG round trip; its duration. Frames met on the way are dropped."""
        t0 = time.monotonic()
        self.send(b"PING\r\n")
        while True:
            f = self.read_frame(max(0.0, t0 + timeout - time.monotonic()))
            if f.op == b"PONG":
                return time.monotonic() - t0
            if f.op == b"-ERR":
                raise Closed(f.line.decode(errors="replace"))

    def request(self, subject: str | bytes, body: bytes = b"", timeout: float = 5.0) -> Frame:
        """Publish with a fresh reply inbox and return the first message that arrives on it
        (a JetStream delivery arrives under its own subject, on the inbox's sid)."""
        subj = subject.encode() if isinstance(subject, str) else subject
        n = next(_inboxes)
        inbox = b"_INBOX.abuse%d.%d" % (os.getpid(), n)
        sid = b"r%d" % n
        self.send(
            b"SUB %s %s\r\nUNSUB %s 1\r\nPUB %s %s %d\r\n%s\r\n"
            % (inbox, sid, sid, subj, inbox, len(body), body)
        )
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if f.op in (b"MSG", b"HMSG") and f.line.split()[2] == sid:  # a delivery keeps its subject
                return f
            if f.op == b"-ERR":
                raise Closed(f.line.decode(errors="replace"))

    def api(self, subject: str, body: dict | bytes | None = None, timeout: float = 10.0) -> dict:
        raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        return json.loads(self.request(subject, raw, timeout).payload)

    def close(self, *, rst: bool = False) -> None:
        try:
            if rst:
                rst_close(self.sock)
            else:
                self.sock.close()
        except OSError:
            pass


def close_all() -> None:
    while OPEN:
        OPEN.pop().close()


def stored_payload(reply: dict) -> bytes:
    """The payload of a ``STREAM.MSG.GET`` reply."""
    return base64.b64decode(reply["message"].get("data", ""))
