"""Leaf-node links under faults, and daisy chains, differentially: the reference at every node
(the baseline), then leafjet at each end and at both.

- A hub SIGKILLed and started again on its ports and data: the leaf's link comes back by itself,
  the leaf served its local clients (request/reply, JetStream) meanwhile, interest is exact
  afterwards; then the leaf dies where the hub cannot see it (a frozen proxy keeps its old
  connection open) and restarts: the hub replaces the old link with the new one, never lists
  two. The remote lists a dead port before the hub's: the dialler goes through its URLs.
- No storm: while a hub is down, a leaf dials about once per reconnect interval (1 s by
  default); leafjet at most twice the reference's rate (counted by a proxy in front of the dead
  hub). Observed over 5 s: the reference 4-5 dials (1 s, plus ~0.1 s), leafjet 3-4 (1-2 s).
- Repeated random cuts of 1-30 s through a proxy, publishing on both sides during the cuts:
  marked ``chaos`` (minutes long), not in the default run.
- A daisy chain A (HUB) <- B (MID) <- C (EDGE): core messages and request/reply across two hops,
  JetStream of C and of B reached from A through their domains, each server's own $JS.API local.

The triangle of links (loop detection) is ``test_leafnodes.py::test_a_triangle_of_links_...``,
with leafjet in each role. The long schedule: ``pytest -m chaos -k random_cuts`` (env
LEAF_CHAOS_SEED / LEAF_CHAOS_ROUNDS / LEAF_CHAOS_MAX_CUT).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.integration.test_leafnodes import (
    connected,
    fence,
    interest_crossed,
    request_until_answered,
    skip_unless_built,
    subscribe,
    unique,
)
from tests.support.barrier import subscriptions_sent
from tests.support.leafnodes import (
    ALL_PAIRS,
    LeafUser,
    Node,
    Remote,
    Topology,
    client_url,
    leaf_count,
    leafz,
    pair_ids,
    wait_for_leaf_connected,
)
from tests.support.servers import RunningServer, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

PAIRS = ALL_PAIRS
PAIR_IDS = pair_ids(PAIRS)
ACCOUNTS = {"A": [("a", "a-pw")]}
# the hub's log line when a leaf's new connection replaces its old one
REPLACED = {"reference": "Replacing connection from same server", "leafjet": "replacing the connection"}
LEAF_USER = LeafUser("leaf-a", "leaf-a-pw", "A")


def remote(hub: RunningServer, **kw: Any) -> Remote:
    return Remote(hub, LEAF_USER.user, LEAF_USER.password, "A", **kw)


def url_a(server: RunningServer) -> str:
    return client_url(server, "a", "a-pw")


async def in_thread(fn: Callable[[], Any]) -> Any:
    """A blocking wait (polling /leafz, starting a server) without stalling the clients' loop."""
    return await anyio.to_thread.run_sync(fn)


async def links_up(*pairs: tuple[RunningServer, int], timeout: float = 15.0) -> None:
    for server, n in pairs:
        await in_thread(lambda server=server, n=n: wait_for_leaf_connected(server, n, timeout))


async def echo(msg: Any) -> None:
    await msg.respond(msg.data)


def subscription_lists(server: RunningServer) -> list[list[str]]:
    z = leafz(server, subs=True) or {}
    return [list(link.get("subscriptions_list") or []) for link in z.get("leafs") or []]


def assert_interest_exact(
    hub: RunningServer, live: set[str], dead: frozenset[str] | set[str] = frozenset()
) -> None:
    """The hub holds one link, announcing each live subject once and no dead one."""
    lists = subscription_lists(hub)
    assert len(lists) == 1, f"{len(lists)} links in /leafz: {lists}"
    announced = lists[0]
    assert len(announced) == len(set(announced)), f"a subject listed twice: {sorted(announced)}"
    missing = live - set(announced)
    assert not missing, f"live subjects not announced: {missing}"
    stale = dead & set(announced)
    assert not stale, f"dead subjects still announced: {stale}"


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


