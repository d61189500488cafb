"""Stream sources within one server, against leafjet and the reference: the same scenario, the
same stored messages (subjects, payloads, the ``Nats-Stream-Source`` header byte for byte) and
the same ``sources[]`` in stream info."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from core.jetstream.sourcing import get_hash
from tests.support.jsapi import api, jetstream
from tests.support.streams import create_stream as create
from tests.support.streams import stored_messages, wait_msgs
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def stored(nc: Any, name: str) -> list[tuple[str, bytes, str | None]]:
    """Every message of the stream: (subject, data, Nats-Stream-Source)."""
    return [(m.subject, m.data, m.source) for m in await stored_messages(nc, name)]


async def test_a_stream_sources_another_stream_of_its_server(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        for i in range(5):
            await js.publish(f"orders.{i}", b"o%d" % i, headers={"Nats-Msg-Id": f"id{i}"} if i == 2 else None)
        await create(nc, {"name": "AGG", "sources": [{"name": "ORDERS"}]})
        for i in range(5, 8):
            await js.publish(f"orders.{i}", b"o%d" % i)
        await wait_msgs(nc, "AGG", 8)
        got = await stored(nc, "AGG")
        assert [(s, d) for s, d, _h in got] == [(f"orders.{i}", b"o%d" % i) for i in range(8)]
        ident = get_hash((await info(nc, "ORDERS"))["created"])  # the upstream's identity
        assert [h for _s, _d, h in got] == [f"ORDERS {i} > > orders.{i - 1} {ident}" for i in range(1, 9)]
        i = await info(nc, "AGG")
        (src,) = i["sources"]
        assert src["name"] == "ORDERS" and src["lag"] == 0 and "error" not in src
        assert src["active"] >= 0
        assert set(src) == {"name", "lag", "active", "seq"} and src["seq"] == 8


async def test_two_sources_keep_each_upstreams_order_and_filters_and_start_seq_apply(js_server):
    async with jetstream(js_server) as (nc, js):
        await create(nc, {"name": "A", "subjects": ["a.>"]})
        await create(nc, {"name": "B", "subjects": ["b.>"]})
        for i in range(10):
            await js.publish(f"a.{'x' if i % 2 else 'y'}", b"a%d" % i)
            await js.publish("b.z", b"b%d" % i)
        cfg = {
            "name": "MIX",
            "subjects": ["mix.>"],
            "sources": [{"name": "A", "filter_subject": "a.x"}, {"name": "B", "opt_start_seq": 4}],
        }
        await create(nc, cfg)
        await js.publish("mix.own", b"own")
        await wait_msgs(nc, "MIX", 5 + 7 + 1)
        got = await stored(nc, "MIX")
        a = [d for s, d, _h in got if s.startswith("a.")]
        b = [d for s, d, _h in got if s.startswith("b.")]
        assert a == [b"a%d" % i for i in range(1, 10, 2)]
        assert b == [b"b%d" % i for i in range(3, 10)]
        assert [h for s, _d, h in got if s == "mix.own"] == [None]
        heads = sorted(h for s, _d, h in got if s.startswith("a."))
        ident = get_hash((await info(nc, "A"))["created"])
        assert heads == sorted(f"A {2 * k + 2} a.x > a.x {ident}" for k in range(5))
        sources = {s["name"]: s for s in (await info(nc, "MIX"))["sources"]}
        assert sources["A"]["filter_subject"] == "a.x"
        assert "filter_subject" not in sources["B"]


async def test_a_sourced_stream_resumes_after_a_restart_without_duplicates(make_server, server_kind):
    srv = make_server(jetstream=True)
    async with jetstream(srv) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        await create(nc, {"name": "DOWN", "sources": [{"name": "UP"}]})
        for i in range(20):
            await js.publish("up.x", b"%d" % i)
        await wait_msgs(nc, "DOWN", 20)
    srv = srv.restart()
    async with jetstream(srv) as (nc, js):
        for i in range(20, 30):
            await js.publish("up.x", b"%d" % i)
        await wait_msgs(nc, "DOWN", 30, timeout=20)
        await anyio.sleep(0.5)
        got = await stored(nc, "DOWN")
        assert [d for _s, d, _h in got] == [b"%d" % i for i in range(30)]


async def test_source_config_errors_are_the_references(js_server):
    async with jetstream(js_server) as (nc, _js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        dup = {"name": "D", "sources": [{"name": "UP"}, {"name": "UP"}]}
        r = await api(nc, "$JS.API.STREAM.CREATE.D", dup)
        own = {"name": "SELF", "subjects": ["self.>"], "sources": [{"name": "SELF"}]}
        r2 = await api(nc, "$JS.API.STREAM.CREATE.SELF", own)
        assert r["error"] == {
            "code": 400,
            "err_code": 10140,
            "description": "duplicate source configuration detected",
        }
        assert r2["error"] == {"code": 500, "err_code": 10052, "description": "detected cycle"}
