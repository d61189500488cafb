"""Consumer options that shape delivery: headers_only, replay_policy original, rate_limit_bps."""

from __future__ import annotations

import time

import anyio
import nats
import pytest
from nats.js.api import ConsumerConfig, ReplayPolicy

from tests.support.jsapi import api

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_headers_only_delivers_headers_and_the_size(js_server):
    nc = await nats.connect(js_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="HO", subjects=["ho"])
        await js.publish("ho", b"x" * 1234, headers={"Trace": "t1"})
        sub = await js.pull_subscribe("ho", durable="H", config=ConsumerConfig(headers_only=True))
        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.data == b""
        assert msg.headers["Trace"] == "t1"
        assert msg.headers["Nats-Msg-Size"] == "1234"
    finally:
        await nc.close()


async def test_headers_only_deliveries_cost_their_delivered_size_against_max_bytes(js_server):
    nc = await nats.connect(js_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="HO", subjects=["ho.>"])
        for _ in range(3):
            await js.publish("ho.a", b"")
        await js.add_consumer("HO", ConsumerConfig(durable_name="H", headers_only=True))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.HO.H", b'{"batch": 5, "max_bytes": 100}', reply=inbox)
        first, refusal = await sub.next_msg(timeout=5), await sub.next_msg(timeout=5)
        # subject + ack subject + the headers block with Nats-Msg-Size (the payload is dropped):
        # 74 bytes, so a second one does not fit in what is left of the 100
        assert first.headers["Nats-Msg-Size"] == "0"
        assert refusal.headers["Status"] == "409" and refusal.headers["Nats-Pending-Bytes"] == "26"
    finally:
        await nc.close()


async def test_replay_original_keeps_the_stored_spacing(js_server):
    nc = await nats.connect(js_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="RP", subjects=["rp"])
        await js.publish("rp", b"1")
        await anyio.sleep(0.6)
        await js.publish("rp", b"2")
        got: list[float] = []

        async def cb(msg):
            got.append(time.monotonic())
            await msg.ack()

        await js.subscribe(
            "rp",
            durable="R",
            cb=cb,
            manual_ack=True,
            config=ConsumerConfig(replay_policy=ReplayPolicy.ORIGINAL),
        )
        with anyio.fail_after(10):
            while len(got) < 2:
                await anyio.sleep(0.02)
        # a delivery order property, not a timing benchmark: the gap is kept, give or take
        assert got[1] - got[0] >= 0.4
    finally:
        await nc.close()


async def test_replay_original_delivers_what_comes_after_it_caught_up_at_once(js_server):
    """As the reference: the stored spacing holds until the replay reaches the stream's last
    message of when it began; a message published later goes out as it comes, not held back by
    how old the first replayed message was."""
    nc = await nats.connect(js_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="RP", subjects=["rp.>"])
        await js.publish("rp.old", b"1")
        await anyio.sleep(3)  # the stored message is 3 s older than the consumer
        got: list[tuple[str, float]] = []

        async def cb(msg):
            got.append((msg.subject, time.monotonic()))

        await js.subscribe(
            "rp.>",
            durable="R",
            cb=cb,
            config=ConsumerConfig(replay_policy=ReplayPolicy.ORIGINAL, ack_policy="none"),
        )
        with anyio.fail_after(5):
            while not got:
                await anyio.sleep(0.02)
        sent = time.monotonic()
        await js.publish("rp.live", b"2")
        with anyio.fail_after(5):
            while len(got) < 2:
                await anyio.sleep(0.02)
        assert got[1][0] == "rp.live"
        assert got[1][1] - sent < 1.5, "a live message is not held back by the replay (3 s before)"
    finally:
        await nc.close()


async def test_rate_limit_bps_spreads_a_push_backlog(js_server):
    nc = await nats.connect(js_server.url)
    try:
        js = nc.jetstream()
        # the reference's bucket holds one max_msg_size; past that the rate applies
        await js.add_stream(name="RL", subjects=["rl"], max_msg_size=1000)
        for _ in range(10):
            await js.publish("rl", b"x" * 900)
        got: list[float] = []

        async def cb(msg):
            got.append(time.monotonic())

        # 9 KB beyond the burst at 40 kbit/s (5 KB/s) is about 1.8 s; unlimited it is milliseconds
        await js.subscribe(
            "rl", durable="L", cb=cb, config=ConsumerConfig(rate_limit_bps=40_000, ack_policy="none")
        )
        with anyio.fail_after(15):
            while len(got) < 10:
                await anyio.sleep(0.05)
        assert got[-1] - got[0] >= 1.0
    finally:
        await nc.close()


async def test_a_paced_push_run_counts_pending_as_messages_go(js_server):
    """As the reference: each paced delivery's ack subject counts what is left when it is taken,
    so messages deleted while a rate-limited run goes on are not counted by the later ones (its
    last message says 0 pending)."""
    nc = await nats.connect(js_server.url)
    try:
        js = nc.jetstream()
        # 1000-byte messages at 16 kbit/s (2 KB/s) past a 1100-byte burst: one every 0.5 s
        await js.add_stream(name="PD", subjects=["pd.>"], max_msg_size=1100)
        for i in range(1, 7):
            await js.publish(f"pd.{i}", b"x" * 1000)
        got: list = []

        async def cb(msg):
            got.append(msg)

        await nc.subscribe("d.P", cb=cb)
        await nc.flush()
        config = {
            "durable_name": "P",
            "deliver_subject": "d.P",
            "rate_limit_bps": 16000,
            "ack_policy": "none",
        }
        await api(nc, "$JS.API.CONSUMER.CREATE.PD.P", {"stream_name": "PD", "config": config})
        with anyio.fail_after(5):
            while not got:
                await anyio.sleep(0.02)
        await js.delete_msg("PD", 5)
        await js.delete_msg("PD", 6)
        with anyio.fail_after(10):
            while len(got) < 4:
                await anyio.sleep(0.05)
        await anyio.sleep(0.8)  # nothing more comes
        assert [(m.metadata.sequence.stream, m.metadata.num_pending) for m in got][-1] == (4, 0)
        assert len(got) == 4
    finally:
        await nc.close()
