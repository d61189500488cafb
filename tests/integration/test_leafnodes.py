"""Leaf-node links, differentially: the same scenarios for each (hub, leaf) pair of implementations.

(reference, reference) is the baseline; a topology with a leafjet node in a role leafjet's config
does not accept yet (``leafjet agent --check-config`` refuses its ``leafnodes`` table) is skipped
with "leafjet leaf links not built yet", and runs by itself once the feature lands.

The module's main topology (per pair) is shared by its tests: a hub with accounts A and B and
JetStream domain HUB; leaf "leaf" (domain EDGE) bound to A with ``deny_imports=["secret.>"]`` and
``deny_exports=["private.>"]``; leaf "leaf-b" (domain EDGEB) bound to B. Tests that cut links or
build loops start their own servers. Nothing sleeps: interest is known to have crossed a link when
a request to a responder subscribed after it is answered across that link (``interest_crossed``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.barrier import subscriptions_sent
from tests.support.leafnodes import (
    ALL_PAIRS,
    NOT_BUILT,
    LeafUser,
    Node,
    Remote,
    Topology,
    client_url,
    leaf_count,
    leaf_port,
    leaf_subscriptions,
    leafz,
    missing_leafjet_roles,
    pair_ids,
    wait_for_leaf_connected,
)
from tests.support.servers import RunningServer, wait_until, wait_until_async

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

TOPOLOGIES = ALL_PAIRS
TOPOLOGY_IDS = pair_ids(TOPOLOGIES)
LOOP_ERROR = 'Loop detected for leafnode account="A". Delaying attempt to reconnect for 30s'

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}x{time.monotonic_ns() % 10**9}"


def skip_unless_built(*kinds_and_roles: tuple[str, str]) -> None:
    if missing_leafjet_roles(list(kinds_and_roles)):
        pytest.skip(NOT_BUILT)


# -- the shared topology ----------------------------------------------------------------------

HUB_ACCOUNTS = {"A": [("a", "a-pw")], "B": [("b", "b-pw")]}
LEAF_USERS = [LeafUser("leaf-a", "leaf-a-pw", "A"), LeafUser("leaf-b", "leaf-b-pw", "B")]


@dataclass
class Net:
    hub: RunningServer
    leaf: RunningServer  # account A, domain EDGE, deny lists
    leaf_b: RunningServer  # account B, domain EDGEB

    @property
    def hub_a(self) -> str:
        return client_url(self.hub, "a", "a-pw")

    @property
    def hub_b(self) -> str:
        return client_url(self.hub, "b", "b-pw")

    @property
    def leaf_a(self) -> str:
        return client_url(self.leaf, "a", "a-pw")

    @property
    def leaf_bb(self) -> str:
        return client_url(self.leaf_b, "b", "b-pw")

    def links_up(self) -> None:
        """The three links are (still) up."""
        wait_for_leaf_connected(self.hub, 2)
        wait_for_leaf_connected(self.leaf, 1)
        wait_for_leaf_connected(self.leaf_b, 1)


@pytest.fixture(scope="module", params=TOPOLOGIES, ids=TOPOLOGY_IDS)
def net(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    hub_kind, leaf_kind = request.param
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    topo = Topology(tmp_path_factory.mktemp(f"leaf-{hub_kind}-{leaf_kind}"))
    try:
        hub = topo.start("hub", hub_kind, Node(accounts=HUB_ACCOUNTS, domain="HUB", leaf_users=LEAF_USERS))
        leaf = topo.start(
            "leaf",
            leaf_kind,
            Node(
                accounts={"A": [("a", "a-pw")]},
                domain="EDGE",
                remotes=[
                    Remote(
                        hub, "leaf-a", "leaf-a-pw", "A", deny_imports=["secret.>"], deny_exports=["private.>"]
                    )
                ],
            ),
        )
        leaf_b = topo.start(
            "leaf-b",
            leaf_kind,
            Node(
                accounts={"B": [("b", "b-pw")]},
                domain="EDGEB",
                remotes=[Remote(hub, "leaf-b", "leaf-b-pw", "B")],
            ),
        )
        n = Net(hub, leaf, leaf_b)
        n.links_up()
        yield n
    finally:
        topo.close()


# -- client helpers ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def connected(*urls: str) -> AsyncIterator[list[Any]]:
    ncs: list[Any] = []
    try:
        for url in urls:
            ncs.append(await nats.connect(url, allow_reconnect=False))
        yield ncs
    finally:
        for nc in ncs:
            with contextlib.suppress(Exception):
                await nc.close()


async def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` (no sleeping for a guessed time); fail after ``timeout``."""
    try:
        await wait_until_async(predicate, timeout, 0.01, what)
    except TimeoutError as e:
        raise AssertionError(str(e)) from None


