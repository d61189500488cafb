"""Resource bounds of the server process, read from /proc/PID: RSS under floods, fds and threads
per stream. The bounds are the reference's figures with room (measured on nats-server 2.15 on
the same machine); a leafjet that exceeds them fails, whatever it does today."""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from collections.abc import Iterator

import pytest

from tests.abuse.conftest import fds, rss_mib, threads, wait_for
from tests.abuse.wire import Raw

pytestmark = pytest.mark.integration


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_mib(pid)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.05):
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except (OSError, KeyError):  # the process is gone (or a zombie without VmRSS)
                return

    def stop(self) -> float:
        self.halt.set()
        self.join(5)
        return self.peak


@pytest.mark.timeout(120)
def test_publish_flood_without_waiting_for_acks_keeps_memory_bounded(target):
    c = target.client()
    assert "error" not in c.api("$JS.API.STREAM.CREATE.FLOOD", {"name": "FLOOD", "subjects": ["flood.>"]})
    before = rss_mib(target.pid)
    sampler = RssSampler(target.pid)
    sampler.start()
    payload = b"p" * 65536
    n = 1500  # ~94 MiB, none of it waited for
    c.send(b"SUB _INBOX.flood 1\r\n")
    for i in range(0, n, 50):
        c.send(
            b"".join(
                b"PUB flood.%d _INBOX.flood %d\r\n%s\r\n" % (i + j, len(payload), payload) for j in range(50)
            )
        )
    acks = 0
    deadline = time.monotonic() + 90
    while acks < n and time.monotonic() < deadline:
        f = c.read_frame(timeout=max(0.1, deadline - time.monotonic()))
        if f.op == b"MSG":
            assert b'"error"' not in f.payload, f.payload
            acks += 1
    grown = sampler.stop() - before
    assert acks == n
    info = c.api("$JS.API.STREAM.INFO.FLOOD")
    assert info["state"]["messages"] == n
    assert grown < 256, f"RSS grew {grown:.0f} MiB while ~94 MiB were published without waiting"
    target.assert_survived()


@pytest.mark.timeout(120)
def test_ten_thousand_unacknowledged_deliveries_keep_memory_bounded(target):
    c = target.client()
    assert "error" not in c.api("$JS.API.STREAM.CREATE.UNACK", {"name": "UNACK", "subjects": ["unack.>"]})
    payload = b"u" * 1024
    for i in range(0, 10_000, 500):
        c.send(b"".join(b"PUB unack.%d %d\r\n%s\r\n" % (i + j, len(payload), payload) for j in range(500)))
        c.ping(30)
    wait_for(
        lambda: c.api("$JS.API.STREAM.INFO.UNACK")["state"]["messages"] == 10_000,
        60,
        "10,000 stored messages",
    )
    created = c.api(
        "$JS.API.CONSUMER.CREATE.UNACK",
        {
            "stream_name": "UNACK",
            "config": {
                "name": "U",
                "ack_policy": "explicit",
                "max_ack_pending": -1,
                "ack_wait": 120_000_000_000,
            },
        },
    )
    assert "error" not in created, created
    before = rss_mib(target.pid)
    sampler = RssSampler(target.pid)
    sampler.start()
    reader = Raw(target.port)
    body = b'{"batch":10000,"expires":60000000000}'
    reader.send(
        b"SUB _INBOX.u 1\r\nPUB $JS.API.CONSUMER.MSG.NEXT.UNACK.U _INBOX.u %d\r\n%s\r\n" % (len(body), body)
    )
    got = 0
    while got < 10_000:
        if reader.read_frame(timeout=30).op == b"MSG":
            got += 1
    info = c.api("$JS.API.CONSUMER.INFO.UNACK.U")
    assert info["num_ack_pending"] == 10_000
    grown = sampler.stop() - before
    assert grown < 100, f"RSS grew {grown:.0f} MiB for 10,000 unacknowledged 1 KiB deliveries"
    target.assert_survived()


