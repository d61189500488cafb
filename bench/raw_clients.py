"""A tiny raw-socket NATS publisher and a counting subscriber, for measuring servers, not clients.

The stock nats-py client spends ~10 us of CPU per message publishing and as much again
receiving: on a 2-core machine that shares its cores with two servers, a nats-py pair is the
slowest part of ``bench cluster``, and its scheduling decides the figure. These two spend well
under 1 us per message, and the same for both servers:

- the publisher sends ``PUB <subject> <size>`` frames a batch at a time (one prepared buffer of
  ~64 KiB, one ``sendall`` each), keeping at most ``window`` messages ahead of what the
  subscriber has counted (a server closes a subscriber that falls far behind);
- the subscriber reads with ``recv_into`` a 1 MiB buffer and counts the frames of its subject
  in place with ``bytearray.count`` of the frame's start (the payload is all ``x``, so the marker never
  occurs inside one), answering a server's ``PING``.

Each runs in a process of its own (forked by ``run_pair``), shares two counters with the other
(how many messages it has seen, whether the readiness probe arrived) and reports its own CPU
time over the measured stretch. Sans nats-py: CONNECT with verbose and pedantic off.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

_CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"echo":false,"headers":false,"protocol":1}\r\n'
_BATCH_BYTES = 64 << 10
_RECV_BYTES = 1 << 20
_READY = 0  # shared counters: the subscriber saw the readiness probe
_COUNT = 1  # messages of the subject the subscriber has counted
_START = 2  # the publisher's clock (ns) when it sent the first message
_END = 3  # the subscriber's clock (ns) when it counted the last


@dataclass
class PairRun:
    msgs_per_s: float
    pub_cpu_us: float  # the publisher's CPU per message
    sub_cpu_us: float  # the subscriber's CPU per message
    counted: int  # messages the subscriber counted (the last read may hold more than asked for)


def _dial(url: str) -> socket.socket:
    parts = urlparse(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _read_until(sock, b"\r\n")  # INFO
    return sock


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    got = b""
    while marker not in got:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before {marker!r}: {got[-200:]!r}")
        got += chunk
    return got


def _handshake(sock: socket.socket, ops: bytes = b"") -> None:
    """CONNECT, ``ops``, then a PING whose PONG says the server has handled them all."""
    sock.sendall(_CONNECT + ops + b"PING\r\n")
    got = _read_until(sock, b"PONG\r\n")
    if b"-ERR" in got:
        raise ConnectionError(f"server refused: {got!r}")


def _subscriber(url: str, subject: str, probe: str, n: int, shared: Any, result: Any) -> None:
    sock = _dial(url)
    _handshake(sock, f"SUB {subject} 1\r\nSUB {probe} 2\r\n".encode())
    marker = f"MSG {subject} 1 ".encode()
    probe_marker = f"MSG {probe} 2 ".encode()
    keep = max(len(marker), len(probe_marker), 6) - 1  # a marker may straddle two reads
    buf = bytearray(_RECV_BYTES)
    tail = b""
    count = 0
    cpu0 = None
    sock.settimeout(300)
    while count < n:
        got = sock.recv_into(buf)
        if not got:
            raise ConnectionError("the server closed the subscriber")
        # Counted in place (no copy of the read): the markers within it, then any that straddle
        # the previous read's end (``tail`` and this read's start are each too short to hold one).
        count += buf.count(marker, 0, got) + _seam(tail, buf, got, marker).count(marker)
        if (
            cpu0 is None
            and not shared[_READY]
            and (buf.find(probe_marker, 0, got) >= 0 or probe_marker in _seam(tail, buf, got, probe_marker))
        ):
            shared[_READY] = 1
            cpu0 = time.process_time()
        pings = buf.count(b"PING\r\n", 0, got) + _seam(tail, buf, got, b"PING\r\n").count(b"PING\r\n")
        if pings:
            sock.sendall(b"PONG\r\n" * pings)
        shared[_COUNT] = count
        tail = bytes(buf[max(0, got - keep) : got]) if got >= keep else (tail + buf[:got])[-keep:]
    shared[_END] = time.monotonic_ns()
    result.send((time.process_time() - (cpu0 or 0.0), count))
    sock.close()


def _seam(tail: bytes, buf: bytearray, got: int, marker: bytes) -> bytes:
    """The bytes around the boundary between the previous reads (``tail``) and this one where
    ``marker`` could straddle it: too short on either side to hold a whole one, so counting it
    here counts only those that straddle."""
    keep = len(marker) - 1
    return tail[-keep:] + buf[: min(got, keep)] if keep else b""


def _publisher(
    url: str, subject: str, probe: str, n: int, size: int, window: int, shared: Any, result: Any
) -> None:
    sock = _dial(url)
    _handshake(sock)
    # Until the subscription has crossed the route: a message before it would be dropped. The
    # probe subject was subscribed after the measured one, on the same connection, so once a
    # probe arrives the measured subject's interest is known here too.
    deadline = time.monotonic() + 60
    probe_frame = f"PUB {probe} 0\r\n\r\n".encode()
    while not shared[_READY]:
        if time.monotonic() > deadline:
            raise TimeoutError("the subscription never crossed the route")
        sock.sendall(probe_frame)
        time.sleep(0.005)
    frame = f"PUB {subject} {size}\r\n".encode() + b"x" * size + b"\r\n"
    per_batch = max(1, _BATCH_BYTES // len(frame))
    batch = frame * per_batch
    cpu0 = time.process_time()
    shared[_START] = time.monotonic_ns()
    sent = 0
    while sent < n:
        while sent - shared[_COUNT] > window:
            time.sleep(0.0002)
        k = min(per_batch, n - sent)
        sock.sendall(batch if k == per_batch else frame * k)
        sent += k
    _handshake_flush(sock)
    result.send(time.process_time() - cpu0)
    sock.close()


def _handshake_flush(sock: socket.socket) -> None:
    sock.sendall(b"PING\r\n")
    _read_until(sock, b"PONG\r\n")


def run_pair(pub_url: str, sub_url: str, subject: str, probe: str, n: int, size: int) -> PairRun:
    """``n`` messages of ``size`` bytes published on ``pub_url`` until a subscriber on ``sub_url``
    has counted them all; each client a forked process of its own."""
    ctx = multiprocessing.get_context("fork")
    shared = ctx.RawArray("q", 4)
    window = max(2000, (4 << 20) // max(1, size))
    sub_get, sub_put = ctx.Pipe(duplex=False)
    pub_get, pub_put = ctx.Pipe(duplex=False)
    sub = ctx.Process(
        name="subscriber", target=_subscriber, args=(sub_url, subject, probe, n, shared, sub_put), daemon=True
    )
    pub = ctx.Process(
        name="publisher",
        target=_publisher,
        args=(pub_url, subject, probe, n, size, window, shared, pub_put),
        daemon=True,
    )
    sub.start()
    pub.start()
    try:
        deadline = time.monotonic() + 600
        while not (sub_get.poll(0.2) and pub_get.poll(0)):
            failed = [p.name for p in (pub, sub) if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"raw clients failed ({failed}): {shared[_COUNT]} of {n} counted")
        (sub_cpu, counted), pub_cpu = sub_get.recv(), pub_get.recv()
    finally:
        for p in (pub, sub):
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    wall = (shared[_END] - shared[_START]) / 1e9
    return PairRun(n / wall, pub_cpu / n * 1e6, sub_cpu / n * 1e6, counted)
