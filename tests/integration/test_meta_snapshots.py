"""The meta group's snapshots and log compaction with three real leafjet processes (issue 22).

The snapshot thresholds are lowered (``cluster.meta_snapshot_entries``, ``meta_segment_bytes``),
so a few dozen API changes make every server snapshot and delete its oldest log segments; then a
server whose store is wiped, and one merely restarted, both come back with the same state as the
others (the wiped one from the leader's snapshot: the entries it lacks are gone from every log).
Tombstones of deleted streams are dropped once their server has deleted the stream. Every
server's routes include itself (one config for the whole cluster). RAFT messages over 256 bytes
go in parts, so the catch-ups here also join snapshots and appends from their parts."""

from __future__ import annotations

import functools
import random
import shutil
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest

from hub.raft.log_store import SNAPSHOT as SNAPSHOT_FILE
from tests.support.cluster import Cluster
from tests.support.jscluster import api_until, meta_leader, raftz, until_true
from tests.support.servers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(240)]

# meta_part_bytes: every snapshot and most appends cross the routes in parts (hub/meta/parts.py)
SMALL_LOG = {"meta_snapshot_entries": 8, "meta_segment_bytes": 1024, "meta_part_bytes": 256}


def start_node(c: Cluster, i: int) -> None:
    """With the lowered thresholds, and one config for all: every server's routes list all
    three, itself included (a route to itself is recognised and dropped; founding ignores it)."""
    c.start_node(i, lambda: c.config(i, routes=[c.route_url(j) for j in range(c.size)], **SMALL_LOG))


def meta_dir(c: Cluster, i: int) -> Path:
    return c.workdir / c.nodes[i].name / "data" / "jetstream" / "$SYS" / "_js_" / "_meta_"


def segments(c: Cluster, i: int) -> set[str]:
    return {p.name for p in meta_dir(c, i).glob("*.seg")}


def leader_index(c: Cluster) -> int:
    running = [i for i in range(c.size) if c.servers[i] is not None]
    name = wait_until(lambda: meta_leader(c, running), 60, interval=0.1, what="a meta leader")
    return next(i for i in range(c.size) if c.nodes[i].name == name)


def views(c: Cluster) -> list[dict[str, Any]]:
    return [raftz(c, i) or {} for i in range(c.size)]


async def same_state_everywhere(c: Cluster, what: str, **more: Any) -> list[dict[str, Any]]:
    """Until every server has applied the same index to the same state (and ``more`` holds on
    each: a key of /raftz and the value it must have)."""

    async def check() -> bool:
        zs = await anyio.to_thread.run_sync(views, c)
        if any(not z.get("state_digest") for z in zs):
            return False
        same = len({(z["applied"], z["state_digest"]) for z in zs}) == 1
        return same and all(all(z.get(k) == v for k, v in more.items()) for z in zs)

    await until_true(check, 90, what)
    return await anyio.to_thread.run_sync(views, c)


