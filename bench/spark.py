"""Spark source throughput: a leafjet stream read through the ``leafjet`` source vs the same rows in Parquet.

    python -m bench spark [--msgs 200000] [--size 64] [--partitions 2] [--runs 3] [--compression auto]

A fresh leafjet agent is filled with ``--msgs`` JSON payloads (not timed). The Parquet file holds exactly
the rows the source returned. Every scan is materialised with Spark's ``noop`` sink (every column is
produced, nothing is written). Fairness on a shared, loaded machine:

- every figure's query is run untimed first (``--warmup`` rounds, 2), the Parquet ones as well as the
  source's: the JVM compiles each scan path over its first runs (a cold Parquet scan of 1M rows took
  2.6 us of CPU per row, the third 0.7), so a cold Parquet figure flatters the source;
- then ``--runs`` rounds, each running all four figures in turn (source, Parquet, source JSON,
  Parquet JSON), so a burst of load from elsewhere hits both sides of a ratio alike;
- each figure is the median of its rounds; the spread of the per-round ratios is printed too.

The source reads through leafjet's bulk read API (``bulkRead=auto``); one more scan with
``bulkRead=false`` shows the direct-get fallback. "leafjet" is the Python source (``reader=python``),
"jvm" the JVM reader (``reader=jvm``, bridges/spark/jvm; built by scripts/build_spark_reader when a
JDK is there, else left out), in the same rounds against the same Parquet scans. Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.servers import start_leafjet

STREAM = "bench"


@dataclass(frozen=True)
class SparkFigures:
    msgs: int
    load_s: float
    source_rows_per_s: float
    source_json_rows_per_s: float
    parquet_rows_per_s: float
    parquet_json_rows_per_s: float
    direct_rows_per_s: float  # the fallback path (bulkRead=false: batched direct gets)
    jvm_rows_per_s: float  # the JVM reader (0: its jar is not built)
    jvm_json_rows_per_s: float
    cpu_us_per_row: dict[str, tuple[float, float, float]]  # scan -> (server, Spark, JVM) CPU us per row
    round_ratios: dict[str, tuple[float, ...]]  # "base"/"json" -> source/Parquet rate in each round


async def fill(url: str, msgs: int, size: int) -> float:
    """Create the stream and publish ``msgs`` messages (acked, windowed); returns seconds taken."""
    import nats

    nc = await nats.connect(url)
    try:
        cfg = {"name": STREAM, "subjects": [f"{STREAM}.>"], "allow_direct": True, "storage": "file"}
        await nc.request(f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(cfg).encode(), timeout=10)
        js = nc.jetstream()
        pad = "x" * max(0, size - 40)
        t0 = time.perf_counter()
        window = 2000
        for i in range(0, msgs, window):
            futs = [
                await js.publish_async(
                    f"{STREAM}.dev{j % 10}", b'{"temp": %d.5, "pad": "%s"}' % (j % 40, pad.encode())
                )
                for j in range(i, min(i + window, msgs))
            ]
            await asyncio.gather(*futs)
        return time.perf_counter() - t0
    finally:
        await nc.close()


_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, CPU seconds of the process itself, of its reaped children), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (
        int(fields[1]),
        (int(fields[11]) + int(fields[12])) / _TICK,
        (int(fields[13]) + int(fields[14])) / _TICK,
    )


def _is_jvm(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def _cpu(server_pid: int) -> tuple[float, float, float]:
    """CPU seconds so far of the server, of Spark (this process and its descendants: the JVM, its
    Python workers, but not the server), and of the JVM alone. Linux /proc only; zeros elsewhere.

    A Python worker that exits is reaped by its parent (a pyspark daemon, or the JVM itself), and its
    CPU moves into that parent's children's time: it stays in Spark's total, but the JVM's share is
    the JVM's own time only (counting its reaped children there once made the Python share negative)."""
    procs: dict[int, tuple[int, float, float]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            procs[int(entry.name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _own, _reaped) in procs.items():
        children.setdefault(ppid, []).append(pid)
    spark, jvm, todo = 0.0, 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid == server_pid or pid not in procs:
            continue
        _ppid, own, reaped = procs[pid]
        spark += own + (reaped if pid != os.getpid() else 0.0)  # the server is reaped by this process
        if _is_jvm(pid):
            jvm += own
        todo += children.get(pid, [])
    server = procs.get(server_pid)
    return (server[1] + server[2] if server else 0.0), spark, jvm


@dataclass(frozen=True)
class Scan:
    seconds: float  # the median of the runs
    server_cpu_s: float  # per run (mean)
    spark_cpu_s: float
    jvm_cpu_s: float  # the JVM's share of spark_cpu_s (the rest: the driver and the Python workers)
    all_seconds: tuple[float, ...] = ()  # every run, in round order


def _timed(df: Any, server_pid: int) -> tuple[float, tuple[float, float, float]]:
    """One scan: wall seconds and the (server, Spark, JVM) CPU seconds it took."""
    s0, k0, j0 = _cpu(server_pid)
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - t0
    s1, k1, j1 = _cpu(server_pid)
    return seconds, (s1 - s0, k1 - k0, j1 - j0)


def _scan(df: Any, runs: int, server_pid: int) -> Scan:
    """``runs`` scans of one query in a row (the fallback figure); the median and the mean CPU."""
    return _rounds({"x": df}, runs, server_pid)["x"]


def _rounds(dfs: dict[str, Any], runs: int, server_pid: int) -> dict[str, Scan]:
    """``runs`` rounds, each scanning every query of ``dfs`` once, in order: interleaving puts both
    sides of a ratio under the same load. Per query: the median seconds and the mean CPU per run."""
    took: dict[str, list[float]] = {k: [] for k in dfs}
    cpu: dict[str, list[tuple[float, float, float]]] = {k: [] for k in dfs}
    for _ in range(runs):
        for name, df in dfs.items():
            seconds, used = _timed(df, server_pid)
            took[name].append(seconds)
            cpu[name].append(used)
    out = {}
    for k in dfs:
        server, spark, jvm = (sum(c[i] for c in cpu[k]) / runs for i in range(3))
        out[k] = Scan(statistics.median(took[k]), server, spark, jvm, tuple(took[k]))
    return out


def run_spark(
    msgs: int,
    size: int,
    partitions: int,
    runs: int,
    compression: str = "auto",
    direct: bool = True,
    warmup: int = 2,
) -> SparkFigures:
    from bridges.spark.session import build_jvm_reader, jvm_reader_jar, quiet_session

    jvm = build_jvm_reader() and jvm_reader_jar() is not None
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-spark-") as tmp:
        # column blocks as on a hub, where Spark reads (an agent has none by default)
        srv = start_leafjet(Path(tmp) / "leafjet", {"jetstream": {"sync": "interval", "column_blocks": True}})
        try:
            load_s = asyncio.run(fill(srv.url, msgs, size))
            spark = quiet_session("leafjet-bench", master=f"local[{partitions}]", tmp_dir=Path(tmp) / "spark")
            try:

                def source(json_schema: bool, bulk: str = "auto", reader: str = "python") -> Any:
                    r = (
                        spark.read.format("leafjet")
                        .option("reader", reader)
                        .option("servers", srv.url)
                        .option("stream", STREAM)
                        .option("numPartitions", str(partitions))
                        .option("bulkRead", bulk)
                        .option("compression", compression)
                    )
                    return (r.option("jsonSchema", "temp DOUBLE") if json_schema else r).load()

                parquet = str(Path(tmp) / "rows.parquet")
                source(True).write.mode("overwrite").parquet(parquet)  # the same rows, not timed
                rows = spark.read.parquet(parquet).count()
                pq = spark.read.parquet(parquet)
                dfs = {
                    "leafjet base": source(False),
                    "parquet base": pq.drop("temp", "_corrupt"),
                    "leafjet json": source(True),
                    "parquet json": pq,
                }
                if jvm:
                    dfs["jvm base"] = source(False, reader="jvm")
                    dfs["jvm json"] = source(True, reader="jvm")
                _rounds(dfs, warmup, srv.pid)  # both sides: Python workers, the JVM's JIT (not timed)
                scans = _rounds(dfs, runs, srv.pid)
                scans["direct get base"] = Scan(float("inf"), 0.0, 0.0, 0.0)  # not run (--no-direct)
                try:
                    if direct:
                        scans["direct get base"] = _scan(source(False, "false"), 1, srv.pid)
                except Exception as e:  # a loaded machine times the fallback out: keep the other figures
                    print(f"direct get scan failed: {str(e).splitlines()[-1][:200]}")
            finally:
                spark.stop()
        finally:
            srv.stop()
    rate = {k: rows / v.seconds for k, v in scans.items()}
    cpu = {
        k: (v.server_cpu_s / rows * 1e6, v.spark_cpu_s / rows * 1e6, v.jvm_cpu_s / rows * 1e6)
        for k, v in scans.items()
    }
    spread = {
        kind: tuple(
            p / s
            for s, p in zip(
                scans[f"leafjet {kind}"].all_seconds, scans[f"parquet {kind}"].all_seconds, strict=True
            )
        )
        for kind in ("base", "json")
    }
    if jvm:
        for kind in ("base", "json"):
            spread[f"jvm {kind}"] = tuple(
                p / s
                for s, p in zip(
                    scans[f"jvm {kind}"].all_seconds, scans[f"parquet {kind}"].all_seconds, strict=True
                )
            )
    return SparkFigures(
        rows,
        load_s,
        rate["leafjet base"],
        rate["leafjet json"],
        rate["parquet base"],
        rate["parquet json"],
        rate["direct get base"],
        rate.get("jvm base", 0.0),
        rate.get("jvm json", 0.0),
        cpu,
        spread,
    )


def spark_matrix(args: argparse.Namespace) -> int:
    f = run_spark(
        args.msgs, args.size, args.partitions, args.runs, args.compression, args.direct, args.warmup
    )
    print(
        f"\nspark N={f.msgs},MsgSz~{args.size}B,Partitions={args.partitions},median of runs={args.runs},"
        f"compression={args.compression}"
    )
    print(
        f"  stream filled in {f.load_s:.1f}s ({f.msgs / f.load_s:,.0f} msgs/s, not timed below); each scan\n"
        f"  materialises every column with the noop sink; {args.warmup} untimed rounds of each query first,\n"
        "  then rounds that interleave the source and Parquet. ratio = leafjet source / Parquet (medians)."
    )
    print(f"{'figure (rows/s)':40s} {'leafjet src':>12s} {'parquet':>12s} {'ratio':>7s}")
    for label, a, b in (
        ("scan, 6 base columns", f.source_rows_per_s, f.parquet_rows_per_s),
        ("scan + jsonSchema 'temp DOUBLE'", f.source_json_rows_per_s, f.parquet_json_rows_per_s),
    ):
        print(f"{label:40s} {a:>12,.0f} {b:>12,.0f} {a / b:7.3f}")
    if f.jvm_rows_per_s:
        for label, a, b in (
            ("JVM reader, 6 base columns", f.jvm_rows_per_s, f.parquet_rows_per_s),
            ("JVM reader + jsonSchema 'temp DOUBLE'", f.jvm_json_rows_per_s, f.parquet_json_rows_per_s),
        ):
            print(f"{label:40s} {a:>12,.0f} {b:>12,.0f} {a / b:7.3f}")
    for kind, ratios in f.round_ratios.items():
        print(f"  {kind} ratio per round: {', '.join(f'{r:.3f}' for r in ratios)}")
    d, p = f.direct_rows_per_s, f.parquet_rows_per_s
    if d:
        print(
            f"{'scan, base, bulkRead=false (direct get)':40s} {d:>12,.0f} {p:>12,.0f} {d / p:7.3f}  (1 run)"
        )
    print("CPU per row (us, mean of the runs; Spark = driver + JVM + Python workers; JVM = its own time):")
    for label, (server, spark, jvm) in f.cpu_us_per_row.items():
        if label.startswith("direct") and not d:
            continue
        split = f"(JVM {jvm:5.2f}, Python {spark - jvm:5.2f})"
        print(f"  {label:20s} server {server:6.2f}   spark {spark:6.2f} {split}")
    return 0


def add_parser(sub: Any) -> None:
    s = sub.add_parser("spark", help="rows/s through the leafjet Spark source vs the same rows in Parquet")
    s.add_argument("--msgs", type=int, default=200_000, help="messages in the stream (1M loads slowly)")
    s.add_argument("--size", type=int, default=64, help="approximate payload size in bytes")
    s.add_argument("--partitions", type=int, default=2)
    s.add_argument("--runs", type=int, default=3, help="rounds after the warm-up; figures are medians")
    s.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="untimed rounds first (one left Parquet's first timed round ~2x slower than its later ones)",
    )
    s.add_argument(
        "--compression", default="auto", choices=("auto", "zstd", "none"), help="the source option"
    )
    s.add_argument(
        "--direct",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also scan once with bulkRead=false (slow: ~15 us/row; --no-direct skips it)",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark")
    add_parser(p.add_subparsers(dest="matrix", required=True))
    return spark_matrix(p.parse_args(["spark", *(argv or [])]))


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
