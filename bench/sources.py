"""Sourcing catch-up: a hub stream sourcing a leaf's stream that is already ``--msgs`` behind.

    python -m bench sources [--msgs 50000] [--size 128] [--runs 1] [--pairs ref-ref,lj-ref,ref-lj,lj-lj]
                            [--retention limits|workqueue]

For each (leaf, hub) pair of implementations -- reference -> reference, leafjet -> reference,
reference -> leafjet, leafjet -> leafjet -- the leaf's stream ``ORDERS`` is filled with ``--msgs``
messages of ``--size`` bytes (async publishes, every ack awaited) while the hub's sourcing stream
does not exist yet; then the hub stream ``AGG`` is created with ``sources: [{name: ORDERS,
external: {api: $JS.EDGE.API}}]`` and the figure is messages/s from the create until the hub's
stream info says it holds them all (polled every 20 ms; 100 ms past 200k messages). The
servers' CPU (leaf and hub, from /proc) spent during the catch-up is divided by the message
count. Ratios are to reference -> reference in the same run; nothing asserts. A catch-up has no
overall deadline, only one on progress (a minute without a new message), so ``--msgs 1000000
--size 1024`` runs (minutes per pair, most of it the fill). Between two leafjets the hub reads
the leaf's stream through the bulk read API (core/jetstream/DESIGN.md); the other pairs use the
reference's consumer path. With
``--retention workqueue`` the leaf's stream is a work queue: the upstream reads it through a
durable acked by the hub's flow-control replies (ADR-60), and the figure ends when the hub holds
every message (the leaf's acks may trail).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nats
from nats.errors import NoRespondersError

from bench.procstat import cpu_seconds
from tests.support.fill import fill_stream
from tests.support.leafnodes import (
    LeafUser,
    Node,
    Remote,
    Topology,
    client_url,
    missing_leafjet_roles,
    wait_for_leaf_connected,
)

PAIRS = {  # short name -> (leaf kind, hub kind)
    "ref-ref": ("reference", "reference"),
    "lj-ref": ("leafjet", "reference"),
    "ref-lj": ("reference", "leafjet"),
    "lj-lj": ("leafjet", "leafjet"),
}
ACCOUNTS = {"APP": [("app", "app-pw")]}
LEAF_USERS = [LeafUser("leaf", "leaf-pw", "APP")]
SOURCE = {"name": "ORDERS", "external": {"api": "$JS.EDGE.API", "deliver": ""}}
F = TypeVar("F")
STALL_S = 60.0  # a catch-up that stores nothing for this long has failed


@dataclass
class SourceFigures:
    msgs_per_s: float
    leaf_cpu_us: float  # per message, during the catch-up
    hub_cpu_us: float


async def _api(nc: Any, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        try:
            msg = await nc.request(subject, json.dumps(body or {}).encode(), timeout=5)
            return dict(json.loads(msg.data))
        except NoRespondersError:  # the leaf's API interest crosses the link with it
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _fill(nc: Any, n: int, size: int) -> None:
    """``n`` publishes into the leaf's stream, at most 1000 acks outstanding, every ack checked."""
    js = nc.jetstream()
    payload = b"x" * size
    window = 1000 if n <= 200_000 else 4000  # 1M x 1 KiB: the fill is most of the run
    for start in range(0, n, window):
        futs = [
            await js.publish_async(f"orders.{i % 16}", payload) for i in range(start, min(n, start + window))
        ]
        await asyncio.gather(*futs)


async def _catch_up(
    hub_url: str, leaf_url: str, n: int, size: int, pids: tuple[int, int], retention: str = "limits"
) -> SourceFigures:
    hub_nc = await nats.connect(hub_url)
    leaf_nc = await nats.connect(leaf_url, pending_size=1 << 30)
    try:
        reply = await _api(
            leaf_nc,
            "$JS.API.STREAM.CREATE.ORDERS",
            {"name": "ORDERS", "subjects": ["orders.>"], "retention": retention},
        )
        assert "error" not in reply, reply
        # fill_stream: acks counted on one reply subject, no future per message (2-3x _fill's
        # rate, and bounded memory for --msgs 1000000)
        payload, subjects = b"x" * size, [f"orders.{k}" for k in range(16)]
        await fill_stream(leaf_nc, lambda i: subjects[i % 16], n, lambda _i: payload)
        leaf_pid, hub_pid = pids
        l0, h0 = cpu_seconds(leaf_pid), cpu_seconds(hub_pid)
        t0 = time.perf_counter()
        reply = await _api(hub_nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [SOURCE]})
        if "error" in reply:
            raise RuntimeError(f"hub stream create: {reply}")
        # no deadline on the whole catch-up (1M messages take minutes on a loaded machine),
        # only on progress: a minute without a new message is a stall
        held, moved = -1, time.monotonic()
        while True:
            info = await _api(hub_nc, "$JS.API.STREAM.INFO.AGG")
            now_held = info["state"]["messages"]
            if now_held >= n:
                break
            if now_held != held:
                held, moved = now_held, time.monotonic()
            elif time.monotonic() - moved > STALL_S:
                raise RuntimeError(f"catch-up stalled at {held} of {n}: {info.get('sources')}")
            await asyncio.sleep(0.02 if n <= 200_000 else 0.1)
        elapsed = time.perf_counter() - t0
        return SourceFigures(
            n / elapsed,
            (cpu_seconds(leaf_pid) - l0) / n * 1e6,
            (cpu_seconds(hub_pid) - h0) / n * 1e6,
        )
    finally:
        await leaf_nc.close()
        await hub_nc.close()