async def request_until_answered(nc: Any, subject: str, data: bytes = b"", timeout: float = 10.0) -> Any:
    """Request until a responder answers: "no responders" and timeouts mean the interest has not
    crossed yet, so ask again."""
    try:
        with anyio.fail_after(timeout):
            while True:
                try:
                    return await nc.request(subject, data, timeout=1)
                except NoRespondersError:
                    await anyio.sleep(0.02)
                except NatsTimeout:
                    pass
    except TimeoutError:
        raise AssertionError(f"no answer on {subject} within {timeout}s") from None


async def interest_crossed(sub_side: Any, pub_side: Any, timeout: float = 10.0) -> None:
    """Return once every SUB/UNSUB that ``sub_side``'s server processed so far is known to
    ``pub_side``'s server, across the link. Interest crosses a link in the order the server
    processed it, so a responder subscribed now is answered only after all of it crossed."""
    subject = unique("barrier.")

    async def respond(msg: Any) -> None:
        await msg.respond(b"")

    sub = await sub_side.subscribe(subject, cb=respond)
    await subscriptions_sent(sub_side)
    await request_until_answered(pub_side, subject, timeout=timeout)
    await sub.unsubscribe()


async def fence(publisher: Any, receivers: list[Any]) -> None:
    """Return once every message ``publisher`` sent so far has reached each of ``receivers``
    (or never will): a marker published now arrives after them, on every path."""
    subject = unique("fence.")
    got: set[int] = set()
    for i, nc in enumerate(receivers):

        async def mark(_msg: Any, i: int = i) -> None:
            got.add(i)

        await nc.subscribe(subject, cb=mark)
        await interest_crossed(nc, publisher)
    await publisher.publish(subject, b"")
    await publisher.flush()
    await until(lambda: len(got) == len(receivers), what="the fence to reach every receiver")


class Inbox:
    """A subscription's messages, collected by a callback."""

    def __init__(self) -> None:
        self.msgs: list[Any] = []

    async def cb(self, msg: Any) -> None:
        self.msgs.append(msg)

    @property
    def data(self) -> list[bytes]:
        return [m.data for m in self.msgs]


async def subscribe(nc: Any, subject: str, queue: str = "") -> Inbox:
    box = Inbox()
    await nc.subscribe(subject, queue=queue, cb=box.cb)
    return box


# -- core -------------------------------------------------------------------------------------


async def test_messages_with_headers_cross_both_ways(net: Net) -> None:
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):
        down = await subscribe(leaf, "down.>")
        up = await subscribe(hub, "up.>")
        await interest_crossed(leaf, hub)
        await interest_crossed(hub, leaf)
        await hub.publish("down.1", b"to-leaf", headers={"X-Origin": "hub", "X-Seq": "1"})
        await hub.publish("down.2", b"", headers={"X-Only": "headers"})
        await leaf.publish("up.1", b"to-hub", headers={"X-Origin": "leaf"})
        await leaf.publish("up.2", b"plain")
        await until(lambda: len(down.msgs) == 2 and len(up.msgs) == 2, what="both messages each way")
        assert [(m.subject, m.data) for m in down.msgs] == [("down.1", b"to-leaf"), ("down.2", b"")]
        assert down.msgs[0].headers == {"X-Origin": "hub", "X-Seq": "1"}
        assert down.msgs[1].headers == {"X-Only": "headers"}
        assert [(m.subject, m.data) for m in up.msgs] == [("up.1", b"to-hub"), ("up.2", b"plain")]
        assert up.msgs[0].headers == {"X-Origin": "leaf"}
        assert not up.msgs[1].headers


