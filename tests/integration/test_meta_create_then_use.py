"""A stream is usable the moment its create is answered, through any server of a cluster.

leafjet answers a clustered create once the placed server has the stream's config durable and the
stream started, while the new store may still be opening (core/jetstream/opening_store.py); the
stream's first store calls wait for it. The same scenario on three ``nats-server`` processes and on
three ``leafjet hub`` processes, stock nats-py: streams placed by tag on server 1, created through
server 2; right after each create's answer, through the same connection, a stream info (empty),
a publish (no retry: acknowledged with sequence 1), a stream info (one message) and a direct get.
"""

from __future__ import annotations

import anyio
import nats
import pytest

from tests.support.cluster import Cluster
from tests.support.jscluster import (
    THREE_TAGGED,
    api,
    api_until,
    publish_until,
    restart_js_node,
    start_js_cluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(180)]

TAGS = THREE_TAGGED
STREAMS = 8


@pytest.fixture
def cluster(tagged_cluster: Cluster) -> Cluster:
    return tagged_cluster  # tests/integration/conftest.py


async def test_a_stream_takes_publishes_and_reads_right_after_its_create(cluster):
    c = cluster
    nc = await nats.connect(c.url(1), max_reconnect_attempts=-1)
    try:
        js = nc.jetstream()
        # the first create waits for the meta group and the placement to know every server
        warm = {"name": "WARM", "subjects": ["warm"], "placement": {"tags": ["ssd"]}}
        first = await api_until(nc, "$JS.API.STREAM.CREATE.WARM", warm, retry_on=(10008, 10005))
        assert "error" not in first, first
        for k in range(STREAMS):
            name = f"NEW{k}"
            cfg = {"name": name, "subjects": [f"new.{k}"], "storage": "file", "placement": {"tags": ["ssd"]}}
            created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", cfg)
            assert created.get("did_create") is True, created
            assert created["cluster"]["leader"] == c.nodes[0].name
            assert created["state"]["messages"] == 0
            info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
            assert info["state"]["messages"] == 0, info
            data = f"first of {name}".encode()
            if c.kind == "reference":
                # the reference, under load, once had no responder for a publish right after the
                # create and its info (its stream's interest not across the route yet); leafjet
                # is held to taking it at once
                ack = await publish_until(js, f"new.{k}", data)
            else:
                ack = await js.publish(f"new.{k}", data, timeout=10)
            assert (ack.stream, ack.seq) == (name, 1)
            info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
            assert (info["state"]["messages"], info["state"]["last_seq"]) == (1, 1), info
            got = await api(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": 1})
            assert got["message"]["subject"] == f"new.{k}", got
    finally:
        await nc.close()


@pytest.mark.chaos
@pytest.mark.timeout(300)
async def test_the_placed_server_killed_right_after_a_create_or_a_publish_keeps_them(tmp_path):
    """leafjet answers a placed create before the stream's config file is in place (the
    committed meta entry is its durable record; the first publish waits for the store): SIGKILL
    the placed server at once after a create's answer, or after a first publish's ack, three
    times each. After each restart every acknowledged stream is there, with its acknowledged
    message."""
    c = Cluster(tmp_path, "leafjet", size=3)
    try:
        start_js_cluster(c, TAGS)
        c.wait_for_mesh()
        nc = await nats.connect(c.url(1), max_reconnect_attempts=-1)
        try:
            js = nc.jetstream()
            expected: dict[str, int] = {}  # acknowledged stream -> acknowledged messages
            hits = 0
            for round_ in range(6):
                name = f"K{round_}"
                cfg = {"name": name, "subjects": [f"k.{name}"], "placement": {"tags": ["ssd"]}}
                created = await api_until(
                    nc, f"$JS.API.STREAM.CREATE.{name}", cfg, retry_on=(10008, 10005, 10118)
                )
                assert created.get("did_create") is True, created
                expected[name] = 0
                if round_ % 2:
                    ack = await js.publish(f"k.{name}", name.encode(), timeout=10)
                    assert ack.seq == 1
                    expected[name] = 1
                await anyio.to_thread.run_sync(lambda: c.stop(0, kill=True))  # at once
                folders = list((c.workdir / c.nodes[0].name).rglob(f"streams/{name}"))
                hits += bool(folders) and not (folders[0] / "stream.json").exists()
                await anyio.to_thread.run_sync(restart_js_node, c, 0, TAGS)
                await anyio.to_thread.run_sync(c.wait_for_mesh)
                for known, msgs in expected.items():
                    info = await api_until(nc, f"$JS.API.STREAM.INFO.{known}", retry_on=(10008, 10118, 10059))
                    assert info["state"]["messages"] == msgs, (known, info)
            print(f"killed before the config file was in place: {hits} of 6")
        finally:
            await nc.close()
    finally:
        c.close()
