"""The long outage: a hub stream sources a leaf's stream; the link is cut (a proxy), the leaf
takes N messages meanwhile, the link comes back, and the hub catches up with every one of them
exactly once, in the leaf's order. The catch-up rate (messages/s from the link's return until the
hub holds them all) is printed, not asserted: speed is the benchmark's (``python -m bench
sources``). The default run has N = 20,000; ``-m soak`` runs N = 1,000,000
(``LEAF_OUTAGE_MSGS`` overrides both), for each pair of implementations. Then two leaves cut
off at once, each taking N, caught up together by one hub stream sourcing both (10,000 each by
default, with a leafjet hub; 1,000,000 each and every pair in the soak tier).
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import nats
import pytest

from tests.integration.test_leafnodes import skip_unless_built
from tests.support.fill import fill_stream
from tests.support.leafnodes import (
    ALL_PAIRS,
    LeafUser,
    Node,
    Remote,
    Topology,
    client_url,
    leaf_count,
    pair_ids,
    wait_for_leaf_connected,
)
from tests.support.leafsources import ACCOUNTS, SOURCE, start_pair
from tests.support.servers import RunningServer, wait_until
from tests.support.sourced import iter_stream, upstream_of
from tests.support.streams import create_stream, stream_info
from tests.support.tiers import only_when_selected

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

PAIR_IDS = pair_ids(ALL_PAIRS)
BEFORE = 100  # messages sourced before the cut: the source is live when the link goes


def url_a(server: RunningServer) -> str:
    return client_url(server, "a", "a-pw")


async def wait_count(nc: Any, stream: str, n: int, timeout: float) -> int:
    """Poll the stream's message count until it reaches ``n``; the count at the end (short of
    ``n`` at the deadline: the checker then says which are missing)."""
    deadline = time.monotonic() + timeout
    while True:
        count = int((await stream_info(nc, stream))["state"]["messages"])
        if count >= n or time.monotonic() > deadline:
            return count
        await anyio.sleep(0.05)


async def check_exactly_once(hub_nc: Any, total: int) -> None:
    """The hub stream holds leaf sequences 1..total, each once, in order (read in batches, so a
    million messages are never held at once)."""
    expected = 1
    async for m in iter_stream(hub_nc, "AGG", batch=2000):
        _key, seq = upstream_of(m.source or "")
        if seq != expected:
            what = "a duplicate" if seq < expected else f"{seq - expected} missing"
            raise AssertionError(f"hub seq {m.seq}: leaf seq {seq}, expected {expected} ({what})")
        expected += 1
    assert expected - 1 == total, f"the hub holds leaf seqs 1..{expected - 1} of {total}"


async def run_outage(topo: Topology, hub_kind: str, leaf_kind: str, n: int) -> None:
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    hub, leaf, proxy = start_pair(topo, hub_kind, leaf_kind, link_timeout=30)
    total = BEFORE + n
    async with (
        await nats.connect(url_a(hub), max_reconnect_attempts=-1) as hub_nc,
        await nats.connect(url_a(leaf), pending_size=1 << 28) as leaf_nc,
    ):
        await create_stream(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await create_stream(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        await fill_stream(leaf_nc, "orders.a", BEFORE, lambda i: b"%d" % i)
        assert await wait_count(hub_nc, "AGG", BEFORE, 30) == BEFORE

        proxy.cut()
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: leaf_count(hub) == 0, 15))
        t_fill = time.monotonic()
        await fill_stream(leaf_nc, "orders.a", n, lambda i: b"%d" % (BEFORE + i))
        fill_s = time.monotonic() - t_fill
        assert (await stream_info(leaf_nc, "ORDERS"))["state"]["last_seq"] == total
        assert (await stream_info(hub_nc, "AGG"))["state"]["messages"] == BEFORE  # it was an outage

        proxy.restore()
        t0 = time.monotonic()
        await wait_count(hub_nc, "AGG", BEFORE + 1, timeout=60)
        resumed_s = time.monotonic() - t0
        got = await wait_count(hub_nc, "AGG", total, timeout=60 + n / 1000)
        caught_up_s = time.monotonic() - t0
        print(
            f"\nhub={hub_kind} leaf={leaf_kind}: {n:,} messages filled during the outage in "
            f"{fill_s:.1f}s ({n / fill_s:,.0f}/s); the first on the hub {resumed_s:.1f}s after the "
            f"link came back, all {caught_up_s:.1f}s after: {n / caught_up_s:,.0f} msgs/s "
            f"(reconnect included), {n / max(1e-3, caught_up_s - resumed_s):,.0f} msgs/s from the first"
        )
        assert got >= total, f"the hub holds {got} of {total}"
        await anyio.sleep(0.5)  # a duplicate on its way has time to land
        await check_exactly_once(hub_nc, total)
        (src,) = (await stream_info(hub_nc, "AGG"))["sources"]
        assert src["lag"] == 0 and "error" not in src, src


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), ALL_PAIRS, ids=PAIR_IDS)
async def test_a_leaf_that_took_messages_through_an_outage_delivers_each_once(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    await run_outage(topo, hub_kind, leaf_kind, int(os.environ.get("LEAF_OUTAGE_MSGS", "20000")))


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), ALL_PAIRS, ids=PAIR_IDS)
async def test_a_million_messages_through_an_outage_arrive_each_once(
    topo: Topology, hub_kind: str, leaf_kind: str, request: pytest.FixtureRequest
) -> None:
    only_when_selected(request, "soak")
    await run_outage(topo, hub_kind, leaf_kind, int(os.environ.get("LEAF_OUTAGE_MSGS", "1000000")))


TWO_LEAVES = ("E1", "E2")


async def run_two_outages(topo: Topology, hub_kind: str, leaf_kind: str, n: int) -> None:
    """Two leaves, each behind its own proxy, both take ``n`` messages while cut off; the hub
    stream sources both, and catches up with both at once when the links come back."""
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    users = {name: LeafUser(f"leaf-{name.lower()}", f"{name.lower()}-pw", "A") for name in TWO_LEAVES}
    hub = topo.start("hub", hub_kind, Node(accounts=ACCOUNTS, domain="HUB", leaf_users=list(users.values())))
    reconnect = 0.2 if leaf_kind == "leafjet" else None
    leaves, proxies = {}, {}
    for name, user in users.items():
        proxies[name] = topo.proxy_to_leaf_port(hub)
        remote = Remote(hub, user.user, user.password, "A", via=proxies[name], reconnect=reconnect)
        leaves[name] = topo.start(name, leaf_kind, Node(accounts=ACCOUNTS, domain=name, remotes=[remote]))
    wait_for_leaf_connected(hub, len(TWO_LEAVES), timeout=30)
    sources = [
        {"name": "ORDERS", "external": {"api": f"$JS.{name}.API", "deliver": ""}} for name in TWO_LEAVES
    ]
    async with await nats.connect(url_a(hub), max_reconnect_attempts=-1) as hub_nc:
        for name, leaf in leaves.items():
            async with await nats.connect(url_a(leaf)) as nc:
                await create_stream(nc, {"name": "ORDERS", "subjects": [f"{name.lower()}.>"]})
        await create_stream(hub_nc, {"name": "AGG", "sources": sources})
        for p in proxies.values():
            p.cut()
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: leaf_count(hub) == 0, 15))
        for name, leaf in leaves.items():
            async with await nats.connect(url_a(leaf), pending_size=1 << 28) as nc:
                await fill_stream(nc, f"{name.lower()}.x", n, lambda i: b"%d" % i)
        for p in proxies.values():
            p.restore()
        got = await wait_count(hub_nc, "AGG", 2 * n, timeout=60 + n / 1000)
        if got < 2 * n:
            info = await stream_info(hub_nc, "AGG")
            raise AssertionError(f"the hub holds {got} of {2 * n}; sources: {info['sources']}")
        # the stream still takes API requests (a consumer create needs its lock)
        headers = [m.source async for m in iter_stream(hub_nc, "AGG", batch=2000)]
    seqs: dict[str, list[int]] = {}
    for h in headers:
        key, seq = upstream_of(h or "")
        seqs.setdefault(key, []).append(seq)
    assert sorted(len(v) for v in seqs.values()) == [n, n], {k: len(v) for k, v in seqs.items()}
    for key, got_seqs in seqs.items():
        assert got_seqs == list(range(1, n + 1)), f"{key}: not each of 1..{n} once, in order"


# A leafjet hub stalled here (both sources idle, the account's API hung: a drain under the
# stream's lock waited for a batch only the other source would settle). The reference's hub
# passes too, but takes ~40 s (its sources back off after the creates that failed during the
# cut): it runs with the soak tier.
LEAFJET_HUBS = [pair for pair in ALL_PAIRS if pair[0] == "leafjet"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), LEAFJET_HUBS, ids=pair_ids(LEAFJET_HUBS))
async def test_a_hub_catches_up_with_two_leaves_at_once(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    await run_two_outages(topo, hub_kind, leaf_kind, 10_000)


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), ALL_PAIRS, ids=PAIR_IDS)
async def test_a_hub_catches_up_with_two_leaves_of_a_million_each(
    topo: Topology, hub_kind: str, leaf_kind: str, request: pytest.FixtureRequest
) -> None:
    only_when_selected(request, "soak")
    await run_two_outages(topo, hub_kind, leaf_kind, int(os.environ.get("LEAF_OUTAGE_MSGS", "1000000")))