# -- 1 and 2: hub killed and restarted, leaf killed and restarted, a dead URL first -------------


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), PAIRS, ids=PAIR_IDS)
async def test_hub_then_leaf_killed_and_restarted(topo: Topology, hub_kind: str, leaf_kind: str) -> None:
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    hub, proxy = topo.start_behind_proxy(  # the leaf dials through it, and so do its reconnects
        "hub", hub_kind, Node(accounts=ACCOUNTS, domain="HUB", leaf_users=[LEAF_USER])
    )
    dead = f"nats-leaf://{LEAF_USER.user}:{LEAF_USER.password}@127.0.0.1:{free_port()}"
    leaf = topo.start(
        "leaf",
        leaf_kind,
        Node(accounts=ACCOUNTS, domain="EDGE", remotes=[remote(hub, via=proxy, urls_before=[dead])]),
    )
    await links_up((hub, 1), (leaf, 1))  # through the dead URL to the live one
    stream = unique("LOCAL_")

    # -- the hub dies; the leaf serves its own clients; the hub comes back on the same ports
    async with connected(url_a(leaf), url_a(leaf), url_a(leaf)) as (leaf_nc, svc, cli):
        down = await subscribe(leaf_nc, "k.down")
        await svc.subscribe("local.svc", cb=echo)
        await subscriptions_sent(svc)
        js = cli.jetstream(timeout=5)
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        async with connected(url_a(hub)) as (hub_nc,):
            await interest_crossed(leaf_nc, hub_nc)
            await hub_nc.publish("k.down", b"before")
            await fence(hub_nc, [leaf_nc])
        assert down.data == [b"before"]

        hub.stop(signal.SIGKILL)
        await in_thread(lambda: wait_until(lambda: leaf_count(leaf) == 0, what="the leaf to see the hub die"))
        for i in range(5):  # while the hub is down
            assert (await cli.request("local.svc", b"%d" % i, timeout=2)).data == b"%d" % i
            ack = await js.publish(f"{stream}.x", b"down-%d" % i)
            assert ack.seq == i + 1 and ack.stream == stream
        await in_thread(lambda: hub.restart(kill=True))
        await links_up((hub, 1), (leaf, 1))

        async with connected(url_a(hub)) as (hub_nc,):
            await interest_crossed(leaf_nc, hub_nc)  # the leaf's interest is announced again
            up = await subscribe(hub_nc, "k.up")  # made after the restart
            await interest_crossed(hub_nc, leaf_nc)
            await hub_nc.publish("k.down", b"after")
            await leaf_nc.publish("k.up", b"up")
            await fence(hub_nc, [leaf_nc])
            await fence(leaf_nc, [hub_nc])
            assert down.data == [b"before", b"after"]
            assert up.data == [b"up"]
            assert_interest_exact(hub, {"k.down"})

    # -- the leaf dies where the hub cannot see it (its connection stays open, silent), and comes
    # back: the hub replaces the old link with the new one (the reference's "Duplicate Remote
    # LeafNode Connection"), and never lists both
    async with connected(url_a(hub)) as (hub_nc,):
        up = await subscribe(hub_nc, "k.up2")  # made before the leaf dies
        old = {lk["id"] for lk in (leafz(hub) or {}).get("leafs") or []}
        assert len(old) == 1
        proxy.freeze()
        leaf.stop(signal.SIGKILL)
        await anyio.sleep(0.2)
        assert {lk["id"] for lk in (leafz(hub) or {}).get("leafs") or []} == old  # still "alive"
        await in_thread(lambda: leaf.restart(kill=True))
        await in_thread(
            lambda: wait_until(
                lambda: (ids := {lk["id"] for lk in (leafz(hub) or {}).get("leafs") or []}) and not ids & old,
                15,
                what="the hub to replace the old link",
            )
        )
        await links_up((hub, 1), (leaf, 1))
        for _ in range(10):  # and it stays one link
            z = leafz(hub) or {}
            ids = {lk["id"] for lk in z.get("leafs") or []}
            assert len(ids) == 1 and not ids & old, f"links on the hub: {z.get('leafs')} (old: {old})"
            await anyio.sleep(0.05)
        assert REPLACED[hub_kind] in hub.log()
        async with connected(url_a(leaf), url_a(leaf)) as (leaf_nc, cli):
            down = await subscribe(leaf_nc, "k.down2")
            await interest_crossed(leaf_nc, hub_nc)
            await interest_crossed(hub_nc, leaf_nc)
            await hub_nc.publish("k.down2", b"d")
            await leaf_nc.publish("k.up2", b"u")
            await fence(hub_nc, [leaf_nc])
            await fence(leaf_nc, [hub_nc])
            assert down.data == [b"d"] and up.data == [b"u"]
            assert_interest_exact(hub, {"k.down2"}, dead={"k.down", "local.svc"})
            # what the leaf stored while its hub was down survived its own SIGKILL
            info = await cli.jetstream(timeout=5).stream_info(stream)
            assert info.state.messages == 5