async def test_request_reply_crosses_both_ways(net: Net) -> None:
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):

        async def leaf_svc(msg: Any) -> None:
            await leaf.publish(msg.reply, b"leaf:" + msg.data, headers={"X-Served-By": "leaf"})

        async def hub_svc(msg: Any) -> None:
            await msg.respond(b"hub:" + msg.data)

        await leaf.subscribe("svc.leaf", cb=leaf_svc)
        await hub.subscribe("svc.hub", cb=hub_svc)
        reply = await request_until_answered(hub, "svc.leaf", b"ping")
        assert reply.data == b"leaf:ping"
        assert reply.headers == {"X-Served-By": "leaf"}
        assert (await request_until_answered(leaf, "svc.hub", b"pong")).data == b"hub:pong"
        for i in range(20):  # the reply inboxes stay known: no further waiting
            assert (await hub.request("svc.leaf", str(i).encode(), timeout=5)).data == b"leaf:%d" % i
            assert (await leaf.request("svc.hub", str(i).encode(), timeout=5)).data == b"hub:%d" % i


async def test_queue_group_spanning_the_link_delivers_each_message_once_local_members_first(net: Net) -> None:
    async with connected(net.hub_a, net.hub_a, net.leaf_a, net.leaf_a, net.leaf_a) as ncs:
        hub_pub, hub_member, leaf_m1, leaf_m2, leaf_pub = ncs
        subject = unique("work.")
        hub_box = Inbox()
        hub_sub = await hub_member.subscribe(subject, queue="q", cb=hub_box.cb)
        leaf_boxes = [await subscribe(leaf_m1, subject, "q"), await subscribe(leaf_m2, subject, "q")]
        await subscriptions_sent(leaf_m1)
        await subscriptions_sent(leaf_m2)
        await interest_crossed(leaf_pub, hub_pub)
        await interest_crossed(hub_member, leaf_pub)
        boxes = [hub_box, *leaf_boxes]

        def delivered() -> list[bytes]:
            return [d for b in boxes for d in b.data]

        # publisher on the hub, a member there: the local member gets each message, exactly once
        n = 200
        for i in range(n):
            await hub_pub.publish(subject, b"h%d" % i)
        await until(lambda: len(delivered()) >= n, what=f"{n} queue deliveries")
        await fence(hub_pub, [hub_member, leaf_m1, leaf_m2])
        assert sorted(delivered()) == sorted(b"h%d" % i for i in range(n))
        assert len(hub_box.msgs) == n, "a message from a hub client goes to the hub's own member first"

        # no member left on the hub: the leaf's members share them, each message once
        await hub_sub.unsubscribe()
        await subscriptions_sent(hub_member)
        for b in boxes:
            b.msgs.clear()
        for i in range(n):
            await hub_pub.publish(subject, b"l%d" % i)
        await until(lambda: len(delivered()) >= n, what=f"{n} queue deliveries to the leaf")
        await fence(hub_pub, [leaf_m1, leaf_m2])
        assert sorted(delivered()) == sorted(b"l%d" % i for i in range(n))
        assert all(b.msgs for b in leaf_boxes), "both leaf members should get some of 200"

        # members on both sides again, publisher on the leaf: the leaf's members get them all
        hub_box = await subscribe(hub_member, subject, "q")
        boxes[0] = hub_box
        await interest_crossed(hub_member, leaf_pub)
        for b in boxes:
            b.msgs.clear()
        for i in range(n):
            await leaf_pub.publish(subject, b"e%d" % i)
        await until(lambda: len(delivered()) >= n, what=f"{n} queue deliveries from the leaf")
        await fence(leaf_pub, [hub_member, leaf_m1, leaf_m2])
        assert sorted(delivered()) == sorted(b"e%d" % i for i in range(n))
        assert not hub_box.msgs, "a message from a leaf client goes to the leaf's own members first"


