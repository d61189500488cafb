"""A hub stream sourcing a leaf's stream across domains with subject transforms, for every
(hub, leaf) pair of implementations: the consumer create carries the transforms' filters over
the link, and the hub stores the rewritten subjects with the same ``Nats-Stream-Source``
header whichever server does the sourcing."""

from __future__ import annotations

import pytest

from core.jetstream.sourcing import get_hash
from tests.integration.test_leaf_sources import stored
from tests.support.leafnodes import ALL_PAIRS, Topology, pair_ids
from tests.support.leafsources import EDGE_API, client, start_pair
from tests.support.streams import create_stream as create
from tests.support.streams import stream_info as info
from tests.support.streams import wait_msgs

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), ALL_PAIRS, ids=pair_ids(ALL_PAIRS))
async def test_a_hub_sources_a_leaf_stream_through_transforms(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    hub, leaf, _proxy = start_pair(topo, hub_kind, leaf_kind)
    async with client(hub) as hub_nc, client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        ljs = leaf_nc.jetstream()
        for subject in ("orders.eu.1", "orders.us.2", "orders.eu.3", "orders.ap.4"):
            await ljs.publish(subject, subject.encode())
        transforms = [
            {"src": "orders.eu.*", "dest": "hub.eu.{{wildcard(1)}}"},
            {"src": "orders.us.*", "dest": "hub.us.$1"},
        ]
        source = {
            "name": "ORDERS",
            "external": {"api": EDGE_API, "deliver": ""},
            "subject_transforms": transforms,
        }
        await create(hub_nc, {"name": "AGG", "subjects": ["agg.>"], "sources": [source]})
        await wait_msgs(hub_nc, "AGG", 3)
        await ljs.publish("orders.us.5", b"orders.us.5")
        await wait_msgs(hub_nc, "AGG", 4)
        got = await stored(hub_nc, "AGG")
        ident = get_hash((await info(leaf_nc, "ORDERS"))["created"])
        name = f"ORDERS:{get_hash(EDGE_API)}"
        filters, dests = "orders.eu.*\forders.us.*", "hub.eu.{{wildcard(1)}}\fhub.us.$1"
        assert got == [
            ("hub.eu.1", b"orders.eu.1", f"{name} 1 {filters} {dests} orders.eu.1 {ident}"),
            ("hub.us.2", b"orders.us.2", f"{name} 2 {filters} {dests} orders.us.2 {ident}"),
            ("hub.eu.3", b"orders.eu.3", f"{name} 3 {filters} {dests} orders.eu.3 {ident}"),
            ("hub.us.5", b"orders.us.5", f"{name} 5 {filters} {dests} orders.us.5 {ident}"),
        ]
        (src,) = (await info(hub_nc, "AGG"))["sources"]
        assert src["subject_transforms"] == transforms and "error" not in src
