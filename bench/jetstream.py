"""JetStream matrix: sync publish latency, async publish throughput, server CPU per message.

One file-storage stream per server; the stock nats-py client drives every server in the same
invocation (reference, leafjet sync=always, leafjet sync=interval), so the ratios compare like with
like on this machine -- except for durability: the reference's file store acknowledges before it
fsyncs (it syncs every 2 min by default), leafjet(always) acknowledges after the fsync.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import nats
from nats.js.api import StorageType

from bench.procstat import cpu_seconds, rss_bytes

STREAM = "BENCH"
SUBJECT_SYNC = "bench.js.sync"
SUBJECT_ASYNC = "bench.js.async"
WARMUP = 200


@dataclass
class JsFigures:
    sync_p50_us: float
    sync_p99_us: float
    sync_cpu_us_per_msg: float
    msgs_per_s: float
    mb_per_s: float
    cpu_us_per_msg: float
    rss_mib: float


async def sync_latency(
    js, pids: Sequence[int], n: int, size: int, subject: str = SUBJECT_SYNC
) -> tuple[float, float, float]:
    """``await js.publish`` one at a time: each waits for its PubAck before the next is sent.
    (p50 us, p99 us, CPU us per message of ``pids`` together)."""
    payload = b"s" * size
    for _ in range(WARMUP):
        await js.publish(subject, payload, timeout=10)
    lat = []
    cpu0 = cpu_seconds(*pids)
    for _ in range(n):
        t = time.perf_counter()
        await js.publish(subject, payload, timeout=10)
        lat.append(time.perf_counter() - t)
    cpu = cpu_seconds(*pids) - cpu0
    lat.sort()
    return statistics.median(lat) * 1e6, lat[int(len(lat) * 0.99) - 1] * 1e6, cpu / n * 1e6


async def async_throughput(
    js, pids: Sequence[int], n: int, size: int, subject: str = SUBJECT_ASYNC, timeout: float = 300
) -> tuple[float, float]:
    """``js.publish_async`` n times; the context's semaphore keeps at most ``window`` acks outstanding.
    Timed until the last PubAck has arrived."""
    payload = b"x" * size
    futs = []
    cpu0 = cpu_seconds(*pids)
    t0 = time.perf_counter()
    for _ in range(n):
        futs.append(await js.publish_async(subject, payload))
    await asyncio.wait_for(js.publish_async_completed(), timeout=timeout)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(*pids) - cpu0
    failed = [f.exception() for f in futs if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} async publishes failed, first: {failed[0]!r}")
    return n / elapsed, cpu / n * 1e6


async def run_jetstream(url: str, pid: int, n: int, size: int, window: int, sync_requests: int) -> JsFigures:
    nc = await nats.connect(url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    try:
        js = nc.jetstream(timeout=30, publish_async_max_pending=window)
        await js.add_stream(name=STREAM, subjects=["bench.js.>"], storage=StorageType.FILE)
        p50, p99, sync_cpu = await sync_latency(js, [pid], sync_requests, size)
        rate, cpu = await async_throughput(js, [pid], n, size)
        info = await js.stream_info(STREAM)
        expected = WARMUP + sync_requests + n
        if info.state.messages != expected:
            raise RuntimeError(f"stream holds {info.state.messages} messages, expected {expected}")
    finally:
        await nc.close()
    return JsFigures(p50, p99, sync_cpu, rate, rate * size / 1e6, cpu, rss_bytes(pid) / (1 << 20))
