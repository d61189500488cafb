"""Leaf-link matrix: messages from a publisher on a leaf to a subscriber on its hub, through the link.

    python -m bench leaf [--msgs 100000] [--sizes 128,1024] [--seconds 5] [--rate 1000000] [--runs 1]

For each (leaf, hub) pair of implementations -- reference -> reference, leafjet -> reference,
reference -> leafjet, leafjet -> leafjet -- the stock nats-py client publishes ``--msgs`` messages
of each size on the leaf while a client of the hub subscribes; the figure is messages/s until the
subscriber has them all. A pair with a leafjet node in a role leafjet's config does not accept
yet is skipped with a note.

The throttled variant puts the link through tests/support/proxy.py at ``--rate`` bytes/s each way
(the hub advertises the proxy, so the leaf never goes around it) and publishes compressible JSON
telemetry (~200 B, {"device":"d-17","ts":...,"temp":21.5,...}) at 4x what the raw link carries, for
``--seconds``: the figure is messages delivered to the hub per second, and the payload rate as a
multiple of the link's (above 1 only with compression on the link). /leafz's ``compression`` says
what the link negotiated. Ratios are to reference -> reference in the same run; nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from bench.procstat import cpu_seconds
from tests.support.leafnodes import (
    LeafUser,
    Node,
    Remote,
    Topology,
    client_url,
    leafz,
    missing_leafjet_roles,
    wait_for_leaf_connected,
)

PAIRS = (  # (leaf kind, hub kind, the hub's leafnodes.compression: None = its default)
    ("reference", "reference", None),
    ("leafjet", "reference", None),
    ("reference", "leafjet", None),
    ("leafjet", "leafjet", "off"),
    ("leafjet", "leafjet", None),  # zstd, negotiated between two leafjet peers
)
ACCOUNTS = {"APP": [("app", "app-pw")]}
LEAF_USERS = [LeafUser("leaf", "leaf-pw", "APP")]


@dataclass
class LeafFigures:
    msgs_per_s: dict[int, float]  # size -> msgs/s
    cpu_us: dict[int, tuple[float, float]]  # size -> (leaf, hub) server CPU per message, us
    throttled_msgs_per_s: float
    throttled_payload_x_link: float
    compression: str


def _telemetry(i: int) -> bytes:
    return json.dumps(
        {
            "device": f"d-{i % 64}",
            "ts": 1_780_000_000_000 + i * 10,
            "temp": round(21.5 + (i % 40) / 10, 1),
            "hum": round(40.2 + (i % 25) / 10, 1),
            "site": "edge-1",
            "fw": "2.4.1",
            "status": "ok",
            "battery": 87,
            "rssi": -61 - i % 7,
            "seq": i,
        },
        separators=(",", ":"),
    ).encode()


async def _interest_crossed(hub: Any, leaf: Any) -> None:
    """Return once the hub's subscriptions are known on the leaf (a responder subscribed after
    them answers a request from the leaf)."""
    subject = f"bench.barrier.{random.getrandbits(40)}"

    async def respond(msg: Any) -> None:
        await msg.respond(b"")

    sub = await hub.subscribe(subject, cb=respond)
    await hub.flush()
    await hub.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            await leaf.request(subject, b"", timeout=1)
            break
        except (NoRespondersError, NatsTimeout):
            await asyncio.sleep(0.02)
    await sub.unsubscribe()


async def pub_sub_throughput(
    pub_url: str,
    sub_url: str,
    n: int,
    size: int,
    subject: str,
    interest: Callable[[Any, Any], Awaitable[None]],
) -> float:
    """Messages/s from a publisher on ``pub_url`` to a subscriber on ``sub_url`` until it has all
    ``n``; ``interest(sub_nc, pub_nc)`` returns once the subscription is known where ``pub_nc`` is."""
    sub_nc = await nats.connect(sub_url, pending_size=1 << 30)
    pub_nc = await nats.connect(pub_url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    done = asyncio.Event()
    count = 0

    async def on_msg(_msg: Any) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    try:
        await sub_nc.subscribe(subject, cb=on_msg, pending_msgs_limit=n + 1, pending_bytes_limit=1 << 31)
        await interest(sub_nc, pub_nc)
        payload = b"x" * size
        # at most ~8 MB in flight: a server closes a subscriber that falls 64 MB behind (slow
        # consumer), and a Python client reading 1 KiB messages does fall behind a Go server
        window = max(1000, (8 << 20) // size)
        t0 = time.perf_counter()
        for i in range(n):
            await pub_nc.publish(subject, payload)
            if i % 1000 == 0:
                await asyncio.sleep(0)
                while i - count > window:
                    await asyncio.sleep(0.001)
        await pub_nc.flush(timeout=120)
        await asyncio.wait_for(done.wait(), timeout=300)
        return n / (time.perf_counter() - t0)
    finally:
        await pub_nc.close()
        await sub_nc.close()


async def _throttled(hub_url: str, leaf_url: str, seconds: float, rate: float) -> tuple[float, float]:
    sub_nc = await nats.connect(hub_url, pending_size=1 << 30)
    pub_nc = await nats.connect(leaf_url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    count = 0
    payload_bytes = 0

    async def on_msg(msg: Any) -> None:
        nonlocal count, payload_bytes
        count += 1
        payload_bytes += len(msg.data)

    try:
        await sub_nc.subscribe("bench.telemetry", cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        await _interest_crossed(sub_nc, pub_nc)
        msgs = [_telemetry(i) for i in range(4096)]
        size = statistics.mean(len(m) for m in msgs)
        offered = 4 * rate / size  # msgs/s: four times what the raw link carries
        t0 = time.perf_counter()
        sent = 0
        while (elapsed := time.perf_counter() - t0) < seconds:
            due = int(offered * elapsed) + 100
            while sent < due:
                await pub_nc.publish("bench.telemetry", msgs[sent % len(msgs)])
                sent += 1
            await asyncio.sleep(0.005)
        delivered, delivered_bytes = count, payload_bytes
        elapsed = time.perf_counter() - t0
        return delivered / elapsed, delivered_bytes / elapsed / rate
    finally:
        await pub_nc.close()
        await sub_nc.close()


def _run_pair(
    tmp: Path, leaf_kind: str, hub_kind: str, compression: str | None, args: argparse.Namespace
) -> LeafFigures:
    figs: dict[int, float] = {}
    cpu: dict[int, tuple[float, float]] = {}
    hub_node = Node(accounts=ACCOUNTS, domain="HUB", leaf_users=LEAF_USERS, leaf_compression=compression)
    tag = f"{leaf_kind}-{hub_kind}-{compression or 'default'}"
    topo = Topology(tmp / tag)
    try:
        hub = topo.start("hub", hub_kind, hub_node)
        leaf = topo.start(
            "leaf",
            leaf_kind,
            Node(accounts=ACCOUNTS, domain="EDGE", remotes=[Remote(hub, "leaf", "leaf-pw", "APP")]),
        )
        wait_for_leaf_connected(hub, 1, timeout=30)
        hub_url, leaf_url = client_url(hub, "app", "app-pw"), client_url(leaf, "app", "app-pw")
        for size in args.sizes:
            # CPU per message says what throughput cannot on a loaded 2-core machine, where the
            # Python client and both servers share the cores: what each server spent.
            runs, leaf_cpu, hub_cpu = [], [], []
            for _ in range(args.runs):
                l0, h0 = cpu_seconds(leaf.pid), cpu_seconds(hub.pid)
                runs.append(
                    asyncio.run(
                        pub_sub_throughput(
                            leaf_url, hub_url, args.msgs, size, "bench.leaf", _interest_crossed
                        )
                    )
                )
                leaf_cpu.append((cpu_seconds(leaf.pid) - l0) / args.msgs * 1e6)
                hub_cpu.append((cpu_seconds(hub.pid) - h0) / args.msgs * 1e6)
            figs[size] = statistics.median(runs)
            cpu[size] = (statistics.median(leaf_cpu), statistics.median(hub_cpu))
    finally:
        topo.close()
    topo = Topology(tmp / f"{tag}-throttled")
    try:
        hub, proxy = topo.start_behind_proxy("hub", hub_kind, hub_node)
        leaf = topo.start(
            "leaf",
            leaf_kind,
            Node(
                accounts=ACCOUNTS, domain="EDGE", remotes=[Remote(hub, "leaf", "leaf-pw", "APP", via=proxy)]
            ),
        )
        z = wait_for_leaf_connected(hub, 1, timeout=30)
        compression = str((z.get("leafs") or [{}])[0].get("compression", "?"))
        proxy.throttle(args.rate)
        tput, x_link = asyncio.run(
            _throttled(
                client_url(hub, "app", "app-pw"), client_url(leaf, "app", "app-pw"), args.seconds, args.rate
            )
        )
        z2 = leafz(hub) or {}
        compression = str((z2.get("leafs") or [{}])[0].get("compression", compression))
    finally:
        topo.close()
    return LeafFigures(figs, cpu, tput, x_link, compression)


def leaf_matrix(args: argparse.Namespace) -> int:
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    results: dict[tuple[str, str, str | None], LeafFigures] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-leaf-") as tmp:
        for leaf_kind, hub_kind, compression in PAIRS:
            if missing_leafjet_roles([(leaf_kind, "solicit"), (hub_kind, "accept")]):
                notes.append(f"{leaf_kind} leaf -> {hub_kind} hub: skipped, leafjet leaf links not built yet")
                continue
            results[leaf_kind, hub_kind, compression] = _run_pair(
                Path(tmp), leaf_kind, hub_kind, compression, args
            )
    sizes = "+".join(f"{s}B" for s in args.sizes)
    print(
        f"\nleaf N={args.msgs},MsgSz={sizes},runs={args.runs}; "
        f"throttled: link {args.rate / 1e6:g} MB/s per direction, ~200B JSON telemetry, {args.seconds:g}s"
    )
    print("  leaf publisher -> link -> hub subscriber, stock nats-py; ratios are to reference -> reference.")
    base = results.get(("reference", "reference", None))
    head = f"{'leaf -> hub':26s}" + "".join(f" {f'{s}B msgs/s':>14s} {'ratio':>6s}" for s in args.sizes)
    head += f" {'throttled msgs/s':>16s} {'ratio':>6s} {'payload/link':>12s}  link compression"
    print(head)
    for (leaf_kind, hub_kind, compression), f in results.items():
        label = f"{leaf_kind} -> {hub_kind}" + (f" ({compression})" if compression else "")
        row = f"{label:26s}"
        for s in args.sizes:
            ratio = f.msgs_per_s[s] / base.msgs_per_s[s] if base else float("nan")
            row += f" {f.msgs_per_s[s]:>14,.0f} {ratio:6.2f}"
        tr = f.throttled_msgs_per_s / base.throttled_msgs_per_s if base else float("nan")
        row += f" {f.throttled_msgs_per_s:>16,.0f} {tr:6.2f} {f.throttled_payload_x_link:>11.2f}x"
        row += f"  {f.compression}"
        print(row)
    print(
        "\nserver CPU per message (us), median of the runs: leaf / hub; ratio of their sum to the reference's"
    )
    for (leaf_kind, hub_kind, compression), f in results.items():
        label = f"{leaf_kind} -> {hub_kind}" + (f" ({compression})" if compression else "")
        row = f"{label:26s}"
        for s in args.sizes:
            lc, hc = f.cpu_us[s]
            ratio = (lc + hc) / sum(base.cpu_us[s]) if base else float("nan")
            row += f"   {s}B {lc:5.2f} / {hc:5.2f} ({ratio:4.2f}x)"
        print(row)
    for note in notes:
        print(f"  {note}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leaf", help="leaf -> hub messages/s through the link, plain and throttled")
    p.add_argument("--msgs", type=int, default=100_000)
    p.add_argument("--sizes", default="128,1024", help="comma list of message sizes in bytes")
    p.add_argument("--seconds", type=float, default=5.0, help="length of the throttled run")
    p.add_argument("--rate", type=float, default=1_000_000, help="throttled link, bytes/s per direction")
    p.add_argument("--runs", type=int, default=1)
