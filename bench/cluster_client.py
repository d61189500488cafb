"""What the subscribing client spends behind each server: ``bench cluster --parts clientcpu``.

Issue 22 asked whether a stock nats-py subscriber spends more CPU per message behind leafjet than
behind the reference. The one-process pub/sub bench cannot say: its publisher and subscriber share
a process, and on a loaded machine each run meets a different load. Here two clusters (two
servers each, joined by a route) run side by side, the subscriber is a process of its own
(bench/client_sub.py) on server 2, the publisher publishes on server 1 from this process, and the
kinds take turns run after run (the order rotates) so that both meet the same load. Per kind and
size, medians over ``--runs``: the subscriber's CPU per message (user + system), its reads (how
many of nats-py's 32 KiB reads came full) and the bytes per message it read, the publisher's
CPU, each server's CPU, msgs/s, and the subscriber's wall time split into running, waiting
for a CPU (runnable) and asleep (no bytes): a client that spends the same CPU per message but
gets through fewer per second is either starved of CPU or waiting for the servers. Nothing
asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.client_sub import PROGRESS
from bench.procstat import context_switches, cpu_seconds
from tests.support.cluster import Cluster, probe_subject, wait_for_interest

KINDS = ("reference", "leafjet")
SUBJECT = "bench.client"
REPO = Path(__file__).resolve().parent.parent


@dataclass
class ClientRun:
    msgs_per_s: float
    sub_user_us: float  # the subscriber's CPU per message
    sub_sys_us: float
    full_read_share: float  # of nats-py's 32 KiB reads, the share that came full
    wire_bytes_per_msg: float  # what the subscriber read, per message
    pub_us: float  # this process (the publisher) per message
    servers_us: tuple[float, float]  # server 1, server 2 per message
    sub_ran: float  # shares of the subscriber's wall time: running,
    sub_starved: float  # runnable but waiting for a CPU,
    sub_slept: float  # and asleep (no bytes to read)
    sub_preempted_per_k: float  # the subscriber's involuntary context switches per 1000 messages
    server2_wakeups_per_k: float  # server 2's voluntary context switches (all threads) per 1000


async def _publish(url: str, probe: str, n: int, size: int) -> None:
    nc = await nats.connect(url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    received = 0
    moved = asyncio.Event()

    async def on_progress(msg: Any) -> None:
        nonlocal received
        received = int(msg.data)
        moved.set()

    try:
        await nc.subscribe(PROGRESS, cb=on_progress)
        await wait_for_interest(nc, probe, timeout=60)
        payload = b"x" * size
        window = max(1000, (8 << 20) // size)  # ~8 MB in flight, as bench.leaf's pub_sub_throughput
        for i in range(n):
            await nc.publish(SUBJECT, payload)
            if i % 1000 == 0:
                await asyncio.sleep(0)
                while i - received > window:
                    moved.clear()
                    await asyncio.wait_for(moved.wait(), timeout=120)
        await nc.flush(timeout=120)
    finally:
        await nc.close()


def _one_run(cluster: Cluster, n: int, size: int) -> ClientRun:
    probe = probe_subject()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sub = subprocess.Popen(
        [sys.executable, "-m", "bench.client_sub", cluster.url(1), SUBJECT, probe, str(n)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        assert sub.stdout is not None
        if sub.stdout.readline().strip() != "READY":
            raise RuntimeError("the subscriber process did not start")
        pids = (cluster.server(0).pid, cluster.server(1).pid)
        before = [cpu_seconds(p) for p in pids]
        switches_before = context_switches(pids[1])[0]
        t0, c0 = time.perf_counter(), time.process_time()
        asyncio.run(_publish(cluster.url(0), probe, n, size))
        line = sub.stdout.readline()
        wall, pub_cpu = time.perf_counter() - t0, time.process_time() - c0
        after = [cpu_seconds(p) for p in pids]
        server2_wakeups = context_switches(pids[1])[0] - switches_before
        figures = json.loads(line)
    finally:
        sub.wait(timeout=60)
    return ClientRun(
        msgs_per_s=n / wall,
        sub_user_us=figures["user_s"] / n * 1e6,
        sub_sys_us=figures["sys_s"] / n * 1e6,
        full_read_share=figures["full_reads"] / max(1, figures["reads"]),
        wire_bytes_per_msg=figures["bytes"] / n,
        pub_us=pub_cpu / n * 1e6,
        servers_us=((after[0] - before[0]) / n * 1e6, (after[1] - before[1]) / n * 1e6),
        sub_ran=figures["run_s"] / figures["wall_s"],
        sub_starved=figures["runnable_wait_s"] / figures["wall_s"],
        sub_preempted_per_k=figures["involuntary_switches"] / n * 1000,
        server2_wakeups_per_k=server2_wakeups / n * 1000,
        sub_slept=max(0.0, 1 - (figures["run_s"] + figures["runnable_wait_s"]) / figures["wall_s"]),
    )


@contextlib.contextmanager
def two_server_clusters(prefix: str) -> Iterator[dict[str, Cluster]]:
    """A two-server cluster of each kind, both running at once (their runs interleave), meshed."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        clusters = {kind: Cluster(Path(tmp) / kind, kind, size=2) for kind in KINDS}
        try:
            for cluster in clusters.values():
                cluster.start()
            for cluster in clusters.values():
                cluster.wait_for_mesh(timeout=60)
            yield clusters
        finally:
            for cluster in clusters.values():
                cluster.close()


