"""Clustered JetStream: the meta group places R1 streams and any server answers the API.

The same scenario runs on three ``nats-server`` processes and three ``leafjet hub`` processes
with stock nats-py clients on different servers: a stream created through one server is placed
by tags, its info (with the reference's ``cluster`` object) and the names and list come from the
others, a publish through a third is stored and consumed through a fourth connection, a KV bucket
works from every server, a placement nothing fits is 10005, a delete through any server removes
it everywhere. The kill -9 and whole-cluster restart scenarios (leafjet) are ``chaos``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import nats
import nats.errors
import pytest

from hub.meta.peers import node_id
from tests.support.cluster import Cluster
from tests.support.jscluster import (
    THREE_TAGGED,
    api,
    api_until,
    err_code,
    fetch_until,
    meta_leader,
    publish_until,
    raftz,
    restart_js_node,
    start_js_cluster,
    until_true,
)
from tests.support.servers import wait_until, wait_until_async

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(240)]

TAGS = THREE_TAGGED


@pytest.fixture
def cluster(tagged_cluster: Cluster) -> Cluster:
    return tagged_cluster  # tests/integration/conftest.py


async def _connect(c: Cluster, i: int) -> nats.NATS:
    return await nats.connect(c.url(i), name=f"client-of-n{i + 1}", max_reconnect_attempts=-1)


async def _placed_on_all_servers(ncs: list[nats.NATS]) -> None:
    """Until the meta group places a stream (a throwaway one), then deletes it: every server
    is known to the leader with its tags by then."""
    for i in range(3):
        r = await api_until(
            ncs[i],
            f"$JS.API.STREAM.CREATE.WARM{i}",
            {"name": f"WARM{i}", "subjects": [f"warm.{i}"]},
            retry_on=(10008, 10005),
        )
        assert "error" not in r, r
    for i in range(3):
        assert "error" not in await api_until(ncs[i], f"$JS.API.STREAM.DELETE.WARM{i}")


@asynccontextmanager
async def _tagged_leafjet(tmp_path: Path) -> AsyncIterator[tuple[Cluster, list[nats.NATS]]]:
    """Three tagged leafjet hubs of a test's own, a client on each, every server known to the
    meta leader with its tags; all closed at the end."""
    c = Cluster(tmp_path, "leafjet", size=3)
    ncs: list[nats.NATS] = []
    try:
        start_js_cluster(c, TAGS)
        c.wait_for_mesh()
        ncs = [await _connect(c, i) for i in range(3)]
        await _placed_on_all_servers(ncs)
        yield c, ncs
    finally:
        for nc in ncs:
            await nc.close()
        c.close()


async def _names_are(nc: nats.NATS, expected: list[str]) -> bool:
    return (await api(nc, "$JS.API.STREAM.NAMES")).get("streams") == expected


async def test_streams_are_placed_and_answered_from_any_server(cluster):
    c = cluster
    ncs = [await _connect(c, i) for i in range(3)]
    try:
        await _placed_on_all_servers(ncs)
        tagged = c.nodes[0].name
        cfg = {"name": "ORDERS", "subjects": ["orders.>"], "placement": {"tags": ["ssd"]}}
        created = await api_until(ncs[1], "$JS.API.STREAM.CREATE.ORDERS", cfg, retry_on=(10008, 10005))
        assert created.get("did_create") is True, created
        assert created["cluster"] == {"name": "C", "leader": tagged}

        # again on a timeout: under load the reference has let a first INFO go unanswered
        info = await api_until(ncs[2], "$JS.API.STREAM.INFO.ORDERS")
        assert info["cluster"] == {"name": "C", "leader": tagged}
        assert info["config"]["subjects"] == ["orders.>"]
        if c.kind == "reference":
            # the reference, under load, once listed nothing right after the create through
            # another server (that server had not applied it yet); leafjet's lists wait for
            # the leader's read index, so leafjet is held to listing it at once
            for i in (0, 2):
                await until_true(
                    lambda i=i: _names_are(ncs[i], ["ORDERS"]), 30, what="the reference to list the stream"
                )
        names = await api(ncs[0], "$JS.API.STREAM.NAMES")
        assert (names["total"], names["streams"]) == (1, ["ORDERS"])
        listed = await api(ncs[2], "$JS.API.STREAM.LIST")
        assert listed["total"] == 1 and listed["streams"][0]["cluster"]["leader"] == tagged

        # publish through server 3, consume through server 2 (the stream lives on server 1)
        js3, js2 = ncs[2].jetstream(), ncs[1].jetstream()
        ack = await publish_until(js3, "orders.1", b"from n3")
        assert (ack.stream, ack.seq) == ("ORDERS", 1)
        sub = await js2.pull_subscribe("orders.>", durable="worker", stream="ORDERS")
        [msg] = await fetch_until(sub, 1)
        assert msg.data == b"from n3"
        await msg.ack_sync(timeout=10)
        cinfo = await api(ncs[0], "$JS.API.CONSUMER.INFO.ORDERS.worker")
        assert cinfo["cluster"] == {"name": "C", "leader": tagged}
        assert cinfo["ack_floor"]["stream_seq"] == 1

        # a KV bucket, wherever it is placed, from every server
        kv3 = await ncs[2].jetstream().create_key_value(bucket="settings")
        await publish_until(ncs[2].jetstream(), "$KV.settings.mode", b"auto")  # kv3.put, once it is reachable
        await kv3.put("mode", b"manual")
        kv1 = await ncs[0].jetstream().key_value("settings")
        assert (await kv1.get("mode")).value == b"manual"
        assert (await kv1.get("mode")).revision == 2

        nope = await api(
            ncs[2], "$JS.API.STREAM.CREATE.NOPE", {"name": "NOPE", "placement": {"tags": ["nope"]}}
        )
        assert nope["error"] == {
            "code": 400,
            "err_code": 10005,
            "description": "no suitable peers for placement, tags not matched ['nope']",
        }
        elsewhere = await api(
            ncs[2], "$JS.API.STREAM.CREATE.NOPE", {"name": "NOPE", "placement": {"cluster": "other"}}
        )
        assert err_code(elsewhere) == 10005

        deleted = await api(ncs[1], "$JS.API.STREAM.DELETE.ORDERS")
        assert deleted.get("success") is True, deleted

        async def gone() -> bool:
            # while the delete spreads a server may leave an INFO unanswered: "not yet"
            try:
                return err_code(await api(ncs[2], "$JS.API.STREAM.INFO.ORDERS", timeout=5.0)) == 10059
            except nats.errors.TimeoutError:
                return False

        await until_true(gone, 20, what="the deleted stream to be gone everywhere")
        if c.kind == "leafjet":
            # R>1 is the next step: refused plainly (the reference would make it)
            r3 = await api(ncs[0], "$JS.API.STREAM.CREATE.R3", {"name": "R3", "num_replicas": 3})
            assert err_code(r3) == 10074 and "R1" in r3["error"]["description"]
    finally:
        for nc in ncs:
            await nc.close()


async def test_a_stream_whose_server_is_down_is_offline_and_nothing_else_breaks(tmp_path):
    """leafjet: the stream's server stopped, its info is 10118 from the others; other streams,
    creates and deletes go on; back up, the stream is there with its messages."""
    async with _tagged_leafjet(tmp_path) as (c, ncs):
        on_n3 = {"name": "FAR", "subjects": ["far.>"], "placement": {"tags": ["az:3"]}}
        # 10005 until the third server's tags reached the meta leader
        far = await api_until(ncs[0], "$JS.API.STREAM.CREATE.FAR", on_n3, retry_on=(10008, 10005))
        assert "error" not in far, far
        await publish_until(ncs[0].jetstream(), "far.1", b"kept")
        await ncs[2].close()
        c.stop(2)
        for nc in ncs[:2]:
            r = await api_until(nc, "$JS.API.STREAM.INFO.FAR")
            assert r["error"]["err_code"] == 10118, r
        # a stream whose server is up, from both survivors
        near = {"name": "NEAR", "subjects": ["near"], "placement": {"tags": ["az:1"]}}
        assert "error" not in await api_until(ncs[1], "$JS.API.STREAM.CREATE.NEAR", near)
        ack = await publish_until(ncs[1].jetstream(), "near", b"x")
        assert ack.stream == "NEAR"
        restart_js_node(c, 2, TAGS)
        c.wait_for_mesh()

        async def back() -> bool:
            r = await api(ncs[1], "$JS.API.STREAM.INFO.FAR")
            return r.get("state", {}).get("messages") == 1

        await until_true(back, 30, what="the stream back with its message")


async def test_a_create_that_fails_on_the_placed_server_is_answered_from_there(tmp_path):
    """leafjet: the placed server answers a create itself once it has applied it, as the
    reference's stream leader does (the client's reply travels in the assignment); when the
    stream cannot be made there (its folder's name is taken by a file), the client hears the
    reference's 10049 with the reason, and the server goes on."""
    async with _tagged_leafjet(tmp_path) as (c, ncs):
        on_n3 = {"name": "PROBE", "subjects": ["probe"], "placement": {"tags": ["az:3"]}}
        probe = await api_until(ncs[0], "$JS.API.STREAM.CREATE.PROBE", on_n3, retry_on=(10008, 10005))
        assert "error" not in probe, probe
        # the stream's folder on server 3 (its store may still be opening: the create is
        # answered before that ends)
        [folder] = [p for p in (tmp_path / c.nodes[2].name).rglob("PROBE") if p.is_dir()]
        (folder.parent / "BROKEN").write_text("not a stream folder")
        broken = {"name": "BROKEN", "subjects": ["broken"], "placement": {"tags": ["az:3"]}}
        for nc in ncs[:2]:  # through both other servers (one of them may lead)
            r = await api(nc, "$JS.API.STREAM.CREATE.BROKEN", broken)
            assert r["error"]["err_code"] == 10049 and "BROKEN" in r["error"]["description"], r
        assert "error" not in await api(ncs[1], "$JS.API.STREAM.INFO.PROBE")
        (folder.parent / "BROKEN").unlink()  # the meta group tries again: the stream is made
        ok = await api_until(ncs[1], "$JS.API.STREAM.INFO.BROKEN", retry_on=(10059, 10118))
        assert ok["config"]["name"] == "BROKEN", ok


@asynccontextmanager
async def _led_leafjet(tmp_path: Path) -> AsyncIterator[tuple[Cluster, int, int]]:
    """Three leafjet hubs of a test's own: (the cluster, its meta leader's index, its term);
    all stopped at the end."""
    c = Cluster(tmp_path, "leafjet", size=3)
    try:
        await anyio.to_thread.run_sync(start_js_cluster, c)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        leader = await anyio.to_thread.run_sync(_leader_index, c)
        yield c, leader, (raftz(c, leader) or {})["term"]
    finally:
        c.close()


def _stop_and_read_hand_over(c: Cluster, i: int) -> str:
    """SIGTERM server ``i`` (until it exits); the server it says it handed leadership to."""
    srv = c.servers[i]
    assert srv is not None
    c.stop(i)
    handed = re.search(r"handed leadership to (\S+) before stopping", srv.log())
    assert handed is not None, srv.log()[-2000:]
    return handed.group(1)


async def test_a_new_meta_leader_is_elected_after_the_leader_is_killed(tmp_path):
    """leafjet: /raftz shows one leader and its term on every server; SIGKILL it and the other
    two agree on a new one, in a later term."""
    async with _led_leafjet(tmp_path) as (c, victim, term):
        c.stop(victim, kill=True)
        new = await anyio.to_thread.run_sync(_leader_index, c)
        assert new != victim
        z = raftz(c, new) or {}
        assert z["role"] == "leader" and z["term"] > term


async def test_a_stopping_meta_leader_hands_leadership_over_first(tmp_path):
    """leafjet (as the reference steps its RAFT leaders down on shutdown): on SIGTERM the meta
    leader hands leadership to a follower before it exits -- the one its log names, which the
    two survivors then agree on, one term later -- so a rolling restart does not leave the API
    without a leader for an election timeout."""
    async with _led_leafjet(tmp_path) as (c, victim, term):
        handed = _stop_and_read_hand_over(c, victim)
        new = await anyio.to_thread.run_sync(_leader_index, c)
        assert c.nodes[new].name == handed
        assert (raftz(c, new) or {})["term"] == term + 1  # the hand-over's election, no other


async def test_a_stopping_meta_leader_hands_over_only_to_a_server_it_can_reach(tmp_path):
    """leafjet: with one follower gone (stopped a moment ago: RAFT still counts it recently
    active, and it is the one the tie-break would pick), the stopping leader hands over to the
    follower it has a route to."""
    async with _led_leafjet(tmp_path) as (c, victim, _term):
        followers = sorted((i for i in range(3) if i != victim), key=lambda i: node_id(c.nodes[i].name))
        gone, left = followers  # the lower node id: the one best_transferee prefers on a tie
        c.stop(gone)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: c.nodes[gone].name not in c.peers(victim), 30, what="the route gone")
        )
        assert _stop_and_read_hand_over(c, victim) == c.nodes[left].name