async def test_one_mebibyte_message_crosses_both_ways(net: Net) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, the default max_payload of both sides
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):
        assert hub.max_payload >= len(payload) and leaf.max_payload >= len(payload)
        down = await subscribe(leaf, "big.down")
        up = await subscribe(hub, "big.up")
        await interest_crossed(leaf, hub)
        await interest_crossed(hub, leaf)
        await hub.publish("big.down", payload)
        await leaf.publish("big.up", payload)
        await until(lambda: down.msgs and up.msgs, what="the 1 MiB messages")
        assert down.data == [payload] and up.data == [payload]


async def test_a_burst_of_one_subject_crosses_both_ways_once_in_order(net: Net) -> None:
    """A publisher's burst of one subject, one size: leafjet routes it a run at a time and a leaf
    link forwards a run as one buffer entry (core/server/DESIGN.md "Runs"). Each side gets every
    message once, in order, and a burst to a subject the leaf may not export stays on the leaf."""
    burst = [b"%06d" % i for i in range(3000)]
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):
        down = await subscribe(leaf, "burst.down")
        up = await subscribe(hub, "burst.up")
        # a wildcard: the leaf keeps this interest and checks each message it would forward
        private = await subscribe(hub, "*.burst")
        await interest_crossed(leaf, hub)
        await interest_crossed(hub, leaf)
        for nc, subject in ((hub, "burst.down"), (leaf, "burst.up"), (leaf, "private.burst")):
            for p in burst:  # one subject at a time: consecutive PUBs of one subject make runs
                await nc.publish(subject, p)
        await hub.flush()
        await leaf.flush()
        await until(lambda: len(down.msgs) >= len(burst) and len(up.msgs) >= len(burst), 60, "the bursts")
        await fence(hub, [leaf])
        await fence(leaf, [hub])
        assert down.data == burst
        assert up.data == burst
        assert not private.msgs, "deny_exports: private.burst must not reach the hub"


async def test_interest_churn_leaves_exact_interest(net: Net) -> None:
    """The leaf adds and removes ~300 subscriptions in rounds while the hub publishes: each live
    subscription gets every round's marker published after it became visible, exactly once, and
    afterwards the hub holds exactly the live interest (/leafz subs) and forwards nothing else."""
    prefix = unique("churn")
    async with connected(net.hub_a, net.hub_a, net.leaf_a, net.leaf_a) as (hub, noise_nc, leaf, leaf2):
        live: dict[str, list[tuple[Any, Inbox, int]]] = {}  # subject -> [(sub, inbox, round subscribed)]
        dropped: list[str] = []
        stop = anyio.Event()
        noise_seq = itertools.count()

        async def noise() -> None:  # the hub publishes all along, to live and dead subjects
            while not stop.is_set():
                names = list(live) + dropped
                for s in names[:50]:
                    await noise_nc.publish(s, b"n%d" % next(noise_seq))
                await noise_nc.flush()

        async with anyio.create_task_group() as tg:
            tg.start_soon(noise)
            for rnd in range(10):
                for j in range(30):  # 30 new subjects a round; a few with two subscribers
                    subject = f"{prefix}.{rnd}.{j}"
                    conns = [leaf, leaf2] if j % 10 == 0 else [leaf]
                    boxes = [Inbox() for _ in conns]
                    live[subject] = [
                        (await c.subscribe(subject, cb=b.cb), b, rnd)
                        for c, b in zip(conns, boxes, strict=True)
                    ]
                victims = list(live)[rnd % 4 :: 4][:15]
                for s in victims:  # drop 15: some back to 0 interest, some from 2 to 1
                    entries = live[s]
                    sub, _, _ = entries.pop()
                    await sub.unsubscribe()
                    if not entries:
                        del live[s]
                        dropped.append(s)
                if rnd % 3 == 2 and dropped:  # and come back to a subject dropped earlier
                    s = dropped.pop(0)
                    box = Inbox()
                    live[s] = [(await leaf.subscribe(s, cb=box.cb), box, rnd)]
                await subscriptions_sent(leaf2)
                await interest_crossed(leaf, hub)
                for s in live:
                    await hub.publish(s, b"r%d" % rnd)
            stop.set()

        await fence(hub, [leaf, leaf2])
        await fence(noise_nc, [leaf, leaf2])
        n_subs = sum(len(v) for v in live.values())
        assert n_subs > 150 and len(dropped) > 20
        for s, entries in live.items():
            for _sub, box, since in entries:
                markers = [d for d in box.data if d.startswith(b"r")]
                assert markers == [b"r%d" % r for r in range(since, 10)], (s, since, markers)
                noise_ids = [d for d in box.data if d.startswith(b"n")]
                assert len(noise_ids) == len(set(noise_ids)), f"{s}: a message arrived twice"

        # the hub holds exactly the live interest of the churned subjects...
        def churned_interest() -> set[str] | None:
            subs = leaf_subscriptions(net.hub, "A")
            return {s for link in subs for s in link if s.startswith(prefix + ".")} if subs else None

        assert churned_interest() == set(live)
        # ...so a subject without interest gets nothing: the link carries only the live ones
        before = _link_out_msgs(net.hub, "A")
        for s in dropped:
            await hub.publish(s, b"dead")
        for s in live:
            await hub.publish(s, b"final")
        await fence(hub, [leaf, leaf2])
        for _s, entries in live.items():
            for _sub, box, _since in entries:
                assert box.data.count(b"final") == 1
        if before is not None:
            after = _link_out_msgs(net.hub, "A")
            assert after is not None
            # the live subjects' finals, plus the fence's barrier requests and its marker
            assert len(live) <= after - before <= len(live) + 6, (before, after, len(live), len(dropped))