# -- 3: no dial storm while the hub is down ----------------------------------------------------

DOWN_FOR = 5.0


async def test_no_dial_storm_while_the_hub_is_down(topo: Topology) -> None:
    """One reference hub per leaf kind, each behind a proxy it advertises (so every reconnect of
    its leaf goes through the proxy, which counts the attempts); both hubs die together."""
    skip_unless_built(("leafjet", "solicit"))
    kinds = ["reference", "leafjet"]
    hubs: dict[str, RunningServer] = {}
    proxies = {}
    for kind in kinds:
        hub, proxy = topo.start_behind_proxy(
            f"hub-{kind}", "reference", Node(accounts=ACCOUNTS, domain="HUB", leaf_users=[LEAF_USER])
        )
        hubs[kind], proxies[kind] = hub, proxy
        topo.start(
            f"leaf-{kind}", kind, Node(accounts=ACCOUNTS, domain="EDGE", remotes=[remote(hub, via=proxy)])
        )
    for kind in kinds:
        await links_up((hubs[kind], 1), (topo[f"leaf-{kind}"], 1))
    for hub in hubs.values():
        hub.stop(signal.SIGKILL)
    before = {kind: proxies[kind].accepted for kind in kinds}
    await anyio.sleep(DOWN_FOR)
    dials = {kind: proxies[kind].accepted - before[kind] for kind in kinds}
    for hub in hubs.values():
        await in_thread(lambda hub=hub: hub.restart(kill=True))
    for kind in kinds:
        await links_up((hubs[kind], 1), (topo[f"leaf-{kind}"], 1))
    print(f"dials in {DOWN_FOR:g}s with the hub down: {dials}")
    # the default reconnect interval is 1 s: about 4-5 dials each (observed: the reference 4, leafjet 3-4)
    assert 2 <= dials["reference"] <= DOWN_FOR + 3, dials
    assert 2 <= dials["leafjet"] <= DOWN_FOR + 3, dials
    assert dials["leafjet"] <= 2 * dials["reference"], dials


# -- 4: repeated cuts of 1-30 s (chaos tier) ---------------------------------------------------


