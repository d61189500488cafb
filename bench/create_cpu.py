"""CPU per stream create on each server of a 3-server cluster, leafjet or the reference.

    python -m bench.create_cpu [--kind leafjet|reference] [--creates 150] [--via leader|follower]

Three servers tagged n0, n1, n2; after the meta leader is agreed, ``--creates`` sequential R1
file-stream creates are sent to the leader (``--via leader``: roles leader+arrival, placed, other)
or to a follower (roles leader, arrival, placed), each placed by tag on one chosen server, so
every server keeps one role. Prints the create p50 and, per server, its CPU (user + system, from
/proc) per create, split into the main thread and the other threads. /proc counts in clock ticks
(10 ms): use 100 creates or more.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.cluster_meta import agreed_leader
from bench.stream_create import seconds, timed_creates
from tests.support.cluster import Cluster
from tests.support.jscluster import start_js_cluster


def _cpu_by_thread(pid: int) -> dict[str, float]:
    """CPU seconds of the main thread and of all the others."""
    out = {"main": 0.0, "threads": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (t / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out["main" if t.name == str(pid) else "threads"] += (int(fields[11]) + int(fields[12])) / tick
    return out


def start_roles(c: Cluster, via_leader: bool) -> tuple[int, int, int]:
    """Start ``c`` (3 servers tagged n0, n1, n2) and wait until a create placed by tag works;
    (meta leader, the server to send creates to, the server to place them on): each server
    keeps one role (the leader is also the arrival with ``via_leader``)."""
    start_js_cluster(c, [["n0"], ["n1"], ["n2"]])
    c.wait_for_mesh(timeout=60)
    leader = agreed_leader(c)
    via = leader if via_leader else (leader + 1) % 3
    placed = next(i for i in range(3) if i not in (leader, via))
    deadline = time.monotonic() + 60
    while True:  # until every server has registered (placement by tag needs it)
        try:
            asyncio.run(timed_creates(c.url(via), 3, f"WARM{time.monotonic_ns()}x", f"n{placed}"))
            return leader, via, placed
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run(kind: str, workdir: Path, n: int, via_leader: bool) -> None:
    c = Cluster(workdir, kind, size=3)
    try:
        leader, via, placed = start_roles(c, via_leader)
        pids = [c.server(i).pid for i in range(3)]
        before = [_cpu_by_thread(p) for p in pids]
        lat = seconds(asyncio.run(timed_creates(c.url(via), n, "S", f"n{placed}")))
        after = [_cpu_by_thread(p) for p in pids]
        roles = {i: "other" for i in range(3)}
        roles[leader], roles[placed] = "leader", "placed"
        roles[via] = "leader+arrival" if via == leader else "arrival"
        print(f"{kind}: {n} creates, p50 {statistics.median(lat) * 1e3:.2f} ms; CPU ms per create:")
        total = 0.0
        for i in range(3):
            d = {k: (after[i][k] - before[i][k]) / n * 1e3 for k in ("main", "threads")}
            total += d["main"] + d["threads"]
            both = d["main"] + d["threads"]
            print(f"  {roles[i]:<16}{both:>7.2f}  (main {d['main']:.2f}, threads {d['threads']:.2f})")
        print(f"  {'sum':<16}{total:>7.2f}")
    finally:
        c.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=("leafjet", "reference"), default="leafjet")
    p.add_argument("--creates", type=int, default=150)
    p.add_argument("--via", choices=("leader", "follower"), default="leader")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-create-cpu-") as tmp:
        run(args.kind, Path(tmp) / args.kind, args.creates, args.via == "leader")


if __name__ == "__main__":
    main()
