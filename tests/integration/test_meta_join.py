"""A new server joins a running JetStream cluster: the reference adds it to its meta group, and
so does a leafjet hub (one server at a time, through a committed RAFT membership change). The
new server then takes streams placed on it, and stays a member across a restart."""

from __future__ import annotations

from typing import Any

import anyio
import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from hub.meta.peers import node_id, peer_hex
from tests.support.cluster import Cluster
from tests.support.jscluster import api, api_until, publish_until, raftz

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(300)]

TAGS = [["az:1"], ["az:2"], ["az:3"], ["az:4"]]
FIRST = 3  # the servers that found the cluster; one more joins later


def _config(c: Cluster, i: int) -> dict[str, Any]:
    """Node ``i``'s config: the founders route to each other only (a founder waits for every
    route it is given), the newcomer to all of them; JetStream on, tagged."""
    cfg = c.config(i)
    cfg["cluster"]["routes"] = [c.route_url(j) for j in range(FIRST) if j != i]
    if c.kind == "reference":
        cfg["jetstream"] = {"store_dir": str(c.workdir / c.nodes[i].name / "js")}
    cfg["server_tags"] = TAGS[i]
    return cfg


def _start(c: Cluster, i: int) -> None:
    c.start_node(i, lambda: _config(c, i))


async def _messages(nc: nats.NATS, stream: str) -> int | None:
    try:
        info = await api(nc, f"$JS.API.STREAM.INFO.{stream}", timeout=5)
    except (NatsTimeout, NoRespondersError):
        return None
    return info.get("state", {}).get("messages")


@pytest.mark.parametrize("kind", ["leafjet", "reference"])
async def test_a_new_server_joins_the_meta_group_and_takes_streams(tmp_path, kind):
    c = Cluster(tmp_path, kind, size=FIRST + 1)
    ncs: list[nats.NATS] = []
    try:
        for i in range(FIRST):
            _start(c, i)
        c.wait_for_mesh(timeout=60, running=list(range(FIRST)))
        nc = await nats.connect(c.url(0))
        ncs.append(nc)
        before = {"name": "BEFORE", "subjects": ["before.>"]}
        r = await api_until(nc, "$JS.API.STREAM.CREATE.BEFORE", before, retry_on=(10008, 10005))
        assert "error" not in r, r
        _start(c, FIRST)
        c.wait_for_mesh(timeout=60)
        # 10005 until the newcomer is a member and the leader knows its tags
        on_new = {"name": "NEW", "subjects": ["new.>"], "placement": {"tags": ["az:4"]}}
        r = await api_until(nc, "$JS.API.STREAM.CREATE.NEW", on_new, retry_on=(10008, 10005), timeout=120)
        assert "error" not in r, r
        assert r["cluster"]["leader"] == c.nodes[FIRST].name, r["cluster"]
        ack = await publish_until(nc.jetstream(), "new.1", b"on the newcomer")
        assert (ack.stream, ack.seq) == ("NEW", 1)
        newcomer = await nats.connect(c.url(FIRST))
        ncs.append(newcomer)
        info = await api_until(newcomer, "$JS.API.STREAM.INFO.BEFORE")
        assert info["config"]["name"] == "BEFORE", info
        if kind == "leafjet":  # the founders' log holds the newcomer as a voter
            meta = raftz(c, 0)
            assert meta is not None and peer_hex(node_id(c.nodes[FIRST].name)) in meta["voters"], meta
            assert len(meta["voters"]) == FIRST + 1, meta
        # stopped and started again, it is still a member: its stream answers again
        await newcomer.close()
        ncs.remove(newcomer)
        c.stop(FIRST)
        _start(c, FIRST)
        c.wait_for_mesh(timeout=60)
        with anyio.fail_after(90):
            while await _messages(nc, "NEW") != 1:
                await anyio.sleep(0.2)
    finally:
        for x in ncs:
            await x.close()
        c.close()
