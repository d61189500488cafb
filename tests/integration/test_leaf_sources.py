"""A hub stream sourcing a leaf's stream across JetStream domains (``external.api =
"$JS.EDGE.API"``), for each (hub, leaf) pair of implementations where the hub side is the one
under test; the stored messages and their ``Nats-Stream-Source`` header are the same whichever
server sources. Then the faults: the link cut while the leaf publishes, and the hub SIGKILLed
in the middle of a catch-up; every leaf message ends up on the hub exactly once, in order.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import pytest

from core.jetstream.sourcing import get_hash
from tests.support.leafnodes import (
    Topology,
    leaf_count,
    pair_ids,
    wait_for_leaf_connected,
)
from tests.support.leafsources import EDGE_API, SOURCE, client, start_pair
from tests.support.servers import wait_until
from tests.support.streams import create_stream as create
from tests.support.streams import stored_messages, wait_msgs
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

# (hub, leaf): leafjet sources both implementations; the reference hub is the baseline the
# stored headers are compared with.
PAIRS = [("leafjet", "leafjet"), ("leafjet", "reference"), ("reference", "leafjet")]
PAIR_IDS = pair_ids(PAIRS)


async def stored(nc: Any, name: str) -> list[tuple[str, bytes, str | None]]:
    """Every message of the stream: (subject, data, its Nats-Stream-Source)."""
    return [(m.subject, m.data, m.source) for m in await stored_messages(nc, name)]


async def payloads(nc: Any, name: str) -> list[bytes]:
    """Every payload of the stream in order, read by a pull consumer (fast for many messages)."""
    js = nc.jetstream()
    await js.add_consumer(name, durable_name="CHECK", ack_policy="none")
    psub = await js.pull_subscribe_bind("CHECK", stream=name)
    total = (await info(nc, name))["state"]["messages"]
    out: list[bytes] = []
    while len(out) < total:
        out.extend(m.data for m in await psub.fetch(min(1000, total - len(out)), timeout=5))
    await psub.unsubscribe()
    return out


async def publish_core(nc: Any, subject: str, payloads: list[bytes]) -> None:
    """Into the leaf's stream without waiting for acks (the stream is bound by subject)."""
    for p in payloads:
        await nc.publish(subject, p)
    await nc.flush()


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), PAIRS, ids=PAIR_IDS)
async def test_a_hub_sources_a_leaf_stream_across_domains(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    hub, leaf, _proxy = start_pair(topo, hub_kind, leaf_kind)
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        ljs = leaf_nc.jetstream()
        for i in range(5):
            await ljs.publish(f"orders.{i}", b"o%d" % i, headers={"X-Origin": "edge"})
        await create(hub_nc, {"name": "AGG", "subjects": ["agg.>"], "sources": [SOURCE]})
        for i in range(5, 10):
            await ljs.publish(f"orders.{i}", b"o%d" % i)
        await wait_msgs(hub_nc, "AGG", 10)
        got = await stored(hub_nc, "AGG")
        assert [(s, d) for s, d, _h in got] == [(f"orders.{i}", b"o%d" % i) for i in range(10)]
        ident = get_hash((await info(leaf_nc, "ORDERS"))["created"])
        name = f"ORDERS:{get_hash(EDGE_API)}"
        assert [h for _s, _d, h in got] == [f"{name} {i + 1} > > orders.{i} {ident}" for i in range(10)]
        msg = await hub_nc.jetstream().get_msg("AGG", 1)
        assert msg.headers is not None and msg.headers.get("X-Origin") == "edge"
        (src,) = (await info(hub_nc, "AGG"))["sources"]
        assert src["name"] == "ORDERS" and src["external"] == {"api": EDGE_API, "deliver": ""}
        assert src["lag"] == 0 and "error" not in src and src["active"] >= 0


async def test_a_live_leafjet_source_follows_one_read_request_across_many_commits(topo: Topology) -> None:
    """leafjet -> leafjet, live: each commit on the leaf reaches the hub as another reply to the
    same read request (``follow``), not one request per reply -- a message committed while a
    reply was on its way waited a round trip for the next request. Messages published one at a
    time, each awaited on the hub: the requests (seen on the hub, where they are published)
    stay few, and every message is stored once, in order."""
    hub, leaf, _proxy = start_pair(topo, "leafjet", "leafjet")
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        requests = await hub_nc.subscribe(f"{EDGE_API}.LEAFJET.READ.ORDERS")
        await hub_nc.flush()
        await create(hub_nc, {"name": "AGG", "subjects": ["agg.>"], "sources": [SOURCE]})
        ljs = leaf_nc.jetstream()
        n = 30
        for i in range(n):
            await ljs.publish("orders.x", b"%d" % i)
            await wait_msgs(hub_nc, "AGG", i + 1)
        assert await payloads(hub_nc, "AGG") == [b"%d" % i for i in range(n)]
        # one per 200 commits or 4 s (the request's wait), plus a recreate if the machine stalls
        assert requests.pending_msgs < n // 3, requests.pending_msgs


async def test_a_catch_up_of_many_small_messages_stores_each_once_with_its_source_header(
    topo: Topology,
) -> None:
    """leafjet -> leafjet: a backlog of small messages comes in replies of thousands, which the
    hub makes into columns on a worker thread (bulk_source.OFFLOAD_ROWS); each is stored once,
    in order, with the header the message-by-message path writes."""
    hub, leaf, _proxy = start_pair(topo, "leafjet", "leafjet")
    n = 10_000
    sent = [b"%d" % i for i in range(n)]
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await publish_core(leaf_nc, "orders.a", sent)
        await wait_msgs(leaf_nc, "ORDERS", n)
        await create(hub_nc, {"name": "AGG", "subjects": ["agg.>"], "sources": [SOURCE]})
        await wait_msgs(hub_nc, "AGG", n, timeout=60)
        assert await payloads(hub_nc, "AGG") == sent
        ident = get_hash((await info(leaf_nc, "ORDERS"))["created"])
        name = f"ORDERS:{get_hash(EDGE_API)}"
        for seq in (1, n // 2, n):
            msg = await hub_nc.jetstream().get_msg("AGG", seq)
            assert msg.headers == {"Nats-Stream-Source": f"{name} {seq} > > orders.a {ident}"}
        names = await leaf_nc.request("$JS.API.CONSUMER.NAMES.ORDERS", b"", timeout=5)
        assert json.loads(names.data)["consumers"] in (None, []), "not read through the bulk read API"


async def cut_while_publishing(topo: Topology, leaf_kind: str, cuts: int) -> None:
    """The leaf publishes while its link is cut, ``cuts`` times; the hub ends with every
    message once, in order."""
    hub, leaf, proxy = start_pair(topo, "leafjet", leaf_kind)
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await create(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(100)])
        await wait_msgs(hub_nc, "AGG", 100)
        for cycle in range(cuts):
            proxy.cut()
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: leaf_count(hub) == 0, 10))
            base = 100 + cycle * 300
            await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(base, base + 200)])
            proxy.restore()
            await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(base + 200, base + 300)])
            await wait_msgs(hub_nc, "AGG", base + 300, timeout=30)
        total = 100 + cuts * 300
        await wait_msgs(leaf_nc, "ORDERS", total)
        await anyio.sleep(0.5)  # anything that would arrive twice has had time to
        got = await payloads(hub_nc, "AGG")
        assert got == [b"%d" % i for i in range(total)]
        (src,) = (await info(hub_nc, "AGG"))["sources"]
        assert src["lag"] == 0 and "error" not in src


