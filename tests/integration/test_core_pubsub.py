"""Core NATS with the stock nats-py client, against leafjet and the reference."""

from __future__ import annotations

import socket
import time

import anyio
import nats
import pytest
from nats.errors import MaxPayloadError, NoRespondersError

from tests.support.barrier import subscriptions_sent

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def _collect(sub, n: int, timeout: float = 5.0) -> list:
    msgs = []
    with anyio.fail_after(timeout):
        while len(msgs) < n:
            msgs.append(await sub.next_msg(timeout=timeout))
    return msgs


async def test_publish_reaches_literal_and_wildcard_subscribers(server):
    nc = await nats.connect(server.url)
    try:
        exact = await nc.subscribe("sensors.a.temp")
        star = await nc.subscribe("sensors.*.temp")
        tail = await nc.subscribe("sensors.>")
        other = await nc.subscribe("other.>")
        await nc.publish("sensors.a.temp", b"21.5")
        await nc.publish("sensors.b.temp", b"22.0")
        await nc.publish("sensors.b.hum.x", b"40")
        await nc.flush()
        assert [m.data for m in await _collect(exact, 1)] == [b"21.5"]
        assert [m.subject for m in await _collect(star, 2)] == ["sensors.a.temp", "sensors.b.temp"]
        assert len(await _collect(tail, 3)) == 3
        assert other.pending_msgs == 0
    finally:
        await nc.close()


async def test_queue_group_delivers_each_message_to_exactly_one_member(server):
    pub = await nats.connect(server.url)
    members = [await nats.connect(server.url) for _ in range(3)]
    try:
        subs = [await m.subscribe("work", queue="workers") for m in members]
        for m in members:
            await subscriptions_sent(m)
        for i in range(300):
            await pub.publish("work", str(i).encode())
        await pub.flush()
        got: list[bytes] = []
        with anyio.fail_after(5):
            while len(got) < 300:
                for s in subs:
                    while s.pending_msgs:
                        got.append((await s.next_msg()).data)
                await anyio.sleep(0.01)
        assert sorted(got, key=int) == [str(i).encode() for i in range(300)]
        assert all(s.delivered > 0 for s in subs), "every member should get some of 300 messages"
    finally:
        for c in [pub, *members]:
            await c.close()


async def test_request_reply(server):
    svc = await nats.connect(server.url)
    client = await nats.connect(server.url)
    try:

        async def handler(msg):
            await msg.respond(b"echo:" + msg.data)

        await svc.subscribe("svc.echo", cb=handler)
        await subscriptions_sent(svc)
        reply = await client.request("svc.echo", b"hi", timeout=2)
        assert reply.data == b"echo:hi"
    finally:
        await svc.close()
        await client.close()


async def test_request_without_responders_fails_fast(server):
    nc = await nats.connect(server.url)
    try:
        with pytest.raises(NoRespondersError):
            await nc.request("nobody.home", b"x", timeout=2)
    finally:
        await nc.close()


async def test_a_subject_with_an_empty_token_reaches_no_one(server):
    """As the reference: ``a..b``, ``a.`` and ``.a`` match no subscription, not even ``>``
    (a publish is not checked unless the client is pedantic, so it is silently dropped)."""
    nc = await nats.connect(server.url)
    try:
        sub = await nc.subscribe(">")
        for subject in ("a..b", "a.", ".a", "a.b"):
            await nc.publish(subject, b"x")
        await nc.flush()
        assert (await sub.next_msg(timeout=2)).subject == "a.b"
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=0.3)
    finally:
        await nc.close()


async def test_headers_round_trip(server):
    nc = await nats.connect(server.url)
    try:
        sub = await nc.subscribe("h")
        await nc.publish("h", b"body", headers={"Trace-Id": "abc", "X-Mixed-Case": "v 1"})
        msg = (await _collect(sub, 1))[0]
        assert msg.data == b"body"
        assert msg.headers == {"Trace-Id": "abc", "X-Mixed-Case": "v 1"}
    finally:
        await nc.close()


async def test_max_payload_is_announced_and_enforced_by_the_client(server):
    nc = await nats.connect(server.url)
    try:
        assert nc.max_payload == 1024 * 1024
        sub = await nc.subscribe("big")
        await nc.publish("big", b"x" * (1024 * 1024))
        assert len((await _collect(sub, 1))[0].data) == 1024 * 1024
        with pytest.raises(MaxPayloadError):
            await nc.publish("big", b"x" * (1024 * 1024 + 1))
    finally:
        await nc.close()


async def test_configured_max_payload(make_server):
    srv = make_server({"max_payload": 4096})
    nc = await nats.connect(srv.url)
    try:
        assert nc.max_payload == 4096
    finally:
        await nc.close()


async def test_unsubscribe_stops_delivery(server):
    nc = await nats.connect(server.url)
    try:
        sub = await nc.subscribe("u")
        await nc.publish("u", b"1")
        await nc.flush()
        await _collect(sub, 1)
        await sub.unsubscribe()
        probe = await nc.subscribe("u")
        await nc.publish("u", b"2")
        await _collect(probe, 1)
        assert sub.pending_msgs == 0
    finally:
        await nc.close()


async def test_many_messages_arrive_in_order(server):
    nc = await nats.connect(server.url)
    try:
        sub = await nc.subscribe("seq", pending_msgs_limit=100_000)
        for i in range(20_000):
            await nc.publish("seq", b"%d" % i)
        await nc.flush()
        msgs = await _collect(sub, 20_000, timeout=20)
        assert [int(m.data) for m in msgs] == list(range(20_000))
    finally:
        await nc.close()


def _stalled_subscriber(port: int, subject: str) -> socket.socket:
    """A raw client that subscribes, then never reads: a tiny receive buffer fills at once."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    got = b""
    while not got.endswith(b"\r\n"):
        got += s.recv(4096)  # INFO
    s.sendall(f'CONNECT {{"verbose":false}}\r\nSUB {subject} 1\r\nPING\r\n'.encode())
    got = b""
    while b"PONG\r\n" not in got:
        got += s.recv(4096)
    return s


def _closed_by_server(s: socket.socket, timeout: float) -> bool:
    """Drain what the server managed to send; True if it then closed the connection."""
    deadline = time.monotonic() + timeout
    s.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            if not s.recv(1 << 20):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


@pytest.mark.parametrize(
    "limits",
    [
        {"max_pending": 1 << 20, "write_deadline": "10s"},  # its buffer passes max_pending
        {"max_pending": 256 << 20, "write_deadline": "1s"},  # a send blocks past write_deadline
    ],
    ids=["max_pending", "write_deadline"],
)
async def test_a_subscriber_that_stops_reading_is_cut_off_and_the_rest_go_on(make_server, limits):
    srv = make_server(limits)
    stalled = _stalled_subscriber(srv.port, "flood")
    nc = await nats.connect(srv.url)
    try:
        healthy = await nc.subscribe("flood")
        payload = b"x" * 32768
        with anyio.fail_after(60):
            for _ in range(24):  # 24 MiB: far past any socket buffer
                for _ in range(32):
                    await nc.publish("flood", payload)
                await nc.flush()
                await anyio.sleep(0.1)  # gives a blocked send time to pass its deadline
        assert await anyio.to_thread.run_sync(_closed_by_server, stalled, 30.0)
        await nc.publish("after", b"")
        await nc.flush()  # the publisher is still connected
        assert healthy.pending_msgs + healthy.delivered > 0
    finally:
        stalled.close()
        await nc.close()
