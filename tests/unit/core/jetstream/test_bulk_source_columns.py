"""A bulk source turns a read frame into columns (``BulkSourceWorker._frame_batch``) with no
statement per message; what it makes must be what the message-by-message rules make: the
messages past the source's position, each with the ``Nats-Stream-Source`` header
``sourced_headers`` writes, transformed subjects, and every jump reported as a gap."""

from __future__ import annotations

from typing import Any

import pytest

from core.jetstream.bulk_source import OFFLOAD_ROWS, BulkSourceWorker
from core.jetstream.source_health import GAP_SKIPPED, GAP_STARTED_PAST
from core.jetstream.sourced_batch import Delivery, SourcedColumns
from core.jetstream.sourcing import sourced_headers
from core.protocol.readframe import decode_frame, encode_frame


class GapRecorder(BulkSourceWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.found: list[tuple[int, int, str]] = []

    def _gap(self, after: int, next_seq: int, reason: str) -> None:
        self.found.append((after, next_seq, reason))


def a_worker(spec: dict[str, Any], position: int, ident: str = "") -> GapRecorder:
    iname = "ORDERS:abcd1234 > >"
    w = GapRecorder(None, spec, iname, position)
    w.ident = ident
    return w


def frame(rows: list[tuple[int, str, bytes, bytes]]) -> Any:
    return decode_frame(
        encode_frame(
            [r[0] for r in rows],
            [1000 + r[0] for r in rows],
            [r[1].encode() for r in rows],
            [r[2] for r in rows],
            [r[3] for r in rows],
        )
    )


def expected(
    w: BulkSourceWorker, rows: list[tuple[int, str, bytes, bytes]], stored: list[str]
) -> list[Delivery]:
    name, flt, dest = w._iname_parts
    tail = f" {w.ident}" if w.ident else ""
    return [
        Delivery(
            seq,
            to,
            sourced_headers(h or None, f"{name} {seq} {flt} {dest} {subject}{tail}"),
            data,
            1000 + seq,
        )
        for (seq, subject, h, data), to in zip(rows, stored, strict=True)
    ]


ROWS = [
    (3, "orders.a", b"", b"three"),
    (4, "orders.b", b"NATS/1.0\r\nX: 1\r\nNats-Expected-Stream: S\r\n\r\n", b"four"),
    (5, "orders.a", b"", b""),
    (6, "orders.c", b"NATS/1.0\r\n\r\n", b"six"),
]


def test_a_contiguous_frame_becomes_the_columns_the_per_message_rules_make() -> None:
    w = a_worker({"name": "ORDERS"}, 2, ident="ID9")
    batch = w._frame_batch(frame(ROWS))
    assert isinstance(batch, SourcedColumns)
    assert list(batch) == expected(w, ROWS, [r[1] for r in ROWS])
    assert w.sseq == 6 and w.found == []


def test_messages_already_taken_are_skipped_and_jumps_are_gaps() -> None:
    w = a_worker({"name": "ORDERS"}, 3)
    w._started_at = 3
    rows = [*ROWS[:2], (9, "orders.a", b"", b"nine"), (12, "orders.d", b"", b"x")]
    batch = w._frame_batch(frame(rows))
    assert list(batch) == expected(w, rows[1:], [r[1] for r in rows[1:]])
    assert w.found == [(4, 9, GAP_SKIPPED), (9, 12, GAP_SKIPPED)]
    w2 = a_worker({"name": "ORDERS"}, 1)
    w2._started_at = 1
    w2._frame_batch(frame(ROWS))
    assert w2.found == [(1, 3, GAP_STARTED_PAST)]


def test_a_frame_all_taken_gives_nothing_and_transforms_rewrite_the_stored_subject() -> None:
    w = a_worker({"name": "ORDERS"}, 6)
    assert len(w._frame_batch(frame(ROWS))) == 0 and w.sseq == 6
    spec = {"name": "ORDERS", "subject_transforms": [{"src": "orders.*", "dest": "agg.{{wildcard(1)}}"}]}
    w = a_worker(spec, 0)
    batch = w._frame_batch(frame(ROWS))
    assert list(batch) == expected(w, ROWS, ["agg.a", "agg.b", "agg.a", "agg.c"])


def test_columns_read_as_deliveries_and_merge() -> None:
    a = SourcedColumns([1, 2], ["s", "t"], [None, b"h"], [b"1", b"2"], [10, 20])
    b = SourcedColumns([3], ["u"], [None], [b"3"], [30])
    a += b
    a += [Delivery(4, "v", None, b"4", 40)]
    assert [d.sseq for d in a] == [1, 2, 3, 4] and a[-1] == Delivery(4, "v", None, b"4", 40)
    assert list(a[1:3]) == [Delivery(2, "t", b"h", b"2", 20), Delivery(3, "u", None, b"3", 30)]


@pytest.mark.anyio
async def test_a_large_frame_becomes_the_same_columns_on_a_worker_thread() -> None:
    """A reply of more than OFFLOAD_ROWS new messages is made into columns off the event loop
    (``_batch``); what comes back, the gaps and ``sseq`` are what ``_frame_batch`` makes."""
    spec = {"name": "ORDERS", "subject_transforms": [{"src": "orders.*", "dest": "agg.{{wildcard(1)}}"}]}
    rows = [
        (s, f"orders.{s % 7}", b"" if s % 5 else b"NATS/1.0\r\nX: 1\r\n\r\n", b"%d" % s)
        for s in range(1, 3 * OFFLOAD_ROWS)
    ]
    del rows[100:103]  # a jump: a gap, reported from the event loop
    on_loop, off_loop = a_worker(spec, 10, ident="ID9"), a_worker(spec, 10, ident="ID9")
    expect = on_loop._frame_batch(frame(rows))
    got = await off_loop._batch(frame(rows))
    assert len(got) == len(rows) - 10 > OFFLOAD_ROWS
    assert list(got) == list(expect) and off_loop.sseq == on_loop.sseq == rows[-1][0]
    assert off_loop.found == on_loop.found == [(100, 104, GAP_SKIPPED)]
