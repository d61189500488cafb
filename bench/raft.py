"""RAFT replication on three local processes: entries/s with a window in flight, commit latency.

    python -m bench raft [--entries 20000] [--window 256] [--sequential 1000] [--size 128] [--runs 1]

leafjet: three ``bench.raft_node`` processes, each the hub's ``RaftDriver`` + ``LogStore`` (fsync
of every persisted batch: "sync on"), joined by plain TCP. The leader proposes ``--size`` byte
entries: ``--entries`` of them with ``--window`` proposals in flight (entries/s), then
``--sequential`` one at a time (p50/p99 from propose to applied on the leader, i.e. a quorum
fsynced it).

The reference has no raw RAFT API; the closest honest figure is an R3 file stream on a 3-node
nats-server cluster: ``--size`` byte publishes through a client of the stream leader's server,
``--window`` async publishes in flight (msgs/s until the last PubAck), then sequential publishes
(p50/p99 of the PubAck). Each publish is one stream-group RAFT entry, acknowledged after quorum
commit and apply (research/cluster-raft.md 1.5). Run with ``sync_interval: always`` (its WAL and
stream fsynced per append entry: as durable as leafjet's log) and with the default (2 min:
acknowledged before any fsync). So the reference figures include a client, a stream store and
the publish path; leafjet's do not: a ratio overstates leafjet. CPU is the three processes'
/proc utime+stime over the timed part, per entry.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.js.api import StorageType, StreamConfig

from bench.jetstream import async_throughput, sync_latency
from bench.procstat import cpu_seconds
from bench.stats import quantile
from tests.support.cluster import Cluster
from tests.support.jscluster import TRANSIENT
from tests.support.servers import REPO, free_ports, wait_until

SUBJECT = "bench.raft"
WARMUP = 100


@dataclass
class RaftFigures:
    entries_per_s: float
    cpu_us_per_entry: float  # all three processes, window run
    p50_us: float
    p99_us: float


# ---------------------------------------------------------------------- leafjet: raw RAFT


class RaftProcesses:
    """Three ``bench.raft_node`` processes; ``call(i, req)`` talks to node i's control port."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        ports = free_ports(2 * size)
        self.raft_ports, self.control_ports = ports[:size], ports[size:]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workdir = workdir
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for i in range(size):
            peers = [f"--peer={j + 1}=127.0.0.1:{self.raft_ports[j]}" for j in range(size) if j != i]
            args = [
                sys.executable,
                "-m",
                "bench.raft_node",
                "--id",
                str(i + 1),
                "--dir",
                str(workdir / f"n{i + 1}"),
            ]
            args += [
                "--raft-port",
                str(self.raft_ports[i]),
                "--control-port",
                str(self.control_ports[i]),
                *peers,
            ]
            log = open(workdir / f"n{i + 1}.log", "wb")  # noqa: SIM115 (the process owns it)
            self.procs.append(
                subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env=env)
            )

    def call(self, i: int, req: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", self.control_ports[i]), timeout=timeout) as s:
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"node {i + 1} closed the control connection")
                buf += chunk
        out = json.loads(buf)
        assert isinstance(out, dict)
        return out

    def leader(self, running: list[int] | None = None) -> int | None:
        """The index of the node every running node names as leader, or None."""
        seen = set()
        for i in running if running is not None else range(len(self.procs)):
            try:
                seen.add(self.call(i, {"cmd": "status"}, timeout=2)["leader"])
            except OSError:
                return None
        if len(seen) != 1 or 0 in seen:
            return None
        return seen.pop() - 1

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def run_leafjet_raft(workdir: Path, args: argparse.Namespace) -> RaftFigures:
    workdir.mkdir(parents=True, exist_ok=True)
    nodes = RaftProcesses(workdir)
    try:
        found = wait_until(  # (index,): node 0 leading is an answer too
            lambda: None if (i := nodes.leader()) is None else (i,), 60, interval=0.1, what="a RAFT leader"
        )
        leader = found[0]
        out = nodes.call(leader, {"cmd": "sequential", "n": WARMUP, "size": args.size})
        if "error" in out:
            raise RuntimeError(out["error"])
        seq = nodes.call(leader, {"cmd": "sequential", "n": args.sequential, "size": args.size})
        pids = nodes.pids()
        c0 = cpu_seconds(*pids)
        win = nodes.call(
            leader, {"cmd": "window", "n": args.entries, "window": args.window, "size": args.size}
        )
        cpu = cpu_seconds(*pids) - c0
        for out in (seq, win):
            if "error" in out:
                raise RuntimeError(f"node {leader + 1}: {out['error']}")
        lat = seq["latencies"]
        p50, p99 = quantile(lat, 0.5) * 1e6, quantile(lat, 0.99) * 1e6
        return RaftFigures(args.entries / win["seconds"], cpu / args.entries * 1e6, p50, p99)
    finally:
        nodes.close()


# ---------------------------------------------------------------------- reference: R3 stream


