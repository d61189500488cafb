"""``bench cluster --parts pubsub``: pub -> route -> sub in interleaved rounds, medians and spread.

Why not one run per kind: on 2 shared cores, five busy processes (two servers, a nats-py
publisher and subscriber at ~10 us of CPU per message each, the bench) made the figure a matter
of scheduling: eight runs on a quiet machine gave ratios from 0.59 to 1.50, and the reference
itself ran 63k-122k msgs/s. Here:

- both clusters (two servers each, joined by a route) run side by side for the whole
  measurement, so each round of one kind meets the same machine as the round of the other kind
  next to it;
- a warm-up round per kind and size is thrown away; then ``--rounds`` rounds, the kinds taking
  turns and the order flipping every round (ref, lj, lj, ref, ...);
- by default the clients are bench/raw_clients.py's raw-socket publisher (64 KiB batches) and
  counting subscriber, each a process of its own at well under 1 us per message, the same for
  both servers: the figure measures the servers, not nats-py (``--clients natspy`` puts the
  stock client back, publisher and subscriber in this process, for comparison);
- each figure is the median of the rounds with its spread (min-max), the ratio is the median of
  the per-round ratios (each against the neighbouring round of the other kind), and CPU per
  message is given for each process: both servers (all threads, nanosecond scheduler counters),
  the publisher and the subscriber.

The old one-run figure is ``--parts pubsub-once`` (bench/cluster.py), unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.cluster_client import KINDS, two_server_clusters
from bench.leaf import pub_sub_throughput
from bench.procstat import run_seconds
from bench.raw_clients import PairRun, run_pair
from tests.support.cluster import Cluster, answer_probes, probe_subject, wait_for_interest


@dataclass
class Round:
    msgs_per_s: float
    pub_server_us: float  # server 1 (the publisher's), CPU per message
    sub_server_us: float  # server 2 (the subscriber's)
    pub_client_us: float
    sub_client_us: float  # with nats-py both clients are one process: all of it here, pub 0


def _natspy_pair(pub_url: str, sub_url: str, n: int, size: int) -> PairRun:
    async def interest(sub_nc: Any, pub_nc: Any) -> None:
        probe = probe_subject()
        await answer_probes(sub_nc, probe)
        await wait_for_interest(pub_nc, probe, timeout=60)

    c0 = time.process_time()
    rate = asyncio.run(pub_sub_throughput(pub_url, sub_url, n, size, "bench.route", interest))
    return PairRun(rate, 0.0, (time.process_time() - c0) / n * 1e6, n)


def _one_round(cluster: Cluster, n: int, size: int, clients: str) -> Round:
    pids = (cluster.server(0).pid, cluster.server(1).pid)
    before = [run_seconds(p) for p in pids]
    if clients == "raw":
        pair = run_pair(cluster.url(0), cluster.url(1), "bench.route", probe_subject(), n, size)
    else:
        pair = _natspy_pair(cluster.url(0), cluster.url(1), n, size)
    after = [run_seconds(p) for p in pids]
    return Round(
        pair.msgs_per_s,
        (after[0] - before[0]) / n * 1e6,
        (after[1] - before[1]) / n * 1e6,
        pair.pub_cpu_us,
        pair.sub_cpu_us,
    )


def pubsub_rounds(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in str(args.sizes).split(",") if s]
    rounds: dict[tuple[str, int], list[Round]] = {(k, s): [] for k in KINDS for s in sizes}
    with two_server_clusters("leafjet-bench-rounds-") as clusters:
        for size in sizes:
            for kind in KINDS:  # warm-up: thrown away
                _one_round(clusters[kind], max(1000, args.msgs // 5), size, args.clients)
            for r in range(args.rounds):
                order = KINDS if r % 2 == 0 else KINDS[::-1]
                for kind in order:
                    rounds[kind, size].append(_one_round(clusters[kind], args.msgs, size, args.clients))
    _print(args, sizes, rounds)


def _spread(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def _print(args: argparse.Namespace, sizes: list[int], rounds: dict[tuple[str, int], list[Round]]) -> None:
    print(
        f"\ncluster pubsub N={args.msgs},rounds={args.rounds},clients={args.clients} "
        "(kinds interleaved after a warm-up; median (min-max))"
    )
    print("  publisher on server 1 -> route -> subscriber on server 2; CPU us/msg per process.")
    print(
        f"{'kind':10s} {'size':>5s} {'msgs/s':>24s} {'srv1 us':>18s} {'srv2 us':>18s} "
        f"{'pub us':>8s} {'sub us':>8s}"
    )
    for size in sizes:
        for kind in KINDS:
            rs = rounds[kind, size]
            print(
                f"{kind:10s} {size:>5d} {_spread([r.msgs_per_s for r in rs], ',.0f'):>24s} "
                f"{_spread([r.pub_server_us for r in rs], '.2f'):>18s} "
                f"{_spread([r.sub_server_us for r in rs], '.2f'):>18s} "
                f"{statistics.median(r.pub_client_us for r in rs):>8.2f} "
                f"{statistics.median(r.sub_client_us for r in rs):>8.2f}"
            )
        ref, lj = rounds["reference", size], rounds["leafjet", size]
        rate = [b.msgs_per_s / a.msgs_per_s for a, b in zip(ref, lj, strict=True)]
        cpu = [
            (b.pub_server_us + b.sub_server_us) / (a.pub_server_us + a.sub_server_us)
            for a, b in zip(ref, lj, strict=True)
        ]
        print(
            f"  {size} B leafjet/reference per round: msgs/s {_spread(rate, '.2f')}, "
            f"server CPU (srv1+srv2) {_spread(cpu, '.2f')}"
        )
        print(f"    msgs/s ratios by round: {', '.join(f'{x:.2f}' for x in rate)}")
