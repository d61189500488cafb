"""Cluster matrix: messages from a publisher on one server to a subscriber on another, over a route.

    python -m bench cluster [--msgs 100000] [--sizes 128,1024] [--requests 2000] [--runs 1]
                            [--rounds 5] [--clients raw|natspy]
                            [--parts pubsub,pubsub-once,meta,clientcpu,stepdown] [--creates 50]
                            [--paired] [--existing 0] [--sync default|always]
                            [--failover-runs 3] [--stepdowns 5]

``pubsub`` (since 2026-11-27): bench/cluster_rounds.py -- both clusters side by side, a warm-up,
then ``--rounds`` rounds with the kinds interleaved, raw-socket clients that cost well under a
microsecond per message (bench/raw_clients.py), medians with their spread and every process's
CPU per message. Its docstring says why: the one-run figure below swung 0.6-1.5x on a quiet
machine, decided by how two nats-py clients were scheduled.

``pubsub-once``: the figure ``pubsub`` gave before, kept for comparison. For each
implementation, two servers joined by a route (tests/support/cluster.py), the stock nats-py
client publishes ``--msgs`` messages of each size on server 1 while a client of server 2
subscribes; the figure is messages/s until the subscriber has them all, and each server's CPU per
message. Then ``--requests`` sequential requests from server 1 answered on server 2: the median
round trip. Ratios are leafjet to the reference in the same run; nothing asserts.

``clientcpu``: the subscribing client's own CPU per message behind each server, the subscriber a
process of its own and the kinds alternating run after run (bench/cluster_client.py).

``meta``: on three servers of each kind with JetStream, stream create latency through a non-leader
and through the meta leader (back to back, or with ``--paired`` alternating between the two clusters),
and the meta leader's failover after kill -9 (bench/cluster_meta.py). ``--sync always`` runs the
reference with ``sync_interval: always``: its default syncs its meta log every 2 minutes, so a
create's RAFT round costs it no fsync, where leafjet's fsyncs on the leader and a follower.

``stepdown``: ``$JS.API.META.LEADER.STEPDOWN`` on three servers of each kind: the time until all
servers name the new leader, and until a create succeeds again (bench/cluster_stepdown.py).
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

from bench.cluster_client import client_cpu_matrix
from bench.cluster_meta import PAIR_GAP, paired_creates, run_meta
from bench.cluster_rounds import pubsub_rounds
from bench.cluster_stepdown import print_stepdowns, run_stepdowns
from bench.leaf import pub_sub_throughput
from bench.procstat import cpu_seconds
from bench.stats import median_or_nan, quantile
from tests.support.cluster import Cluster, answer_probes, probe_subject, wait_for_interest

KINDS = ("reference", "leafjet")


@dataclass
class ClusterFigures:
    msgs_per_s: dict[int, float]  # size -> msgs/s
    cpu_us: dict[int, tuple[float, float]]  # size -> (publisher's server, subscriber's server) us/msg
    client_us: dict[int, float]  # size -> this process (publisher and subscriber clients) us/msg
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
        client: dict[int, float] = {}
        for size in args.sizes:
            runs, pub_cpu, sub_cpu, client_cpu = [], [], [], []
            for _ in range(args.runs):
                p0, s0, c0 = cpu_seconds(pub_pid), cpu_seconds(sub_pid), time.process_time()
                runs.append(
                    asyncio.run(
                        pub_sub_throughput(pub_url, sub_url, args.msgs, size, "bench.route", _route_interest)
                    )
                )
                pub_cpu.append((cpu_seconds(pub_pid) - p0) / args.msgs * 1e6)
                sub_cpu.append((cpu_seconds(sub_pid) - s0) / args.msgs * 1e6)
                client_cpu.append((time.process_time() - c0) / args.msgs * 1e6)
            figs[size] = statistics.median(runs)
            cpu[size] = (statistics.median(pub_cpu), statistics.median(sub_cpu))
            client[size] = statistics.median(client_cpu)
        rr = asyncio.run(_requests(pub_url, sub_url, args.requests))
        return ClusterFigures(figs, cpu, client, rr)
    finally:
        cluster.close()


def _ratio(a: float, b: float) -> float:
    """a/b, NaN when the reference's figure is zero (a run too short to register CPU time)."""
    return a / b if b else float("nan")


