"""The meta group under a network partition and after it, and a server whose ``server_name``
changed, with three real leafjet processes (issue 22). Both are fault scenarios of half a
minute or more, so ``chaos`` (run with ``-m chaos``); leafjet only (the reference's timers make
the same scenario take minutes: a 4-9 s election timeout and a 10 s lost-quorum check).

Partition: every route to server 2 runs through a TCP proxy (``tests/support/proxy.py``): it
dials the others through P0 and P1, they dial it through P2, and each advertises its proxy, so
gossip never offers a way around them. Cutting the three proxies leaves 0-1 (a majority, with
its direct route) and 2 alone."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import anyio
import nats
import pytest

from tests.support.cluster import Cluster
from tests.support.jscluster import api, api_until, err_code, meta_leader, raftz, start_js_node, until_true
from tests.support.proxy import Proxy
from tests.support.servers import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.cluster,
    pytest.mark.chaos,
    pytest.mark.anyio,
    pytest.mark.timeout(300),
]

FAST_REDIAL = {"connect_retry_max": "1s"}


def _through_proxies(c: Cluster, proxies: list[Proxy]) -> list[dict]:
    def via(j: int) -> str:
        return f"nats-route://{proxies[j].address}"

    return [
        c.config(0, routes=[c.route_url(1), via(2)], advertise=proxies[0].address, **FAST_REDIAL),
        c.config(1, routes=[c.route_url(0), via(2)], advertise=proxies[1].address, **FAST_REDIAL),
        c.config(2, routes=[via(0), via(1)], advertise=proxies[2].address, **FAST_REDIAL),
    ]


async def _names(c: Cluster, i: int) -> list[str]:
    nc = await nats.connect(c.url(i))
    try:
        return list((await api_until(nc, "$JS.API.STREAM.NAMES"))["streams"] or [])
    finally:
        await nc.close()


async def test_a_partition_keeps_the_majority_serving_and_the_minority_catches_up(tmp_path):
    c = Cluster(tmp_path, "leafjet", size=3)
    proxies = [Proxy(("127.0.0.1", c.nodes[i].cluster_port)) for i in range(3)]
    try:
        configs = _through_proxies(c, proxies)
        for i in range(3):
            c.start_node(i, configs[i])
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: meta_leader(c, [0, 1, 2]), 60, interval=0.1, what="a meta leader")
        )
        majority = await nats.connect(c.url(0))
        minority = await nats.connect(c.url(2))
        for k in range(3):
            body = {"name": f"BEFORE{k}", "subjects": [f"before.{k}"]}
            r = await api_until(majority, f"$JS.API.STREAM.CREATE.BEFORE{k}", body, retry_on=(10008, 10005))
            assert "error" not in r, r

        for p in proxies:
            p.cut()

        # the majority keeps (or elects) a leader among itself and serves creates
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: meta_leader(c, [0, 1]), 60, interval=0.1, what="a majority leader")
        )
        for k in range(3):
            body = {"name": f"DURING{k}", "subjects": [f"during.{k}"]}
            r = await api_until(majority, f"$JS.API.STREAM.CREATE.DURING{k}", body, retry_on=(10008, 10005))
            assert "error" not in r and r["cluster"]["leader"] in (c.nodes[0].name, c.nodes[1].name), r

        # the minority knows no leader and says so: 10008, not a hang
        async def minority_has_no_leader() -> bool:
            z = await anyio.to_thread.run_sync(raftz, c, 2)
            return z is not None and not z["leader"] and z["role"] != "leader"

        await until_true(minority_has_no_leader, 60, "server 2 to lose its leader")
        r = await api(minority, "$JS.API.STREAM.CREATE.LONELY", {"name": "LONELY", "subjects": ["lonely"]})
        assert err_code(r) == 10008, r

        for p in proxies:
            p.restore()

        async def healed() -> bool:
            zs = [await anyio.to_thread.run_sync(raftz, c, i) or {} for i in range(3)]
            if any(not z.get("state_digest") or not z.get("leader") for z in zs):
                return False
            return len({(z["leader"], z["applied"], z["state_digest"]) for z in zs}) == 1

        await until_true(healed, 90, "server 2 to rejoin with the same state")
        want = sorted([f"BEFORE{k}" for k in range(3)] + [f"DURING{k}" for k in range(3)])
        for i in range(3):
            names = await _names(c, i)
            assert sorted(names) == want, (i, names)  # each once; LONELY never assigned
        # and the healed group takes changes from the former minority too
        r = await api_until(minority, "$JS.API.STREAM.CREATE.AFTER", {"name": "AFTER", "subjects": ["after"]})
        assert "error" not in r, r
        await majority.close()
        await minority.close()
    finally:
        c.close()
        for p in proxies:
            p.close()


async def test_a_server_restarted_under_another_name_is_refused_clearly_and_the_rest_go_on(tmp_path):
    c = Cluster(tmp_path, "leafjet", size=3)
    try:
        for i in range(3):
            start_js_node(c, i)
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: meta_leader(c, [0, 1, 2]), 60, interval=0.1, what="a meta leader")
        )
        nc0 = await nats.connect(c.url(0))
        r = await api_until(nc0, "$JS.API.STREAM.CREATE.KEEP", {"name": "KEEP", "subjects": ["keep"]})
        assert "error" not in r, r

        # server 2 comes back from the same store under a new name
        c.stop(2)
        cfg = c.config(2)
        cfg["server_name"] = c.nodes[2].name + "-renamed"
        c.start_node(2, cfg)
        await anyio.to_thread.run_sync(
            lambda: wait_until(
                lambda: "was server_name changed?" in c.log(2),
                60,
                interval=0.1,
                what="the renamed server's error",
            )
        )
        nc2 = await nats.connect(c.url(2))
        r = await api(nc2, "$JS.API.STREAM.CREATE.NEW", {"name": "NEW", "subjects": ["new"]})
        assert err_code(r) == 10008, r
        # the other two keep their quorum and their data
        r = await api_until(nc0, "$JS.API.STREAM.CREATE.MORE", {"name": "MORE", "subjects": ["more"]})
        assert "error" not in r, r
        assert sorted(await _names(c, 1)) == ["KEEP", "MORE"]
        await nc0.close()
        await nc2.close()
    finally:
        c.close()


def _stream_folder(c: Cluster, i: int, name: str) -> Path:
    return c.workdir / c.nodes[i].name / "data" / "jetstream" / "$G" / "streams" / name


def _num_routes(c: Cluster, i: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{c.nodes[i].http_port}/routez", timeout=2) as r:
            return int(json.loads(r.read())["num_routes"])
    except (OSError, ValueError, KeyError):
        return None


async def test_a_create_prepared_on_a_cut_off_leader_that_never_commits_leaves_nothing(tmp_path):
    """A server prepares a stream assigned to it as soon as the entry reaches its log
    (core/jetstream/prepared.py). A leader cut off from the others places a create on itself and
    prepares it, but the entry never commits; once it has rejoined and applied past it, the
    preparation is gone: no folder, no stream."""
    c = Cluster(tmp_path, "leafjet", size=3)
    proxies = [Proxy(("127.0.0.1", c.nodes[i].cluster_port)) for i in range(3)]
    try:
        configs = _through_proxies(c, proxies)
        for i in range(3):
            c.start_node(i, configs[i])
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        lonely = c.nodes[2].name
        nc0 = await nats.connect(c.url(0))
        nc2 = await nats.connect(c.url(2))
        r = await api_until(nc2, "$JS.API.STREAM.CREATE.BEFORE", {"name": "BEFORE", "subjects": ["before"]})
        assert "error" not in r, r
        # server 2 (the one the proxies cut off) must lead: hand leadership to it
        deadline = anyio.current_time() + 120
        while (leader := await anyio.to_thread.run_sync(meta_leader, c, [0, 1, 2])) != lonely:
            assert anyio.current_time() < deadline, "server 2 never became the meta leader"
            if leader is not None:
                await api(nc0, "$JS.API.META.LEADER.STEPDOWN", {"placement": {"preferred": lonely}})
            await anyio.sleep(0.5)

        for p in proxies:
            p.cut()
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: _num_routes(c, 2) == 0, 10, interval=0.02, what="server 2 alone")
        )
        answer: dict[str, dict] = {}

        async def create_lonely() -> None:
            body = {"name": "LONELY", "subjects": ["lonely"]}
            answer["r"] = await api(nc2, "$JS.API.STREAM.CREATE.LONELY", body, timeout=30)

        async with anyio.create_task_group() as tg:
            tg.start_soon(create_lonely)
            # it places the create on itself (no route left) and prepares it; no quorum commits it
            await until_true(
                lambda: anyio.to_thread.run_sync(_stream_folder(c, 2, "LONELY").exists),
                20,
                "the cut-off leader to prepare LONELY",
            )
        assert err_code(answer["r"]) == 10008, answer["r"]
        # the majority goes on: its entries take the place of the cut-off leader's
        r = await api_until(nc0, "$JS.API.STREAM.CREATE.DURING", {"name": "DURING", "subjects": ["during"]})
        assert "error" not in r, r
        for p in proxies:
            p.restore()

        async def healed() -> bool:
            zs = [await anyio.to_thread.run_sync(raftz, c, i) or {} for i in range(3)]
            if any(not z.get("state_digest") or not z.get("leader") for z in zs):
                return False
            return len({(z["leader"], z["applied"], z["state_digest"]) for z in zs}) == 1

        await until_true(healed, 90, "server 2 to rejoin with the same state")
        await until_true(
            lambda: anyio.to_thread.run_sync(lambda: not _stream_folder(c, 2, "LONELY").exists()),
            30,
            "the unused preparation to be removed",
        )
        assert sorted(await _names(c, 2)) == ["BEFORE", "DURING"]
        await nc0.close()
        await nc2.close()
    finally:
        c.close()
        for p in proxies:
            p.close()
