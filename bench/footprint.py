"""What a server costs at rest: RSS, threads, file descriptors and CPU while idle, bare and with
many idle streams, for leafjet and the reference in one run.

    python -m bench footprint [--streams 1000] [--idle-seconds 10] [--nofile 1024]

An edge gateway counts every megabyte and every wake-up: the figures are read from /proc of the
server process. ``--nofile`` starts both servers under that soft and hard limit of open files
(prlimit), as systemd's default of 1024 does, to show whether the streams fit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.procstat import cpu_seconds, rss_bytes
from tests.support.servers import start_server


@dataclass(slots=True)
class Footprint:
    rss_mib: float
    threads: int
    fds: int
    idle_cpu_ms_per_s: float


@dataclass(slots=True)
class FootprintFigures:
    bare: Footprint
    loaded: Footprint | None
    streams_created: int
    error: str = ""


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def measure(pid: int, idle_seconds: float) -> Footprint:
    """The process's figures after ``idle_seconds`` of doing nothing; CPU over that time."""
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(idle_seconds)
    cpu = cpu_seconds(pid) - cpu0
    elapsed = time.monotonic() - t0
    return Footprint(
        rss_mib=rss_bytes(pid) / 2**20,
        threads=_threads(pid),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        idle_cpu_ms_per_s=1000 * cpu / elapsed,
    )


async def create_streams(url: str, n: int) -> tuple[int, str]:
    """Create ``n`` file streams, each with one message; how many it created, and the first error."""
    nc = await nats.connect(url, max_reconnect_attempts=0)
    js = nc.jetstream(timeout=30)
    try:
        for i in range(n):
            try:
                await js.add_stream(name=f"S{i}", subjects=[f"s.{i}"])
                await js.publish(f"s.{i}", b"x")
            except Exception as e:
                return i, f"{type(e).__name__}: {e}"
        return n, ""
    finally:
        await nc.close()


def run_one(kind: str, workdir: Path, streams: int, idle_seconds: float, nofile: int) -> FootprintFigures:
    # The limit is set in this process around the start: the server inherits it.
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, max(nofile, old[1])))
    try:
        srv = start_server(kind, workdir, {"jetstream": {}} if kind == "leafjet" else {}, jetstream=True)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    try:
        bare = measure(srv.pid, idle_seconds)
        if not streams:
            return FootprintFigures(bare, None, 0)
        created, error = asyncio.run(create_streams(srv.url, streams))
        loaded = measure(srv.pid, idle_seconds)
        return FootprintFigures(bare, loaded, created, error)
    finally:
        srv.stop()


def footprint_matrix(args: argparse.Namespace) -> int:
    figs: dict[str, FootprintFigures] = {}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        for kind in ("reference", "leafjet"):
            figs[kind] = run_one(kind, Path(tmp) / kind, args.streams, args.idle_seconds, args.nofile)
    limit = f",NOFILE={args.nofile}" if args.nofile else ""
    print(f"\nfootprint Streams={args.streams},Idle={args.idle_seconds:g}s{limit}")
    print(f"{'figure':40s} {'leafjet':>12s} {'reference':>12s} {'ratio':>8s}")
    lj, ref = figs["leafjet"], figs["reference"]

    def row(label: str, a: float, b: float, fmt: str) -> None:
        ratio = f"{a / b:8.2f}" if b else f"{'-':>8s}"
        print(f"{label:40s} {fmt.format(a):>12s} {fmt.format(b):>12s} {ratio}")

    figures = (
        ("RSS (MiB)", "rss_mib", "{:.1f}"),
        ("threads", "threads", "{:d}"),
        ("open fds", "fds", "{:d}"),
        ("idle CPU (ms per s)", "idle_cpu_ms_per_s", "{:.2f}"),
    )
    for label, attr, fmt in figures:
        bare_label = f"idle {label}" if attr == "rss_mib" else label
        row(bare_label, getattr(lj.bare, attr), getattr(ref.bare, attr), fmt)
    if lj.loaded is not None and ref.loaded is not None:
        made = f"created: leafjet {lj.streams_created}, reference {ref.streams_created}"
        print(f"with {args.streams} idle streams ({made})")
        for label, attr, fmt in figures:
            row(f"  {label}", getattr(lj.loaded, attr), getattr(ref.loaded, attr), fmt)
        per = [
            (f.loaded.rss_mib - f.bare.rss_mib) * 1024 / max(f.streams_created, 1) if f.loaded else 0.0
            for f in (lj, ref)
        ]
        row("  RSS per idle stream (KiB)", per[0], per[1], "{:.1f}")
        for kind, f in figs.items():
            if f.error:
                print(f"  {kind}: stream {f.streams_created} failed: {f.error}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("footprint", help="idle RSS, threads, fds and CPU, bare and with many idle streams")
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--nofile", type=int, default=0, help="start the servers under this open-files limit")
