"""Consumer matrix: pull-consumer fetch drain, ordered-consumer catch-up, KV put/get, server CPU per message.

Every server (reference, leafjet sync=always, leafjet sync=interval) is driven by the stock nats-py
client in the same invocation. Streams are pre-loaded with ``js.publish_async`` before the timed
part, so the figures are about delivery, not ingest:

- fetch: a durable pull consumer drained with ``fetch(batch)``; with AckExplicit every message is
  acked with ``msg.ack()`` (fire and forget) and the clock stops once the consumer's ack floor
  reaches N; with AckNone it stops at the N-th message.
- ordered: ``js.subscribe(subject, ordered_consumer=True, cb=...)`` catching up on N messages.
- KV: sequential ``await kv.put`` then ``await kv.get`` over a fixed key set (client defaults, so
  gets go through ``$JS.API.STREAM.MSG.GET``, not direct get). A sequential put waits for its own
  commit, so it measures one put's latency. "KV put, 32 writers" is the load of many devices
  writing at once: 32 tasks on the connection, each putting in turn, over the same key set.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

from bench.procstat import cpu_seconds, rss_bytes

FETCH_STREAM, FETCH_SUBJECT = "CFETCH", "bench.c.fetch"
ORDERED_STREAM, ORDERED_SUBJECT = "CORDERED", "bench.c.ordered"
KV_BUCKET = "CBENCH"
KV_WRITERS_BUCKET, KV_WRITERS = "CBENCHW", 32
TIMEOUT = 300.0


@dataclass
class ConsumerFigures:
    fetch_ack_msgs_per_s: float
    fetch_ack_cpu_us_per_msg: float
    fetch_noack_msgs_per_s: float
    fetch_noack_cpu_us_per_msg: float
    ordered_msgs_per_s: float
    ordered_cpu_us_per_msg: float
    kv_put_ops_per_s: float
    kv_get_ops_per_s: float
    kv_put_writers_ops_per_s: float
    rss_mib: float


async def preload(js, stream: str, subject: str, n: int, size: int) -> None:
    """Untimed: fill ``stream`` with n messages of ``size`` bytes and check it holds them."""
    await js.add_stream(name=stream, subjects=[subject], storage=StorageType.FILE)
    payload = b"x" * size
    futs = [await js.publish_async(subject, payload) for _ in range(n)]
    await asyncio.wait_for(js.publish_async_completed(), timeout=TIMEOUT)
    failed = [f.exception() for f in futs if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} preload publishes failed, first: {failed[0]!r}")
    info = await js.stream_info(stream)
    if info.state.messages != n:
        raise RuntimeError(f"{stream} holds {info.state.messages} messages, expected {n}")


async def fetch_drain(nc, js, pid: int, n: int, batch: int, durable: str, ack: bool) -> tuple[float, float]:
    """Drain n messages through a durable pull consumer, ``fetch(batch)`` at a time."""
    policy = AckPolicy.EXPLICIT if ack else AckPolicy.NONE
    cfg = ConsumerConfig(durable_name=durable, ack_policy=policy, max_ack_pending=-1)
    psub = await js.pull_subscribe(FETCH_SUBJECT, durable=durable, stream=FETCH_STREAM, config=cfg)
    got = 0
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    while got < n:
        msgs = await psub.fetch(min(batch, n - got), timeout=30)
        got += len(msgs)
        if ack:
            for m in msgs:
                await m.ack()
    if ack:  # done when the server has processed every ack
        await nc.flush()
        deadline = time.monotonic() + TIMEOUT
        while (info := await js.consumer_info(FETCH_STREAM, durable)).ack_floor.stream_seq < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{durable}: ack floor {info.ack_floor.stream_seq} of {n} after drain")
            await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    if got != n:
        raise RuntimeError(f"{durable}: fetched {got} messages, expected {n}")
    info = await js.consumer_info(FETCH_STREAM, durable)
    if info.num_pending != 0 or info.delivered.stream_seq != n:
        seq, pending = info.delivered.stream_seq, info.num_pending
        raise RuntimeError(f"{durable}: delivered up to {seq}, {pending} pending, expected {n}")
    await psub.unsubscribe()
    return n / elapsed, cpu / n * 1e6


async def ordered_catchup(js, pid: int, n: int) -> tuple[float, float]:
    """An ordered push consumer catching up on n stored messages; timed until the n-th callback."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    got = 0

    async def cb(_msg) -> None:
        nonlocal got
        got += 1
        if got == n and not done.done():
            done.set_result(None)

    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    sub = await js.subscribe(ORDERED_SUBJECT, ordered_consumer=True, cb=cb)
    await asyncio.wait_for(done, timeout=TIMEOUT)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    await asyncio.sleep(0.2)  # anything past N would be a duplicate
    await sub.unsubscribe()
    if got != n:
        raise RuntimeError(f"ordered consumer received {got} messages, expected {n}")
    return n / elapsed, cpu / n * 1e6


async def kv_ops(js, ops: int, keys: int, size: int) -> tuple[float, float]:
    kv = await js.create_key_value(bucket=KV_BUCKET, storage=StorageType.FILE)
    value = b"v" * size
    t0 = time.perf_counter()
    for i in range(ops):
        await kv.put(f"k{i % keys}", value)
    put_rate = ops / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in range(ops):
        entry = await kv.get(f"k{i % keys}")
        if entry.value != value:
            raise RuntimeError(f"kv get k{i % keys} returned {entry.value[:16]!r}...")
    get_rate = ops / (time.perf_counter() - t0)
    return put_rate, get_rate


async def kv_writers(js, ops: int, keys: int, size: int, writers: int = KV_WRITERS) -> float:
    """``writers`` tasks putting concurrently, ``ops // writers`` puts each; total puts/s."""
    kv = await js.create_key_value(bucket=KV_WRITERS_BUCKET, storage=StorageType.FILE)
    value = b"v" * size
    each = max(1, ops // writers)

    async def writer(w: int) -> None:
        for i in range(each):
            await kv.put(f"k{(w + i * writers) % keys}", value)

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    rate = each * writers / (time.perf_counter() - t0)
    entry = await kv.get(f"k{(writers - 1 + (each - 1) * writers) % keys}")
    if entry.value != value:
        raise RuntimeError(f"kv writers: last put read back as {entry.value[:16]!r}...")
    return rate


async def run_consumers(
    url: str, pid: int, fetch_n: int, ordered_n: int, batch: int, kv_n: int, kv_keys: int
) -> ConsumerFigures:
    nc = await nats.connect(url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    try:
        js = nc.jetstream(timeout=30, publish_async_max_pending=1000)
        await preload(js, FETCH_STREAM, FETCH_SUBJECT, fetch_n, 128)
        await preload(js, ORDERED_STREAM, ORDERED_SUBJECT, ordered_n, 1024)
        ack_rate, ack_cpu = await fetch_drain(nc, js, pid, fetch_n, batch, "acked", ack=True)
        noack_rate, noack_cpu = await fetch_drain(nc, js, pid, fetch_n, batch, "noack", ack=False)
        ord_rate, ord_cpu = await ordered_catchup(js, pid, ordered_n)
        put_rate, get_rate = await kv_ops(js, kv_n, kv_keys, 128)
        writers_rate = await kv_writers(js, kv_n, kv_keys, 128)
    finally:
        await nc.close()
    return ConsumerFigures(
        ack_rate,
        ack_cpu,
        noack_rate,
        noack_cpu,
        ord_rate,
        ord_cpu,
        put_rate,
        get_rate,
        writers_rate,
        rss_bytes(pid) / (1 << 20),
    )
