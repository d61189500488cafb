"""Run a benchmark matrix against leafjet and the reference in one invocation.

    python -m bench core [--msgs 200000] [--size 128] [--requests 5000] [--runs 3]
    python -m bench jetstream [--msgs 100000] [--size 128] [--window 1000] [--sync-requests 2000] [--runs 1]
    python -m bench store [--msgs 100000] [--size 128] [--window 1000] [--runs 3] [--modes apply,...]

core/jetstream figures are medians over --runs runs; each run uses a fresh server of each kind. store
figures are the best of --runs runs of the store and of raw sqlite3, both in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.core import CoreFigures, run_core
from bench.jetstream import JsFigures, run_jetstream
from bench.store import MODES, run_store
from tests.support.servers import start_server

GOALS = {  # figure -> (goal text, leafjet/reference ratio that meets it, higher_is_better)
    "msgs_per_s": (">= 0.9x reference", 0.9, True),
    "cpu_us_per_msg": ("<= 5x reference", 5.0, False),
}


def _median(figs: list) -> Any:
    cls = type(figs[0])
    return cls(**{k: statistics.median(getattr(f, k) for f in figs) for k in cls.__dataclass_fields__})


def _goal(key: str, ratio: float) -> str:
    if key not in GOALS:
        return ""
    _text, bound, higher = GOALS[key]
    return "met" if (ratio >= bound if higher else ratio <= bound) else "NOT met"


def core_matrix(args: argparse.Namespace) -> int:
    results: dict[str, CoreFigures] = {}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        runs: dict[str, list[CoreFigures]] = {"leafjet": [], "reference": []}
        for r in range(args.runs):
            for kind in ("reference", "leafjet"):
                srv = start_server(kind, Path(tmp) / f"{kind}-{r}")
                try:
                    runs[kind].append(
                        asyncio.run(run_core(srv.url, srv.pid, args.msgs, args.size, args.requests))
                    )
                finally:
                    srv.stop()
        results = {k: _median(v) for k, v in runs.items()}
    lj, ref = results["leafjet"], results["reference"]
    name = f"core N={args.msgs},MsgSz={args.size}B,Requests={args.requests},runs={args.runs}"
    print(f"\n{name}")
    rows = [
        ("pub->sub throughput (msgs/s)", "msgs_per_s", "{:,.0f}"),
        ("pub->sub throughput (MB/s)", "mb_per_s", "{:,.1f}"),
        ("server CPU per message (us)", "cpu_us_per_msg", "{:.2f}"),
        ("request/reply p50 (us)", "rr_p50_us", "{:,.0f}"),
        ("request/reply p99 (us)", "rr_p99_us", "{:,.0f}"),
        ("server CPU per request (us)", "rr_cpu_us_per_req", "{:.1f}"),
        ("server RSS after run (MiB)", "rss_mib", "{:.1f}"),
    ]
    print(f"{'figure':34s} {'leafjet':>14s} {'reference':>14s} {'ratio':>8s}  goal")
    for label, key, fmt in rows:
        a, b = getattr(lj, key), getattr(ref, key)
        ratio = a / b if b else float("nan")
        goal = ""
        if key in GOALS:
            text, bound, higher = GOALS[key]
            met = ratio >= bound if higher else ratio <= bound
            goal = f"{text}: {'met' if met else 'NOT met'}"
        print(f"{label:34s} {fmt.format(a):>14s} {fmt.format(b):>14s} {ratio:8.2f}  {goal}")
    return 0


JS_SERVERS = (  # column -> (kind, config)
    ("reference", ("reference", {})),
    ("leafjet(always)", ("leafjet", {"jetstream": {"sync": "always"}})),
    ("leafjet(interval)", ("leafjet", {"jetstream": {"sync": "interval"}})),
)


def jetstream_matrix(args: argparse.Namespace) -> int:
    runs: dict[str, list[JsFigures]] = {col: [] for col, _ in JS_SERVERS}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        for r in range(args.runs):
            for i, (col, (kind, config)) in enumerate(JS_SERVERS):
                srv = start_server(kind, Path(tmp) / f"{i}-{kind}-{r}", config, jetstream=True)
                try:
                    runs[col].append(
                        asyncio.run(
                            run_jetstream(
                                srv.url, srv.pid, args.msgs, args.size, args.window, args.sync_requests
                            )
                        )
                    )
                finally:
                    srv.stop()
    res = {col: _median(v) for col, v in runs.items()}
    ref, al, iv = res["reference"], res["leafjet(always)"], res["leafjet(interval)"]
    name = (
        f"jetstream N={args.msgs},MsgSz={args.size}B,Window={args.window},"
        f"SyncRequests={args.sync_requests},Storage=file,runs={args.runs}"
    )
    print(f"\n{name}")
    print(
        "  reference: file store, default sync_interval 2m -- it acks BEFORE fsync.\n"
        "  leafjet(always) acks after fsync (not like for like); leafjet(interval) fsyncs every 1s and acks\n"
        "  before it -- the closer comparison. ratios are leafjet/reference."
    )
    rows = [
        ("sync publish p50 (us)", "sync_p50_us", "{:,.0f}"),
        ("sync publish p99 (us)", "sync_p99_us", "{:,.0f}"),
        ("server CPU per sync publish (us)", "sync_cpu_us_per_msg", "{:.1f}"),
        ("async publish throughput (msgs/s)", "msgs_per_s", "{:,.0f}"),
        ("async publish throughput (MB/s)", "mb_per_s", "{:,.2f}"),
        ("server CPU per message (us)", "cpu_us_per_msg", "{:.1f}"),
        ("server RSS after run (MiB)", "rss_mib", "{:.1f}"),
    ]
    print(
        f"{'figure':34s} {'reference':>10s} {'lj(always)':>10s} {'lj(interval)':>12s}"
        f" {'always/ref':>10s} {'interval/ref':>12s}  goal"
    )
    for label, key, fmt in rows:
        b, a, i = getattr(ref, key), getattr(al, key), getattr(iv, key)
        ra = a / b if b else float("nan")
        ri = i / b if b else float("nan")
        goal = f"{GOALS[key][0]}: always {_goal(key, ra)}, interval {_goal(key, ri)}" if key in GOALS else ""
        print(
            f"{label:34s} {fmt.format(b):>10s} {fmt.format(a):>10s} {fmt.format(i):>12s}"
            f" {ra:10.2f} {ri:12.2f}  {goal}"
        )
    return 0


STORE_GOAL = 0.5  # store/raw


def store_matrix(args: argparse.Namespace) -> int:
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        print(f"unknown --modes {sorted(unknown)}; choose from {','.join(MODES)}", file=sys.stderr)
        return 2
    figs = asyncio.run(run_store(args.msgs, args.size, args.window, args.runs, modes))
    w = args.window
    labels = {
        "apply": f"store apply ({w} Appends per call)",
        "gather": f"store append x{w} concurrent (gather)",
        "taskgroup": f"store append x{w} concurrent (task group)",
        "workers": f"store append, {w} concurrent workers",
    }
    name = f"store N={args.msgs},MsgSz={args.size}B,Window={w},best of runs={args.runs}"
    print(f"\n{name}")
    print(
        f"  raw = sqlite3 executemany, {w} rows per transaction, WAL, synchronous FULL (always) / NORMAL"
        " (interval).\n  commits = store transactions (group commits); ratio = store/raw."
    )
    print(
        f"{'figure (msgs/s)':42s} {'always':>10s} {'ratio':>6s} {'commits':>7s}"
        f" {'interval':>10s} {'ratio':>6s} {'commits':>7s}  goal"
    )
    print(
        f"{'raw sqlite3':42s} {figs.raw['always']:>10,.0f} {'':>6s} {'':>7s} {figs.raw['interval']:>10,.0f}"
    )
    for mode in modes:
        cells, met = [], []
        for sync in ("always", "interval"):
            rate, commits = figs.store[sync, mode]
            ratio = rate / figs.raw[sync]
            cells.append(f"{rate:>10,.0f} {ratio:6.2f} {commits:>7d}")
            met.append(f"{sync} {'met' if ratio >= STORE_GOAL else 'NOT met'}")
        print(f"{labels[mode]:42s} {' '.join(cells)}  >= {STORE_GOAL}x raw: {', '.join(met)}")
    print(f"{'asyncio ceiling, 1 call/msg, no store':42s} {figs.harness:>10,.0f}  (gather over bare futures)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    sub = p.add_subparsers(dest="matrix", required=True)
    c = sub.add_parser("core", help="core pub/sub throughput, request/reply latency, CPU per message")
    c.add_argument("--msgs", type=int, default=200_000)
    c.add_argument("--size", type=int, default=128)
    c.add_argument("--requests", type=int, default=5000)
    c.add_argument("--runs", type=int, default=3)
    j = sub.add_parser("jetstream", help="JetStream sync publish latency, async publish throughput, CPU/msg")
    j.add_argument("--msgs", type=int, default=100_000)
    j.add_argument("--size", type=int, default=128)
    j.add_argument("--window", type=int, default=1000, help="max outstanding async publish acks")
    j.add_argument("--sync-requests", type=int, default=2000)
    j.add_argument("--runs", type=int, default=1)
    st = sub.add_parser("store", help="SqliteStore append throughput vs raw sqlite3 (no server)")
    st.add_argument("--msgs", type=int, default=100_000)
    st.add_argument("--size", type=int, default=128)
    st.add_argument("--window", type=int, default=1000, help="Appends per apply / concurrent appends")
    st.add_argument("--runs", type=int, default=3)
    st.add_argument("--modes", default="apply,gather,workers", help=f"comma list of {','.join(MODES)}")
    args = p.parse_args(argv)
    if args.matrix == "core":
        return core_matrix(args)
    if args.matrix == "jetstream":
        return jetstream_matrix(args)
    if args.matrix == "store":
        return store_matrix(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
