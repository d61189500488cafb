"""A hub sourcing a leaf's stream across JetStream domains: the set-up the leaf source tests share.

One account ``A`` (user ``a``) on both; the hub (domain ``HUB``) accepts the leaf's link behind
a proxy the tests cut and restore; the leaf (domain ``EDGE``) serves its API to the hub as
``EDGE_API``; ``SOURCE`` is the hub's source of the leaf's stream ``ORDERS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nats

from tests.support.leafnodes import LeafUser, Node, Remote, Topology, client_url, wait_for_leaf_connected
from tests.support.proxy import Proxy
from tests.support.servers import RunningServer

ACCOUNTS = {"A": [("a", "a-pw")]}
LEAF_USER = LeafUser("leaf-a", "leaf-a-pw", "A")
EDGE_API = "$JS.EDGE.API"
SOURCE = {"name": "ORDERS", "external": {"api": EDGE_API, "deliver": ""}}


def start_pair(
    topo: Topology, hub_kind: str, leaf_kind: str, *, link_timeout: float = 15.0
) -> tuple[RunningServer, RunningServer, Proxy]:
    """The hub behind a proxy and the leaf dialling it through the proxy; returns once the hub
    sees the link. leafjet's dial interval is configurable (the reference's is fixed at 1 s):
    its leaf comes back after a cut within 0.2 s."""
    hub, proxy = topo.start_behind_proxy(
        "hub", hub_kind, Node(accounts=ACCOUNTS, domain="HUB", leaf_users=[LEAF_USER])
    )
    reconnect = 0.2 if leaf_kind == "leafjet" else None
    remote = Remote(hub, LEAF_USER.user, LEAF_USER.password, "A", via=proxy, reconnect=reconnect)
    leaf = topo.start("leaf", leaf_kind, Node(accounts=ACCOUNTS, domain="EDGE", remotes=[remote]))
    wait_for_leaf_connected(hub, 1, timeout=link_timeout)
    return hub, leaf, proxy


async def connect(server: RunningServer) -> Any:
    """A nats-py client of account A that reconnects for ever (the servers are restarted)."""
    return await nats.connect(
        client_url(server, "a", "a-pw"), max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )


@asynccontextmanager
async def client(server: RunningServer) -> AsyncIterator[Any]:
    nc = await connect(server)
    try:
        yield nc
    finally:
        await nc.close()
