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

from bridges.spark.arrow import to_record_batch
from bridges.spark.options import (
    BASE_COLUMNS,
    BASE_DDL,
    CORRUPT_COLUMN,
    OptionError,
    SourceOptions,
    parse_options,
    split_range,
)
from bridges.spark.reader import (
    Record,
    SyncSession,
    check_data_loss,
    fetch_info,
    read_range,
    resolve_range,
    stream_info,
)

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
    """An inclusive sequence range of one stream; carries everything ``read()`` needs (it is pickled)."""

    opts: SourceOptions
    first: int
    last: int


def read_partition(p: RangePartition, fields: tuple[tuple[str, str], ...], names: list[str]) -> Iterator[Any]:
    opts = p.opts
    with SyncSession(opts) as s:
        info = s.run(lambda nc: stream_info(nc, opts))
        first = check_data_loss(opts, p.first, p.last, info.first_seq)
        direct = info.allow_direct if opts.use_direct == "auto" else opts.use_direct == "true"
        assert s.nc is not None
        buf: list[Record] = []
        seen_first: int | None = None
        for chunk in s.iterate(read_range(s.nc, opts, first, p.last, direct)):
            if seen_first is None:
                seen_first = chunk[0][0]
            buf.extend(chunk)
            if len(buf) >= opts.rows_per_arrow_batch:
                yield to_record_batch(opts.stream, buf, fields, names)
                buf = []
        if buf:
            yield to_record_batch(opts.stream, buf, fields, names)
        if (seen_first is None or seen_first > first) and first <= p.last:
            # Something at the start was missing: was the head of the stream removed while we read?
            now = s.run(lambda nc: stream_info(nc, opts))
            check_data_loss(opts, first, min(p.last, (seen_first or p.last + 1) - 1), now.first_seq)


class LeafjetBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.fields = json_fields(schema)
        self.names = [f.name for f in schema.fields]

    def partitions(self) -> list[RangePartition]:
        _info, first, last = resolve_range(self.opts)
        ranges = split_range(first, last, self.opts.num_partitions, self.opts.min_partition_size)
        parts = [RangePartition(self.opts, lo, hi) for lo, hi in ranges]
        return parts or [RangePartition(self.opts, 1, 0)]  # an empty range reads nothing

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_partition(partition, self.fields, self.names)


class LeafjetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"<stream>": N}``: every message with sequence <= N has been planned into a batch."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.fields = json_fields(schema)
        self.names = [f.name for f in schema.fields]
        self.target: int | None = None  # the availableNow ceiling

    def _seq(self, offset: dict) -> int:
        try:
            return int(offset[self.opts.stream])
        except (KeyError, TypeError, ValueError):
            raise OptionError(
                f"checkpoint offset {offset!r} is not for stream {self.opts.stream!r}; "
                "use a fresh checkpoint location for a different stream"
            ) from None

    def initialOffset(self) -> dict:
        _info, first, _last = resolve_range(self.opts)
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
        return [RangePartition(self.opts, lo, hi) for lo, hi in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_partition(partition, self.fields, self.names)

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


def register(spark: Any) -> None:
    """Register format ``leafjet`` with a SparkSession."""
    spark.dataSource.register(LeafjetDataSource)
