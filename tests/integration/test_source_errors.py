"""A source's bad input and upstream gaps on one server, against leafjet and the reference: the
error each shows in stream info and ``/jsz``, the create errors, and what a source stores when
the upstream removed messages before it read them. leafjet also logs a gap and publishes its
``SOURCE_GAP`` advisory (core/jetstream/source_health.py); the reference says nothing, so those
checks are leafjet's only.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import anyio
import pytest

from tests.support.jsapi import api, jetstream
from tests.support.servers import RunningServer, free_port
from tests.support.streams import create_stream as create
from tests.support.streams import stored_messages, wait_msgs
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

NOT_FOUND = {"code": 404, "err_code": 10059, "description": "stream not found"}


@pytest.fixture
def monitored(make_server: Any) -> RunningServer:
    return make_server({"http_port": free_port()}, jetstream=True)


def jsz(server: RunningServer) -> dict[str, dict[str, Any]]:
    """``/jsz?streams=1``'s stream details by name."""
    url = f"http://127.0.0.1:{server.config['http_port']}/jsz?streams=1"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    return {s["name"]: s for acc in body.get("account_details", []) for s in acc.get("stream_detail", [])}


async def wait_info(nc: Any, name: str, done: Any, timeout: float = 20.0) -> dict[str, Any]:
    """Poll STREAM.INFO until ``done(info)``; the info."""
    with anyio.fail_after(timeout):
        while True:
            i = await info(nc, name)
            if done(i):
                return i
            await anyio.sleep(0.05)


async def test_a_source_or_mirror_of_a_missing_stream_shows_the_upstreams_error(
    monitored: RunningServer,
) -> None:
    async with jetstream(monitored) as (nc, _js):
        await create(nc, {"name": "S", "sources": [{"name": "NOPE"}]})
        await create(nc, {"name": "M", "mirror": {"name": "NOPE"}})
        s = await wait_info(nc, "S", lambda i: "error" in i["sources"][0])
        m = await wait_info(nc, "M", lambda i: "error" in i["mirror"])
        assert s["sources"] == [{"name": "NOPE", "lag": 0, "active": -1, "error": NOT_FOUND}]
        assert m["mirror"] == {"name": "NOPE", "lag": 0, "active": -1, "error": NOT_FOUND}
        details = jsz(monitored)
        (src,) = details["S"]["sources"]
        assert src["error"] == NOT_FOUND and src["active"] == -1
        assert details["M"]["mirror"]["error"] == NOT_FOUND
        if monitored.kind == "leafjet":  # what the reference has no field for
            extras = src["leafjet"]
            assert extras["state"] == "waiting" and extras["consumer_creates"] >= 1
            assert extras["failures"] >= 1 and extras["upstream_lost"] == 0
            assert "stream not found (10059)" in monitored.log()
        # the upstream appears: the source recovers (within the backoff's first step)
        await create(nc, {"name": "NOPE", "subjects": ["nope.>"]})
        await nc.jetstream().publish("nope.a", b"1")
        await wait_msgs(nc, "S", 1, timeout=30)
        s = await wait_info(nc, "S", lambda i: "error" not in i["sources"][0])
        assert s["sources"][0]["lag"] == 0


async def test_an_external_api_with_wildcards_is_refused_as_the_reference(js_server: RunningServer) -> None:
    async with jetstream(js_server) as (nc, _js):
        for api_prefix in ("$JS.*.API", "$JS.>"):
            for key in ("sources", "mirror"):
                spec = {"name": "UP", "external": {"api": api_prefix, "deliver": ""}}
                cfg = {"name": "W", key: [spec] if key == "sources" else spec}
                r = await api(nc, "$JS.API.STREAM.CREATE.W", cfg)
                assert r["error"] == {
                    "code": 500,
                    "err_code": 10052,
                    "description": f'stream external api prefix "{api_prefix}" must be a valid subject '
                    "without wildcards",
                }
        spec = {"name": "UP", "external": {"api": "$JS.X.API", "deliver": "d.*"}}
        r = await api(nc, "$JS.API.STREAM.CREATE.W", {"name": "W", "sources": [spec]})
        assert r["error"] == {
            "code": 400,
            "err_code": 10024,
            "description": "stream external delivery prefix d.* must not contain wildcards",
        }