def _streams_cost(target, n: int) -> tuple[float, float, int, float]:
    """Create ``n`` streams with a message each; (fds per stream, threads added, RSS MiB per stream)."""
    c = target.client()
    fd0, th0, rss0 = fds(target.pid), threads(target.pid), rss_mib(target.pid)
    for i in range(n):
        reply = c.api(
            f"$JS.API.STREAM.CREATE.MANY{i}", {"name": f"MANY{i}", "subjects": [f"many.{i}.>"]}, timeout=30
        )
        assert "error" not in reply, reply
        assert c.api(f"many.{i}.x", b"one", timeout=30).get("seq") == 1
    c.ping()
    return (fds(target.pid) - fd0) / n, threads(target.pid) - th0, n, (rss_mib(target.pid) - rss0) / n


def _assert_stream_costs(target, n: int) -> None:
    fds_per_stream, threads_added, _, rss_per_stream = _streams_cost(target, n)
    kind = target.srv.kind
    print(
        f"{kind}: {fds_per_stream:.2f} fds/stream, +{threads_added} threads, {rss_per_stream:.3f} MiB/stream"
    )
    target.assert_survived()
    over = []
    if fds_per_stream > 3:
        over.append(f"{fds_per_stream:.2f} fds per stream (at most 3)")
    if threads_added > 16:
        over.append(
            f"{threads_added} threads added for {n} streams (at most 16: threads must not grow per stream)"
        )
    if rss_per_stream >= 1.0:
        over.append(f"{rss_per_stream:.2f} MiB per stream (under 1)")
    assert not over, "; ".join(over)


@contextlib.contextmanager
def _open_files_limit(soft: int) -> Iterator[None]:
    """Start servers under a soft limit of ``soft`` open files (systemd's default is 1,024): a
    child process inherits the limit this process has when it starts it."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


@pytest.mark.timeout(120)
def test_fds_threads_and_memory_per_stream_are_bounded_for_hundreds_of_streams(make_target):
    with _open_files_limit(1024):
        target = make_target()
    _assert_stream_costs(target, 200)


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_fds_threads_and_memory_per_stream_are_bounded_for_thousands_of_streams(make_target):
    with _open_files_limit(1024):
        target = make_target()
    _assert_stream_costs(target, 2000)


@pytest.mark.timeout(120)
def test_many_connections_with_subscriptions_keep_memory_bounded(target):
    before = rss_mib(target.pid)
    clients = []
    for i in range(300):
        c = Raw(target.port)
        c.send(b"".join(b"SUB conn.%d.%d %d\r\n" % (i, j, j) for j in range(10)))
        clients.append(c)
    for c in clients:
        c.ping(10)
    grown = rss_mib(target.pid) - before
    for c in clients:
        c.close()
    target.assert_survived()
    assert grown < 100, f"300 connections with 10 subscriptions each cost {grown:.0f} MiB"


@pytest.mark.timeout(120)
def test_flood_to_a_reader_that_stopped_keeps_memory_bounded_with_default_limits(target):
    """With the default max_pending (64 MiB), 160 MiB sent to a client that does not read cost
    at most that buffer and some slack: the client is cut, the publisher never waits on it."""
    slow = Raw(target.port, rcvbuf=4096)
    slow.send(b"SUB big 1\r\n")
    slow.ping()
    before = rss_mib(target.pid)
    sampler = RssSampler(target.pid)
    sampler.start()
    # leafjet pauses a publisher that feeds a full receiver for up to write_deadline (10 s)
    pub = Raw(target.port, timeout=30)
    payload = b"b" * 65536
    try:
        for _ in range(0, 2560, 64):
            pub.send(b"".join(b"PUB big %d\r\n%s\r\n" % (len(payload), payload) for _ in range(64)))
        pub.ping(60)
    finally:
        grown = sampler.stop() - before
    slow.drain_until_closed(timeout=30)
    target.assert_survived()
    assert grown < 200, f"RSS grew {grown:.0f} MiB for one reader that stopped (max_pending 64 MiB)"