@pytest.mark.parametrize("leaf_kind", ["leafjet", "reference"])
async def test_a_link_cut_while_the_leaf_publishes_loses_and_duplicates_nothing(
    topo: Topology, leaf_kind: str
) -> None:
    await cut_while_publishing(topo, leaf_kind, cuts=1)


@pytest.mark.chaos
@pytest.mark.parametrize("leaf_kind", ["leafjet", "reference"])
async def test_repeated_link_cuts_while_the_leaf_publishes_lose_and_duplicate_nothing(
    topo: Topology, leaf_kind: str, request: pytest.FixtureRequest
) -> None:
    if "chaos" not in (request.config.option.markexpr or "") and os.environ.get("LEAFJET_CHAOS") != "1":
        pytest.skip("chaos variant: select with -m chaos or LEAFJET_CHAOS=1")
    await cut_while_publishing(topo, leaf_kind, cuts=6)


async def test_a_hub_killed_mid_catch_up_resumes_exactly_where_it_stored(topo: Topology) -> None:
    """Between two leafjets the catch-up goes through the bulk read API (no upstream consumer
    exists on the leaf), in replies of about 1 MiB: incompressible payloads and a throttled
    link make it last seconds, so the kill lands between two stored replies."""
    hub, leaf, proxy = start_pair(topo, "leafjet", "leafjet")
    n = 4_000
    sent = [i.to_bytes(4, "big") + os.urandom(1020) for i in range(n)]
    async with client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await publish_core(leaf_nc, "orders.a", sent)
        await wait_msgs(leaf_nc, "ORDERS", n)
    proxy.throttle(1_000_000)  # a catch-up of seconds, so the kill lands in its middle
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        with anyio.fail_after(20):
            while (await info(hub_nc, "AGG"))["state"]["messages"] == 0:
                await anyio.sleep(0.01)
        partial = (await info(hub_nc, "AGG"))["state"]["messages"]
        names = await leaf_nc.request("$JS.API.CONSUMER.NAMES.ORDERS", b"", timeout=5)
        assert json.loads(names.data)["consumers"] in (None, []), "not read through the bulk read API"
    hub.restart(kill=True)
    assert partial < n, "the catch-up was over before the kill: nothing was tested"
    proxy.throttle(None)
    wait_for_leaf_connected(hub, 1)
    async with client(hub) as hub_nc:
        await wait_msgs(hub_nc, "AGG", n, timeout=60)
        await anyio.sleep(0.5)
        got = await payloads(hub_nc, "AGG")
    assert got == sent


