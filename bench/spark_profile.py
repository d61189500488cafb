"""Where Spark's side of a JVM-reader scan spends its CPU: Java Flight Recorder over timed scans.

    python -m bench.spark_profile [--msgs 1000000] [--store DIR] [--scans 4] [--queries jvm,parquet]

A leafjet agent serves a stream of ``--msgs`` messages (filled as ``python -m bench spark`` fills it;
with ``--store`` the filled data directory is kept and reused by the next run, so a profile of a new
jar costs no refill). One Spark session (``local[2]``, the JVM reader's jar built first) warms every
query up (``--warmup`` scans each), then records JFR (``settings=profile``: execution samples every
10-20 ms per running thread) over ``--scans`` scans of each query in turn, started and stopped by
``jcmd`` so the JVM's start is not in it. Printed per query: CPU per row of the server, of Spark and
of the JVM (as bench/spark.py counts them); then, for the task threads only ("Executor task launch
worker"), the hottest frames by self samples and by inclusive samples, and the samples per thread
group. Queries: ``jvm`` (6 base columns), ``jvm-json`` (+ jsonSchema 'temp DOUBLE'), ``parquet``,
``parquet-json`` (the same rows from a Parquet file). JFR samples all queries together: profile one
at a time (``--queries jvm``) to put samples on a query. Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark import STREAM, _cpu, _is_jvm, fill
from tests.support.servers import start_leafjet


def _jvm_pid() -> int:
    """The Spark JVM: a java process below this one."""
    me = os.getpid()
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    for pid in parents:
        p = pid
        while p in parents and p not in (0, 1):
            p = parents[p]
            if p == me and _is_jvm(pid):
                return pid
    raise RuntimeError("no Spark JVM below this process")


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of ``pid``, summed by name (digits dropped: 'GC Thread#')."""
    out: dict[str, float] = collections.defaultdict(float)
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")].rstrip("0123456789#- ")
        fields = text[text.rindex(")") + 2 :].split()
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _frames(event: dict[str, Any]) -> list[str]:
    out = []
    for f in event["values"]["stackTrace"]["frames"]:
        m = f["method"]
        out.append(f"{m['type']['name']}.{m['name']}")
    return out