def _link_out_msgs(server: RunningServer, account: str) -> int | None:
    z = leafz(server) or {}
    links = [lk for lk in z.get("leafs") or [] if lk.get("account") == account]
    return int(links[0]["out_msgs"]) if len(links) == 1 and "out_msgs" in links[0] else None


async def test_deny_lists_stop_subjects_in_their_direction(net: Net) -> None:
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):
        secret = await subscribe(leaf, "secret.>")
        leaf_open = await subscribe(leaf, "open.down")
        private = await subscribe(hub, "private.>")
        hub_open = await subscribe(hub, "open.up")
        await interest_crossed(leaf, hub)
        await interest_crossed(hub, leaf)
        await hub.publish("secret.x", b"no")
        await hub.publish("open.down", b"yes")
        await leaf.publish("private.x", b"no")
        await leaf.publish("open.up", b"yes")
        await until(lambda: leaf_open.msgs and hub_open.msgs, what="the allowed subjects to cross")
        await fence(hub, [leaf])
        await fence(leaf, [hub])
        assert not secret.msgs, "deny_imports: secret.x must not reach the leaf"
        assert not private.msgs, "deny_exports: private.x must not reach the hub"
        announced = {s for link in leaf_subscriptions(net.hub, "A") for s in link}
        assert "open.down" in announced
        assert not any(s.startswith("secret.") for s in announced), announced


async def test_two_tenants_with_the_same_subjects_do_not_see_each_other(net: Net) -> None:
    async with connected(net.hub_a, net.leaf_a, net.hub_b, net.leaf_bb) as ncs:
        hub_a, leaf_a, hub_b, leaf_b = ncs
        boxes = [await subscribe(nc, "tenant.x") for nc in ncs]
        await interest_crossed(leaf_a, hub_a)
        await interest_crossed(hub_a, leaf_a)
        await interest_crossed(leaf_b, hub_b)
        await interest_crossed(hub_b, leaf_b)
        tags = [b"hub-A", b"leaf-A", b"hub-B", b"leaf-B"]
        for nc, tag in zip(ncs, tags, strict=True):
            await nc.publish("tenant.x", tag)
        await until(lambda: all(len(b.msgs) >= 2 for b in boxes), what="each tenant's two messages")
        for pub in ncs:  # whatever crossed over any link has arrived by now
            await fence(pub, [nc for nc in ncs if nc is not pub and (nc in ncs[:2]) == (pub in ncs[:2])])
        for box in boxes[:2]:
            assert sorted(box.data) == [b"hub-A", b"leaf-A"]
        for box in boxes[2:]:
            assert sorted(box.data) == [b"hub-B", b"leaf-B"]


