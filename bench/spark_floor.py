"""The floor of Spark's Python data source path: a fake source that yields pre-built RecordBatches.

    python -m bench.spark_floor [--rows 1000000] [--batch 12000] [--runs 3] [--variants base,...]

No server: each partition's ``read`` builds one batch (not timed: built before the first yield, a few
ms) and yields it again and again, so what is measured is PySpark's pass-through, the Arrow stream to
the JVM and the JVM's row path (the same noop sink as ``python -m bench spark``). Each variant changes
one thing of the leafjet source's batches (a column's layout or the schema) so the JVM's cost per
row can be put on each column. Every variant is run untimed first (``--warmup``), then the variants
are interleaved for ``--runs`` rounds; figures are medians (wall) and means (CPU). Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bench.spark import STREAM, _cpu, fill
from tests.support.servers import start_leafjet

BASE = (
    "stream STRING, seq BIGINT, subject STRING, timestamp TIMESTAMP, headers MAP<STRING,STRING>, data BINARY"
)
# variant -> (schema DDL, how its batch is built: see build_batch)
VARIANTS: dict[str, str] = {
    "base": BASE,  # the source's batches as they are: headers = empty maps
    "headers-null": BASE,  # headers column all null (no map per row)
    "no-headers": "stream STRING, seq BIGINT, subject STRING, timestamp TIMESTAMP, data BINARY",
    "no-stream": "seq BIGINT, subject STRING, timestamp TIMESTAMP, headers MAP<STRING,STRING>, data BINARY",
    "seq-only": "seq BIGINT",
    "seq-ts": "seq BIGINT, timestamp TIMESTAMP",
    "strings": "stream STRING, subject STRING",
    "data-only": "data BINARY",
    "headers-only": "headers MAP<STRING,STRING>",
    "json": f"{BASE}, temp DOUBLE, _corrupt BOOLEAN",
}
# A variant named "parquet-<variant>" scans the rows of <variant> written to a Parquet file; "leafjet",
# "leafjet-json" and "leafjet-nullheaders" scan a real leafjet filled with as many messages (as
# ``python -m bench spark`` does; the last with the source's ``nullHeaders`` option).


def build_batch(variant: str, n: int, payload: int = 64) -> pa.RecordBatch:
    import numpy as np

    seq = np.arange(1, n + 1, dtype=np.int64)
    body = b'{"temp": 12.5, "pad": "' + b"x" * max(0, payload - 25) + b'"}'
    data_off = np.arange(0, (n + 1) * len(body), len(body), dtype=np.int32)
    data = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(data_off), pa.py_buffer(body * n)])
    subj = [f"bench.dev{i % 10}".encode() for i in range(n)]
    subj_off = np.concatenate([[0], np.cumsum([len(s) for s in subj])]).astype(np.int32)
    subject = pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(subj_off), pa.py_buffer(b"".join(subj))]
    )
    empty = pa.py_buffer(bytes(4 * (n + 1)))
    no_str = pa.array([], pa.string())
    cols: dict[str, pa.Array] = {
        "stream": pa.repeat(pa.scalar("bench", pa.string()), n),
        "seq": pa.array(seq),
        "subject": subject,
        "timestamp": pa.array(seq * 1000, pa.timestamp("us", tz="UTC")),
        "headers": pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, empty]), no_str, no_str
        ),
        "data": data,
        "temp": pa.array(np.full(n, 12.5)),
        "_corrupt": pa.array(np.zeros(n, dtype=bool)),
    }
    if variant == "headers-null":
        cols["headers"] = pa.nulls(n, pa.map_(pa.string(), pa.string()))
    names = [c.split()[0] for c in VARIANTS[variant].split(", ")]
    return pa.RecordBatch.from_arrays([cols[c] for c in names], names=names)


@dataclass(frozen=True)
class FakePartition(InputPartition):
    variant: str
    batches: int
    rows: int


class FakeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.variant = options["variant"]
        self.total = int(options["rows"])
        self.rows = int(options["batch"])
        self.parts = int(options["partitions"])

    def partitions(self) -> list[FakePartition]:
        per = self.total // self.parts // self.rows
        return [FakePartition(self.variant, per, self.rows) for _ in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FakePartition)
        batch = build_batch(partition.variant, partition.rows)
        for _ in range(partition.batches):
            yield batch


class FakeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "leafjetfloor"

    def schema(self) -> str:
        return VARIANTS[self.options["variant"]]

    def reader(self, schema: Any) -> DataSourceReader:
        return FakeReader(dict(self.options))


def run(
    rows: int, batch: int, partitions: int, runs: int, warmup: int, variants: list[str], conf: dict[str, str]
) -> None:
    from bridges.spark.session import quiet_session

    n = rows // partitions // batch * batch * partitions
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-floor-") as tmp:
        srv = None
        spark = quiet_session("leafjet-floor", master=f"local[{partitions}]", tmp_dir=Path(tmp), conf=conf)
        try:
            spark.dataSource.register(FakeSource)

            def fake(v: str) -> Any:
                return (
                    spark.read.format("leafjetfloor")
                    .option("variant", v)
                    .option("rows", str(rows))
                    .option("batch", str(batch))
                    .option("partitions", str(partitions))
                    .load()
                )

            dfs = {}
            for v in variants:
                if v.startswith("leafjet"):  # the real source over a leafjet filled with the same count
                    if srv is None:
                        # column blocks as on a hub, where Spark reads (an agent has none by default)
                        srv = start_leafjet(
                            Path(tmp) / "leafjet", {"jetstream": {"sync": "interval", "column_blocks": True}}
                        )
                        asyncio.run(fill(srv.url, n, 64))
                    r = spark.read.format("leafjet").option("servers", srv.url).option("stream", STREAM)
                    r = r.option("numPartitions", str(partitions))
                    if v == "leafjet-nullheaders":
                        r = r.option("nullHeaders", "true")
                    dfs[v] = (r.option("jsonSchema", "temp DOUBLE") if v == "leafjet-json" else r).load()
                elif v.startswith("parquet-"):  # the same rows as the fake variant, in a Parquet file
                    path = str(Path(tmp) / f"{v}.parquet")
                    fake(v.removeprefix("parquet-")).write.mode("overwrite").parquet(path)
                    dfs[v] = spark.read.parquet(path)
                else:
                    dfs[v] = fake(v)
            took: dict[str, list[float]] = {v: [] for v in variants}
            cpu: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
            for r in range(warmup + runs):
                for v, df in dfs.items():
                    pid = srv.pid if srv is not None else -1
                    s0, k0, j0 = _cpu(pid)
                    t0 = time.perf_counter()
                    df.write.format("noop").mode("overwrite").save()
                    dt = time.perf_counter() - t0
                    s1, k1, j1 = _cpu(pid)
                    if r >= warmup:
                        took[v].append(dt)
                        cpu[v].append((k1 - k0, j1 - j0, s1 - s0))
        finally:
            if srv is not None:
                srv.stop()
            print(f"load after: {os.getloadavg()}")
            spark.stop()
    print(
        f"\nspark floor: fake source, {n:,} rows/scan, {batch:,} rows/batch, {partitions} partitions, "
        f"conf={conf}"
    )
    print(
        f"{'variant':20s} {'rows/s':>12s} {'JVM us/row':>11s} {'Python us/row':>14s} {'server us/row':>14s}"
    )
    for v in variants:
        spark_s = sum(c[0] for c in cpu[v]) / runs
        jvm_s = sum(c[1] for c in cpu[v]) / runs
        server_s = sum(c[2] for c in cpu[v]) / runs
        rate = n / statistics.median(took[v])
        print(
            f"{v:20s} {rate:>12,.0f} {jvm_s / n * 1e6:>11.3f} {(spark_s - jvm_s) / n * 1e6:>14.3f} "
            f"{server_s / n * 1e6:>14.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark_floor")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=12_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--variants", default="base,headers-null,no-headers,seq-only")
    p.add_argument("--conf", action="append", default=[], help="k=v Spark setting (repeatable)")
    a = p.parse_args(argv)
    conf = dict(c.split("=", 1) for c in a.conf)
    run(a.rows, a.batch, a.partitions, a.runs, a.warmup, a.variants.split(","), conf)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
