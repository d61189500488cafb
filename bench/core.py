"""Core NATS matrix: publish->subscribe throughput, request/reply latency, server CPU per message.

Both servers run in the same invocation, each measured with the stock nats-py client, so the
ratio leafjet/reference compares like with like on this machine.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import nats

from bench.procstat import cpu_seconds, rss_bytes


@dataclass
class CoreFigures:
    msgs_per_s: float
    mb_per_s: float
    cpu_us_per_msg: float
    rr_p50_us: float
    rr_p99_us: float
    rr_cpu_us_per_req: float
    rss_mib: float


async def pubsub_throughput(url: str, pid: int, n: int, size: int) -> tuple[float, float]:
    """Publish n messages of `size` bytes; time until the subscriber (another connection) has all."""
    sub_nc = await nats.connect(url, pending_size=1 << 30)
    pub_nc = await nats.connect(url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    done = asyncio.Event()
    count = 0

    async def on_msg(_msg) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    await sub_nc.subscribe("bench.core", cb=on_msg, pending_msgs_limit=n + 1, pending_bytes_limit=1 << 31)
    await sub_nc.flush()
    await sub_nc.flush()  # twice: nats-py writes flush()'s PING ahead of a SUB still pending
    payload = b"x" * size
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    for i in range(n):
        await pub_nc.publish("bench.core", payload)
        if i % 2000 == 0:
            await asyncio.sleep(0)
    await pub_nc.flush(timeout=120)
    await asyncio.wait_for(done.wait(), timeout=300)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    await pub_nc.close()
    await sub_nc.close()
    return n / elapsed, cpu / n * 1e6


async def request_latency(url: str, pid: int, n: int) -> tuple[float, float, float]:
    svc = await nats.connect(url)
    cli = await nats.connect(url)

    async def handler(msg) -> None:
        await msg.respond(msg.data)

    await svc.subscribe("bench.rr", cb=handler)
    await svc.flush()
    await svc.flush()  # twice: nats-py writes flush()'s PING ahead of a SUB still pending
    for _ in range(200):  # warm-up
        await cli.request("bench.rr", b"x" * 64, timeout=5)
    lat = []
    cpu0 = cpu_seconds(pid)
    for _ in range(n):
        t = time.perf_counter()
        await cli.request("bench.rr", b"x" * 64, timeout=5)
        lat.append(time.perf_counter() - t)
    cpu = cpu_seconds(pid) - cpu0
    await svc.close()
    await cli.close()
    lat.sort()
    p50 = statistics.median(lat) * 1e6
    p99 = lat[int(len(lat) * 0.99) - 1] * 1e6
    return p50, p99, cpu / n * 1e6


async def run_core(url: str, pid: int, n: int, size: int, requests: int) -> CoreFigures:
    rate, cpu = await pubsub_throughput(url, pid, n, size)
    p50, p99, rr_cpu = await request_latency(url, pid, requests)
    return CoreFigures(rate, rate * size / 1e6, cpu, p50, p99, rr_cpu, rss_bytes(pid) / (1 << 20))