def cluster_matrix(args: argparse.Namespace) -> int:
    parts = {p for p in str(args.parts).split(",") if p}
    if unknown := parts - {"pubsub", "pubsub-once", "meta", "clientcpu", "stepdown"}:
        print(f"unknown --parts {sorted(unknown)}; choose from pubsub,pubsub-once,meta,clientcpu,stepdown")
        return 2
    if "pubsub" in parts:
        pubsub_rounds(args)
    if "pubsub-once" in parts:
        _pubsub_matrix(args)
    if "clientcpu" in parts:
        client_cpu_matrix(args)
    if "meta" in parts:
        _meta_matrix(args)
    if "stepdown" in parts:
        with tempfile.TemporaryDirectory(prefix="leafjet-bench-stepdown-") as tmp:
            res = {kind: run_stepdowns(Path(tmp), kind, args.stepdowns) for kind in KINDS}
        print_stepdowns(res, args.stepdowns)
    return 0


def _meta_matrix(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-meta-") as tmp:
        paired = (
            paired_creates(Path(tmp), KINDS, args.creates, args.sync)
            if args.paired and args.creates > 0
            else None
        )
        creates = 0 if args.paired else args.creates
        res = {
            kind: run_meta(Path(tmp), kind, creates, args.failover_runs, args.existing, args.sync)
            for kind in KINDS
            if args.failover_runs > 0 or creates > 0
        }
    existing = f",Existing={args.existing}" if args.existing and not args.paired else ""
    sync = ",Sync=always" if args.sync == "always" else ""
    print(
        f"\ncluster meta Creates={args.creates}{existing}{sync},FailoverRuns={args.failover_runs}"
        " (3 servers each)"
    )
    if args.sync == "always":
        print("  The reference with sync_interval: always (fsyncs before acknowledging, as leafjet).")
    if paired is not None:
        gap = f"{PAIR_GAP * 1e3:.0f} ms"
        print("  R1 file-stream creates, sequential, raw API request, alternating between the two")
        print(f"  clusters (both running, {gap} before each create); ratio = leafjet/reference,")
        print("  for creates the median of the pairs' ratios.")
    else:
        print("  R1 file-stream creates, sequential (back to back), raw API request, one cluster after")
        print("  the other; ratio = leafjet/reference.")
    print(
        "  Failover: SIGKILL of the meta leader, times from the kill (median of runs, each a fresh cluster)."
    )
    print(f"{'figure':44s} {'reference':>10s} {'leafjet':>10s} {'ratio':>7s}  goal")
    create_rows: list[tuple[str, float, float, float | None, float]] = []
    if paired is None and res:
        ref, lj = res["reference"], res["leafjet"]
        for label, r, v, bound in (
            ("create via a non-leader, p50 ms", ref.create_follower_p50_ms, lj.create_follower_p50_ms, 2.0),
            ("create via a non-leader, p90 ms", ref.create_follower_p90_ms, lj.create_follower_p90_ms, None),
            ("create via the leader, p50 ms", ref.create_leader_p50_ms, lj.create_leader_p50_ms, 2.0),
            ("create via the leader, p90 ms", ref.create_leader_p90_ms, lj.create_leader_p90_ms, None),
        ):
            create_rows.append((label, r, v, bound, _ratio(v, r)))
    if paired is not None:
        for way, label in (("follower", "via a non-leader"), ("leader", "via the leader")):
            r_ms, l_ms = paired.ms["reference"][way], paired.ms["leafjet"][way]
            pair = quantile(paired.ratios[way], 0.5)
            create_rows.append(
                (f"create {label}, p50 ms", quantile(r_ms, 0.5), quantile(l_ms, 0.5), 2.0, pair)
            )
            p90 = _ratio(quantile(l_ms, 0.9), quantile(r_ms, 0.9))
            create_rows.append(
                (f"create {label}, p90 ms", quantile(r_ms, 0.9), quantile(l_ms, 0.9), None, p90)
            )
    for label, r, v, bound, ratio in create_rows:
        goal = "" if bound is None else f"<= {bound:g}x: {'met' if ratio <= bound else 'NOT met'}"
        print(f"{label:44s} {r:>10.2f} {v:>10.2f} {ratio:7.2f}  {goal}")
    if args.failover_runs <= 0:
        return
    ref, lj = res["reference"], res["leafjet"]
    rows = (
        (
            "kill -9 -> new leader shown, median s",
            median_or_nan(ref.leader_after_kill_s),
            median_or_nan(lj.leader_after_kill_s),
            1.0,
        ),
        (
            "kill -9 -> create ok via survivor, median s",
            median_or_nan(ref.create_after_kill_s),
            median_or_nan(lj.create_after_kill_s),
            1.0,
        ),
    )
    for label, r, v, bound in rows:
        ratio = _ratio(v, r)
        goal = "" if bound is None else f"<= {bound:g}x: {'met' if ratio <= bound else 'NOT met'}"
        print(f"{label:44s} {r:>10.2f} {v:>10.2f} {ratio:7.2f}  {goal}")
    for kind, f in res.items():
        runs = ", ".join(
            f"{a:.2f}/{b:.2f}" for a, b in zip(f.leader_after_kill_s, f.create_after_kill_s, strict=True)
        )
        print(f"  {kind} runs (new leader / create ok, s): {runs}")


def _pubsub_matrix(args: argparse.Namespace) -> None:
    # a copy: the parts after this one parse ``--sizes`` from the text again
    args = argparse.Namespace(**{**vars(args), "sizes": [int(s) for s in str(args.sizes).split(",") if s]})
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
        rc, vc = ref.client_us[s], lj.client_us[s]
        label = f"{s}B client CPU us/msg (pub + sub process)"
        print(f"{label:40s} {rc:>12.2f} {vc:>12.2f} {_ratio(vc, rc):7.2f}")
    r, v = ref.request_us, lj.request_us
    print(f"{'request/reply across the route, median us':40s} {r:>12,.0f} {v:>12,.0f} {_ratio(v, r):7.2f}")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cluster", help="server 1 -> route -> server 2 messages/s, CPU/msg, request RTT")
    p.add_argument("--msgs", type=int, default=100_000)
    p.add_argument("--sizes", default="128,1024", help="comma list of message sizes in bytes")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--runs", type=int, default=1, help="pubsub-once and clientcpu: runs per kind")
    p.add_argument("--rounds", type=int, default=5, help="pubsub: interleaved rounds per kind and size")
    p.add_argument(
        "--clients",
        choices=("raw", "natspy"),
        default="raw",
        help="pubsub: raw-socket publisher and counting subscriber, or the stock nats-py client",
    )
    p.add_argument(
        "--parts",
        default="pubsub,meta",
        help="pubsub (over a route, interleaved rounds), pubsub-once (the old one-run figure), "
        "meta (creates, failover), clientcpu (the subscriber's CPU, alternating), "
        "stepdown (meta leader stepdown -> new leader)",
    )
    p.add_argument("--creates", type=int, default=50, help="sequential creates per server measured")
    p.add_argument(
        "--failover-runs", type=int, default=3, help="kill -9 of the meta leader, fresh cluster each"
    )
    p.add_argument(
        "--existing",
        type=int,
        default=0,
        help="meta (back to back): streams created in the cluster before the measured creates",
    )
    p.add_argument(
        "--sync",
        choices=("default", "always"),
        default="default",
        help="meta: default, each server's own (the reference syncs its meta log every 2 min); "
        "always: the reference too fsyncs before acknowledging, as durable as leafjet",
    )
    p.add_argument("--stepdowns", type=int, default=5, help="stepdown: meta leader stepdowns per kind")
    p.add_argument(
        "--paired",
        action="store_true",
        help="meta: both clusters at once, creates alternating between them, a pause before each "
        "(bench/cluster_meta.py paired_creates) instead of back to back, one cluster after the other",
    )
