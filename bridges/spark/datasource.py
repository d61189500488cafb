"""The ``leafjet`` PySpark data source (Python Data Source API, PySpark >= 4.0): batch and streaming.

    spark.dataSource.register(LeafjetDataSource)
    df = (spark.read.format("leafjet").option("servers", "nats://127.0.0.1:4222")
          .option("stream", "telemetry").load())

Batch partitions are contiguous sub-ranges of the stream's sequences, read in parallel. Streaming offsets
are stream sequences, ``{"<stream>": <last sequence included>}``, so a query restarted from its checkpoint
re-plans exactly the uncommitted range. See DESIGN.md for the options and the guarantees.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from bridges.spark.options import (
    BASE_COLUMNS,
    BASE_DDL,
    CORRUPT_COLUMN,
    OptionError,
    SourceOptions,
    parse_options,
    split_range,
)
from bridges.spark.partition import choose_bulk, read_partition
from bridges.spark.reader import SyncSession, fetch_info, resolve_range

_KINDS = {
    StringType: "string",
    DoubleType: "double",
    FloatType: "float",
    LongType: "long",
    IntegerType: "int",
    ShortType: "short",
    BooleanType: "boolean",
    TimestampType: "timestamp",
}


def json_fields(schema: StructType) -> tuple[tuple[str, str], ...]:
    """The JSON columns of a source schema (between the base columns and ``_corrupt``) and their kinds."""
    extra = [f for f in schema.fields if f.name not in BASE_COLUMNS and f.name != CORRUPT_COLUMN]
    out = []
    for f in extra:
        kind = _KINDS.get(type(f.dataType))
        if kind is None:
            raise OptionError(
                f"jsonSchema column {f.name!r} has type {f.dataType.simpleString()}; supported: "
                "STRING, DOUBLE, FLOAT, BIGINT, INT, SMALLINT, BOOLEAN, TIMESTAMP"
            )
        out.append((f.name, kind))
    return tuple(out)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """An inclusive sequence range of one stream; carries everything ``read()`` needs (it is pickled).
    ``bulk``: read through leafjet's bulk read API (decided once, on the driver)."""

    opts: SourceOptions
    first: int
    last: int
    bulk: bool = False


def read_range_partition(
    p: RangePartition, fields: tuple[tuple[str, str], ...], names: list[str]
) -> Iterator[pa.RecordBatch]:
    return read_partition(p.opts, p.first, p.last, p.bulk, fields, names)


def plan(opts: SourceOptions) -> tuple[int, int, bool]:
    """Driver side: the range to read and whether to read it in bulk, on one connection."""
    with SyncSession(opts) as s:
        _info, first, last = resolve_range(opts, s)
        return first, last, choose_bulk(opts, s)


def detect_bulk(opts: SourceOptions) -> bool:
    with SyncSession(opts) as s:
        return choose_bulk(opts, s)


class LeafjetBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.fields = json_fields(schema)
        self.names = [f.name for f in schema.fields]

    def partitions(self) -> list[RangePartition]:
        first, last, bulk = plan(self.opts)
        ranges = split_range(first, last, self.opts.num_partitions, self.opts.min_partition_size)
        parts = [RangePartition(self.opts, lo, hi, bulk) for lo, hi in ranges]
        return parts or [RangePartition(self.opts, 1, 0)]  # an empty range reads nothing

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range_partition(partition, self.fields, self.names)


class LeafjetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"<stream>": N}``: every message with sequence <= N has been planned into a batch."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.fields = json_fields(schema)
        self.names = [f.name for f in schema.fields]
        self.target: int | None = None  # the availableNow ceiling
        self.bulk: bool | None = None  # learnt once per query (planning), as in batch

    def _seq(self, offset: dict) -> int:
        try:
            return int(offset[self.opts.stream])
        except (KeyError, TypeError, ValueError):
            raise OptionError(
                f"checkpoint offset {offset!r} is not for stream {self.opts.stream!r}; "
                "use a fresh checkpoint location for a different stream"
            ) from None

    def initialOffset(self) -> dict:
        first, _last, self.bulk = plan(self.opts)
        return {self.opts.stream: first - 1}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = fetch_info(self.opts).last_seq

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._seq(start)
        end = fetch_info(self.opts).last_seq
        if self.opts.end_seq is not None:
            end = min(end, self.opts.end_seq)
        if self.target is not None:
            end = min(end, self.target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {self.opts.stream: max(begin, end)}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        ranges = split_range(
            self._seq(start) + 1, self._seq(end), self.opts.num_partitions, self.opts.min_partition_size
        )
        if ranges and self.bulk is None:
            self.bulk = detect_bulk(self.opts)
        return [RangePartition(self.opts, lo, hi, bool(self.bulk)) for lo, hi in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range_partition(partition, self.fields, self.names)

    def commit(self, end: dict) -> None:
        """Nothing to release: reads are stateless, the checkpoint is the only record of progress."""


class LeafjetDataSource(DataSource):
    """Format ``leafjet``; options are validated here, the network is touched only by readers."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return "leafjet"

    def schema(self) -> str:
        if not self.opts.json_schema:
            return BASE_DDL
        return f"{BASE_DDL}, {self.opts.json_schema}, {CORRUPT_COLUMN} BOOLEAN"

    def reader(self, schema: StructType) -> DataSourceReader:
        return LeafjetBatchReader(self.opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LeafjetStreamReader(self.opts, schema)


# The name this source is also registered under: the JVM reader (bridges/spark/jvm) hands it every
# read it does not do itself (format ``leafjet`` is then the JVM's, Spark refuses a second one).
PYTHON_NAME = "leafjet_python"


class LeafjetPythonDataSource(LeafjetDataSource):
    @classmethod
    def name(cls) -> str:
        return PYTHON_NAME


def register(spark: Any) -> None:
    """Register format ``leafjet`` with a SparkSession, and ``leafjet_python`` for the JVM reader.

    When the JVM reader's jar is on the classpath, ``leafjet`` is already taken by it (Spark says
    DATA_SOURCE_ALREADY_EXISTS): it then reads batches itself and hands the rest to
    ``leafjet_python``."""
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(LeafjetDataSource)
    except AnalysisException as e:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
    spark.dataSource.register(LeafjetPythonDataSource)