async def test_a_cycle_of_sources_within_a_domain_is_refused(js_server: RunningServer) -> None:
    cycle = {"code": 500, "err_code": 10052, "description": "detected cycle"}
    async with jetstream(js_server) as (nc, _js):
        await create(nc, {"name": "A", "subjects": ["a"], "sources": [{"name": "B"}]})
        r = await api(
            nc, "$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["b"], "sources": [{"name": "A"}]}
        )
        assert r["error"] == cycle
        # three streams: C sources B sources A; A updated to source C closes the ring
        await create(nc, {"name": "B", "subjects": ["b"]})
        await create(nc, {"name": "C", "subjects": ["c"], "sources": [{"name": "B"}]})
        r = await api(
            nc, "$JS.API.STREAM.UPDATE.B", {"name": "B", "subjects": ["b"], "sources": [{"name": "C"}]}
        )
        assert r["error"] == cycle
        # nothing of the refused configs is running: A still reads B, which reads nothing
        await nc.jetstream().publish("b", b"x")
        await wait_msgs(nc, "C", 1)
        await wait_msgs(nc, "A", 1)


async def set_sources(nc: Any, sources: list[dict[str, Any]]) -> None:
    r = await api(nc, "$JS.API.STREAM.UPDATE.AGG", {"name": "AGG", "subjects": ["agg"], "sources": sources})
    assert "error" not in r, r


async def test_messages_removed_upstream_while_a_source_was_away_are_a_reported_gap(
    monitored: RunningServer,
) -> None:
    """A source removed and added again resumes after what it stored (both servers). Upstream
    removed messages meanwhile: one deleted (the deliveries skip it) and a purge (the new
    consumer starts past them). Both servers store what is left, once; leafjet logs and
    advises each gap once and counts what was lost."""
    async with jetstream(monitored) as (nc, js):
        advisories: list[dict[str, Any]] = []

        async def on_advisory(msg: Any) -> None:
            advisories.append(json.loads(msg.data))

        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.SOURCE_GAP.>", cb=on_advisory)
        await create(nc, {"name": "UP", "subjects": ["up"]})
        await create(nc, {"name": "AGG", "subjects": ["agg"], "sources": [{"name": "UP"}]})
        for i in range(1, 6):
            await js.publish("up", b"%d" % i)
        await wait_msgs(nc, "AGG", 5)

        await set_sources(nc, [])
        for i in range(6, 11):
            await js.publish("up", b"%d" % i)
        assert (await api(nc, "$JS.API.STREAM.MSG.DELETE.UP", {"seq": 7}))["success"]
        await set_sources(nc, [{"name": "UP"}])
        await wait_msgs(nc, "AGG", 9)

        await set_sources(nc, [])
        for i in range(11, 16):
            await js.publish("up", b"%d" % i)
        assert (await api(nc, "$JS.API.STREAM.PURGE.UP", {"seq": 14}))["success"]  # 11-13 go
        await set_sources(nc, [{"name": "UP"}])
        await wait_msgs(nc, "AGG", 11)
        await anyio.sleep(0.5)  # anything stored twice has had time to arrive

        got = [m.data for m in await stored_messages(nc, "AGG")]
        assert got == [b"%d" % i for i in (1, 2, 3, 4, 5, 6, 8, 9, 10, 14, 15)]
        if monitored.kind != "leafjet":
            return
        with anyio.fail_after(10):
            while len(advisories) < 2:
                await anyio.sleep(0.05)
        ranges = [(a["first_seq"], a["last_seq"], a["missing"], a["reason"]) for a in advisories]
        assert ranges == [(7, 7, 1, "upstream_skipped"), (11, 13, 3, "consumer_started_past")]
        assert advisories[0]["type"] == "io.leafjet.advisory.v1.stream_source_gap"
        assert advisories[0]["stream"] == "AGG" and advisories[0]["source"] == {"name": "UP"}
        assert advisories[0]["kind"] == "source"
        (src,) = jsz(monitored)["AGG"]["sources"]
        assert src["leafjet"]["upstream_lost"] == 3  # counted since the source was added again
        assert src["leafjet"]["last_gap"] == {"first_seq": 11, "last_seq": 13}
        assert "upstream sequences 11-13 (3 messages) were removed before they were read" in monitored.log()


async def test_a_source_in_a_domain_nobody_serves_shows_no_responders(monitored: RunningServer) -> None:
    """The reference shows nothing for this (no error, ``active: -1``, for as long as one
    waits); leafjet shows why and logs it, and retries with the backoff."""
    if monitored.kind != "leafjet":
        pytest.skip("the reference shows no error for a domain nobody serves")
    spec = {"name": "UP", "external": {"api": "$JS.NOPE.API", "deliver": ""}}
    async with jetstream(monitored) as (nc, _js):
        await create(nc, {"name": "S", "sources": [spec]})
        s = await wait_info(nc, "S", lambda i: "error" in i["sources"][0])
        assert s["sources"][0]["error"] == {
            "code": 500,
            "err_code": 10045,
            "description": "no responders for $JS.NOPE.API.CONSUMER.CREATE.UP",
        }
        (src,) = jsz(monitored)["S"]["sources"]
        assert src["leafjet"]["failures"] == 1 and src["leafjet"]["consumer_creates"] == 1
        assert "stream S source UP: no responders: no responders for $JS.NOPE.API" in monitored.log()
