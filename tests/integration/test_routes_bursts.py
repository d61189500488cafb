"""A publisher's burst of one subject across a cluster, against both implementations.

leafjet routes such a burst a run at a time (a run of same-size PUBs in one read is matched once
and crosses a route as one write, core/server/DESIGN.md "Runs"): every subscriber must still get
every message once and in order, a queue group once cluster-wide, a subscription with a message
limit exactly its limit, and the server with no interest nothing.
"""

from __future__ import annotations

import socket
from collections import Counter

import anyio
import nats
import pytest

from tests.integration.test_routes import cluster  # noqa: F401  (the fixture: both kinds)
from tests.support.cluster import answer_probes, probe_subject, wait_for_interest
from tests.support.servers import wait_until_async

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(180)]

BURST = 3000


async def _crossed(pub: nats.NATS, nc: nats.NATS) -> None:
    probe = probe_subject()
    await answer_probes(nc, probe)
    await wait_for_interest(pub, probe, timeout=60)


async def test_a_burst_of_one_subject_reaches_each_subscriber_once_in_order(cluster):  # noqa: F811
    ncs = [await nats.connect(cluster.url(i), allow_reconnect=False) for i in range(3)]
    pub = ncs[0]
    got: dict[str, list[bytes]] = {}
    queue_got: list[tuple[int, bytes]] = []

    def recorder(name: str):
        got[name] = []

        async def on_msg(msg):
            got[name].append(msg.data)

        return on_msg

    try:
        # plain interest on the publisher's server and on a peer (two of its subscriptions
        # match), a wildcard on the third server, and one that stops after 10 messages
        await ncs[0].subscribe("burst.x", cb=recorder("local"))
        await ncs[1].subscribe("burst.x", cb=recorder("n2"))
        await ncs[1].subscribe("burst.*", cb=recorder("n2-wild"))
        await ncs[2].subscribe("burst.>", cb=recorder("n3"))
        limited = await ncs[2].subscribe("burst.x", cb=recorder("n3-10"))
        await limited.unsubscribe(10)
        for nc in ncs[1:]:
            await _crossed(pub, nc)
        payloads = [b"%06d" % i for i in range(BURST)]  # one size: the common run
        for p in payloads:
            await pub.publish("burst.x", p)
        await pub.flush()
        full = ("local", "n2", "n2-wild", "n3")
        await wait_until_async(lambda: all(len(got[n]) >= BURST for n in full), 60, what="the burst")
        await anyio.sleep(0.3)  # nothing more may come
        for name in full:
            assert got[name] == payloads, name  # once each, in order
        assert got["n3-10"] == payloads[:10]

        # a queue group with members on two peers: each message once, cluster-wide
        for i in (1, 2):

            async def member(msg, i=i):
                queue_got.append((i, msg.data))

            await ncs[i].subscribe("burst.x", queue="workers", cb=member)
            await _crossed(pub, ncs[i])
        for p in payloads:
            await pub.publish("burst.x", p)
        await pub.flush()
        await wait_until_async(lambda: len(queue_got) >= BURST, 60, what="the queue group's burst")
        await wait_until_async(lambda: len(got["n2"]) >= 2 * BURST, 60, what="the plain subscriber")
        await anyio.sleep(0.3)
        assert sorted(p for _i, p in queue_got) == payloads  # exactly once
        servers = Counter(i for i, _p in queue_got)
        assert servers[1] > 0 and servers[2] > 0, servers
        assert got["n2"] == payloads * 2 and got["local"] == payloads * 2
    finally:
        for nc in ncs:
            await nc.close()


WARM_UP = b"MSG burst.raw 1 1\r\nw\r\n"


def _raw_subscriber(port: int) -> socket.socket:
    """A raw socket subscribed to ``burst.raw`` (sid 1) on ``port``, its handshake read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    buf = b""
    while not buf.endswith(b"\r\n"):
        buf += s.recv(4096)
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB burst.raw 1\r\nPING\r\n')
    buf = b""
    while not buf.endswith(b"PONG\r\n"):
        chunk = s.recv(4096)
        assert chunk, "the server closed the raw subscriber"
        buf += chunk
    return s


async def test_a_burst_reaches_a_subscriber_as_the_reference_frames_it(cluster):  # noqa: F811
    """Issue 22: what a subscriber's client parses per message. Across a route a burst reaches
    the subscriber as plain ``MSG <subject> <sid> <size>`` frames, back to back, with nothing
    between them (no reply field, no headers, no PING or INFO): the bytes the reference sends."""
    sub = _raw_subscriber(cluster.nodes[1].client_port)
    pub = await nats.connect(cluster.url(0), allow_reconnect=False)
    received = bytearray()
    try:
        sub.setblocking(False)

        def drain() -> None:
            try:
                while chunk := sub.recv(1 << 20):
                    received.extend(chunk)
            except BlockingIOError:
                pass

        with anyio.fail_after(60):  # until the subscription has crossed the route
            while not received:
                await pub.publish("burst.raw", b"w")
                await pub.flush()
                await anyio.sleep(0.05)
                drain()
        payloads = [b"%06d" % i for i in range(BURST)]
        for p in payloads:
            await pub.publish("burst.raw", p)
        await pub.flush()
        expected = b"".join(b"MSG burst.raw 1 6\r\n" + p + b"\r\n" for p in payloads)

        def burst_arrived() -> bool:
            drain()
            return len(received) >= len(expected) + received.count(WARM_UP) * len(WARM_UP)

        await wait_until_async(burst_arrived, 60, what="the burst")
        await anyio.sleep(0.3)  # nothing more may come
        drain()
        warm_ups = 0
        while received.startswith(WARM_UP, warm_ups * len(WARM_UP)):
            warm_ups += 1
        assert bytes(received[warm_ups * len(WARM_UP) :]) == expected
    finally:
        await pub.close()
        sub.close()