async def test_jetstream_across_domains(net: Net) -> None:
    stream = unique("EDGE_ORDERS_")
    local = unique("HUB_LOCAL_")
    leaf_local = unique("LEAF_LOCAL_")
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):
        edge = hub.jetstream(domain="EDGE", timeout=5)
        with anyio.fail_after(15):  # the leaf's $JS.EDGE.API interest crosses with the link
            while True:
                try:
                    info = await edge.account_info()
                    break
                except (NoRespondersError, NatsTimeout):
                    await anyio.sleep(0.05)
        assert info.domain == "EDGE"
        await edge.add_stream(name=stream, subjects=[f"{stream}.>"])
        leaf_js = leaf.jetstream(timeout=5)
        assert (await leaf_js.stream_info(stream)).config.name == stream  # created on the leaf
        for i in range(10):
            await leaf_js.publish(f"{stream}.{i}", b"order-%d" % i)
        psub = await edge.pull_subscribe(f"{stream}.>", durable="hubreader", stream=stream)
        got: list[bytes] = []
        with anyio.fail_after(15):
            while len(got) < 10:
                for m in await psub.fetch(10 - len(got), timeout=5):
                    got.append(m.data)
                    await m.ack_sync(timeout=5)
        assert got == [b"order-%d" % i for i in range(10)]
        ci = await edge.consumer_info(stream, "hubreader")
        assert ci.num_ack_pending == 0 and ci.delivered.stream_seq == 10

        # each side's own $JS.API still reaches its own JetStream
        hub_js = hub.jetstream(timeout=5)
        assert (await hub_js.account_info()).domain == "HUB"
        await hub_js.add_stream(name=local, subjects=[f"{local}.>"])
        assert (await leaf_js.account_info()).domain == "EDGE"
        await leaf_js.add_stream(name=leaf_local, subjects=[f"{leaf_local}.>"])
        hub_streams = {s.config.name for s in await hub_js.streams_info()}
        leaf_streams = {s.config.name for s in await leaf_js.streams_info()}
        assert local in hub_streams and stream not in hub_streams and leaf_local not in hub_streams
        assert stream in leaf_streams and leaf_local in leaf_streams and local not in leaf_streams
        # and the leaf reaches the hub's JetStream through the hub's domain
        assert (await leaf.jetstream(domain="HUB", timeout=5).stream_info(local)).config.name == local


async def test_key_value_across_the_link_through_the_domain_prefix(net: Net) -> None:
    """A hub client creates and reads a leaf's bucket through ``$JS.EDGE.API``; a write through
    ``$JS.EDGE.API.$KV.<bucket>.<key>`` (what nats.go sends for a domain) lands in the leaf's
    bucket; the bare ``$KV.>`` never crosses (nats-py's put, which does not prefix it)."""
    bucket = unique("cfg")
    async with connected(net.hub_a, net.leaf_a) as (hub, leaf):
        edge = hub.jetstream(domain="EDGE", timeout=5)
        await request_until_answered(hub, "$JS.EDGE.API.INFO")
        kv = await edge.create_key_value(bucket=bucket)
        leaf_kv = await leaf.jetstream(timeout=5).key_value(bucket)  # the bucket lives on the leaf
        await leaf_kv.put("rate", b"10s")
        assert (await kv.get("rate")).value == b"10s"  # read from the hub through the prefix
        ack = json.loads((await hub.request(f"$JS.EDGE.API.$KV.{bucket}.mode", b"eco", timeout=5)).data)
        assert ack["stream"] == f"KV_{bucket}" and ack.get("domain") == "EDGE"
        assert (await leaf_kv.get("mode")).value == b"eco"
        with pytest.raises((NoRespondersError, NatsTimeout)):
            await hub.request(f"$KV.{bucket}.rate", b"never", timeout=1)
        assert (await leaf_kv.get("rate")).value == b"10s"


# -- the hub's leaf port against bad input ----------------------------------------------------


