"""The duplicate window rebuilt from the stored messages' ``Nats-Msg-Id`` headers.

A stream keeps its dedup ids in memory only (``Stream._dedup``), as the reference does
(stream.go ``storeMsgId``/``rebuildDedupe``): the id is in the stored message's own headers,
so writing it a second time, as a meta row per publish, bought nothing but a row insert and
a delete per message. At load the window is read back from the messages stored since
``now - duplicate_window``: a binary search for the first of them, then the headers of the
rest in columnar reads (one aggregate query per chunk in the SQLite store), and only the rows
that carry an id are looked at one by one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

import anyio

from core.errors import StoreError
from core.store.columns import MsgColumns
from core.subjects import storable

if TYPE_CHECKING:
    from core.store.api import StreamStore

# How many messages one read of the scan takes (fewer when they are large: a read holds
# about SCAN_BYTES of subjects, headers and data at once).
SCAN_ROWS = 4096
SCAN_BYTES = 16 << 20

# As ``slice_header`` finds it: the exact name at the start of a line, then a colon.
_NEEDLE = b"\r\nNats-Msg-Id:"


class MsgIdEntry(NamedTuple):
    msg_id: str
    seq: int
    ts: int


def ids_in(cols: MsgColumns) -> Iterator[MsgIdEntry]:
    """The messages of ``cols`` that carry a non-empty ``Nats-Msg-Id``, in row order, with the
    id read as ``Stream._decide`` reads it (``slice_header``, then ``storable``). Rows without
    one cost nothing here: the needle is searched in the whole header column at once."""
    blob = cols.headers
    if not isinstance(blob, bytes):
        blob = bytes(blob)
    offsets = cols.header_offsets
    i = blob.find(_NEEDLE)
    while i >= 0:
        row = bisect.bisect_right(offsets, i) - 1
        end_of_row = offsets[row + 1]
        start = i + len(_NEEDLE)
        while start < end_of_row and blob[start] == 0x20:
            start += 1
        end = blob.find(b"\r\n", start, end_of_row)
        raw = blob[start : end_of_row if end < 0 else end]
        if raw:
            yield MsgIdEntry(
                storable(raw.decode("utf-8", "surrogateescape")), cols.seqs[row], cols.timestamps[row]
            )
        # the first occurrence in a block is the one slice_header reads: go on at the next row
        i = blob.find(_NEEDLE, end_of_row)


def rows_per_read(msgs: int, nbytes: int) -> int:
    """Rows per columnar read for a stream of ``msgs`` messages taking ``nbytes``."""
    if msgs <= 0:
        return SCAN_ROWS
    return max(1, min(SCAN_ROWS, SCAN_BYTES // max(1, nbytes // msgs)))


async def scan_msg_ids(
    store: StreamStore, first_seq: int, last_seq: int, since_ts: int, rows: int
) -> tuple[dict[str, tuple[int, int]], str | None]:
    """The ids of the messages stored in ``[first_seq, last_seq]`` at or after ``since_ts``,
    oldest first (an id stored twice keeps its last message, at its place), as ``Stream._dedup``
    holds them: id -> (seq, ts). Also the id of the message at ``last_seq`` when the scan reached
    it ("" when it has none; None when it is not stored), the stream's last msg id."""
    window: dict[str, tuple[int, int]] = {}
    last_id: str | None = None
    start = first_seq
    while start <= last_seq:
        try:
            cols, covered = await store.read_columns(start, last_seq, rows)
        except StoreError:
            if rows == 1:
                raise
            # more than one read can hold (SQLite refuses a value over 1 GB): a run of large
            # messages in a stream of small ones, which the average sized ``rows`` for
            rows //= 2
            continue
        n = len(cols)
        if n:  # the next read sized by what these rows held, not by the stream's average
            rows = max(1, min(SCAN_ROWS, SCAN_BYTES * n // max(1, cols.bytes_before(n, 0))))
        if len(cols) and cols.seqs[len(cols) - 1] == last_seq:
            last_id = ""
        for entry in ids_in(cols):
            if entry.ts >= since_ts:
                window.pop(entry.msg_id, None)  # seen again: it moves to the end
                window[entry.msg_id] = (entry.seq, entry.ts)
            if entry.seq == last_seq:
                last_id = entry.msg_id
        if covered < start:
            break  # nothing covered: never seen, a guard against a read that makes no progress
        start = covered + 1
        await anyio.lowlevel.checkpoint()  # a memory store's read does not yield
    return window, last_id