# ---------------------------------------------------------------------------------------- chaos


def _running(c: Cluster) -> list[int]:
    return [i for i in range(c.size) if c.servers[i] is not None]


def _leader_index(c: Cluster) -> int:
    name = wait_until(lambda: meta_leader(c, _running(c)), 60, interval=0.1, what="a meta leader")
    return next(i for i in range(c.size) if c.nodes[i].name == name)


class _Churn:
    """Clients creating (and, with ``deletes``, deleting) streams through random running servers
    until ``stop``; what was acknowledged, and what may or may not have happened (no clear
    answer), for ``check``."""

    def __init__(self, c: Cluster, deletes: bool) -> None:
        self.c = c
        self.deletes = deletes
        self.created: set[str] = set()
        self.deleted: set[str] = set()
        self.uncertain: set[str] = set()
        self.stop = anyio.Event()

    async def worker(self, w: int) -> None:
        rng = random.Random(w)
        n = 0
        nc = None
        while not self.stop.is_set():
            try:
                if nc is None or nc.is_closed:
                    i = rng.choice(_running(self.c))
                    nc = await nats.connect(self.c.url(i), allow_reconnect=False, connect_timeout=2)
                if self.deletes and self.created - self.deleted and rng.random() < 0.3:
                    name = rng.choice(sorted(self.created - self.deleted))
                    # a delete without a clear answer may or may not have happened (and two
                    # workers may delete one stream at once: one of them hears 10059)
                    self.uncertain.add(name)
                    r = await api(nc, f"$JS.API.STREAM.DELETE.{name}", timeout=5)
                    if r.get("success"):
                        self.deleted.add(name)
                else:
                    name = f"W{w}_{n}"
                    n += 1
                    r = await api(
                        nc,
                        f"$JS.API.STREAM.CREATE.{name}",
                        {"name": name, "subjects": [f"w.{name}"]},
                        timeout=5,
                    )
                    if r.get("did_create"):
                        self.created.add(name)
                    else:
                        self.uncertain.add(name)
            except Exception:
                if nc is not None:
                    await nc.close()
                nc = None
                await anyio.sleep(0.1)

    async def check(self) -> None:
        """Every server lists the same streams, each once: every acknowledged create, and no
        acknowledged delete."""
        # A change whose answer a worker gave up on (5 s, on a loaded machine) may still commit
        # after the workers stopped: the listings are taken again until they agree (bounded).
        for _ in range(20):
            listings = []
            for i in range(self.c.size):
                nc = await _connect(self.c, i)
                names = await api_until(nc, "$JS.API.STREAM.NAMES")
                listings.append(names["streams"] or [])
                await nc.close()
            if listings[0] == listings[1] == listings[2]:
                break
            await anyio.sleep(0.5)
        must = self.created - self.deleted - self.uncertain
        for names in listings:
            assert len(names) == len(set(names)), "a stream listed twice"
            present = set(names)
            assert must <= present, f"acknowledged creates lost: {sorted(must - present)}"
            assert not (self.deleted - self.uncertain) & present, "an acknowledged delete is back"
        assert listings[0] == listings[1] == listings[2]


