"""The meta group's figures for ``python -m bench cluster``: stream create latency and leader
failover after kill -9, on three leafjet hubs and on three nats-server processes.

Create latency: ``--creates`` sequential R1 file-stream creates (each a new name, the raw
``$JS.API.STREAM.CREATE`` request of a stock nats-py client), through a server that is not the
meta leader and through the leader; p50 and p90 of the round trip. ``--existing N`` creates N
streams first (not timed): a create among many streams. By default back to back, on
one cluster, then on the other. With ``--paired`` (``paired_creates``) both clusters run at once
and the creates alternate between them (which one goes first alternates too), each after a
pause of PAIR_GAP (the work a server does behind its answer must not land on the other's
create), so that the machine's speed, which drifts over a run, is the same for both: besides
each side's percentiles, the median of the per-pair ratios (leafjet / reference) is given.
The two ways measure different things: back to back keeps every server's threads busy; paired,
each create finds its servers idle for a while (bench/RESULTS.md: the reference's p50 is then
several times its back-to-back figure on this machine, ours moves less).

Failover: SIGKILL the meta leader; t0 is the kill. Two times from t0, each run on a fresh
cluster (``--failover-runs``, median):
- *new leader*: a survivor's monitoring names another, live, leader (leafjet ``/raftz``, the
  reference ``/jsz`` ``meta_cluster.leader``), polled every 50 ms;
- *create ok*: a create succeeds through a survivor. A create is sent every 100 ms (a new name
  each, each waiting up to 5 s), so a slow or lost attempt does not hide a later success.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.stats import quantile
from hub.meta.peers import peer_of
from tests.support.cluster import Cluster
from tests.support.jscluster import raftz, start_js_cluster
from tests.support.servers import wait_until

ATTEMPT_EVERY = 0.1
PAIR_GAP = 0.05  # s before each paired create
ATTEMPT_TIMEOUT = 5.0
FAILOVER_DEADLINE = 90.0


@dataclass
class MetaFigures:
    create_follower_p50_ms: float
    create_follower_p90_ms: float
    create_leader_p50_ms: float
    create_leader_p90_ms: float
    leader_after_kill_s: list[float]
    create_after_kill_s: list[float]


def _jsz_meta_leader(c: Cluster, i: int) -> str | None:
    try:
        url = f"http://127.0.0.1:{c.nodes[i].http_port}/jsz"
        with urllib.request.urlopen(url, timeout=2.0) as r:
            meta = json.loads(r.read()).get("meta_cluster") or {}
    except (OSError, ValueError, urllib.error.URLError):
        return None
    leader = meta.get("leader")
    return leader if isinstance(leader, str) and leader else None


def meta_leader_seen_by(c: Cluster, i: int) -> str | None:
    """The meta leader's name as server ``i``'s monitoring shows it (None: none known)."""
    if c.kind == "leafjet":
        # by its peer id: "leader" is the name only once that server has registered with the group
        peer = (raftz(c, i) or {}).get("leader_peer")
        return next((n.name for n in c.nodes if peer and peer_of(n.name) == peer), None)
    return _jsz_meta_leader(c, i)


def _agreed_leader(c: Cluster, running: list[int]) -> tuple[int] | None:
    """(index,) of the leader every running server names (a tuple: index 0 is a leader too)."""
    names = {meta_leader_seen_by(c, i) for i in running}
    if len(names) != 1:
        return None
    name = names.pop()
    return next(((i,) for i in running if c.nodes[i].name == name), None)


def agreed_leader(c: Cluster, timeout: float = 90.0) -> int:
    """The index of the meta leader all of ``c``'s servers name, once they agree; a timeout
    names what each server names."""
    try:
        agreed = wait_until(
            lambda: _agreed_leader(c, list(range(c.size))), timeout, interval=0.1, what="a meta leader"
        )
    except TimeoutError as e:
        seen = [meta_leader_seen_by(c, i) for i in range(c.size)]
        raise TimeoutError(f"{c.kind}: {e}; the servers name {seen}") from None
    assert agreed is not None
    return agreed[0]


async def until_new_leader(
    c: Cluster, watch: list[int], old: str, t0: float, deadline: float = FAILOVER_DEADLINE, poll: float = 0.05
) -> float:
    """The time (monotonic) at which the servers ``watch`` all name one leader other than
    ``old``, polled every ``poll`` s; TimeoutError ``deadline`` s after ``t0``."""

    def seen() -> bool:
        names = {meta_leader_seen_by(c, i) for i in watch}
        return len(names) == 1 and not names & {None, old}

    while not await asyncio.to_thread(seen):
        if time.monotonic() - t0 > deadline:
            raise TimeoutError(f"no new meta leader after {old}")
        await asyncio.sleep(poll)
    return time.monotonic()


def start_cluster(c: Cluster, sync: str = "default") -> None:
    """Start ``c``'s servers with JetStream. ``sync="always"``: the reference fsyncs its meta
    log and stores before acknowledging (``sync_interval: always``), as durable as leafjet, whose
    RAFT log always does (its default is a sync every 2 minutes)."""
    if c.kind == "leafjet":
        start_js_cluster(c)
    else:  # the reference: a store dir each
        for i in range(c.size):
            cfg = c.config(i)
            cfg["jetstream"] = {"store_dir": str(c.workdir / c.nodes[i].name / "js")}
            if sync == "always":
                cfg["jetstream"]["sync_interval"] = "always"
            c.start_node(i, cfg)
    c.wait_for_mesh(timeout=60)


async def _create(nc: nats.NATS, name: str, timeout: float) -> dict[str, Any]:
    body = {"name": name, "subjects": [f"bench.meta.{name}"], "storage": "file", "num_replicas": 1}
    msg = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), timeout=timeout)
    out = json.loads(msg.data)
    assert isinstance(out, dict)
    return out


async def create_until_ok(nc: nats.NATS, prefix: str, deadline_s: float = 60.0) -> None:
    """Creates until one succeeds (the meta group elected, every server registered)."""
    deadline = time.monotonic() + deadline_s
    n = 0
    while True:
        n += 1
        try:
            if "error" not in await _create(nc, f"{prefix}{n}", ATTEMPT_TIMEOUT):
                return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no stream create succeeded within {deadline_s}s")
        await asyncio.sleep(0.2)


async def _create_latencies(url: str, prefix: str, n: int, existing: int = 0) -> list[float]:
    """``n`` timed creates through ``url``, after ``existing`` untimed ones (a cluster that holds
    many streams: a create's work must not grow with them)."""
    nc = await nats.connect(url)
    try:
        await create_until_ok(nc, f"{prefix}W")
        for k in range(existing):
            resp = await _create(nc, f"{prefix}X{k}", 30.0)
            if "error" in resp:
                raise RuntimeError(f"create {prefix}X{k}: {resp['error']}")
        out = []
        for k in range(n):
            t0 = time.perf_counter()
            resp = await _create(nc, f"{prefix}{k}", 30.0)
            out.append(time.perf_counter() - t0)
            if "error" in resp:
                raise RuntimeError(f"create {prefix}{k}: {resp['error']}")
        return out
    finally:
        await nc.close()


@dataclass
class PairedCreates:
    """Create round trips in ms by kind ("reference", "leafjet") and way in ("follower",
    "leader"), taken in alternation; ``ratios[way]``: leafjet / reference of each pair."""

    ms: dict[str, dict[str, list[float]]]
    ratios: dict[str, list[float]]


def paired_creates(
    workdir: Path, kinds: tuple[str, str], creates: int, sync: str = "default"
) -> PairedCreates:
    """Start a three-server cluster of each kind, then alternate their creates (above)."""
    clusters = {kind: Cluster(workdir / f"{kind}-creates", kind, size=3) for kind in kinds}
    try:
        urls: dict[str, dict[str, str]] = {}
        for kind, c in clusters.items():
            start_cluster(c, sync)
            leader = agreed_leader(c)
            urls[kind] = {"follower": c.url((leader + 1) % c.size), "leader": c.url(leader)}
        return asyncio.run(_alternate(urls, kinds, creates))
    finally:
        for c in clusters.values():
            c.close()


async def _alternate(urls: dict[str, dict[str, str]], kinds: tuple[str, str], n: int) -> PairedCreates:
    ways = ("follower", "leader")
    ncs: dict[tuple[str, str], nats.NATS] = {}
    ms: dict[str, dict[str, list[float]]] = {kind: {way: [] for way in ways} for kind in kinds}
    ratios: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for kind in kinds:  # one by one: a failed connect leaves the others closed below
            for way in ways:
                ncs[(kind, way)] = await nats.connect(urls[kind][way])
        for (_kind, way), nc in ncs.items():
            await create_until_ok(nc, f"W{way[0].upper()}")
        for k in range(n):
            for way in ways:
                order = kinds if k % 2 == 0 else kinds[::-1]
                took: dict[str, float] = {}
                for kind in order:
                    name = f"P{way[0].upper()}{k}"
                    # the work a server does behind its answer (a config file, a checkpoint)
                    # must not land on the other cluster's create
                    await asyncio.sleep(PAIR_GAP)
                    t0 = time.perf_counter()
                    resp = await _create(ncs[(kind, way)], name, 30.0)
                    took[kind] = (time.perf_counter() - t0) * 1e3
                    if "error" in resp:
                        raise RuntimeError(f"{kind} create {name}: {resp['error']}")
                    ms[kind][way].append(took[kind])
                ratios[way].append(took[kinds[1]] / took[kinds[0]])
        return PairedCreates(ms, ratios)
    finally:
        for nc in ncs.values():
            await nc.close()


async def until_new_leader_and_create(
    c: Cluster,
    nc: nats.NATS,
    watch: list[int],
    old: str,
    t0: float,
    prefix: str,
    *,
    deadline: float = FAILOVER_DEADLINE,
    attempt_every: float = ATTEMPT_EVERY,
    poll: float = 0.05,
) -> tuple[float, float]:
    """After a disruption of the meta leader ``old`` at ``t0`` (monotonic): seconds from t0
    until the servers ``watch`` all name one new leader, and until a create through ``nc``
    succeeds (an attempt every ``attempt_every`` s, a new name each, each waiting up to
    ATTEMPT_TIMEOUT, so a slow or lost attempt does not hide a later success)."""
    created = asyncio.Event()
    created_at: list[float] = []

    async def attempt(name: str) -> None:
        try:
            resp = await _create(nc, name, ATTEMPT_TIMEOUT)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return
        if "error" not in resp and not created.is_set():
            created_at.append(time.monotonic())
            created.set()

    tag = secrets.token_hex(2).upper()
    leader_task = asyncio.ensure_future(until_new_leader(c, watch, old, t0, deadline, poll))
    tasks = []
    k = 0
    while not created.is_set():
        if time.monotonic() - t0 > deadline:
            leader_task.cancel()
            raise TimeoutError(f"no create succeeded after {old}")
        k += 1
        tasks.append(asyncio.ensure_future(attempt(f"{prefix}{tag}{k}")))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(created.wait(), attempt_every)
    leader_at = await leader_task
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return leader_at - t0, created_at[0] - t0


async def _failover_once(c: Cluster, leader: int, survivor: int) -> tuple[float, float]:
    nc = await nats.connect(c.url(survivor), max_reconnect_attempts=-1)
    try:
        await create_until_ok(nc, "PRE")
        others = [i for i in range(c.size) if i != leader]
        await asyncio.to_thread(c.stop, leader, kill=True)
        t0 = time.monotonic()
        return await until_new_leader_and_create(c, nc, others, c.nodes[leader].name, t0, "FO")
    finally:
        await nc.close()


def run_meta(
    workdir: Path, kind: str, creates: int, failover_runs: int, existing: int = 0, sync: str = "default"
) -> MetaFigures:
    follower_lat: list[float] = []
    leader_lat: list[float] = []
    after_kill: list[tuple[float, float]] = []
    for r in range(max(1, failover_runs)):
        c = Cluster(workdir / f"{kind}-{r}", kind, size=3)
        try:
            start_cluster(c, sync)
            leader = agreed_leader(c)
            survivor = (leader + 1) % c.size
            if r == 0 and creates > 0:
                follower_lat = asyncio.run(_create_latencies(c.url(survivor), "CF", creates, existing))
                leader_lat = asyncio.run(_create_latencies(c.url(leader), "CL", creates))
            if failover_runs > 0:
                after_kill.append(asyncio.run(_failover_once(c, leader, survivor)))
        finally:
            c.close()

    def pct(xs: list[float], q: float) -> float:
        return quantile(xs, q) * 1e3

    return MetaFigures(
        pct(follower_lat, 0.5),
        pct(follower_lat, 0.9),
        pct(leader_lat, 0.5),
        pct(leader_lat, 0.9),
        [a for a, _ in after_kill],
        [b for _, b in after_kill],
    )
