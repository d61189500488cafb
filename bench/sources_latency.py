"""Live sourcing latency: from a publish on the leaf to its arrival in the hub's sourcing stream.

    python -m bench sources-latency [--rate 1000] [--seconds 5] [--size 128] [--runs 1]
                                    [--pairs ref-ref,lj-ref,ref-lj,lj-lj]

For each (leaf, hub) pair of implementations (as ``bench sources``), the hub's stream ``AGG``
sources the leaf's ``ORDERS`` (``external.api = $JS.EDGE.API``) and is already live. A publisher
on the leaf sends ``--rate`` messages/s for ``--seconds`` (after one second of warm-up, not
counted), each carrying its send time (``perf_counter_ns``) and acknowledged by the leaf's stream
(acks counted, not awaited, so the rate stays steady). An ordered push consumer on the hub's
``AGG`` reads each message as it is stored there; latency = receipt - send time, in this one
process (one clock). p50/p90/p99/max in milliseconds; a message delivered twice is counted
once (``redeliv``), and ``hub stored`` (less the warm-up) should equal what was sent; ratios
are to reference -> reference in the same run. The issue's goal (reported, never asserted):
leafjet's live p50 <= 2x the reference's. The publisher and the hub's consumer share this
process's event loop, so a loaded machine delays both the same way for every pair. ``leaf
us/msg`` and ``hub us/msg`` are each server's CPU (user + system) per message sent, over the
publishing and the wait for the last message: unlike latency, they hardly move with the
machine's load, and on a busy machine each one competes for the cores with every process of
the chain.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.procstat import cpu_seconds
from bench.sources import PAIRS, SOURCE, _api, add_sync_argument, pair_nodes, run_pairs
from bench.stats import quantile
from tests.support.leafnodes import (
    Topology,
    client_url,
    wait_for_leaf_connected,
)

STAMP = struct.Struct(">Qq")  # the message's number, its send time (perf_counter_ns)
WARMUP_S = 1.0
P50_GOAL = 2.0  # leafjet's p50 at most this many times the reference's


@dataclass
class LatencyFigures:
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    received: int  # of the counted messages; short of ``sent`` if some never arrived in time
    sent: int
    redelivered: int  # deliveries of a message already received (by its number)
    hub_stored: int  # messages in the hub's stream at the end (``sent`` + warm-up, if exact)
    leaf_us: float = 0.0  # the leaf server's CPU per message sent (us)
    hub_us: float = 0.0  # the hub server's


async def create_sourced_pair(leaf_nc: Any, hub_nc: Any) -> None:
    """The leaf's stream ``ORDERS`` and the hub's ``AGG`` sourcing it (live from the start)."""
    reply = await _api(leaf_nc, "$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]})
    assert "error" not in reply, reply
    reply = await _api(hub_nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [SOURCE]})
    assert "error" not in reply, reply


async def publish_paced(
    nc: Any, rate: float, total: int, payload: Callable[[int], bytes], reply: str
) -> None:
    """``total`` publishes to ``orders.x`` at ``rate`` a second, each at its slot (never a burst
    to catch up a late one); their acks go to ``reply``, counted or not by the caller."""
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await nc.publish("orders.x", payload(i), reply=reply)
    await nc.flush()


async def _measure(
    hub_url: str, leaf_url: str, rate: float, seconds: float, size: int, pids: tuple[int, int]
) -> LatencyFigures:
    hub_nc = await nats.connect(hub_url)
    leaf_nc = await nats.connect(leaf_url)
    try:
        await create_sourced_pair(leaf_nc, hub_nc)

        warmup = int(rate * WARMUP_S)
        total = warmup + int(rate * seconds)
        latencies_ns: list[int] = []
        seen: set[int] = set()
        redelivered = 0
        arrived = asyncio.Event()

        async def on_hub(msg: Any) -> None:
            nonlocal redelivered
            now = time.perf_counter_ns()
            i, sent_ns = STAMP.unpack_from(msg.data)
            if i in seen:
                redelivered += 1
                return
            seen.add(i)
            if i >= warmup:
                latencies_ns.append(now - sent_ns)
            if i == total - 1:
                arrived.set()

        sub = await hub_nc.jetstream().subscribe("orders.>", stream="AGG", ordered_consumer=True, cb=on_hub)
        acks = 0

        async def on_ack(_msg: Any) -> None:
            nonlocal acks
            acks += 1

        inbox = leaf_nc.new_inbox()
        ack_sub = await leaf_nc.subscribe(inbox, cb=on_ack)
        pad = b"x" * max(0, size - STAMP.size)
        cpu0 = [cpu_seconds(pid) for pid in pids]

        def stamped(i: int) -> bytes:  # the send time, taken as the message goes out
            return STAMP.pack(i, time.perf_counter_ns()) + pad

        await publish_paced(leaf_nc, rate, total, stamped, inbox)
        with contextlib.suppress(TimeoutError):  # then reported as fewer received than sent
            await asyncio.wait_for(arrived.wait(), 30)
        leaf_us, hub_us = ((cpu_seconds(pid) - c0) / total * 1e6 for pid, c0 in zip(pids, cpu0, strict=True))
        await asyncio.sleep(0.2)  # the last few may still be in the hub's delivery
        await sub.unsubscribe()
        await ack_sub.unsubscribe()
        ms = sorted(x / 1e6 for x in latencies_ns)
        if not ms:
            raise RuntimeError(f"no message reached the hub ({acks} of {total} acked on the leaf)")
        hub_stored = int((await _api(hub_nc, "$JS.API.STREAM.INFO.AGG"))["state"]["messages"])
        return LatencyFigures(
            quantile(ms, 0.5),
            quantile(ms, 0.9),
            quantile(ms, 0.99),
            ms[-1],
            len(ms),
            total - warmup,
            redelivered,
            hub_stored - warmup,
            leaf_us,
            hub_us,
        )
    finally:
        await leaf_nc.close()
        await hub_nc.close()


def _run_pair(tmp: Path, leaf_kind: str, hub_kind: str, args: argparse.Namespace, run: int) -> LatencyFigures:
    topo = Topology(tmp / f"latency-{leaf_kind}-{hub_kind}-{run}")
    try:
        hub, leaf = pair_nodes(topo, leaf_kind, hub_kind, args.sync)
        wait_for_leaf_connected(hub, 1, timeout=30)
        return asyncio.run(
            _measure(
                client_url(hub, "app", "app-pw"),
                client_url(leaf, "app", "app-pw"),
                args.rate,
                args.seconds,
                args.size,
                (leaf.pid, hub.pid),
            )
        )
    finally:
        topo.close()


def latency_matrix(args: argparse.Namespace) -> int:
    runs, notes = run_pairs(args, "leafjet-bench-sources-latency-", _run_pair)
    res = {
        k: LatencyFigures(
            statistics.median(f.p50_ms for f in v),
            statistics.median(f.p90_ms for f in v),
            statistics.median(f.p99_ms for f in v),
            max(f.max_ms for f in v),
            sum(f.received for f in v),
            sum(f.sent for f in v),
            sum(f.redelivered for f in v),
            sum(f.hub_stored for f in v),
            statistics.median(f.leaf_us for f in v),
            statistics.median(f.hub_us for f in v),
        )
        for k, v in runs.items()
        if v
    }
    print(
        f"\nsources live latency rate={args.rate:g}/s,seconds={args.seconds:g},MsgSz={args.size}B,"
        f"sync={args.sync},runs={args.runs} (medians of p50/p90/p99; max of max)"
    )
    print("  leaf publish -> hub's ordered push consumer on the sourcing stream, ms")
    base = res.get("ref-ref")
    print(
        f"{'leaf -> hub':26s} {'p50':>7s} {'p90':>7s} {'p99':>7s} {'max':>7s} "
        f"{'p50 ratio':>9s} {'p99 ratio':>9s} {'got/sent':>13s} {'redeliv':>7s} {'hub stored':>10s} "
        f"{'leaf us/msg':>11s} {'hub us/msg':>10s}  goal"
    )
    for name, f in res.items():
        leaf_kind, hub_kind = PAIRS[name]
        r50 = f.p50_ms / base.p50_ms if base else float("nan")
        r99 = f.p99_ms / base.p99_ms if base else float("nan")
        goal = ""
        if base and name != "ref-ref":
            goal = f"p50 <= {P50_GOAL:g}x reference: {'met' if r50 <= P50_GOAL else 'NOT met'}"
        print(
            f"{leaf_kind + ' -> ' + hub_kind:26s} {f.p50_ms:7.2f} {f.p90_ms:7.2f} {f.p99_ms:7.2f} "
            f"{f.max_ms:7.1f} {r50:9.2f} {r99:9.2f} {f.received:>6}/{f.sent:<6} {f.redelivered:>7} "
            f"{f.hub_stored:>10} {f.leaf_us:11.1f} {f.hub_us:10.1f}  {goal}"
        )
    for note in notes:
        print(f"  {note}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sources-latency", help="hub stream sourcing a live leaf stream: publish-to-hub latency p50/p99"
    )
    p.add_argument("--rate", type=float, default=1000.0, help="leaf publishes per second, steady")
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds (after 1 s of warm-up)")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--pairs", default=",".join(PAIRS), help=f"comma list of {','.join(PAIRS)}")
    add_sync_argument(p)