def start_reference_js(c: Cluster, sync: str | None) -> None:
    """Every node with JetStream on (a store dir each) and ``sync_interval`` when given."""
    for i in range(c.size):
        cfg = c.config(i)
        js: dict[str, Any] = {"store_dir": str(c.workdir / c.nodes[i].name / "js")}
        if sync is not None:
            js["sync_interval"] = sync
        cfg["jetstream"] = js
        c.start_node(i, cfg)


async def create_r3_stream(url: str, name: str, subjects: list[str], deadline_s: float = 60.0) -> str:
    """Create the R3 stream (again while the meta group has no leader, or has not heard of every
    server yet: 10005); its leader's name."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=10)
        deadline = time.monotonic() + deadline_s
        cfg = StreamConfig(name=name, subjects=subjects, storage=StorageType.FILE, num_replicas=3)
        while True:
            try:
                await js.add_stream(cfg)
                break
            except (nats.js.errors.APIError, nats.errors.TimeoutError, nats.errors.NoRespondersError) as e:
                code = getattr(e, "err_code", None)
                if time.monotonic() > deadline or (code is not None and code not in (*TRANSIENT, 10005)):
                    raise
                await asyncio.sleep(0.2)
        while True:
            info = await js.stream_info(name)
            if info.cluster is not None and info.cluster.leader:
                return info.cluster.leader
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def _reference_load(url: str, pids: list[int], args: argparse.Namespace) -> RaftFigures:
    """The sequential publishes, then the window: bench/jetstream.py's two loops on the R3 stream."""
    nc = await nats.connect(url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    try:
        js = nc.jetstream(timeout=30, publish_async_max_pending=args.window)
        p50, p99, _ = await sync_latency(js, pids, args.sequential, args.size, SUBJECT)
        rate, cpu = await async_throughput(js, pids, args.entries, args.size, SUBJECT, timeout=600)
        return RaftFigures(rate, cpu, p50, p99)
    finally:
        await nc.close()


def run_reference_r3(workdir: Path, sync: str | None, args: argparse.Namespace) -> RaftFigures:
    c = Cluster(workdir, "reference", size=3)
    try:
        start_reference_js(c, sync)
        c.wait_for_mesh(timeout=60)
        leader_name = asyncio.run(create_r3_stream(c.url(0), "RAFTBENCH", [SUBJECT]))
        leader = next(i for i, n in enumerate(c.nodes) if n.name == leader_name)
        pids = [c.server(i).pid for i in range(c.size)]
        return asyncio.run(_reference_load(c.url(leader), pids, args))
    finally:
        c.close()


# ---------------------------------------------------------------------- the matrix


COLUMNS = (
    ("reference R3 stream, sync always", "always"),
    ("reference R3 stream, sync default (2m)", None),
)


def _median(figs: list[RaftFigures]) -> RaftFigures:
    return RaftFigures(
        *(statistics.median(getattr(f, k) for f in figs) for k in RaftFigures.__dataclass_fields__)
    )


def raft_matrix(args: argparse.Namespace) -> int:
    results: dict[str, list[RaftFigures]] = {"leafjet raw RAFT (fsync)": []}
    results.update({label: [] for label, _ in COLUMNS})
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-raft-") as tmp:
        for r in range(args.runs):
            results["leafjet raw RAFT (fsync)"].append(run_leafjet_raft(Path(tmp) / f"lj-{r}", args))
            for i, (label, sync) in enumerate(COLUMNS):
                results[label].append(run_reference_r3(Path(tmp) / f"ref{i}-{r}", sync, args))
    med = {k: _median(v) for k, v in results.items()}
    lj = med["leafjet raw RAFT (fsync)"]
    print(
        f"\nraft Entries={args.entries},Window={args.window},Sequential={args.sequential},"
        f"EntrySz={args.size}B,runs={args.runs}"
    )
    print(
        "  leafjet: 3 processes of the hub's RaftDriver+LogStore over TCP, fsync per batch; commit =\n"
        "  proposed and applied on the leader. reference: no raw RAFT API, so an R3 file stream on 3\n"
        "  nats-server processes, publishes via the stream leader's server (a client, the stream store\n"
        "  and the PubAck included). ratio = leafjet/reference column, same run."
    )
    print(f"{'figure':26s} {'column':42s} {'value':>12s} {'lj ratio':>9s}")
    rows = (
        ("entries/s, window", "entries_per_s", "{:,.0f}"),
        ("CPU us/entry (3 procs)", "cpu_us_per_entry", "{:.1f}"),
        ("sequential commit p50 us", "p50_us", "{:,.0f}"),
        ("sequential commit p99 us", "p99_us", "{:,.0f}"),
    )
    for label, key, fmt in rows:
        for col, fig in med.items():
            v, mine = getattr(fig, key), getattr(lj, key)
            ratio = "" if fig is lj else f"{mine / v:9.2f}" if v else "      nan"
            print(f"{label:26s} {col:42s} {fmt.format(v):>12s} {ratio}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "raft", help="RAFT replication on 3 processes: entries/s, commit p50/p99 (vs an R3 stream)"
    )
    p.add_argument("--entries", type=int, default=20_000, help="entries proposed with --window in flight")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--sequential", type=int, default=1000, help="one-at-a-time proposals for p50/p99")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--runs", type=int, default=1)