async def test_many_changes_compact_the_log_and_wiped_or_restarted_servers_catch_up(tmp_path):
    c = Cluster(tmp_path, "leafjet", size=3)
    try:
        async with anyio.create_task_group() as tg:  # the three start at once: it is quicker
            for i in range(3):
                tg.start_soon(anyio.to_thread.run_sync, start_node, c, i)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        leader = await anyio.to_thread.run_sync(leader_index, c)
        first = [await anyio.to_thread.run_sync(segments, c, i) for i in range(3)]
        nc = await nats.connect(c.url(leader))
        for k in range(12):
            body = {"name": f"S{k}", "subjects": [f"s.{k}"]}
            r = await api_until(nc, f"$JS.API.STREAM.CREATE.S{k}", body, retry_on=(10008, 10005))
            assert "error" not in r, r
        for k in range(0, 12, 2):
            assert (await api_until(nc, f"$JS.API.STREAM.DELETE.S{k}")).get("success")
        zs = await same_state_everywhere(c, "every server at one state, its tombstones dropped", tombstones=0)
        for i, z in enumerate(zs):
            assert z["snapshots_taken"] >= 1 and z["snapshot_index"] > 8, z
            now = await anyio.to_thread.run_sync(segments, c, i)
            assert not first[i] & now, f"server {i}: its first segments {first[i]} are still there"

        # a follower loses its whole store; the others go on while it is down
        wiped = (leader + 1) % 3
        c.stop(wiped)
        await anyio.to_thread.run_sync(shutil.rmtree, c.workdir / c.nodes[wiped].name / "data")
        for k in range(12, 16):
            body = {"name": f"S{k}", "subjects": [f"s.{k}"]}
            assert "error" not in await api_until(nc, f"$JS.API.STREAM.CREATE.S{k}", body)
        await anyio.to_thread.run_sync(start_node, c, wiped)
        zs = await same_state_everywhere(c, "the wiped server caught up")
        assert zs[wiped]["snapshot_index"] > 1  # installed from the leader's snapshot
        assert zs[wiped]["messages_in_parts"] > 0  # that snapshot among them (over 256 bytes)

        # a plain restart: the snapshot, then the tail of the log
        restarted = (leader + 2) % 3
        c.stop(restarted)
        assert "error" not in await api_until(nc, "$JS.API.STREAM.DELETE.S1")
        await anyio.to_thread.run_sync(start_node, c, restarted)
        await same_state_everywhere(c, "the restarted server caught up", tombstones=0)

        names = []
        for i in range(3):
            nci = await nats.connect(c.url(i))
            names.append(sorted((await api_until(nci, "$JS.API.STREAM.NAMES"))["streams"] or []))
            await nci.close()
        want = sorted(f"S{k}" for k in range(1, 16) if k >= 12 or (k % 2 == 1 and k != 1))
        assert names == [want, want, want]
        await nc.close()
    finally:
        c.close()


async def test_a_snapshot_larger_than_a_route_takes_catches_a_wiped_server_up(tmp_path):
    # Streams with many random subjects make a snapshot of over 1 MiB, compressed: whole, it
    # would close the route it was sent on (the route's max_payload), at every retry.
    rng = random.Random(11)
    BIG = 48  # streams of 1500 random subjects: ~25 KB each in the snapshot
    c = Cluster(tmp_path, "leafjet", size=3)

    def routes(i: int) -> dict[str, Any]:  # every server's routes list all three
        return c.config(i, routes=[c.route_url(j) for j in range(3)], meta_snapshot_entries=8)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(anyio.to_thread.run_sync, c.start_node, i, functools.partial(routes, i))
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        leader = await anyio.to_thread.run_sync(leader_index, c)
        nc = await nats.connect(c.url(leader))
        for k in range(BIG):
            subjects = [f"r{k}.{rng.getrandbits(128):032x}" for _ in range(1500)]
            body = {"name": f"BIG{k}", "subjects": subjects}
            r = await api_until(nc, f"$JS.API.STREAM.CREATE.BIG{k}", body, retry_on=(10008, 10005))
            assert "error" not in r, r
        wiped = (leader + 1) % 3
        c.stop(wiped)
        await anyio.to_thread.run_sync(shutil.rmtree, c.workdir / c.nodes[wiped].name / "data")
        for k in range(BIG, BIG + 9):  # past the next snapshot: the wiped server must be sent one
            r = await api_until(
                nc, f"$JS.API.STREAM.CREATE.BIG{k}", {"name": f"BIG{k}", "subjects": [f"r{k}"]}
            )
            assert "error" not in r, r
        await anyio.to_thread.run_sync(c.start_node, wiped, functools.partial(routes, wiped))
        zs = await same_state_everywhere(c, "the wiped server caught up from a snapshot of over 1 MiB")
        assert zs[wiped]["streams"] == BIG + 9 and zs[wiped]["snapshot_index"] > 1
        assert zs[wiped]["messages_in_parts"] >= 1
        snapshot = meta_dir(c, wiped) / SNAPSHOT_FILE  # the one installed: as large as sent
        assert snapshot.stat().st_size > 1 << 20
        await nc.close()
    finally:
        c.close()
