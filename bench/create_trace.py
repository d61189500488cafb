"""Where a hub cluster's stream create spends its time: a timeline of the trace points.

    python -m bench.create_trace [--creates 40] [--via follower|leader] [--gap 0.02] [--existing 0]

Three leafjet hubs run with ``LEAFJET_TRACE=1`` (core/trace.py: each server logs named points
with CLOCK_MONOTONIC, one clock for the machine); ``--creates`` sequential R1 creates are sent
to a server that is not the meta leader (or to the leader), each placed by tag on the third
server, so that each server keeps one role: ``A`` the server the client asked, ``L`` the meta
leader (``AL`` when asked directly), ``P`` the server the stream is placed on. For every create
the points of the three servers from the request's send are put on one timeline (up to the
next create's send: what a server does behind its answer, such as a store still opening, is
listed after the answer when ``--gap`` leaves it time); a point seen more than once in one
create is numbered (``raft.received#2``).
Printed: each point's median time from the send, its median gap from the point before it, and
the median CPU its server's thread spent since that server's previous point (a gap with little
CPU was a wait: a hop, a disk, the loop busy with another task).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.create_cpu import start_roles
from bench.stream_create import timed_creates
from tests.support.cluster import Cluster

LINE = re.compile(r"^TRACE (\d+) (\d+) (\S+) ?(.*)$")


def _points(log: str) -> list[tuple[int, int, str, str]]:
    out = []
    for line in log.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m[1]), int(m[2]), m[3], m[4]))
    return out


async def _spaced_creates(url: str, n: int, tag: str, gap: float) -> list[tuple[str, int, int]]:
    """``timed_creates`` one at a time, ``gap`` seconds apart (names ``T<k>0``)."""
    out = []
    for k in range(n):
        out += await timed_creates(url, 1, f"T{k}", tag)
        await asyncio.sleep(gap)
    return out


def run(workdir: Path, creates: int, via_leader: bool, gap: float = 0.0, existing: int = 0) -> None:
    os.environ["LEAFJET_TRACE"] = "1"  # the servers inherit it
    c = Cluster(workdir, "leafjet", size=3)
    try:
        leader, via, placed = start_roles(c, via_leader)
        if existing:  # an account that holds that many streams (untimed, named X<k>)
            asyncio.run(timed_creates(c.url(via), existing, "X", f"n{placed}"))
        if gap > 0:
            done = asyncio.run(_spaced_creates(c.url(via), creates, f"n{placed}", gap))
        else:
            done = asyncio.run(timed_creates(c.url(via), creates, "T", f"n{placed}"))
        time.sleep(0.5)  # the last points reach the logs
        logs = {i: _points(c.log(i)) for i in range(3)}
    finally:
        c.close()
        os.environ.pop("LEAFJET_TRACE", None)

    at: dict[str, list[float]] = defaultdict(list)  # label -> ms from the send, per create
    cpu: dict[str, list[float]] = defaultdict(list)  # label -> us of CPU since that server's last point
    totals = []
    role = {i: "".join(r for r, j in (("A", via), ("L", leader), ("P", placed)) if j == i) for i in range(3)}
    for k, (name, t0, t1) in enumerate(done):
        # a create's points up to the next create's send (or 50 ms): what a server does behind
        # its answer (a store still opening, a config file put in place) is listed after it
        until = done[k + 1][1] if k + 1 < len(done) else t1 + 50_000_000
        events = []
        for i, pts in logs.items():
            last_cpu = None
            for t, thread_cpu, point, key in pts:
                if t < t0 or t > until:
                    last_cpu = thread_cpu
                    continue
                key_name = key.rsplit(".", 1)[-1] if key else ""
                if key_name and key_name.startswith("T") and key_name != name and key_name[1:].isdigit():
                    last_cpu = thread_cpu
                    continue  # another create's point (a late one of the previous)
                used = (thread_cpu - last_cpu) / 1e3 if last_cpu is not None else 0.0
                last_cpu = thread_cpu
                events.append((t, f"{role[i]} {point}", used))
        events.sort()
        seen: dict[str, int] = defaultdict(int)
        for t, label, used in events:
            seen[label] += 1
            full = label if seen[label] == 1 else f"{label}#{seen[label]}"
            at[full].append((t - t0) / 1e6)
            cpu[full].append(used)
        totals.append((t1 - t0) / 1e6)
    # labels seen in at least half of the creates, in order of their median time
    rows = sorted(
        ((statistics.median(v), k) for k, v in at.items() if len(v) >= len(done) / 2), key=lambda r: r[0]
    )
    print(
        f"stream create via the {'leader' if via_leader else 'follower'}: {len(done)} creates, "
        f"p50 {statistics.median(totals):.2f} ms (A = asked, L = meta leader, P = placed)"
    )
    print(f"{'point':<34}{'at ms':>8}{'gap ms':>8}{'cpu us':>8}")
    prev = 0.0
    total = statistics.median(totals)
    answered = False
    for median_at, label in rows:
        if not answered and median_at > total:
            print(f"{'answer received':<34}{total:>8.2f}{total - prev:>8.2f}")
            print("behind the answer (until the next create's send):")
            answered, prev = True, total
        print(f"{label:<34}{median_at:>8.2f}{median_at - prev:>8.2f}{statistics.median(cpu[label]):>8.0f}")
        prev = median_at
    if not answered:
        print(f"{'answer received':<34}{total:>8.2f}{total - prev:>8.2f}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.create_trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--creates", type=int, default=40)
    p.add_argument("--via", choices=("follower", "leader"), default="follower")
    p.add_argument(
        "--gap", type=float, default=0.0, help="seconds between creates (room for work behind each)"
    )
    p.add_argument("--existing", type=int, default=0, help="streams created first, not traced")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="leafjet-create-trace-") as tmp:
        run(Path(tmp), args.creates, args.via == "leader", args.gap, args.existing)


if __name__ == "__main__":
    main()