def summarize(jfr: Path, top: int) -> None:
    """Task threads' samples: hottest self frames, inclusive frames, thread groups."""
    raw = subprocess.run(
        ["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample", str(jfr)],
        capture_output=True,
        check=True,
    ).stdout
    events = json.loads(raw)["recording"]["events"]
    groups: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    tasks = 0
    for e in events:
        thread = e["values"]["sampledThread"]["javaName"] or "?"
        group = thread.split(" for ")[0].rstrip("0123456789- ")
        groups[group] += 1
        if not thread.startswith("Executor task"):
            continue
        tasks += 1
        frames = _frames(e)
        if frames:
            own[frames[0]] += 1
        for name in set(frames):
            incl[name] += 1
    print(f"  samples: {len(events)}, task threads {tasks}")
    print("  by thread group: " + ", ".join(f"{g} {n}" for g, n in groups.most_common(8)))
    print("  task threads, self samples:")
    for name, n in own.most_common(top):
        print(f"    {n:6d} {100 * n / max(1, tasks):5.1f}%  {name}")
    print("  task threads, inclusive samples (leafjet, Spark's row path, IO):")
    keep = ("dev.leafjet", "ColumnarToRow", "GeneratedClass", "UnsafeRow", "Noop", "DataWriting", "java.net")
    shown = [(n, c) for n, c in incl.most_common() if any(k in n for k in keep)]
    for name, n in shown[:top]:
        print(f"    {n:6d} {100 * n / max(1, tasks):5.1f}%  {name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--msgs", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--store", type=Path, default=None, help="keep/reuse the filled server's directory")
    p.add_argument("--scans", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--queries", default="jvm,parquet")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--jfr", type=Path, default=None, help="where the recording goes (default: a temp dir)")
    p.add_argument("--option", action="append", default=[], help="extra source option k=v (jvm queries)")
    p.add_argument("--settings", default="profile", help="JFR settings: profile, default or a .jfc file")
    p.add_argument("--per-scan", action="store_true", help="print each scan's busiest JVM threads")
    p.add_argument("--no-record", dest="record", action="store_false", help="CPU per row only, no JFR")
    a = p.parse_args(argv)

    from bridges.spark.session import build_jvm_reader, quiet_session

    if not build_jvm_reader():
        raise SystemExit("no JDK: the JVM reader cannot be built")
    with tempfile.TemporaryDirectory(prefix="leafjet-spark-profile-") as tmp:
        store = a.store or Path(tmp) / "leafjet"
        fresh = not (store / "data").exists()
        # column blocks as on a hub, where Spark reads (an agent has none by default)
        srv = start_leafjet(store, {"jetstream": {"sync": "interval", "column_blocks": True}})
        try:
            if fresh:
                took = asyncio.run(fill(srv.url, a.msgs, a.size))
                print(f"filled {a.msgs} messages in {took:.1f}s")
            spark = quiet_session("leafjet-profile", master="local[2]", tmp_dir=Path(tmp) / "spark")
            try:
                extra = dict(kv.split("=", 1) for kv in a.option)

                def jvm(json_schema: bool) -> Any:
                    r = spark.read.format("leafjet").option("reader", "jvm").option("servers", srv.url)
                    r = r.option("stream", STREAM).option("numPartitions", "2")
                    for k, v in extra.items():
                        r = r.option(k, v)
                    return (r.option("jsonSchema", "temp DOUBLE") if json_schema else r).load()

                parquet = str(Path(tmp) / "rows.parquet")
                jvm(True).write.mode("overwrite").parquet(parquet)
                rows = spark.read.parquet(parquet).count()
                pq = spark.read.parquet(parquet)
                every = {
                    "jvm": jvm(False),
                    "jvm-json": jvm(True),
                    "parquet": pq.drop("temp", "_corrupt"),
                    "parquet-json": pq,
                }
                dfs = {q: every[q] for q in a.queries.split(",")}
                for _ in range(a.warmup):
                    for df in dfs.values():
                        df.write.format("noop").mode("overwrite").save()
                jfr = a.jfr or Path(tmp) / "scan.jfr"
                pid = _jvm_pid()
                if a.record:
                    start = ["jcmd", str(pid), "JFR.start", "name=scan", f"settings={a.settings}"]
                    subprocess.run(start, check=True, capture_output=True)
                cpu: dict[str, list[tuple[float, float, float, float]]] = {q: [] for q in dfs}
                by_thread: dict[str, collections.Counter[str]] = {q: collections.Counter() for q in dfs}
                for _ in range(a.scans):
                    for q, df in dfs.items():
                        threads0 = _threads(pid)
                        s0, k0, j0 = _cpu(srv.pid)
                        t0 = time.perf_counter()
                        df.write.format("noop").mode("overwrite").save()
                        wall = time.perf_counter() - t0
                        s1, k1, j1 = _cpu(srv.pid)
                        scan_threads = collections.Counter(
                            {k: v - threads0.get(k, 0.0) for k, v in _threads(pid).items()}
                        )
                        by_thread[q].update(scan_threads)
                        if a.per_scan:
                            print(f"  {q:13s} {wall:6.2f}s  " + ", ".join(
                                f"{k} {v:.2f}" for k, v in scan_threads.most_common(3)
                            ))  # fmt: skip
                        cpu[q].append((wall, s1 - s0, k1 - k0, j1 - j0))
                if a.record:
                    subprocess.run(["jcmd", str(pid), "JFR.stop", "name=scan", f"filename={jfr}"], check=True,
                                   capture_output=True)  # fmt: skip
                print(f"{rows} rows, {a.scans} scans per query, load {os.getloadavg()[0]:.1f}")
                for q, runs in cpu.items():
                    wall, server, sp, jv = (sum(r[i] for r in runs) / len(runs) for i in range(4))
                    print(
                        f"  {q:13s} {rows / wall:>11,.0f} rows/s  CPU us/row:"
                        f" server {server / rows * 1e6:5.2f}"
                        f"  spark {sp / rows * 1e6:5.2f}  (JVM {jv / rows * 1e6:5.2f})"
                    )
                print("JVM threads, CPU us/row (mean of the scans):")
                for q, used in by_thread.items():
                    print(f"  {q:13s} " + ", ".join(
                        f"{k} {v / rows / a.scans * 1e6:.3f}" for k, v in used.most_common(6) if v > 0
                    ))  # fmt: skip
                if a.record:
                    summarize(jfr, a.top)
            finally:
                spark.stop()
        finally:
            srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