async def test_stepdowns_while_clients_create_lose_no_acknowledged_create(tmp_path):
    """leafjet: clients on every server create streams while the meta leader is stepped down
    again and again (each a hand-over: proposals refused while the target catches up, answered
    10008, retried by nobody here): a new leader each time, and every acknowledged create is on
    every server, once."""
    async with _led_leafjet(tmp_path) as (c, _leader, _term):
        churn = _Churn(c, deletes=False)
        nc = await _connect(c, 0)
        async with anyio.create_task_group() as tg:
            for w in range(3):
                tg.start_soon(churn.worker, w)
            for _round in range(6):
                await wait_until_async(lambda r=_round: len(churn.created) >= 3 * (r + 1), 60, what="creates")
                old = await anyio.to_thread.run_sync(_leader_index, c)
                r = await api(nc, "$JS.API.META.LEADER.STEPDOWN")
                assert r.get("success") is True, r
                assert await anyio.to_thread.run_sync(_leader_index, c) != old
            churn.stop.set()
        await nc.close()
        await churn.check()


@pytest.mark.chaos
@pytest.mark.timeout(600)
async def test_killing_the_meta_leader_loses_no_acknowledged_change(tmp_path):
    """Clients on every server create and delete streams while the meta leader is SIGKILLed
    (twice): a new leader is elected, every acknowledged create is there, no acknowledged delete
    is, and every server lists the same streams, each once."""
    async with _led_leafjet(tmp_path) as (c, _leader, _term):
        churn = _Churn(c, deletes=True)
        async with anyio.create_task_group() as tg:
            for w in range(4):
                tg.start_soon(churn.worker, w)
            for _round in range(2):
                await wait_until_async(lambda: len(churn.created) >= 5, 60, what="some creates")
                victim = await anyio.to_thread.run_sync(_leader_index, c)
                before = len(churn.created)
                await anyio.to_thread.run_sync(lambda v=victim: c.stop(v, kill=True))
                new = await anyio.to_thread.run_sync(_leader_index, c)
                assert new != victim
                await wait_until_async(
                    lambda b=before: len(churn.created) >= b + 5, 60, what="creates after failover"
                )
                await anyio.to_thread.run_sync(restart_js_node, c, victim)
                await anyio.to_thread.run_sync(c.wait_for_mesh)
            churn.stop.set()
        await churn.check()


