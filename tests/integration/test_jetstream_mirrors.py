"""Stream mirrors within one server, against leafjet and the reference: the mirror holds the
upstream's messages under the upstream's sequences and timestamps, turns what the upstream lost
before the mirror read it into deleted sequences, reports ``mirror`` in stream info, and takes
no publishes and no config changes, as the reference does."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.support.jsapi import api, jetstream
from tests.support.streams import counts, stored_messages, wait_last
from tests.support.streams import create_stream as create
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def stored(nc: Any, name: str) -> list[tuple[int, str, bytes, bytes, str]]:
    """Every message of the stream: (seq, subject, data, headers, time)."""
    return [(m.seq, m.subject, m.data, m.headers, m.time) for m in await stored_messages(nc, name)]


async def test_a_mirror_keeps_the_upstreams_sequences_and_timestamps(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        for i in range(5):
            await js.publish(f"orders.{i}", b"o%d" % i, headers={"X-I": str(i)} if i % 2 else None)
        await create(nc, {"name": "M", "mirror": {"name": "ORDERS"}})
        for i in range(5, 10):
            await js.publish(f"orders.{i}", b"o%d" % i)
        await wait_last(nc, "M", 10)
        assert await stored(nc, "M") == await stored(nc, "ORDERS")
        i = await info(nc, "M")
        assert counts(i["state"]) == (10, 1, 10, 0)
        assert i["state"]["first_ts"] == (await info(nc, "ORDERS"))["state"]["first_ts"]
        m = i["mirror"]
        assert m["name"] == "ORDERS" and m["lag"] == 0 and "error" not in m and m["active"] >= 0
        assert "sources" not in i and "external" not in m
        assert set(m) == {"name", "lag", "active"}, m


async def test_messages_the_upstream_lost_before_the_mirror_read_them_are_deleted_sequences(js_server):
    """max_msgs dropped 1-20 and two messages were deleted inside what is left, all before
    the mirror exists: it starts at the upstream's first message and holds the holes as
    deleted sequences, with the reference's counters."""
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"], "max_msgs": 10})
        for i in range(30):
            await js.publish("up.x", b"%d" % i)
        for seq in (24, 25, 28):
            r = await api(nc, "$JS.API.STREAM.MSG.DELETE.UP", {"seq": seq})
            assert r.get("success"), r
        await create(nc, {"name": "M", "mirror": {"name": "UP"}})
        i = await wait_last(nc, "M", 30)
        up = await info(nc, "UP")
        assert counts(i["state"]) == counts(up["state"]) == (7, 21, 30, 3)
        assert await stored(nc, "M") == await stored(nc, "UP")


async def test_a_mirror_of_a_purged_upstream_starts_at_its_first_sequence(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for i in range(8):
            await js.publish("up.x", b"%d" % i)
        await api(nc, "$JS.API.STREAM.PURGE.UP", {})
        await js.publish("up.x", b"8")
        await create(nc, {"name": "M", "mirror": {"name": "UP"}})
        i = await wait_last(nc, "M", 9)
        assert counts(i["state"]) == counts((await info(nc, "UP"))["state"]) == (1, 9, 9, 0)
        assert await stored(nc, "M") == await stored(nc, "UP")


async def test_a_mirror_resumes_after_its_last_sequence_after_a_restart(make_server):
    srv = make_server(jetstream=True)
    async with jetstream(srv) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        await create(nc, {"name": "M", "mirror": {"name": "UP"}})
        for i in range(20):
            await js.publish("up.x", b"%d" % i)
        await wait_last(nc, "M", 20)
    srv = srv.restart()
    async with jetstream(srv) as (nc, js):
        for i in range(20, 30):
            await js.publish("up.x", b"%d" % i)
        await wait_last(nc, "M", 30, timeout=20)
        await anyio.sleep(0.5)
        assert counts((await info(nc, "M"))["state"]) == (30, 1, 30, 0)
        assert await stored(nc, "M") == await stored(nc, "UP")


async def test_a_mirror_takes_no_publishes_and_no_config_changes(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        await create(nc, {"name": "M", "mirror": {"name": "UP"}})
        await js.publish("up.x", b"1")
        await wait_last(nc, "M", 1)
        # a publish that names the mirror reaches the upstream only, which refuses it
        r = await nc.request("up.x", b"2", headers={"Nats-Expected-Stream": "M"}, timeout=5)
        assert b'"err_code":10060' in r.data.replace(b" ", b"")
        cfg = (await info(nc, "M"))["config"]
        errors = []
        for change in (
            {"mirror": {"name": "UP", "filter_subject": "up.y"}},
            {"subjects": ["m.>"]},
            {"mirror": {"name": "UP"}, "sources": [{"name": "UP"}]},
        ):
            r = await api(nc, "$JS.API.STREAM.UPDATE.M", {**cfg, **change})
            errors.append(r.get("error"))
        bad = [
            {"name": "B1", "subjects": ["b.>"], "mirror": {"name": "UP"}},
            {"name": "B2", "mirror": {"name": "UP"}, "sources": [{"name": "UP"}]},
            {"name": "B3", "mirror": {"name": "UP"}, "first_seq": 5},
        ]
        for b in bad:
            r = await api(nc, f"$JS.API.STREAM.CREATE.{b['name']}", b)
            errors.append(r.get("error"))
        assert [(e or {}).get("err_code") for e in errors] == [10055, 10034, 10031, 10034, 10031, 10143]
        assert counts((await info(nc, "M"))["state"]) == (1, 1, 1, 0)


async def test_a_mirror_promoted_to_a_stream_of_its_own_stops_mirroring(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        await create(nc, {"name": "M", "mirror": {"name": "UP"}})
        await js.publish("up.x", b"1")
        await wait_last(nc, "M", 1)
        cfg = {k: v for k, v in (await info(nc, "M"))["config"].items() if k != "mirror"}
        r = await api(nc, "$JS.API.STREAM.UPDATE.M", {**cfg, "subjects": ["m.>"]})
        assert "error" not in r and "mirror" not in r, r
        await js.publish("up.x", b"2")
        ack = await js.publish("m.x", b"own")
        assert (ack.stream, ack.seq) == ("M", 2)
        i = await info(nc, "M")
        assert counts(i["state"]) == (2, 1, 2, 0) and "mirror" not in i
