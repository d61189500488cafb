"""Core NATS across a cluster of three servers joined by routes, against both implementations.

The same scenario runs on three ``nats-server`` processes and on three ``leafjet hub`` processes
(``tests/support/cluster.py``), with stock nats-py clients connected to different servers:
messages cross servers, a queue group delivers each message once cluster-wide, request/reply and
"no responders" work across servers, interest goes away with an unsubscribe and with a server,
and a restarted server rejoins the mesh.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import anyio
import nats
import pytest
from nats.errors import NoRespondersError

from tests.support.cluster import (
    KINDS,
    Cluster,
    answer_probes,
    probe_subject,
    wait_for_interest,
    wait_for_no_interest,
)
from tests.support.servers import wait_until_async

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(180)]


@pytest.fixture(params=KINDS)
def cluster(request, tmp_path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, request.param, size=3)
    try:
        c.start()
        c.wait_for_mesh()
        yield c
    finally:
        c.close()


async def _connect(cluster: Cluster, i: int) -> nats.NATS:
    return await nats.connect(cluster.url(i), allow_reconnect=False, name=f"client-of-n{i + 1}")


async def test_messages_cross_servers_once_per_subscription(cluster):
    pub = await _connect(cluster, 0)
    subs = [await _connect(cluster, i) for i in (1, 2)]
    got: list[list[tuple[str, bytes]]] = [[], [], []]
    try:
        for n, nc in enumerate(subs):

            async def on_msg(msg, n=n):
                got[n].append((msg.subject, msg.data))

            await nc.subscribe("orders.*", cb=on_msg)
            await nc.subscribe("orders.new", cb=on_msg)  # two of one server's subs match
            probe = probe_subject()
            await answer_probes(nc, probe)
            await wait_for_interest(pub, probe)

        for i in range(50):
            await pub.publish("orders.new", f"{i}".encode())
        await pub.publish("orders.old", b"old")
        await pub.flush()
        await wait_until_async(lambda: all(len(g) == 101 for g in got[:2]), 20, what="all deliveries")
        await anyio.sleep(0.3)  # nothing more may come: a message crosses each route once
        for g in got[:2]:
            assert len(g) == 101
            assert Counter(g)[("orders.new", b"7")] == 2  # one per matching subscription
            assert ("orders.old", b"old") in g
    finally:
        for nc in (pub, *subs):
            await nc.close()


async def test_queue_group_delivers_each_message_once_cluster_wide(cluster):
    pub = await _connect(cluster, 0)
    members = [await _connect(cluster, i) for i in (1, 2, 2)]
    seen: list[bytes] = []
    per_server: Counter[int] = Counter()
    try:
        for n, nc in enumerate(members):

            async def on_msg(msg, n=n):
                seen.append(msg.data)
                per_server[1 if n == 0 else 2] += 1

            await nc.subscribe("work", queue="workers", cb=on_msg)
            probe = probe_subject()
            await answer_probes(nc, probe)
            await wait_for_interest(pub, probe)

        total = 300
        for i in range(total):
            await pub.publish("work", f"{i}".encode())
        await pub.flush()
        await wait_until_async(lambda: len(seen) >= total, 20, what="every message delivered")
        await anyio.sleep(0.3)
        assert sorted(seen, key=int) == [f"{i}".encode() for i in range(total)]  # exactly once
        assert per_server[1] > 0 and per_server[2] > 0, per_server  # both servers served the group
    finally:
        for nc in (pub, *members):
            await nc.close()


async def test_request_reply_and_no_responders_across_servers(cluster):
    requester = await _connect(cluster, 0)
    responder = await _connect(cluster, 2)
    try:

        async def answer(msg):
            await responder.publish(msg.reply, b"answer to " + msg.data)

        sub = await responder.subscribe("svc.echo", cb=answer)
        await responder.flush()
        await wait_for_interest(requester, "svc.echo")
        reply = await requester.request("svc.echo", b"ping", timeout=5)
        assert reply.data == b"answer to ping"

        with pytest.raises(NoRespondersError):
            await requester.request("svc.nobody", b"hello", timeout=5)

        await sub.unsubscribe()
        await responder.flush()
        await wait_for_no_interest(requester, "svc.echo")
    finally:
        await requester.close()
        await responder.close()


async def test_interest_goes_with_a_dead_server_and_comes_back_after_restart(cluster):
    requester = await _connect(cluster, 0)
    responder = await _connect(cluster, 1)
    try:

        async def answer(msg):
            await responder.publish(msg.reply, b"from n2")

        await responder.subscribe("svc.n2", cb=answer)
        await responder.flush()
        await wait_for_interest(requester, "svc.n2")
        await responder.close()

        await anyio.to_thread.run_sync(lambda: cluster.stop(1, kill=True))
        await wait_for_no_interest(requester, "svc.n2")
        await anyio.to_thread.run_sync(lambda: cluster.wait_for_mesh(running=[0, 2]))

        await anyio.to_thread.run_sync(cluster.start_node, 1)
        await anyio.to_thread.run_sync(cluster.wait_for_mesh)
        responder = await _connect(cluster, 1)
        await responder.subscribe("svc.n2", cb=answer)
        await responder.flush()
        await wait_for_interest(requester, "svc.n2")
        reply = await requester.request("svc.n2", b"?", timeout=5)
        assert reply.data == b"from n2"
    finally:
        await requester.close()
        await responder.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_interest_is_per_account(tmp_path, kind):
    """Two accounts use the same subject: a message crosses the cluster in its own account only."""
    users = {
        "A": {"users": [{"user": "a", "password": "a-pw"}]},
        "B": {"users": [{"user": "b", "password": "b-pw"}]},
    }
    c = Cluster(tmp_path, kind, size=2, extra={"accounts": users})
    try:
        await anyio.to_thread.run_sync(c.start)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        port0, port1 = c.nodes[0].client_port, c.nodes[1].client_port
        pub_a = await nats.connect(f"nats://a:a-pw@127.0.0.1:{port0}")
        sub_a = await nats.connect(f"nats://a:a-pw@127.0.0.1:{port1}")
        sub_b = await nats.connect(f"nats://b:b-pw@127.0.0.1:{port1}")
        got_a: list[bytes] = []
        got_b: list[bytes] = []

        async def on_a(msg):
            got_a.append(msg.data)

        async def on_b(msg):
            got_b.append(msg.data)

        await sub_b.subscribe("shared", cb=on_b)
        await sub_b.flush()
        await sub_a.subscribe("shared", cb=on_a)
        probe = probe_subject()
        await answer_probes(sub_a, probe)
        await wait_for_interest(pub_a, probe)
        await pub_a.publish("shared", b"for A")
        await pub_a.flush()
        await wait_until_async(lambda: got_a, 10, what="account A's delivery")
        await anyio.sleep(0.3)
        assert got_a == [b"for A"] and got_b == []
        for nc in (pub_a, sub_a, sub_b):
            await nc.close()
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_that_knows_one_member_learns_the_whole_mesh(tmp_path, kind):
    """n2 and n3 list only n1 in their routes: they learn of each other from n1 (gossip)."""
    c = Cluster(tmp_path, kind, size=3, routes_to="first")
    try:
        await anyio.to_thread.run_sync(c.start)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        a = await _connect(c, 1)
        b = await _connect(c, 2)

        async def answer(msg):
            await b.publish(msg.reply, b"n3")

        await b.subscribe("svc.n3", cb=answer)
        await b.flush()
        await wait_for_interest(a, "svc.n3")
        assert (await a.request("svc.n3", b"", timeout=5)).data == b"n3"
        if kind == "leafjet":  # one route per pair of servers, whoever dialled first
            for i in range(3):
                assert (c.routez(i) or {}).get("num_routes") == 2, c.routez(i)
        await a.close()
        await b.close()
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_leaf_of_one_server_is_reached_from_every_server(tmp_path, kind):
    """A leaf dials server 1 of a cluster: its interest crosses the routes (a client of server 2
    reaches a responder on the leaf), and so does the cluster's (the leaf reaches server 2)."""
    from tests.support.leafnodes import Node, Remote, Topology, wait_for_leaf_connected

    c = Cluster(tmp_path / "c", kind, size=2, leaf_users=[{"user": "leaf", "password": "leaf-pw"}])
    topo = Topology(tmp_path / "leaf")
    try:
        await anyio.to_thread.run_sync(c.start)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        hub = c.server(0)
        hub.config.setdefault("leafnodes", {"port": c.nodes[0].leaf_port})
        await anyio.to_thread.run_sync(
            lambda: topo.start("leaf", kind, Node(remotes=[Remote(hub, "leaf", "leaf-pw", "$G")]))
        )
        await anyio.to_thread.run_sync(lambda: wait_for_leaf_connected(hub, 1, timeout=30))
        leaf_nc = await nats.connect(f"nats://127.0.0.1:{topo['leaf'].port}", allow_reconnect=False)
        far = await _connect(c, 1)

        async def leaf_answers(msg):
            await leaf_nc.publish(msg.reply, b"from the leaf")

        async def far_answers(msg):
            await far.publish(msg.reply, b"from server 2")

        await leaf_nc.subscribe("svc.leaf", cb=leaf_answers)
        await far.subscribe("svc.far", cb=far_answers)
        await leaf_nc.flush()
        await far.flush()
        await wait_for_interest(far, "svc.leaf")
        assert (await far.request("svc.leaf", b"", timeout=5)).data == b"from the leaf"
        await wait_for_interest(leaf_nc, "svc.far")
        assert (await leaf_nc.request("svc.far", b"", timeout=5)).data == b"from server 2"
        await leaf_nc.close()
        await far.close()
    finally:
        topo.close()
        c.close()