async def test_a_link_cut_mid_bulk_catch_up_loses_and_duplicates_nothing(topo: Topology) -> None:
    """A cut (and a freeze: replies that never come) between two leafjets in the middle of a
    bulk catch-up: the source resumes after what it stored, and the hub holds each message once."""
    hub, leaf, proxy = start_pair(topo, "leafjet", "leafjet")
    n = 3_000
    sent = [i.to_bytes(4, "big") + os.urandom(1020) for i in range(n)]
    async with client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await publish_core(leaf_nc, "orders.a", sent)
        await wait_msgs(leaf_nc, "ORDERS", n)
    proxy.throttle(1_000_000)
    async with client(hub) as hub_nc:
        await create(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        with anyio.fail_after(20):
            while (await info(hub_nc, "AGG"))["state"]["messages"] == 0:
                await anyio.sleep(0.01)
        proxy.freeze()
        partial = (await info(hub_nc, "AGG"))["state"]["messages"]
        await anyio.sleep(0.5)
        proxy.cut()
        proxy.throttle(None)
        proxy.restore()
        assert partial < n, "the catch-up was over before the cut: nothing was tested"
        wait_for_leaf_connected(hub, 1)
        await wait_msgs(hub_nc, "AGG", n, timeout=90)
        await anyio.sleep(0.5)
        assert await payloads(hub_nc, "AGG") == sent
        (src,) = (await info(hub_nc, "AGG"))["sources"]
        assert src["lag"] == 0 and "error" not in src


@pytest.mark.chaos
@pytest.mark.parametrize("leaf_kind", ["leafjet", "reference"])
async def test_an_outage_longer_than_the_upstream_consumer_lives_resumes_at_once_on_reconnect(
    topo: Topology, leaf_kind: str, request: pytest.FixtureRequest
) -> None:
    """Cut for 13 s: the leaf drops the hub's consumer (10 s without interest), the hub's
    source stalls and backs off; the link's return cuts the backoff short (the reference's
    leaf-connect kick) and the source resumes after what it stored."""
    if "chaos" not in (request.config.option.markexpr or "") and os.environ.get("LEAFJET_CHAOS") != "1":
        pytest.skip("chaos variant: select with -m chaos or LEAFJET_CHAOS=1")
    hub, leaf, proxy = start_pair(topo, "leafjet", leaf_kind)
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await create(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(100)])
        await wait_msgs(hub_nc, "AGG", 100)
        proxy.cut()
        await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(100, 300)])
        await anyio.sleep(13)
        proxy.restore()
        t0 = anyio.current_time()
        await wait_msgs(hub_nc, "AGG", 300, timeout=30)
        caught_up = anyio.current_time() - t0
        got = await payloads(hub_nc, "AGG")
        assert got == [b"%d" % i for i in range(300)]
        assert caught_up < 8, f"took {caught_up:.1f}s after the link came back"