@pytest.mark.chaos
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), PAIRS, ids=PAIR_IDS)
async def test_random_cuts_of_one_to_thirty_seconds(topo: Topology, hub_kind: str, leaf_kind: str) -> None:
    """Rounds of: a cut of 1-30 s (both sides publish throughout, and the leaf churns its
    interest during the cut), the link back, then a burst each way that must arrive exactly
    once. Messages of the cut may be lost but never duplicated. LEAF_CHAOS_SEED, LEAF_CHAOS_ROUNDS
    and LEAF_CHAOS_MAX_CUT override the schedule."""
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    seed = int(os.environ.get("LEAF_CHAOS_SEED", str(random.randrange(1 << 30))))
    rounds = int(os.environ.get("LEAF_CHAOS_ROUNDS", "6"))
    max_cut = float(os.environ.get("LEAF_CHAOS_MAX_CUT", "30"))
    rng = random.Random(seed)
    schedule = [round(rng.uniform(1.0, max_cut), 1) for _ in range(rounds)]
    print(f"seed {seed}: cuts {schedule}")
    hub, proxy = topo.start_behind_proxy(
        "hub", hub_kind, Node(accounts=ACCOUNTS, domain="HUB", leaf_users=[LEAF_USER])
    )
    leaf = topo.start(
        "leaf", leaf_kind, Node(accounts=ACCOUNTS, domain="EDGE", remotes=[remote(hub, via=proxy)])
    )
    await links_up((hub, 1), (leaf, 1))
    async with connected(url_a(hub), url_a(hub), url_a(leaf), url_a(leaf)) as (
        hub_pub,
        hub_nc,
        leaf_pub,
        leaf_nc,
    ):
        down = await subscribe(leaf_nc, "chaos.down.>")
        up = await subscribe(hub_nc, "chaos.up.>")
        churn: dict[str, Any] = {}  # subject -> subscription on the leaf, added/removed during cuts
        dropped: set[str] = set()
        await interest_crossed(leaf_nc, hub_pub)
        await interest_crossed(hub_nc, leaf_pub)
        stop = anyio.Event()
        counts = {"down": 0, "up": 0}

        async def noise(nc: Any, direction: str) -> None:  # publishes all along, cuts included
            while not stop.is_set():
                counts[direction] += 1
                await nc.publish(f"chaos.{direction}.noise", b"n%d" % counts[direction])
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as tg:
            tg.start_soon(noise, hub_pub, "down")
            tg.start_soon(noise, leaf_pub, "up")
            for rnd, cut_for in enumerate(schedule):
                proxy.cut()
                await in_thread(
                    lambda: wait_until(lambda: leaf_count(hub) == 0, 15, what="the hub to see the cut")
                )
                t_end = time.monotonic() + cut_for
                j = 0
                while time.monotonic() < t_end:  # the leaf's interest changes while cut off
                    subject = f"chaos.churn.{rnd}.{j}"
                    churn[subject] = await leaf_nc.subscribe(subject)
                    if j % 2 and churn:
                        gone = rng.choice(sorted(churn))
                        await churn.pop(gone).unsubscribe()
                        dropped.add(gone)
                    j += 1
                    await anyio.sleep(min(0.5, max(0.0, t_end - time.monotonic())))
                proxy.restore()
                await links_up((hub, 1), (leaf, 1), timeout=30)
                await interest_crossed(leaf_nc, hub_pub)
                await interest_crossed(hub_nc, leaf_pub)
                tag = b"r%d-" % rnd
                for i in range(100):
                    await hub_pub.publish(f"chaos.down.burst.{rnd}", tag + b"%d" % i)
                    await leaf_pub.publish(f"chaos.up.burst.{rnd}", tag + b"%d" % i)
                await fence(hub_pub, [leaf_nc])
                await fence(leaf_pub, [hub_nc])
                for box in (down, up):
                    got = [d for d in box.data if d.startswith(tag)]
                    assert sorted(got) == sorted(tag + b"%d" % i for i in range(100)), (seed, rnd, len(got))
                assert_interest_exact(hub, {"chaos.down.>", *churn}, dead=dropped - set(churn))
            stop.set()
        for box in (down, up):
            noise_seen = [d for d in box.data if d.startswith(b"n")]
            assert len(noise_seen) == len(set(noise_seen)), f"seed {seed}: a message delivered twice"


# -- 5: a daisy chain A (HUB) <- B (MID) <- C (EDGE) ------------------------------------------

CHAINS = [
    ("reference", "reference", "reference"),
    ("leafjet", "leafjet", "leafjet"),
    ("reference", "leafjet", "reference"),
]
CHAIN_IDS = ["A={},B={},C={}".format(*k) for k in CHAINS]
LEAF_B = LeafUser("leaf-b", "leaf-b-pw", "A")
LEAF_C = LeafUser("leaf-c", "leaf-c-pw", "A")


@dataclass
class Chain:
    a: RunningServer
    b: RunningServer
    c: RunningServer


