"""A run of stored messages as columns (``MsgColumns``): what a bulk read sends, with no per-row objects.

The bulk read API (core/jetstream/bulk_read.py) answers with a columnar frame. Building it from one
``StoredMsg`` per row cost about as much as reading the rows; a store that can hand the columns over
directly (the SQLite store builds them inside SQLite, see core/store/sqlite_columns.py) saves both.

Layout, as the frame's: ``seqs`` and ``timestamps`` one value per row; ``subjects``, ``headers``
(the NATS header block, empty when a message has none) and ``data`` each as Arrow's binary layout:
``count + 1`` offsets (the first 0, non-decreasing) into one bytes value. Arrays are in the host's
byte order; the frame encoder makes them little-endian.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from core.errors import StoreError
from core.vector import numpy

MAX_COLUMN_BYTES = (1 << 31) - 1  # an i32 offset

Blob = bytes | memoryview


@dataclass(frozen=True, slots=True)
class MsgColumns:
    seqs: array[int]  # "Q"
    timestamps: array[int]  # "q"
    subject_offsets: array[int]  # "i", len(seqs) + 1
    subjects: Blob
    header_offsets: array[int]
    headers: Blob
    data_offsets: array[int]
    data: Blob

    def __len__(self) -> int:
        return len(self.seqs)

    def bytes_before(self, i: int, per_row: int) -> int:
        """What the first ``i`` rows take: their subjects, headers and data, plus ``per_row`` each."""
        return self.subject_offsets[i] + self.header_offsets[i] + self.data_offsets[i] + per_row * i

    def fitting(self, budget: int, per_row: int) -> int:
        """How many leading rows fit in ``budget`` bytes (``bytes_before``); sizes are positive,
        so that is a prefix, found by bisection (no per-row loop)."""
        rows = range(len(self) + 1)
        return bisect.bisect_right(rows, budget, key=lambda i: self.bytes_before(i, per_row)) - 1

    def head(self, n: int) -> MsgColumns:
        """The first ``n`` rows (the blobs are views, not copies)."""
        if n >= len(self):
            return self
        return MsgColumns(
            self.seqs[:n],
            self.timestamps[:n],
            self.subject_offsets[: n + 1],
            memoryview(self.subjects)[: self.subject_offsets[n]],
            self.header_offsets[: n + 1],
            memoryview(self.headers)[: self.header_offsets[n]],
            self.data_offsets[: n + 1],
            memoryview(self.data)[: self.data_offsets[n]],
        )


def offsets(lengths: Iterable[int]) -> array[int]:
    """A binary column's ``len + 1`` offsets ("i") from its values' lengths; ``StoreError`` past
    an i32 offset."""
    try:
        return array("i", accumulate(lengths, initial=0))
    except OverflowError:
        raise StoreError("a read's column is larger than 2 GiB") from None


EMPTY = MsgColumns(array("Q"), array("q"), array("i", [0]), b"", array("i", [0]), b"", array("i", [0]), b"")


def columns_of(msgs: Sequence[Any]) -> MsgColumns:
    """Columns of ``StoredMsg``-shaped rows (``seq, subject, headers, data, ts``): a store that
    has its messages as objects anyway (the memory store, a decrypting read) goes through this."""
    if not msgs:
        return EMPTY
    seqs, subjects, headers, data, stamps = zip(*msgs, strict=True)
    subj = [s.encode("utf-8", "surrogateescape") for s in subjects]
    hdrs = [h or b"" for h in headers]
    return MsgColumns(
        array("Q", seqs),
        array("q", stamps),
        offsets(map(len, subj)),
        b"".join(subj),
        offsets(map(len, hdrs)),
        b"".join(hdrs),
        offsets(map(len, data)),
        b"".join(data),
    )


def concat(parts: Sequence[MsgColumns]) -> MsgColumns:
    """One run of several consecutive ones (a read that took more than one store query)."""
    if len(parts) == 1:
        return parts[0]

    def joined(offsets: list[array[int]]) -> array[int]:
        out = array("i", [0])
        np = numpy()
        for off in offsets:
            base = out[-1]
            if not base:
                out.extend(off[1:])
            elif np is not None:
                shifted = np.frombuffer(off, dtype=np.int32)[1:].astype(np.int64) + base
                if len(shifted) and shifted[-1] > MAX_COLUMN_BYTES:
                    raise StoreError("a read's column is larger than 2 GiB")
                out.frombytes(shifted.astype(np.int32).tobytes())
            else:
                try:
                    out.extend(map(base.__add__, off[1:]))
                except OverflowError:
                    raise StoreError("a read's column is larger than 2 GiB") from None
        return out

    return MsgColumns(
        array("Q", b"".join(p.seqs.tobytes() for p in parts)),
        array("q", b"".join(p.timestamps.tobytes() for p in parts)),
        joined([p.subject_offsets for p in parts]),
        b"".join(p.subjects for p in parts),
        joined([p.header_offsets for p in parts]),
        b"".join(p.headers for p in parts),
        joined([p.data_offsets for p in parts]),
        b"".join(p.data for p in parts),
    )


def covered_by(msgs: Sequence[Any], start: int, end: int, limit: int) -> int:
    """What a ``range(start, end, limit)`` read that returned ``msgs`` covers: up to ``end`` when
    it came back short of ``limit`` (the store had nothing more), else up to its last message."""
    if limit <= 0:
        return start - 1
    if len(msgs) < limit:
        return max(end, start - 1)
    return int(msgs[-1][0])
