"""The test proxy (tests/support/proxy.py) against a trivial echo server, from sync code.

Timing asserts are loose on purpose: the machine running the suite may be a loaded 2-core box."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.proxy import Proxy
from tests.support.servers import wait_until


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            pass  # reset by the proxy: what the tests do


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    srv = _Server(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[Proxy]:
    with Proxy(echo) as p:
        yield p


def _connect(p: Proxy) -> socket.socket:
    return socket.create_connection((p.host, p.port), timeout=5)


def _echo_round(s: socket.socket, data: bytes) -> bytes:
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _closed(s: socket.socket) -> bool:
    """True once the peer closed or reset ``s`` (reads nothing more)."""
    try:
        s.settimeout(5)
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_forwards_both_ways_and_counts_bytes(proxy: Proxy) -> None:
    with _connect(proxy) as s:
        assert _echo_round(s, b"hello" * 1000) == b"hello" * 1000
        wait_until(lambda: proxy.connections == 1, what="one live connection")
        wait_until(
            lambda: proxy.bytes_forwarded == {"up": 5000, "down": 5000}, what="5000 bytes each way counted"
        )
    wait_until(lambda: proxy.connections == 0, what="the connection to be gone after the client closed")


def _refused(p: Proxy) -> bool:
    """A new connection is refused: reset at connect, or accepted and reset at once."""
    try:
        s = _connect(p)
    except OSError:
        return True
    with s:
        return _closed(s)


def test_cut_closes_live_connections_and_resets_new_ones_until_restore(proxy: Proxy) -> None:
    live: list[socket.socket] = []
    try:
        live += [_connect(proxy) for _ in range(3)]
        for s in live:
            assert _echo_round(s, b"x") == b"x"
        wait_until(lambda: proxy.connections == 3, what="three live connections")
        proxy.cut()
        assert proxy.connections == 0
        assert all(_closed(s) for s in live)
        assert _refused(proxy)
        assert proxy.connections == 0
        proxy.restore()
        with _connect(proxy) as s:
            assert _echo_round(s, b"back") == b"back"
    finally:
        for s in live:
            s.close()


def test_delay_adds_latency_per_direction(proxy: Proxy) -> None:
    with _connect(proxy) as s:
        assert _echo_round(s, b"warm") == b"warm"
        proxy.delay(0.2)
        t0 = time.monotonic()
        assert _echo_round(s, b"ping") == b"ping"
        assert time.monotonic() - t0 >= 0.35  # 0.2 each way, loosely
        proxy.delay(0)
        t0 = time.monotonic()
        assert _echo_round(s, b"ping") == b"ping"
        assert time.monotonic() - t0 < 0.35


def test_throttle_limits_rate_within_a_factor(proxy: Proxy) -> None:
    rate = 200_000  # bytes/s per direction
    proxy.throttle(rate)
    data = b"y" * 200_000  # ~1 s at the rate (the echo back runs alongside, through its own bucket)
    with _connect(proxy) as s:
        t0 = time.monotonic()
        got = _echo_round(s, data)
        elapsed = time.monotonic() - t0
    assert got == data
    assert 0.5 <= elapsed <= 5.0, f"{len(data)} bytes at {rate} B/s took {elapsed:.2f}s"
    proxy.throttle(None)
    with _connect(proxy) as s:
        t0 = time.monotonic()
        assert _echo_round(s, data) == data
        assert time.monotonic() - t0 < 0.5


def test_close_ends_live_connections() -> None:
    srv = _Server(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = Proxy(srv.server_address)
        s = _connect(p)
        assert _echo_round(s, b"z") == b"z"
        p.close()
        assert _closed(s)
        s.close()
        with pytest.raises(OSError):
            socket.create_connection((p.host, p.port), timeout=2).close()
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_read_larger_than_the_throttles_burst_still_passes() -> None:
    """A read made before the throttle was set can exceed its burst (64 KiB against 3000 bytes
    at 60 kB/s): it passes a burst at a time, where it used to wait forever."""
    import asyncio

    from tests.support.proxy import _Bucket

    bucket = _Bucket()
    bucket.set(60_000)
    asyncio.run(asyncio.wait_for(bucket.take(64 * 1024), timeout=30))
