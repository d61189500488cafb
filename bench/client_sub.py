"""A stock nats-py subscriber in a process of its own, reporting its own CPU per message.

    python -m bench.client_sub URL SUBJECT PROBE N

Run by ``bench cluster --parts clientcpu`` (bench/cluster_client.py). It subscribes to SUBJECT,
answers requests on PROBE (so the publisher knows its interest has crossed the route), prints
``READY``, and after N messages prints one JSON line: the CPU it spent from READY to the last
message (user and system seconds), how much of that time it ran, waited for a CPU (runnable,
not running) and slept (waited for bytes), the reads nats-py's read loop made and the bytes they held.
Every 1000 messages it publishes its count on ``PROGRESS`` so that the publisher keeps a bounded
window in flight (a server closes a subscriber that falls 64 MB behind).

A process of its own, because in the one-process bench the publisher's CPU is counted with the
subscriber's: here the figure is only what the subscribing client spends to read and dispatch.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

import nats

from bench.procstat import context_switches
from tests.support.cluster import answer_probes

PROGRESS = "bench.progress"
READ_SIZE = 32768  # nats-py's DEFAULT_BUFFER_SIZE: what its read loop asks for per read


def _schedstat() -> tuple[float, float]:
    """Seconds this process has run and has waited runnable on a run queue (Linux schedstat):
    what is left of the wall time it slept, waiting for bytes."""
    with open("/proc/self/schedstat") as f:
        run_ns, wait_ns, _slices = f.read().split()
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


async def subscribe(url: str, subject: str, probe: str, n: int) -> dict[str, Any]:
    nc = await nats.connect(url, pending_size=1 << 30)
    reads: list[int] = []
    transport: Any = nc._transport  # counted, not changed: the read loop calls read(32768)
    read = transport.read

    async def counted_read(size: int) -> bytes:
        data: bytes = await read(size)
        reads.append(len(data))
        return data

    transport.read = counted_read
    count = 0
    done = asyncio.Event()

    async def on_msg(_msg: Any) -> None:
        nonlocal count
        count += 1
        if count % 1000 == 0:
            await nc.publish(PROGRESS, str(count).encode())
        if count == n:
            done.set()

    try:
        await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=n + 1, pending_bytes_limit=1 << 31)
        await answer_probes(nc, probe)
        reads.clear()
        print("READY", flush=True)
        user0, sys0 = _cpu()
        run0, wait0 = _schedstat()
        switches0 = context_switches("self")
        t0 = time.perf_counter()
        await asyncio.wait_for(done.wait(), timeout=600)
        wall = time.perf_counter() - t0
        user1, sys1 = _cpu()
        run1, wait1 = _schedstat()
        switches1 = context_switches("self")
        return {
            "voluntary_switches": switches1[0] - switches0[0],
            "involuntary_switches": switches1[1] - switches0[1],
            "wall_s": wall,
            "run_s": run1 - run0,
            "runnable_wait_s": wait1 - wait0,
            "user_s": user1 - user0,
            "sys_s": sys1 - sys0,
            "reads": len(reads),
            "full_reads": sum(1 for r in reads if r == READ_SIZE),
            "bytes": sum(reads),
        }
    finally:
        await nc.close()


def main() -> None:
    url, subject, probe, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print(json.dumps(asyncio.run(subscribe(url, subject, probe, n))), flush=True)


if __name__ == "__main__":
    main()
