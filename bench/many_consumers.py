"""A stream with many consumers: what a publish and a consumer create cost then; and two
figures of push consumers: a KV watch's first update, and the CPU of push consumers whose
clients are away.

    python -m bench many-consumers [--consumers 1000] [--publishes 300] [--away 100] [--runs 1]

For each kind (leafjet, the reference), one server with JetStream and a stream ``S`` (``s.>``)
holding 100 messages; ``--consumers`` durable pull consumers are created, each filtered on one of
``s.0`` .. ``s.99`` (nobody pulls from them: think of one per device, waiting for its device),
and timed; then ``--publishes`` sequential publishes, each waiting for its ack, to ``s.<k>``.
Printed: the create p50 of the first and of the last 100 consumers, and the publish p50 with all
of them in place, each with its ratio leafjet / reference. Then, on a fresh server: 30 nats-py
KV watches of one key each (``kv.watch``: an ordered push consumer created before its
subscription), the p50 from the call to the first update; and ``--away`` durable push consumers
whose deliver subjects nobody subscribes to, the server's CPU (user + system) per second over
10 s. No goal: the issues name none; these are what an application and an idle device see.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import nats

from bench import medians_by_kind
from bench.procstat import cpu_seconds
from bench.stats import print_kind_rows
from tests.support.servers import start_server

KINDS = ("reference", "leafjet")


async def _measure(url: str, consumers: int, publishes: int) -> dict[str, float]:
    nc = await nats.connect(url)
    try:
        stream = {"name": "S", "subjects": ["s.>"]}
        await nc.request("$JS.API.STREAM.CREATE.S", json.dumps(stream).encode(), timeout=10)
        for i in range(100):
            await nc.request(f"s.{i}", b"x", timeout=10)
        created: list[float] = []
        for k in range(consumers):
            cfg = {"durable_name": f"C{k}", "ack_policy": "explicit", "filter_subject": f"s.{k % 100}"}
            body = {"stream_name": "S", "config": cfg}
            t0 = time.perf_counter()
            msg = await nc.request(f"$JS.API.CONSUMER.CREATE.S.C{k}", json.dumps(body).encode(), timeout=30)
            created.append(time.perf_counter() - t0)
            if b'"error"' in msg.data:
                raise RuntimeError(f"consumer C{k}: {msg.data!r}")
        published: list[float] = []
        for i in range(publishes):
            t0 = time.perf_counter()
            await nc.request(f"s.{i % 100}", b"y", timeout=30)
            published.append(time.perf_counter() - t0)
        return {
            "create_first_ms": statistics.median(created[:100]) * 1e3,
            "create_last_ms": statistics.median(created[-100:]) * 1e3,
            "publish_ms": statistics.median(published) * 1e3,
        }
    finally:
        await nc.close()


async def _watch_and_away(url: str, pid: int, away: int) -> dict[str, float]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="B")
        for i in range(100):
            await kv.put(f"k{i}", b"v")
        took: list[float] = []
        for i in range(30):
            t0 = time.perf_counter()
            watcher = await kv.watch(f"k{i}", include_history=False)
            await watcher.updates(timeout=5)
            took.append(time.perf_counter() - t0)
            await watcher.stop()
        for k in range(away):
            cfg = {"durable_name": f"D{k}", "deliver_subject": f"away.{k}", "ack_policy": "explicit"}
            body = json.dumps({"stream_name": "KV_B", "config": cfg}).encode()
            await nc.request(f"$JS.API.CONSUMER.CREATE.KV_B.D{k}", body, timeout=30)
        await asyncio.sleep(2)
        c0 = cpu_seconds(pid)
        await asyncio.sleep(10)
        return {
            "watch_first_ms": statistics.median(took) * 1e3,
            "away_cpu_ms_per_s": (cpu_seconds(pid) - c0) / 10 * 1e3,
        }
    finally:
        await nc.close()


def many_consumers_matrix(args: argparse.Namespace) -> int:
    def measure(kind: str, workdir: Path) -> dict[str, float]:
        srv = start_server(kind, workdir, jetstream=True)
        try:
            figs = asyncio.run(_measure(srv.url, args.consumers, args.publishes))
        finally:
            srv.stop()
        srv = start_server(kind, workdir.with_name(workdir.name + "-watch"), jetstream=True)
        try:
            figs.update(asyncio.run(_watch_and_away(srv.url, srv.pid, args.away)))
        finally:
            srv.stop()
        return figs

    med = medians_by_kind(KINDS, args.runs, "leafjet-bench-many-consumers-", measure)
    print(
        f"\nmany consumers Consumers={args.consumers},Publishes={args.publishes},runs={args.runs} "
        "(p50 ms, medians of runs)"
    )
    print("  durable pull consumers filtered on s.0..s.99, nobody pulling; sync publishes to s.<k>")
    print("  ms unless said")
    labels = {
        "create_first_ms": "consumer create, first 100",
        "create_last_ms": f"consumer create, last 100 of {args.consumers}",
        "publish_ms": f"publish with {args.consumers} consumers",
        "watch_first_ms": "KV watch -> first update",
        "away_cpu_ms_per_s": f"CPU, {args.away} push consumers away, ms/s",
    }
    print_kind_rows(labels, med)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("many-consumers", help="a stream with many filtered consumers: publish and create")
    p.add_argument("--consumers", type=int, default=1000)
    p.add_argument("--publishes", type=int, default=300)
    p.add_argument("--away", type=int, default=100, help="push consumers whose subscribers are away")
    p.add_argument("--runs", type=int, default=1)