@pytest.mark.chaos
@pytest.mark.timeout(600)
async def test_the_whole_cluster_restarts_with_its_streams(tmp_path):
    c = Cluster(tmp_path, "leafjet", size=3)
    try:
        start_js_cluster(c, TAGS)
        c.wait_for_mesh()
        ncs = [await _connect(c, i) for i in range(3)]
        await _placed_on_all_servers(ncs)
        for i, tag in enumerate(["az:1", "az:2", "az:3"]):
            cfg = {"name": f"S{i}", "subjects": [f"s{i}"], "placement": {"tags": [tag]}}
            assert "error" not in await api_until(ncs[(i + 1) % 3], f"$JS.API.STREAM.CREATE.S{i}", cfg)
            for k in range(3):
                await publish_until(ncs[(i + 2) % 3].jetstream(), f"s{i}", str(k).encode())
        for nc in ncs:
            await nc.close()
        for i in range(3):
            c.stop(i, kill=True)
        for i in range(3):
            restart_js_node(c, i, TAGS)
        c.wait_for_mesh()
        ncs = [await _connect(c, i) for i in range(3)]
        for i in range(3):
            names = await api_until(ncs[i], "$JS.API.STREAM.NAMES")
            assert names["streams"] == ["S0", "S1", "S2"]
            for s in range(3):
                info = await api_until(ncs[i], f"$JS.API.STREAM.INFO.S{s}", retry_on=(10008, 10118))
                assert info["state"]["messages"] == 3
                assert info["cluster"]["leader"] == c.nodes[s].name
        assert raftz(c, 0) is not None
        for nc in ncs:
            await nc.close()
    finally:
        c.close()


