"""Records -> pyarrow RecordBatches matching the source's Spark schema, with optional JSON columns.

JSON parsing is permissive, like Spark's ``from_json`` in PERMISSIVE mode: a payload that is not a JSON
object, or a present field of the wrong type, gives nulls in the JSON columns and ``_corrupt = true``; a
missing field is just null. Nothing here raises on bad payloads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from bridges.spark.options import BASE_COLUMNS, CORRUPT_COLUMN
from bridges.spark.reader import Record

TS = pa.timestamp("us", tz="UTC")
HEADERS = pa.map_(pa.string(), pa.string())
ARROW_KINDS = {
    "string": pa.string(),
    "double": pa.float64(),
    "float": pa.float32(),
    "long": pa.int64(),
    "int": pa.int32(),
    "short": pa.int16(),
    "boolean": pa.bool_(),
    "timestamp": TS,
}
_INT_BOUNDS = {"long": 2**63, "int": 2**31, "short": 2**15}
_BAD = object()


def _coerce(kind: str, v: Any) -> Any:
    """The JSON value as ``kind``, None for JSON null, or _BAD when it does not fit."""
    if v is None:
        return None
    if kind == "string":
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    if kind in ("double", "float"):
        if isinstance(v, bool) or not isinstance(v, int | float):
            return _BAD
        return float(v)
    if kind in _INT_BOUNDS:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            return _BAD
        bound = _INT_BOUNDS[kind]
        return v if -bound <= v < bound else _BAD
    if kind == "boolean":
        return v if isinstance(v, bool) else _BAD
    if kind == "timestamp":
        if isinstance(v, bool):
            return _BAD
        if isinstance(v, int | float):  # epoch seconds
            return int(v * 1_000_000)
        if isinstance(v, str):
            try:
                dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                return _BAD
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
            return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return _BAD
    raise ValueError(f"unsupported JSON column type {kind!r}")


def parse_json_columns(
    payloads: Sequence[bytes], fields: Sequence[tuple[str, str]]
) -> tuple[list[list[Any]], list[bool]]:
    """Per field a column of values, and the ``_corrupt`` flags, for a list of payloads."""
    cols: list[list[Any]] = [[] for _ in fields]
    corrupt: list[bool] = []
    for payload in payloads:
        try:
            obj = json.loads(payload)
        except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting too: corrupt
            obj = None
        if not isinstance(obj, dict):
            for col in cols:
                col.append(None)
            corrupt.append(True)
            continue
        values = [_coerce(kind, obj.get(name)) for name, kind in fields]
        bad = any(v is _BAD for v in values)
        for col, v in zip(cols, values, strict=True):
            col.append(None if bad else v)
        corrupt.append(bad)
    return cols, corrupt


def to_record_batch(
    stream: str, records: Sequence[Record], fields: Sequence[tuple[str, str]], names: Sequence[str]
) -> pa.RecordBatch:
    """``names`` are the Spark schema's column names (base columns, JSON columns, then ``_corrupt``)."""
    n = len(records)
    seqs, subjects, stamps, headers, data = (list(c) for c in zip(*records, strict=True)) if n else ([],) * 5
    arrays: list[pa.Array] = [
        pa.array([stream] * n, pa.string()),
        pa.array(seqs, pa.int64()),
        pa.array(subjects, pa.string()),
        pa.array(stamps, TS),
        pa.array([list(h.items()) if h else [] for h in headers], HEADERS),
        pa.array(data, pa.binary()),
    ]
    if fields:
        cols, corrupt = parse_json_columns(data, fields)
        arrays += [pa.array(col, ARROW_KINDS[kind]) for col, (_n, kind) in zip(cols, fields, strict=True)]
        arrays.append(pa.array(corrupt, pa.bool_()))
    return pa.RecordBatch.from_arrays(arrays, names=list(names))


__all__ = ["ARROW_KINDS", "BASE_COLUMNS", "CORRUPT_COLUMN", "parse_json_columns", "to_record_batch"]
