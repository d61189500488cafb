"""Run a benchmark matrix against leafjet and the reference in one invocation.

    python -m bench core [--msgs 200000] [--size 128] [--requests 5000] [--runs 3]
    python -m bench jetstream [--msgs 100000] [--size 128] [--window 1000] [--sync-requests 2000] [--runs 1]
    python -m bench consumers [--msgs 100000] [--ordered-msgs N] [--batch 500] [--kv-ops 5000] [--runs 1]
    python -m bench mqtt [--msgs 20000] [--size 128] [--inflight 100] [--runs 1]
    python -m bench spark [--msgs 200000] [--size 64] [--partitions 2] [--runs 3] [--warmup 2] [--no-direct]
    python -m bench putfloor [--ops 5000] [--runs 3]
    python -m bench footprint [--streams 1000] [--idle-seconds 10] [--nofile 1024]
    python -m bench monitoring [--msgs 100000] [--js-msgs 20000] [--runs 3] [--interval 1.0]
    python -m bench leaf [--msgs 100000] [--sizes 128,1024] [--seconds 5] [--rate 1000000] [--runs 1]
    python -m bench sources [--msgs 50000] [--size 128] [--runs 1] [--pairs ref-ref,lj-ref,ref-lj,lj-lj]
    python -m bench sources-latency [--rate 1000] [--seconds 5] [--size 128] [--runs 1] [--pairs ...]
    python -m bench cluster [--msgs 100000] [--sizes 128,1024] [--rounds 5] [--clients raw] [--parts ...]
    python -m bench raft [--entries 20000] [--window 256] [--sequential 1000] [--size 128] [--runs 1]
    python -m bench many-consumers [--consumers 1000] [--publishes 300] [--away 100] [--runs 1]
    python -m bench restart [--streams 2000] [--big-msgs 1000000] [--runs 1]
    python -m bench backup [--msgs 200000] [--size 1024] [--runs 1]
    python -m bench store [--msgs 100000] [--size 128] [--window 1000] [--runs 3] [--modes apply,...]

core/jetstream/consumers figures are medians over --runs runs; each run uses a fresh server of each
kind. store figures are the best of --runs runs of the store and of raw sqlite3, both in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import median_figures
from bench.backup import add_parser as add_backup_parser
from bench.backup import backup_matrix
from bench.cluster import add_parser as add_cluster_parser
from bench.cluster import cluster_matrix
from bench.consumers import KV_WRITERS, ConsumerFigures, run_consumers
from bench.core import CoreFigures, run_core
from bench.footprint import add_parser as add_footprint_parser
from bench.footprint import footprint_matrix
from bench.jetstream import JsFigures, run_jetstream
from bench.leaf import add_parser as add_leaf_parser
from bench.leaf import leaf_matrix
from bench.many_consumers import add_parser as add_many_consumers_parser
from bench.many_consumers import many_consumers_matrix
from bench.monitoring import add_parser as add_monitoring_parser
from bench.monitoring import monitoring_matrix
from bench.mqtt import run_mqtt, run_mqtt_commands
from bench.putfloor import add_parser as add_putfloor_parser
from bench.putfloor import putfloor_matrix
from bench.raft import add_parser as add_raft_parser
from bench.raft import raft_matrix
from bench.restart import add_parser as add_restart_parser
from bench.restart import restart_matrix
from bench.sources import add_parser as add_sources_parser
from bench.sources import sources_matrix
from bench.sources_latency import add_parser as add_sources_latency_parser
from bench.sources_latency import latency_matrix as sources_latency_matrix
from bench.spark import add_parser as add_spark_parser
from bench.spark import spark_matrix
from bench.store import MODES, run_store
from tests.support.servers import start_server

GOALS = {  # figure -> (goal text, leafjet/reference ratio that meets it, higher_is_better)
    "msgs_per_s": (">= 0.9x reference", 0.9, True),
    "cpu_us_per_msg": ("<= 5x reference", 5.0, False),
}
for _prefix in ("fetch_ack_", "fetch_noack_", "ordered_"):
    GOALS[_prefix + "msgs_per_s"] = GOALS["msgs_per_s"]
    GOALS[_prefix + "cpu_us_per_msg"] = GOALS["cpu_us_per_msg"]
GOALS["kv_put_ops_per_s"] = GOALS["kv_get_ops_per_s"] = GOALS["msgs_per_s"]
GOALS["kv_put_writers_ops_per_s"] = GOALS["msgs_per_s"]


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
        results = {k: median_figures(v) for k, v in runs.items()}
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


JS_SERVERS: tuple[tuple[str, tuple[str, dict[str, Any]]], ...] = (  # column -> (kind, config)
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
    res = {col: median_figures(v) for col, v in runs.items()}
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


def consumers_matrix(args: argparse.Namespace) -> int:
    ordered_n = args.ordered_msgs or args.msgs
    servers = JS_SERVERS if args.interval else JS_SERVERS[:2]
    runs: dict[str, list[ConsumerFigures]] = {col: [] for col, _ in servers}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        for r in range(args.runs):
            for i, (col, (kind, config)) in enumerate(servers):
                srv = start_server(kind, Path(tmp) / f"{i}-{kind}-{r}", config, jetstream=True)
                try:
                    runs[col].append(
                        asyncio.run(
                            run_consumers(
                                srv.url, srv.pid, args.msgs, ordered_n, args.batch, args.kv_ops, args.kv_keys
                            )
                        )
                    )
                finally:
                    srv.stop()
    res = {col: median_figures(v) for col, v in runs.items()}
    cols = [col for col, _ in servers]
    ref = res["reference"]
    name = (
        f"consumers N={args.msgs},MsgSz=128B,Batch={args.batch},OrderedN={ordered_n},OrderedMsgSz=1024B,"
        f"KvOps={args.kv_ops},KvKeys={args.kv_keys},Storage=file,runs={args.runs}"
    )
    print(f"\n{name}")
    print(
        "  streams pre-loaded with publish_async (not timed); server CPU is /proc utime+stime of the server\n"
        "  over the timed part. fetch+ack is timed until the consumer's ack floor reaches N. KV puts are\n"
        "  sequential awaits, so they pay the store's sync policy per op; the writers' puts are committed\n"
        "  together. ratios are leafjet/reference."
    )
    rows = [
        ("fetch+ack throughput (msgs/s)", "fetch_ack_msgs_per_s", "{:,.0f}"),
        ("fetch+ack server CPU/msg (us)", "fetch_ack_cpu_us_per_msg", "{:.1f}"),
        ("fetch AckNone throughput (msgs/s)", "fetch_noack_msgs_per_s", "{:,.0f}"),
        ("fetch AckNone server CPU/msg (us)", "fetch_noack_cpu_us_per_msg", "{:.1f}"),
        ("ordered catch-up (msgs/s)", "ordered_msgs_per_s", "{:,.0f}"),
        ("ordered catch-up CPU/msg (us)", "ordered_cpu_us_per_msg", "{:.1f}"),
        ("KV put (ops/s)", "kv_put_ops_per_s", "{:,.0f}"),
        ("KV get (ops/s)", "kv_get_ops_per_s", "{:,.0f}"),
        (f"KV put, {KV_WRITERS} writers (ops/s)", "kv_put_writers_ops_per_s", "{:,.0f}"),
        ("server RSS after run (MiB)", "rss_mib", "{:.1f}"),
    ]
    short = {"leafjet(always)": "lj(always)", "leafjet(interval)": "lj(interval)"}
    lj_cols = cols[1:]
    print(
        f"{'figure':34s} {'reference':>10s}"
        + "".join(f" {short[c]:>12s}" for c in lj_cols)
        + "".join(f" {short[c][3:-1] + '/ref':>12s}" for c in lj_cols)
        + "  goal"
    )
    for label, key, fmt in rows:
        b = getattr(ref, key)
        vals = [getattr(res[c], key) for c in lj_cols]
        ratios = [v / b if b else float("nan") for v in vals]
        goal = ""
        if key in GOALS:
            goal = f"{GOALS[key][0]}: " + ", ".join(
                f"{short[c][3:-1]} {_goal(key, ra)}" for c, ra in zip(lj_cols, ratios, strict=True)
            )
        print(
            f"{label:34s} {fmt.format(b):>10s}"
            + "".join(f" {fmt.format(v):>12s}" for v in vals)
            + "".join(f" {ra:12.2f}" for ra in ratios)
            + f"  {goal}"
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
    co = sub.add_parser("consumers", help="pull fetch drain, ordered consumer catch-up, KV put/get, CPU/msg")
    co.add_argument("--msgs", type=int, default=100_000, help="128 B messages drained by each fetch figure")
    co.add_argument("--ordered-msgs", type=int, default=0, help="1 KiB messages for ordered (default --msgs)")
    co.add_argument("--batch", type=int, default=500, help="fetch batch size")
    co.add_argument("--kv-ops", type=int, default=5000, help="sequential puts, then as many gets")
    co.add_argument("--kv-keys", type=int, default=100)
    co.add_argument("--no-interval", dest="interval", action="store_false", help="skip leafjet sync=interval")
    co.add_argument("--runs", type=int, default=1)
    st = sub.add_parser("store", help="SqliteStore append throughput vs raw sqlite3 (no server)")
    st.add_argument("--msgs", type=int, default=100_000)
    st.add_argument("--size", type=int, default=128)
    st.add_argument("--window", type=int, default=1000, help="Appends per apply / concurrent appends")
    st.add_argument("--runs", type=int, default=3)
    st.add_argument("--modes", default="apply,gather,workers", help=f"comma list of {','.join(MODES)}")
    add_spark_parser(sub)
    mq = sub.add_parser(
        "mqtt", help="MQTT device -> stream via mosquitto+bridge vs the reference's MQTT listener"
    )
    mq.add_argument("--msgs", type=int, default=20_000)
    mq.add_argument("--size", type=int, default=128)
    mq.add_argument("--inflight", type=int, default=100, help="device QoS 1 inflight window")
    mq.add_argument(
        "--runs", type=int, default=1, help="runs, the order of the columns rotated each run; medians"
    )
    mq.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory for a py-spy profile of the bridge and the leafjet agent (raw stacks)",
    )
    mq.add_argument(
        "--commands", action="store_true", help="commands out instead: stream -> bridge -> devices"
    )
    add_putfloor_parser(sub)
    add_footprint_parser(sub)
    add_monitoring_parser(sub)
    add_leaf_parser(sub)
    add_sources_parser(sub)
    add_sources_latency_parser(sub)
    add_cluster_parser(sub)
    add_raft_parser(sub)
    add_restart_parser(sub)
    add_many_consumers_parser(sub)
    add_backup_parser(sub)
    args = p.parse_args(argv)
    if args.matrix == "core":
        return core_matrix(args)
    if args.matrix == "jetstream":
        return jetstream_matrix(args)
    if args.matrix == "consumers":
        return consumers_matrix(args)
    if args.matrix == "store":
        return store_matrix(args)
    if args.matrix == "spark":
        return spark_matrix(args)
    if args.matrix == "putfloor":
        return putfloor_matrix(args)
    if args.matrix == "footprint":
        return footprint_matrix(args)
    if args.matrix == "monitoring":
        return monitoring_matrix(args)
    if args.matrix == "leaf":
        return leaf_matrix(args)
    if args.matrix == "sources":
        return sources_matrix(args)
    if args.matrix == "sources-latency":
        return sources_latency_matrix(args)
    if args.matrix == "cluster":
        return cluster_matrix(args)
    if args.matrix == "raft":
        return raft_matrix(args)
    if args.matrix == "restart":
        return restart_matrix(args)
    if args.matrix == "many-consumers":
        return many_consumers_matrix(args)
    if args.matrix == "backup":
        return backup_matrix(args)
    if args.matrix == "mqtt" and args.commands:
        return run_mqtt_commands(args.msgs, args.size)
    if args.matrix == "mqtt":
        return run_mqtt(args.msgs, args.size, args.inflight, args.profile, args.runs)
    return 2


if __name__ == "__main__":
    sys.exit(main())