@pytest.fixture(scope="module", params=CHAINS, ids=CHAIN_IDS)
def chain(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    a_kind, b_kind, c_kind = request.param
    skip_unless_built((a_kind, "accept"), (b_kind, "accept"), (b_kind, "solicit"), (c_kind, "solicit"))
    topo = Topology(tmp_path_factory.mktemp("chain"))
    try:
        a = topo.start("A", a_kind, Node(accounts=ACCOUNTS, domain="HUB", leaf_users=[LEAF_B]))
        b = topo.start(
            "B",
            b_kind,
            Node(
                accounts=ACCOUNTS,
                domain="MID",
                leaf_users=[LEAF_C],
                remotes=[Remote(a, LEAF_B.user, LEAF_B.password, "A")],
            ),
        )
        c = topo.start(
            "C",
            c_kind,
            Node(accounts=ACCOUNTS, domain="EDGE", remotes=[Remote(b, LEAF_C.user, LEAF_C.password, "A")]),
        )
        wait_for_leaf_connected(a, 1)
        wait_for_leaf_connected(b, 2)
        wait_for_leaf_connected(c, 1)
        yield Chain(a, b, c)
    finally:
        topo.close()


async def test_chain_core_messages_cross_two_hops_both_ways(chain: Chain) -> None:
    async with connected(url_a(chain.a), url_a(chain.c)) as (a, c):
        down = await subscribe(c, "chain.down")
        up = await subscribe(a, "chain.up")
        await interest_crossed(c, a)
        await interest_crossed(a, c)
        for i in range(20):
            await a.publish("chain.down", b"d%d" % i, headers={"X-From": "A"})
            await c.publish("chain.up", b"u%d" % i)
        await fence(a, [c])
        await fence(c, [a])
        assert down.data == [b"d%d" % i for i in range(20)]
        assert down.msgs[0].headers == {"X-From": "A"}
        assert up.data == [b"u%d" % i for i in range(20)]


async def test_chain_request_reply_from_a_to_c(chain: Chain) -> None:
    async with connected(url_a(chain.a), url_a(chain.c)) as (a, c):

        async def svc(msg: Any) -> None:
            await msg.respond(b"C:" + msg.data)

        await c.subscribe("chain.svc", cb=svc)
        assert (await request_until_answered(a, "chain.svc", b"first")).data == b"C:first"
        for i in range(10):
            assert (await a.request("chain.svc", b"%d" % i, timeout=5)).data == b"C:%d" % i


async def js_ready(js: Any, timeout: float = 15.0) -> Any:
    """account_info until the (remote) JetStream answers: its interest crosses with the links."""
    with anyio.fail_after(timeout):
        while True:
            try:
                return await js.account_info()
            except (NoRespondersError, NatsTimeout):
                await anyio.sleep(0.05)


async def test_chain_jetstream_through_domains(chain: Chain) -> None:
    stream = unique("CHAIN_EDGE_")
    async with connected(url_a(chain.a), url_a(chain.b), url_a(chain.c)) as (a, b, c):
        edge = a.jetstream(domain="EDGE", timeout=5)
        assert (await js_ready(edge)).domain == "EDGE"
        await edge.add_stream(name=stream, subjects=[f"{stream}.>"])
        c_js = c.jetstream(timeout=5)
        assert (await c_js.stream_info(stream)).config.name == stream  # created on C
        for i in range(5):
            await c_js.publish(f"{stream}.{i}", b"edge-%d" % i)
        psub = await edge.pull_subscribe(f"{stream}.>", durable="from_a", stream=stream)
        got: list[bytes] = []
        with anyio.fail_after(15):
            while len(got) < 5:
                for m in await psub.fetch(5 - len(got), timeout=5):
                    got.append(m.data)
                    await m.ack_sync(timeout=5)
        assert got == [b"edge-%d" % i for i in range(5)]
        # B's JetStream, from A through domain MID
        assert (await js_ready(a.jetstream(domain="MID", timeout=5))).domain == "MID"
        # each server's own $JS.API stays local
        for nc, domain in ((a, "HUB"), (b, "MID"), (c, "EDGE")):
            assert (await nc.jetstream(timeout=5).account_info()).domain == domain
        a_streams = {s.config.name for s in await a.jetstream(timeout=5).streams_info()}
        b_streams = {s.config.name for s in await b.jetstream(timeout=5).streams_info()}
        assert stream not in a_streams and stream not in b_streams