def client_cpu_matrix(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in str(args.sizes).split(",") if s]
    runs: dict[tuple[str, int], list[ClientRun]] = {(k, s): [] for k in KINDS for s in sizes}
    with two_server_clusters("leafjet-bench-client-") as clusters:
        for r in range(args.runs):
            order = KINDS[r % 2 :] + KINDS[: r % 2]  # each kind goes first in half the runs
            for size in sizes:
                for kind in order:
                    runs[kind, size].append(_one_run(clusters[kind], args.msgs, size))
    _print(args, sizes, runs)


def _time_split(runs: list[ClientRun]) -> str:
    med = statistics.median
    ran, starved, slept = (med(getattr(r, f) for r in runs) for f in ("sub_ran", "sub_starved", "sub_slept"))
    return f"{ran:.0%}/{starved:.0%}/{slept:.0%}"


def _print(args: argparse.Namespace, sizes: list[int], runs: dict[tuple[str, int], list[ClientRun]]) -> None:
    med = statistics.median
    print(f"\ncluster clientcpu N={args.msgs},runs={args.runs} (kinds alternate; medians)")
    print("  publisher on server 1 -> route -> subscriber on server 2, each client a process of its own.")
    print(
        f"{'kind':10s} {'size':>5s} {'msgs/s':>9s} {'sub us/msg':>11s} {'(user+sys)':>12s} "
        f"{'full reads':>10s} {'B/msg':>7s} {'pub us':>7s} {'srv1 us':>8s} {'srv2 us':>8s} "
        f"{'sub ran/starved/slept':>22s}"
    )
    for size in sizes:
        for kind in KINDS:
            rs = runs[kind, size]
            user, sys_ = med(r.sub_user_us for r in rs), med(r.sub_sys_us for r in rs)
            print(
                f"{kind:10s} {size:>5d} {med(r.msgs_per_s for r in rs):>9,.0f} "
                f"{med(r.sub_user_us + r.sub_sys_us for r in rs):>11.2f} {f'{user:.2f}+{sys_:.2f}':>12s} "
                f"{med(r.full_read_share for r in rs):>10.0%} {med(r.wire_bytes_per_msg for r in rs):>7.1f} "
                f"{med(r.pub_us for r in rs):>7.2f} {med(r.servers_us[0] for r in rs):>8.2f} "
                f"{med(r.servers_us[1] for r in rs):>8.2f} {_time_split(rs):>22s}"
            )
        for kind in KINDS:
            rs = runs[kind, size]
            print(
                f"  {kind} {size} B per 1000 msgs: subscriber preempted "
                f"{med(r.sub_preempted_per_k for r in rs):.1f}x, server 2 woke "
                f"{med(r.server2_wakeups_per_k for r in rs):.1f}x"
            )
        ref = med(r.sub_user_us + r.sub_sys_us for r in runs["reference", size])
        lj = med(r.sub_user_us + r.sub_sys_us for r in runs["leafjet", size])
        print(f"  {size} B: subscriber CPU leafjet/reference {lj / ref if ref else float('nan'):.2f}")
        for kind in KINDS:
            each = ", ".join(f"{r.sub_user_us + r.sub_sys_us:.1f}" for r in runs[kind, size])
            print(f"    {kind} runs (sub us/msg): {each}")
