"""Cluster matrix: messages from a publisher on one server to a subscriber on another, over a route.

    python -m bench cluster [--msgs 100000] [--sizes 128,1024] [--requests 2000] [--runs 1]

For each implementation, two servers joined by a route (tests/support/cluster.py: three
``nats-server`` or three ``leafjet hub`` processes, the first two used): the stock nats-py
client publishes ``--msgs`` messages of each size on server 1 while a client of server 2
subscribes; the figure is messages/s until the subscriber has them all, and each server's CPU per
message. Then ``--requests`` sequential requests from server 1 answered on server 2: the median
round trip. Ratios are leafjet to the reference in the same run; nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.leaf import pub_sub_throughput
from bench.procstat import cpu_seconds
from tests.support.cluster import Cluster, answer_probes, probe_subject, wait_for_interest

KINDS = ("reference", "leafjet")


@dataclass
class ClusterFigures:
    msgs_per_s: dict[int, float]  # size -> msgs/s
    cpu_us: dict[int, tuple[float, float]]  # size -> (publisher's server, subscriber's server) us/msg
    request_us: float  # median round trip, server 1 -> server 2 -> back


async def _route_interest(sub_nc: Any, pub_nc: Any) -> None:
    probe = probe_subject()
    await answer_probes(sub_nc, probe)
    await wait_for_interest(pub_nc, probe, timeout=60)


async def _requests(pub_url: str, sub_url: str, n: int) -> float:
    responder = await nats.connect(sub_url)
    requester = await nats.connect(pub_url)
    try:

        async def answer(msg: Any) -> None:
            await responder.publish(msg.reply, b"pong")

        await responder.subscribe("bench.rr", cb=answer)
        await responder.flush()
        await wait_for_interest(requester, "bench.rr", timeout=60)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await requester.request("bench.rr", b"ping", timeout=10)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6
    finally:
        await requester.close()
        await responder.close()


def _run_kind(tmp: Path, kind: str, args: argparse.Namespace) -> ClusterFigures:
    cluster = Cluster(tmp / kind, kind, size=2)
    try:
        cluster.start()
        cluster.wait_for_mesh(timeout=60)
        pub_url, sub_url = cluster.url(0), cluster.url(1)
        pub_pid, sub_pid = cluster.server(0).pid, cluster.server(1).pid
        figs: dict[int, float] = {}
        cpu: dict[int, tuple[float, float]] = {}
        for size in args.sizes:
            runs, pub_cpu, sub_cpu = [], [], []
            for _ in range(args.runs):
                p0, s0 = cpu_seconds(pub_pid), cpu_seconds(sub_pid)
                runs.append(
                    asyncio.run(
                        pub_sub_throughput(pub_url, sub_url, args.msgs, size, "bench.route", _route_interest)
                    )
                )
                pub_cpu.append((cpu_seconds(pub_pid) - p0) / args.msgs * 1e6)
                sub_cpu.append((cpu_seconds(sub_pid) - s0) / args.msgs * 1e6)
            figs[size] = statistics.median(runs)
            cpu[size] = (statistics.median(pub_cpu), statistics.median(sub_cpu))
        rr = asyncio.run(_requests(pub_url, sub_url, args.requests))
        return ClusterFigures(figs, cpu, rr)
    finally:
        cluster.close()


def _ratio(a: float, b: float) -> float:
    """a/b, NaN when the reference's figure is zero (a run too short to register CPU time)."""
    return a / b if b else float("nan")


def cluster_matrix(args: argparse.Namespace) -> int:
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-cluster-") as tmp:
        results = {kind: _run_kind(Path(tmp), kind, args) for kind in KINDS}
    ref, lj = results["reference"], results["leafjet"]
    sizes = "+".join(f"{s}B" for s in args.sizes)
    print(f"\ncluster N={args.msgs},MsgSz={sizes},Requests={args.requests},runs={args.runs}")
    print("  publisher on server 1 -> route -> subscriber on server 2, stock nats-py.")
    print("  ratio = leafjet/reference, measured in this run.")
    print(f"{'figure':40s} {'reference':>12s} {'leafjet':>12s} {'ratio':>7s}")
    for s in args.sizes:
        r, v = ref.msgs_per_s[s], lj.msgs_per_s[s]
        print(f"{f'{s}B msgs/s across the route':40s} {r:>12,.0f} {v:>12,.0f} {_ratio(v, r):7.2f}")
        rc, vc = sum(ref.cpu_us[s]), sum(lj.cpu_us[s])
        print(
            f"{f'{s}B server CPU us/msg (pub + sub side)':40s} {rc:>12.2f} {vc:>12.2f} {_ratio(vc, rc):7.2f}"
            f"   (leafjet {lj.cpu_us[s][0]:.2f} + {lj.cpu_us[s][1]:.2f})"
        )
    r, v = ref.request_us, lj.request_us
    print(f"{'request/reply across the route, median us':40s} {r:>12,.0f} {v:>12,.0f} {_ratio(v, r):7.2f}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cluster", help="server 1 -> route -> server 2 messages/s, CPU/msg, request RTT")
    p.add_argument("--msgs", type=int, default=100_000)
    p.add_argument("--sizes", default="128,1024", help="comma list of message sizes in bytes")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--runs", type=int, default=1)