async def test_jetstream_stays_per_server_but_its_streams_are_reachable(tmp_path):
    """Until hub/raft/ replicates JetStream, each leafjet server's API answers only its own
    clients (an API request never reaches, and is never answered by, the other servers), while a
    stream's subjects are reachable from every server: a publish on server 2 is stored on server
    1's stream and acknowledged from there."""
    c = Cluster(tmp_path, "leafjet", size=2)
    try:
        await anyio.to_thread.run_sync(c.start)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        nc1, nc2 = await _connect(c, 0), await _connect(c, 1)
        js1, js2 = nc1.jetstream(), nc2.jetstream()
        await js1.add_stream(name="ORDERS", subjects=["orders.>"])
        with pytest.raises(nats.js.errors.NotFoundError):
            await js2.stream_info("ORDERS")
        probe = probe_subject()
        await answer_probes(nc1, probe)
        await wait_for_interest(nc2, probe)
        ack = await js2.publish("orders.1", b"from server 2")
        assert (ack.stream, ack.seq) == ("ORDERS", 1)
        assert (await js1.stream_info("ORDERS")).state.messages == 1
        await nc1.close()
        await nc2.close()
    finally:
        c.close()


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", KINDS)
async def test_the_mesh_heals_after_each_server_is_killed_in_turn(tmp_path, kind):
    """Each server is SIGKILLed and started again in turn, twice over: every time the mesh is
    whole again and a request from every server is answered on every other."""
    c = Cluster(tmp_path, kind, size=3)
    try:
        await anyio.to_thread.run_sync(c.start)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        for victim in [0, 1, 2, 0, 1, 2]:
            await anyio.to_thread.run_sync(lambda v=victim: c.stop(v, kill=True))
            await anyio.to_thread.run_sync(
                lambda v=victim: c.wait_for_mesh(running=[i for i in range(3) if i != v])
            )
            await anyio.to_thread.run_sync(c.start_node, victim)
            await anyio.to_thread.run_sync(c.wait_for_mesh)
            ncs = [await _connect(c, i) for i in range(3)]
            try:
                for i, nc in enumerate(ncs):

                    async def answer(msg, nc=nc, i=i):
                        await nc.publish(msg.reply, f"n{i + 1}".encode())

                    await nc.subscribe(f"who.n{i + 1}", cb=answer)
                    await nc.flush()
                for i, nc in enumerate(ncs):
                    for j in range(3):
                        if i != j:
                            await wait_for_interest(nc, f"who.n{j + 1}")
                            assert (
                                await nc.request(f"who.n{j + 1}", b"", timeout=5)
                            ).data == f"n{j + 1}".encode()
            finally:
                for nc in ncs:
                    await nc.close()
    finally:
        c.close()
