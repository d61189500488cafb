"""Rows -> pyarrow.RecordBatch matching the source's Spark schema (base columns, JSON columns, ``_corrupt``).

Two inputs: a bulk read frame (``frame_to_batch``: every column is built from the frame's buffers with
``pa.Array.from_buffers``, no per-row Python), and the direct-get path's records (``to_record_batch``,
the fallback against a server that is not leafjet). JSON columns come from ``json_columns`` for both.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from bridges.spark.json_columns import ARROW_KINDS, TS, Fields, json_columns, parse_json_columns
from bridges.spark.options import BASE_COLUMNS, CORRUPT_COLUMN
from bridges.spark.reader import META_HEADERS, Record, parse_header_block
from core.protocol.readframe import ReadFrame

HEADERS = pa.map_(pa.string(), pa.string())
_TS_NS = pa.timestamp("ns", tz="UTC")
_NO_STRINGS = pa.array([], pa.string())


def _batch(
    arrays: list[pa.Array], data: pa.BinaryArray, fields: Fields, names: Sequence[str]
) -> pa.RecordBatch:
    if fields:
        arrays = [*arrays, *json_columns(data, fields)]
    return pa.RecordBatch.from_arrays(arrays, names=list(names))


def to_record_batch(
    stream: str, records: Sequence[Record], fields: Fields, names: Sequence[str], null_headers: bool = False
) -> pa.RecordBatch:
    """``names`` are the Spark schema's column names (base columns, JSON columns, then ``_corrupt``).
    ``null_headers``: a message without headers of its own gets null, not an empty map."""
    n = len(records)
    seqs, subjects, stamps, headers, data = (list(c) for c in zip(*records, strict=True)) if n else ([],) * 5
    payloads = pa.array(data, pa.binary())
    none: list[tuple[str, str]] | None = None if null_headers else []
    arrays: list[pa.Array] = [
        pa.repeat(pa.scalar(stream, pa.string()), n),
        pa.array(seqs, pa.int64()),
        pa.array(subjects, pa.string()),
        pa.array(stamps, TS),
        pa.array([list(h.items()) if h else none for h in headers], HEADERS),
        payloads,
    ]
    return _batch(arrays, payloads, fields, names)


# -------------------------------------------------------------------------------------------- frames


def _binary(kind: pa.DataType, n: int, offsets: bytes | memoryview, values: bytes | memoryview) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _subjects(n: int, offsets: bytes | memoryview, values: bytes | memoryview) -> pa.Array:
    arr = _binary(pa.string(), n, offsets, values)
    try:
        arr.validate(full=True)  # a subject that is no UTF-8 (kept as raw bytes by the server)
    except pa.ArrowInvalid:
        raw = _binary(pa.binary(), n, offsets, values).to_pylist()
        arr = pa.array([b.decode("utf-8", "replace") for b in raw], pa.string())
    return arr


def no_headers(n: int, null: bool = False) -> pa.Array:
    """``n`` empty maps: zero offsets, no entries (``pa.repeat`` of an empty map took ~5 ms/8192 rows);
    with ``null``, ``n`` nulls (Spark's JVM then writes no map per row: 0.10-0.16 us/row less)."""
    if null:
        return pa.nulls(n, HEADERS)
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(bytes(4 * (n + 1)))])
    return pa.MapArray.from_arrays(offsets, _NO_STRINGS, _NO_STRINGS)


def _headers(blocks: pa.BinaryArray, null: bool = False) -> pa.Array:
    """MAP<STRING,STRING> of the messages' own headers. No headers at all (the usual case) costs one
    constant array; otherwise only the rows that have a header block are parsed. ``null``: a row
    without headers of its own is null rather than an empty map."""
    n = len(blocks)
    mask = pc.greater(pc.binary_length(blocks), 0)
    if n == 0 or not pc.any(mask).as_py():
        return no_headers(n, null)
    keys: list[str] = []
    values: list[str] = []
    counts: list[int] = []
    for raw in pc.filter(blocks, mask).to_pylist():
        parsed = parse_header_block(raw) or {}
        own = [(k, v) for k, v in parsed.items() if k not in META_HEADERS]
        counts.append(len(own))
        keys += [k for k, _v in own]
        values += [v for _k, v in own]
    per_row = pc.replace_with_mask(pa.repeat(pa.scalar(0, pa.int32()), n), mask, pa.array(counts, pa.int32()))
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(per_row)])
    nulls = pc.equal(per_row, 0) if null else None
    return pa.MapArray.from_arrays(
        offsets, pa.array(keys, pa.string()), pa.array(values, pa.string()), mask=nulls
    )


def frame_to_batch(
    stream: str, frame: ReadFrame, rows: int, fields: Fields, names: Sequence[str], null_headers: bool = False
) -> pa.RecordBatch:
    """The first ``rows`` messages of a bulk read frame as a RecordBatch (``null_headers``: as in
    ``to_record_batch``)."""
    n = len(frame)
    buf = frame.arrow_buffers()
    data = _binary(pa.binary(), n, *buf["data"])
    arrays: list[pa.Array] = [
        pa.repeat(pa.scalar(stream, pa.string()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(buf["seq"][0])]),
        _subjects(n, *buf["subject"]),
        pa.Array.from_buffers(_TS_NS, n, [None, pa.py_buffer(buf["ts"][0])]).cast(TS, safe=False),
        (
            _headers(_binary(pa.binary(), n, *buf["headers"]), null_headers)
            if frame.header_offsets[n]
            else no_headers(n, null_headers)
        ),
        data,
    ]
    if rows < n:
        arrays = [a.slice(0, rows) for a in arrays]
        data = data.slice(0, rows)
    return _batch(arrays, data, fields, names)


__all__ = [
    "ARROW_KINDS",
    "BASE_COLUMNS",
    "CORRUPT_COLUMN",
    "frame_to_batch",
    "parse_json_columns",
    "to_record_batch",
]