SYNC_OPTIONS: dict[
    str, dict[str, dict[str, str]]
] = {  # --sync -> kind -> [jetstream] fields ("default": each server's own default)
    "default": {"leafjet": {}, "reference": {}},
    # both fsync before acknowledging: leafjet's default, the reference's sync_interval always
    "always": {"leafjet": {}, "reference": {"sync_interval": "always"}},
    # both fsync on a timer: the reference's default (2 min), leafjet's interval mode
    "interval": {"leafjet": {"sync": "interval"}, "reference": {}},
}


def pair_nodes(topo: Topology, leaf_kind: str, hub_kind: str, sync: str) -> tuple[Any, Any]:
    """The hub (domain HUB) and the leaf (domain EDGE, linked to it) of one pair."""
    js = SYNC_OPTIONS[sync]
    hub = topo.start(
        "hub",
        hub_kind,
        Node(accounts=ACCOUNTS, domain="HUB", leaf_users=LEAF_USERS, js_options=js[hub_kind]),
    )
    leaf = topo.start(
        "leaf",
        leaf_kind,
        Node(
            accounts=ACCOUNTS,
            domain="EDGE",
            remotes=[Remote(hub, "leaf", "leaf-pw", "APP")],
            js_options=js[leaf_kind],
        ),
    )
    return hub, leaf


def add_sync_argument(p: Any) -> None:
    p.add_argument(
        "--sync",
        choices=sorted(SYNC_OPTIONS),
        default="default",
        help="default: each server's own (leafjet fsyncs before acking, the reference every 2 min); "
        "always: both fsync before acking; interval: both fsync on a timer",
    )


def _run_pair(tmp: Path, leaf_kind: str, hub_kind: str, args: argparse.Namespace, run: int) -> SourceFigures:
    topo = Topology(tmp / f"{leaf_kind}-{hub_kind}-{run}")
    try:
        hub, leaf = pair_nodes(topo, leaf_kind, hub_kind, args.sync)
        wait_for_leaf_connected(hub, 1, timeout=30)
        return asyncio.run(
            _catch_up(
                client_url(hub, "app", "app-pw"),
                client_url(leaf, "app", "app-pw"),
                args.msgs,
                args.size,
                (leaf.pid, hub.pid),
                args.retention,
            )
        )
    finally:
        topo.close()
        shutil.rmtree(topo.workdir, ignore_errors=True)  # 1M x 1 KiB is a GiB a side


def run_pairs(
    args: argparse.Namespace, prefix: str, run_pair: Callable[[Path, str, str, argparse.Namespace, int], F]
) -> tuple[dict[str, list[F]], list[str]]:
    """``run_pair`` for each of ``--pairs`` (alternated run by run, ``--runs`` times) in a temporary
    directory: the figures of each pair, and notes on the pairs skipped."""
    wanted = list(dict.fromkeys(p for p in str(args.pairs).split(",") if p))
    runs: dict[str, list[F]] = {p: [] for p in wanted}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for r in range(args.runs):
            for name in wanted:
                leaf_kind, hub_kind = PAIRS[name]
                if missing_leafjet_roles([(leaf_kind, "solicit"), (hub_kind, "accept")]):
                    if r == 0:
                        notes.append(f"{name}: skipped, leafjet leaf links not built yet")
                    continue
                runs[name].append(run_pair(Path(tmp), leaf_kind, hub_kind, args, r))
    return runs, notes


def sources_matrix(args: argparse.Namespace) -> int:
    runs, notes = run_pairs(args, "leafjet-bench-sources-", _run_pair)
    res = {
        k: SourceFigures(
            statistics.median(f.msgs_per_s for f in v),
            statistics.median(f.leaf_cpu_us for f in v),
            statistics.median(f.hub_cpu_us for f in v),
        )
        for k, v in runs.items()
        if v
    }
    print(
        f"\nsources catch-up N={args.msgs},MsgSz={args.size}B,retention={args.retention},"
        f"sync={args.sync},runs={args.runs} (medians)"
    )
    print("  hub stream created after the leaf's stream holds N; msgs/s until the hub holds N")
    base = res.get("ref-ref")
    print(f"{'leaf -> hub':26s} {'msgs/s':>10s} {'ratio':>6s} {'leaf us/msg':>12s} {'hub us/msg':>11s}  runs")
    for name, f in res.items():
        leaf_kind, hub_kind = PAIRS[name]
        ratio = f.msgs_per_s / base.msgs_per_s if base else float("nan")
        each = ", ".join(f"{x.msgs_per_s:,.0f}" for x in runs[name])
        print(
            f"{leaf_kind + ' -> ' + hub_kind:26s} {f.msgs_per_s:>10,.0f} {ratio:6.2f} "
            f"{f.leaf_cpu_us:>12.2f} {f.hub_cpu_us:>11.2f}  {each}"
        )
    for note in notes:
        print(f"  {note}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sources", help="hub stream sourcing a leaf stream: catch-up msgs/s and CPU/msg")
    p.add_argument("--msgs", type=int, default=50_000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--pairs", default=",".join(PAIRS), help=f"comma list of {','.join(PAIRS)}")
    add_sync_argument(p)
    p.add_argument(
        "--retention",
        choices=("limits", "workqueue"),
        default="limits",
        help="the leaf stream's retention (workqueue: read through an ADR-60 flow-control durable)",
    )