def _raw_leaf_port(port: int, data: bytes, timeout: float = 8.0) -> tuple[bytes, bytes, float]:
    """(the INFO line, what the server answered until it closed, seconds to the close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        info = b""
        while not info.endswith(b"\r\n"):
            chunk = s.recv(65536)
            assert chunk, "closed before INFO"
            info += chunk
        t0 = time.monotonic()
        if data:
            s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return info, out, time.monotonic() - t0


async def test_leaf_port_refuses_clients_garbage_stalls_and_wrong_credentials(net: Net) -> None:
    port = leaf_port(net.hub)
    info, out, _ = _raw_leaf_port(port, b"")
    fields = json.loads(info[5:])
    assert fields["auth_required"] is True and fields["nonce"] and fields["client_id"]
    assert fields["leafnode_urls"]
    # a client's CONNECT (it has "lang"): refused once authenticated, as a client on the wrong port
    _, out, _ = _raw_leaf_port(
        port, b'CONNECT {"lang":"python3","verbose":false,"user":"leaf-a","pass":"leaf-a-pw"}\r\nPING\r\n'
    )
    assert out == b"-ERR 'attempted to connect to leaf node port'\r\n"
    _, out, _ = _raw_leaf_port(port, b'CONNECT {"user":"leaf-a","pass":"wrong","headers":true}\r\n')
    assert out == b"-ERR 'Authorization Violation'\r\n"
    _, out, _ = _raw_leaf_port(port, b"\x00\xff\xfe garbage\r\nLS+ foo\r\n")
    assert out == b"-ERR 'Authorization Violation'\r\n"
    _, out, _ = _raw_leaf_port(port, b"PING\r\n")
    assert out == b"-ERR 'Authorization Violation'\r\n"
    _, out, elapsed = _raw_leaf_port(port, b"")  # connect and say nothing
    assert out == b"-ERR 'Authentication Timeout'\r\n"
    assert 1.0 <= elapsed <= 6.0, elapsed  # the default auth timeout is 2 s
    # a stock client is refused, whoever it claims to be
    for user, pw, why in [
        ("a", "a-pw", "Authorization Violation"),
        ("leaf-a", "leaf-a-pw", "leaf node port"),
    ]:
        with pytest.raises(nats.errors.Error, match=why):
            nc = await nats.connect(
                f"nats://{user}:{pw}@127.0.0.1:{port}", allow_reconnect=False, connect_timeout=5
            )
            await nc.close()
    # and the hub still serves its leafs and clients
    net.links_up()
    async with connected(net.hub_a, net.leaf_a, net.hub_b, net.leaf_bb) as (hub, leaf, hub_b, leaf_b):

        async def echo(msg: Any) -> None:
            await msg.respond(msg.data)

        await leaf.subscribe("after.bad.input", cb=echo)
        await leaf_b.subscribe("after.bad.input", cb=echo)
        assert (await request_until_answered(hub, "after.bad.input", b"A")).data == b"A"
        assert (await request_until_answered(hub_b, "after.bad.input", b"B")).data == b"B"


# -- link failure -----------------------------------------------------------------------------


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    yield t
    t.close()


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), TOPOLOGIES, ids=TOPOLOGY_IDS)
async def test_link_comes_back_after_cuts_with_exact_interest(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    accounts = {"A": [("a", "a-pw")]}
    hub, proxy = topo.start_behind_proxy(
        "hub", hub_kind, Node(accounts=accounts, domain="HUB", leaf_users=LEAF_USERS[:1])
    )
    leaf = topo.start(
        "leaf",
        leaf_kind,
        Node(accounts=accounts, domain="EDGE", remotes=[Remote(hub, "leaf-a", "leaf-a-pw", "A", via=proxy)]),
    )
    wait_for_leaf_connected(hub, 1)
    async with connected(client_url(hub, "a", "a-pw"), *[client_url(leaf, "a", "a-pw")] * 3) as ncs:
        hub_nc, leaf_nc, local_svc, local_cli = ncs
        before_cut = await subscribe(leaf_nc, "after.cut")

        async def echo(msg: Any) -> None:
            await msg.respond(msg.data)

        await local_svc.subscribe("local.svc", cb=echo)
        await interest_crossed(leaf_nc, hub_nc)
        for cycle in range(3):
            proxy.cut()
            await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: leaf_count(hub) == 0, what="the hub to drop the link")
            )
            await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: leaf_count(leaf) == 0, what="the leaf to see the cut")
            )
            cut_until = time.monotonic() + 2.0
            served = 0
            while time.monotonic() < cut_until:  # the leaf serves its local clients meanwhile
                assert (
                    await local_cli.request("local.svc", b"%d" % served, timeout=2)
                ).data == b"%d" % served
                served += 1
            assert served > 0
            proxy.restore()
            await anyio.to_thread.run_sync(lambda: wait_for_leaf_connected(hub, 1))
            await anyio.to_thread.run_sync(lambda: wait_for_leaf_connected(leaf, 1))
            await interest_crossed(leaf_nc, hub_nc)  # the leaf's whole interest is announced again
            announced = [s for link in _subscription_lists(hub) for s in link]
            assert announced.count("after.cut") == 1, announced
            await hub_nc.publish("after.cut", b"cycle-%d" % cycle)
            await fence(hub_nc, [leaf_nc])
            assert before_cut.data == [b"cycle-%d" % c for c in range(cycle + 1)]


def _subscription_lists(server: RunningServer) -> list[list[str]]:
    z = leafz(server, subs=True) or {}
    return [list(link.get("subscriptions_list") or []) for link in z.get("leafs") or []]


# -- loops ------------------------------------------------------------------------------------

TRIANGLES = [
    ("reference", "reference", "reference"),
    ("leafjet", "reference", "reference"),
    ("reference", "leafjet", "reference"),
    ("reference", "reference", "leafjet"),
    ("leafjet", "leafjet", "leafjet"),
]


@pytest.mark.parametrize("kinds", TRIANGLES, ids=["A={},B={},C={}".format(*k) for k in TRIANGLES])
async def test_a_triangle_of_links_is_detected_as_a_loop(topo: Topology, kinds: tuple[str, str, str]) -> None:
    """A accepts; B solicits A and accepts; C solicits A, then B (held back by a cut proxy until
    C's link to A is up, so the loop closes on one known link). The servers detect the loop
    with the reference's error and keep serving their clients; no cycle of links stays up."""
    a_kind, b_kind, c_kind = kinds
    skip_unless_built((a_kind, "accept"), (b_kind, "accept"), (b_kind, "solicit"), (c_kind, "solicit"))
    accounts = {"A": [("a", "a-pw")]}
    users = [LeafUser("leaf", "leaf-pw", "A")]
    a = topo.start("A", a_kind, Node(accounts=accounts, domain="DA", leaf_users=users))
    b = topo.start(
        "B",
        b_kind,
        Node(accounts=accounts, domain="DB", leaf_users=users, remotes=[Remote(a, "leaf", "leaf-pw", "A")]),
    )
    wait_for_leaf_connected(a, 1)
    to_b = topo.proxy_to_leaf_port(b)  # C's link to B: held back until C's link to A is up
    to_b.cut()
    c = topo.start(
        "C",
        c_kind,
        Node(
            accounts=accounts,
            domain="DC",
            remotes=[Remote(a, "leaf", "leaf-pw", "A"), Remote(b, "leaf", "leaf-pw", "A", via=to_b)],
        ),
    )
    wait_for_leaf_connected(a, 2)
    to_b.restore()
    nodes = (a, b, c)
    wait_until(lambda: any(LOOP_ERROR in s.log() for s in nodes), 15, what="a loop error in a log")
    # no cycle stays up: at most two of the three links, over a few polls. The three servers are
    # asked one after another, so one poll can catch a link that one end has closed and the other
    # has not yet seen go (an odd count): only two polls in a row past two links fail.
    over = 0
    for _ in range(6):
        links = sum(leaf_count(s) for s in nodes)
        over = over + 1 if links > 4 else 0
        assert over < 2, f"{links / 2} links up in a triangle in two polls in a row"
        await anyio.sleep(0.2)
    for s in nodes:  # every server keeps serving its clients
        async with connected(client_url(s, "a", "a-pw"), client_url(s, "a", "a-pw")) as (svc, cli):

            async def echo(msg: Any) -> None:
                await msg.respond(msg.data)

            await svc.subscribe("loop.local", cb=echo)
            await subscriptions_sent(svc)
            assert (await cli.request("loop.local", b"x", timeout=5)).data == b"x"
