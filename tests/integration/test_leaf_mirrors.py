"""A hub stream mirroring a leaf's stream across JetStream domains (``mirror.external.api =
"$JS.EDGE.API"``), for each (hub, leaf) pair where the hub side is the one under test: the
mirror holds the leaf's messages under their sequences and timestamps; what the leaf dropped
(max_msgs) while the link was cut becomes deleted sequences, counted as the reference counts
them; a cut while the leaf publishes loses and duplicates nothing. Then a site reading the
hub's commands through its own mirror while the uplink is down.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.leafnodes import Topology, leaf_count, pair_ids
from tests.support.leafsources import EDGE_API, client, start_pair
from tests.support.servers import wait_until
from tests.support.streams import counts, stored_messages, wait_last
from tests.support.streams import create_stream as create
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

MIRROR = {"name": "ORDERS", "external": {"api": EDGE_API, "deliver": ""}}
PAIRS = [("leafjet", "leafjet"), ("leafjet", "reference"), ("reference", "leafjet")]
PAIR_IDS = pair_ids(PAIRS)


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


async def stored(
    nc: Any, name: str, first: int = 0, last: int = 0
) -> list[tuple[int, str, bytes, bytes, str]]:
    """The stream's messages from ``first`` to ``last`` (all by default): (seq, subject, data,
    headers, time)."""
    return [
        (m.seq, m.subject, m.data, m.headers, m.time) for m in await stored_messages(nc, name, first, last)
    ]


async def publish_core(nc: Any, subject: str, payloads: list[bytes]) -> None:
    for p in payloads:
        await nc.publish(subject, p)
    await nc.flush()


async def cut(proxy: Any, hub: Any) -> None:
    proxy.cut()
    await anyio.to_thread.run_sync(lambda: wait_until(lambda: leaf_count(hub) == 0, 10))


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), PAIRS, ids=PAIR_IDS)
async def test_a_hub_mirrors_a_leaf_stream_and_what_the_leaf_dropped_offline_is_deleted(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    hub, leaf, proxy = start_pair(topo, hub_kind, leaf_kind)
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"], "max_msgs": 150})
        ljs = leaf_nc.jetstream()
        for i in range(5):
            await ljs.publish(f"orders.{i}", b"o%d" % i, headers={"X-Origin": "edge"})
        await create(hub_nc, {"name": "M", "mirror": MIRROR})
        await publish_core(leaf_nc, "orders.x", [b"%d" % i for i in range(5, 100)])
        await wait_last(hub_nc, "M", 100)
        assert await stored(hub_nc, "M") == await stored(leaf_nc, "ORDERS")
        m = (await info(hub_nc, "M"))["mirror"]
        assert m["name"] == "ORDERS" and m["external"] == {"api": EDGE_API, "deliver": ""}
        assert m["lag"] == 0 and "error" not in m and m["active"] >= 0
        # offline, the leaf keeps its newest 150: 101-250 are gone before the hub reads them
        await cut(proxy, hub)
        await publish_core(leaf_nc, "orders.x", [b"%d" % i for i in range(100, 400)])
        proxy.restore()
        i = await wait_last(hub_nc, "M", 400, timeout=30)
        assert counts(i["state"]) == (250, 1, 400, 150)
        assert await stored(hub_nc, "M", 251) == await stored(leaf_nc, "ORDERS")
        assert "error" not in i["mirror"]


@pytest.mark.parametrize("leaf_kind", ["leafjet", "reference"])
async def test_a_link_cut_while_the_leaf_publishes_leaves_the_mirror_whole(
    topo: Topology, leaf_kind: str
) -> None:
    hub, leaf, proxy = start_pair(topo, "leafjet", leaf_kind)
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await create(hub_nc, {"name": "M", "mirror": MIRROR})
        await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(100)])
        await wait_last(hub_nc, "M", 100)
        await cut(proxy, hub)
        await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(100, 300)])
        proxy.restore()
        await publish_core(leaf_nc, "orders.a", [b"%d" % i for i in range(300, 400)])
        i = await wait_last(hub_nc, "M", 400, timeout=30)
        await anyio.sleep(0.5)  # anything that would arrive twice has had time to
        i = await info(hub_nc, "M")
        assert counts(i["state"]) == (400, 1, 400, 0)
        got = await stored(hub_nc, "M")
        assert [d for _s, _subj, d, _h, _t in got] == [b"%d" % n for n in range(400)]
        assert got == await stored(leaf_nc, "ORDERS")
        assert i["mirror"]["lag"] == 0 and "error" not in i["mirror"]


@pytest.mark.parametrize("hub_kind", ["leafjet", "reference"])
async def test_a_site_reads_the_hubs_commands_from_its_mirror_while_offline(
    topo: Topology, hub_kind: str
) -> None:
    """The other direction: a leafjet site mirrors the hub's command stream
    (``external.api = "$JS.HUB.API"``), its own consumer reads the commands while the uplink
    is down, and the commands the hub took meanwhile arrive once it is back."""
    hub, leaf, proxy = start_pair(topo, hub_kind, "leafjet")
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        hjs = hub_nc.jetstream()
        await create(hub_nc, {"name": "CMDS", "subjects": ["cmd.>"]})
        for i in range(3):
            await hjs.publish("cmd.site1", b"c%d" % i)
        hub_api = {"api": "$JS.HUB.API", "deliver": ""}
        await create(leaf_nc, {"name": "CMDS", "mirror": {"name": "CMDS", "external": hub_api}})
        await wait_last(leaf_nc, "CMDS", 3)
        await cut(proxy, hub)
        for i in range(3, 5):
            await hjs.publish("cmd.site1", b"c%d" % i)
        ljs = leaf_nc.jetstream()
        sub = await ljs.pull_subscribe("cmd.site1", durable="SITE", stream="CMDS")
        offline = [m.data for m in await sub.fetch(3, timeout=5)]
        assert offline == [b"c0", b"c1", b"c2"]
        proxy.restore()
        i = await wait_last(leaf_nc, "CMDS", 5, timeout=30)
        assert counts(i["state"]) == (5, 1, 5, 0)
        assert [m.data for m in await sub.fetch(2, timeout=5)] == [b"c3", b"c4"]
        assert await stored(leaf_nc, "CMDS") == await stored(hub_nc, "CMDS")
