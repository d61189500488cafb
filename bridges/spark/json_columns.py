"""JSON payloads -> typed Arrow columns and the ``_corrupt`` flag, in bulk.

Semantics (PERMISSIVE, like Spark's ``from_json``; DESIGN.md "Schema"): a payload that is not a JSON
object, or a present field of the wrong type, gives nulls in *all* JSON columns of that row and
``_corrupt = true``; a missing field or a JSON null is only null.

Two decoders give the same answer:

* **bulk** (``_bulk``): pyarrow's JSON reader over the block's payloads joined by newlines, with the
  fields as an explicit schema. It is all C++, and it refuses (raises) every row the semantics call
  corrupt: a non-object, a field of another JSON type, a number that does not fit the column, a
  duplicated field. It is only trusted when each payload is exactly one row, which the guards below
  make sure of.
* **per row** (``parse_json_columns``): ``json.loads`` and a coercion per field. It is the reference
  for the semantics and runs only for a sub-block the bulk decoder refused.

A block is decoded in bulk; if that fails, each sub-block of ``SUB_BLOCK`` rows is tried in bulk and
the ones that still fail go per row. One bad payload in 8192 therefore costs ``SUB_BLOCK`` per-row
parses, not 8192.

Guards before the bulk decoder (all vectorised): every payload is valid UTF-8 (pyarrow would accept
bad bytes inside an ignored field; ``json.loads`` does not), starts with ``{`` and ends with ``}``,
and the reader returns exactly one row per payload. Why that is enough: a payload can only give one
row or more, or an error; two payloads cannot merge into one row because the newline between them
would have to sit inside a JSON string (a raw control character: an error) or follow a complete
value inside an object/array (a missing comma: an error). A first row that is a top-level ``null``
crashes pyarrow 26's reader (a segfault): the ``{`` guard keeps it from ever seeing one.

Known difference: a payload nested deeper than Python's recursion limit inside a field the schema
does not name is accepted by the bulk decoder but corrupt per row; it is corrupt only if its block
fell back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

TS = pa.timestamp("us", tz="UTC")
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
# What the bulk decoder reads each kind as before the cast to the column type: float32 is read
# as float64 and narrowed, as the per-row path narrows Python floats.
_BULK_KINDS = {**ARROW_KINDS, "float": pa.float64()}
SUB_BLOCK = 512
_INT_BOUNDS = {"long": 2**63, "int": 2**31, "short": 2**15}
_BAD = object()

Fields = Sequence[tuple[str, str]]


# ------------------------------------------------------------------------------------------ per row


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
            if isinstance(v, float) and not math.isfinite(v):  # NaN, Infinity: no instant (int() raised)
                return _BAD
            us = int(v * 1_000_000)
            return us if -(2**63) <= us < 2**63 else _BAD
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


def parse_json_columns(payloads: Sequence[bytes], fields: Fields) -> tuple[list[list[Any]], list[bool]]:
    """Per field a column of values, and the ``_corrupt`` flags, for a list of payloads (per row)."""
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


def _per_row(data: pa.BinaryArray, fields: Fields) -> list[pa.Array]:
    cols, corrupt = parse_json_columns(data.to_pylist(), fields)
    out = [_to_arrow(col, kind) for col, (_n, kind) in zip(cols, fields, strict=True)]
    return [*out, pa.array(corrupt, pa.bool_())]


def _to_arrow(values: list[Any], kind: str) -> pa.Array:
    if kind == "float":  # a double beyond float32 becomes inf, as the bulk path's cast does
        return pa.array(values, pa.float64()).cast(pa.float32(), safe=False)
    return pa.array(values, ARROW_KINDS[kind])


# --------------------------------------------------------------------------------------------- bulk


def _bulk(data: pa.BinaryArray, fields: Fields) -> list[pa.Array] | None:
    """The columns by pyarrow's JSON reader, or None when a guard or the reader refuses the block."""
    n = len(data)
    if n == 0:
        return [pa.array([], ARROW_KINDS[kind]) for _n, kind in fields] + [pa.array([], pa.bool_())]
    if data.null_count or not _all(pc.starts_with(data, "{")) or not _all(pc.ends_with(data, "}")):
        return None
    try:
        data.view(pa.string()).validate(full=True)  # UTF-8, every row
    except pa.ArrowInvalid:
        return None
    lines = pc.binary_join_element_wise(data, pa.scalar(b"", pa.binary()), b"\n")
    body = _body(lines)
    schema = pa.schema([(name, _BULK_KINDS[kind]) for name, kind in fields])
    try:
        table = pajson.read_json(
            pa.BufferReader(body),
            read_options=pajson.ReadOptions(use_threads=False, block_size=_block_size(data)),
            parse_options=pajson.ParseOptions(
                explicit_schema=schema,
                unexpected_field_behavior="ignore",
                newlines_in_values=True,  # pretty-printed payloads; the guards hold either way
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, OverflowError):
        return None
    if table.num_rows != n:
        return None
    out = []
    for (_name, kind), col in zip(fields, table.columns, strict=True):
        arr = col.combine_chunks()
        if kind == "float":
            arr = arr.cast(pa.float32(), safe=False)
        out.append(arr)
    return [*out, pa.repeat(pa.scalar(False), n)]


def _all(flags: pa.BooleanArray) -> bool:
    return bool(pc.all(flags).as_py())


def _block_size(data: pa.BinaryArray) -> int:
    """64 KiB blocks (they stay in cache: measured faster than one block of everything), larger
    when a payload would not fit in one (the reader refuses a row that straddles blocks)."""
    longest = pc.max(pc.binary_length(data)).as_py() or 0
    return max(1 << 16, 2 * longest + 2)


def _body(lines: pa.BinaryArray) -> pa.Buffer:
    """The value bytes of a fresh binary array (offset 0): every row, back to back."""
    size = pc.sum(pc.binary_length(lines)).as_py() or 0
    values = lines.buffers()[2]
    assert lines.offset == 0 and values is not None
    return values[:size]


def json_columns(data: pa.BinaryArray, fields: Fields) -> list[pa.Array]:
    """The JSON columns of ``fields`` and then ``_corrupt``, for a column of payloads."""
    whole = _bulk(data, fields)
    if whole is not None:
        return whole
    parts: list[list[pa.Array]] = []
    for lo in range(0, len(data), SUB_BLOCK):
        block = data.slice(lo, SUB_BLOCK)
        parts.append(_bulk(block, fields) or _per_row(block, fields))
    return [pa.concat_arrays([p[i] for p in parts]) for i in range(len(fields) + 1)]