async def test_stepdowns_and_peer_removal_of_an_r1_stream_answer_as_the_reference(cluster):
    """An R1 stream and its consumer have no group to lead: a stepdown of either succeeds, one of
    what does not exist is "not found", and removing a peer is refused: 10040 for a server that
    does not hold the stream, 10075 for the one that does (nowhere to move it), after the body's
    checks (10003, 10025)."""
    c = cluster
    ncs = [await _connect(c, i) for i in range(3)]
    try:
        await _placed_on_all_servers(ncs)
        cfg = {"name": "SD", "subjects": ["sd.>"], "placement": {"tags": ["az:2"]}}
        created = await api_until(ncs[0], "$JS.API.STREAM.CREATE.SD", cfg, retry_on=(10008, 10005))
        assert "error" not in created, created
        holder = created["cluster"]["leader"]
        consumer = {"stream_name": "SD", "config": {"durable_name": "C", "ack_policy": "explicit"}}
        r = await api_until(ncs[1], "$JS.API.CONSUMER.DURABLE.CREATE.SD.C", consumer)
        assert "error" not in r, r

        def code(r: dict) -> object:
            return r["error"]["err_code"] if "error" in r else r.get("success")

        for nc in (ncs[0], ncs[2]):  # a server that holds nothing of it, and its holder's peer
            assert code(await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SD")) is True
            assert code(await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.NOPE")) == 10059
            assert code(await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.SD.C")) is True
            assert code(await api(nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.SD.NOPE")) == 10014
            remove = "$JS.API.STREAM.PEER.REMOVE.SD"
            assert code(await api(nc, remove)) == 10003
            bad = await nc.request(remove, b"{bad", timeout=10)
            assert code(json.loads(bad.data)) == 10025
            assert code(await api(nc, remove, {"peer": ""})) == 10003
            assert code(await api(nc, remove, {"peer": "nobody"})) == 10040
            other = next(n.name for n in c.nodes if n.name != holder)
            assert code(await api(nc, remove, {"peer": other})) == 10040
            assert code(await api(nc, remove, {"peer": holder})) == 10075
            # a consumer of more replicas than its R1 stream: the reference's 10126, not
            # "replicas > 1 not supported in non-clustered mode"
            r3 = {"stream_name": "SD", "config": {"name": "R3", "ack_policy": "explicit", "num_replicas": 3}}
            assert code(await api(nc, "$JS.API.CONSUMER.CREATE.SD.R3", r3)) == 10126
            # a snapshot is answered by the stream's server, whichever server was asked
            snap = await api(nc, "$JS.API.STREAM.SNAPSHOT.SD", {"deliver_subject": "snap.x"})
            assert "error" not in snap and snap["config"]["name"] == "SD", snap
    finally:
        for nc in ncs:
            await nc.close()


MISSING_STREAM_CASES = [
    # the reference's meta leader: a stream's own requests are "not found" before the body is read
    ("$JS.API.STREAM.INFO.NOPE", b"{bad", 10059),
    ("$JS.API.STREAM.PURGE.NOPE", b"{bad", 10059),
    ("$JS.API.STREAM.MSG.GET.NOPE", b"{bad", 10059),
    ("$JS.API.STREAM.MSG.DELETE.NOPE", b"{bad", 10059),
    ("$JS.API.STREAM.MSG.GET.NOPE", b'{"seq":1}', 10059),
    # consumer requests read their body first
    ("$JS.API.CONSUMER.CREATE.NOPE", b"{bad", 10025),
    ("$JS.API.CONSUMER.INFO.NOPE.c", b"{bad", 10038),
    ("$JS.API.CONSUMER.NAMES.NOPE", b"{bad", 10025),
    ("$JS.API.CONSUMER.NAMES.NOPE", b"", 10059),
    ("$JS.API.CONSUMER.LIST.NOPE", b"{bad", 10025),
    ("$JS.API.CONSUMER.LIST.NOPE", b"", None),  # an empty list: no consumer assignments
]


async def test_requests_for_a_stream_that_does_not_exist_answer_as_the_reference(cluster):
    ncs = [await _connect(cluster, i) for i in range(3)]
    try:
        await _placed_on_all_servers(ncs)
        for nc in ncs:
            for subject, body, expected in MISSING_STREAM_CASES:
                got = json.loads((await nc.request(subject, body, timeout=10)).data)
                assert err_code(got) == expected, (subject, body, got)
                if expected is None:
                    assert (got["total"], got["consumers"]) == (0, []), got
    finally:
        for nc in ncs:
            await nc.close()


async def test_a_meta_leader_stepdown_checks_its_body_and_placement_as_the_reference(tmp_path):
    """leafjet (the reference takes this request from its system account only; its checks read
    from its source, jsLeaderStepDownRequest): a body that is not JSON is 10025, a placement
    nobody fits is 10005 with the reference's reasons, and one some other server fits hands
    leadership to that server (as the reference's StepDown does, to its preferred peer)."""
    async with _tagged_leafjet(tmp_path) as (c, ncs):
        leader = await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: meta_leader(c, [0, 1, 2]), 60, interval=0.1, what="a meta leader")
        )
        subject = "$JS.API.META.LEADER.STEPDOWN"
        bad = json.loads((await ncs[0].request(subject, b"{bad", timeout=10)).data)
        assert err_code(bad) == 10025, bad
        for placement, why in (
            ({"preferred": "nobody"}, 'preferred server "nobody" not known'),
            ({"preferred": leader}, f'preferred server "{leader}" is already leader'),
            ({"tags": ["nope"]}, "no replacement peer connected"),
        ):
            r = await api(ncs[0], subject, {"placement": placement})
            assert (err_code(r), r["error"]["description"]) == (10005, why), r
        assert raftz(c, 0) is not None and meta_leader(c, [0, 1, 2]) == leader  # none stepped down
        k, tag = next((i, t) for i, t in enumerate(["az:1", "az:2", "az:3"]) if c.nodes[i].name != leader)
        r = await api(ncs[0], subject, {"placement": {"tags": [tag]}})
        assert r.get("success") is True, r
        await _leader_becomes(c, c.nodes[k].name)
        # and by name: to the third server
        third = next(n.name for n in c.nodes if n.name not in (leader, c.nodes[k].name))
        r = await api(ncs[0], subject, {"placement": {"preferred": third}})
        assert r.get("success") is True, r
        await _leader_becomes(c, third)


async def _leader_becomes(c, name: str) -> None:
    """Until every server names ``name`` meta leader (a stepdown answers once the old leader
    has handed over; the others hear of the new one by its first append)."""
    await anyio.to_thread.run_sync(
        lambda: wait_until(
            lambda: meta_leader(c, [0, 1, 2]) == name, 30, interval=0.05, what=f"{name} leading"
        )
    )


async def test_an_update_that_would_move_the_stream_is_refused_clearly(tmp_path):
    """leafjet: the reference moves a stream whose new placement its server does not fit (its
    messages copied to one that fits); leafjet cannot move one yet and refuses the update
    (10069 saying so) instead of keeping it where its config says it is not. An update its
    server still fits goes through."""
    async with _tagged_leafjet(tmp_path) as (c, ncs):
        cfg = {"name": "MV", "subjects": ["mv.>"], "placement": {"tags": ["az:1"]}}
        created = await api_until(ncs[1], "$JS.API.STREAM.CREATE.MV", cfg, retry_on=(10008, 10005))
        assert created["cluster"]["leader"] == c.nodes[0].name, created
        move = await api(ncs[2], "$JS.API.STREAM.UPDATE.MV", {**cfg, "placement": {"tags": ["az:2"]}})
        assert err_code(move) == 10069 and "not supported yet" in move["error"]["description"], move
        info = await api(ncs[2], "$JS.API.STREAM.INFO.MV")
        assert info["config"]["placement"] == {"tags": ["az:1"]}, info  # unchanged
        fits = {**cfg, "subjects": ["mv.>", "more.>"], "placement": {"tags": ["ssd"]}}  # n1 has it too
        r = await api(ncs[2], "$JS.API.STREAM.UPDATE.MV", fits)
        assert "error" not in r and r["config"]["subjects"] == ["mv.>", "more.>"], r
