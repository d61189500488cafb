"""The dedup window rebuilt from stored messages (core/jetstream/dedup_window.py), over real
SQLite files: which ids a load finds, where its scan starts, and what it does with the dedup
meta rows an older version wrote."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from core.errors import StoreError
from core.jetstream import dedup_window
from core.jetstream.dedup_window import MsgIdEntry, ids_in
from core.jetstream.models import StreamConfig
from core.jetstream.stream import Stream
from core.server.accounts import Account
from core.server.internal import InboundMsg
from core.store import SqliteStore
from core.store.api import Append, SetMetaOp, StoredMsg
from core.store.columns import columns_of

pytestmark = pytest.mark.anyio

S = 1_000_000_000


def block(*lines: bytes) -> bytes:
    return b"NATS/1.0\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


def test_ids_are_read_as_decide_reads_them() -> None:
    rows = [
        StoredMsg(1, "a", None, b"x", 10),
        StoredMsg(2, "a", block(b"Nats-Msg-Id: one"), b"x", 20),
        StoredMsg(3, "a", block(b"X-Nats-Msg-Id: no", b"Other: 1"), b"x", 30),  # another name
        StoredMsg(4, "a", block(b"nats-msg-id: no"), b"x", 40),  # names match exactly, case included
        StoredMsg(5, "a", block(b"Nats-Msg-Id:"), b"x", 50),  # empty: absent
        StoredMsg(6, "a", block(b"A: b", b"Nats-Msg-Id:   two ", b"Nats-Msg-Id: second"), b"x", 60),
        StoredMsg(7, "a", block(b"Nats-Msg-Id: \xff"), b"x", 70),  # not UTF-8: stored as U+FFFD
        StoredMsg(8, "a", b"", b"x", 80),
    ]
    assert list(ids_in(columns_of(rows))) == [
        MsgIdEntry("one", 2, 20),
        MsgIdEntry("two ", 6, 60),  # the first line; the value as sent, trailing space kept
        MsgIdEntry("\ufffd", 7, 70),
    ]


async def a_stream(path: Path, window_s: float = 120) -> tuple[Stream, SqliteStore]:
    cfg = StreamConfig.from_json({"name": "D", "subjects": ["d.>"], "duplicate_window": int(window_s * S)})
    store = await SqliteStore.open(path / "msgs.db")
    return Stream(cfg, store, time.time_ns(), Account("A"), None), store


async def test_a_load_rebuilds_the_window_from_the_messages_in_it(tmp_path: Path) -> None:
    now = time.time_ns()
    stream, store = await a_stream(tmp_path, window_s=60)
    try:
        old, live = now - 90 * S, now - 30 * S
        ops: list[Any] = [Append("d.a", block(b"Nats-Msg-Id: old%d" % i), b"", old + i) for i in range(500)]
        ops += [Append("d.a", block(b"Nats-Msg-Id: id%d" % i), b"", live + i) for i in range(300)]
        ops += [Append("d.a", block(b"Nats-Msg-Id: id7"), b"again", live + 1000)]  # stored twice
        ops += [Append("d.b", None, b"no id", live + 1001)]
        await store.apply(ops)
        starts: list[int] = []
        read = store.read_columns

        async def spy(start: int, end: int, limit: int, subject_filter: str | None = None) -> Any:
            starts.append(start)
            return await read(start, end, limit, subject_filter)

        store.read_columns = spy  # type: ignore[method-assign,assignment]
        await stream.load()
        assert min(starts) == 501, "the scan starts at the first message in the window"
        ids = list(stream._dedup)
        assert ids == [f"id{i}" for i in range(300) if i != 7] + ["id7"], "oldest first"
        assert stream._dedup["id7"] == (801, live + 1000)
        assert stream._dedup["id0"] == (501, live)
        assert stream._last_msg_id == "", "the last message has no id"
    finally:
        await store.close()


async def test_a_load_takes_the_last_msg_id_from_the_last_message(tmp_path: Path) -> None:
    stream, store = await a_stream(tmp_path)
    try:
        now = time.time_ns()
        await store.apply([Append("d.a", None, b"", now), Append("d.a", block(b"Nats-Msg-Id: m"), b"", now)])
        await stream.load()
        assert stream._last_msg_id == "m"
    finally:
        await store.close()


async def test_the_dedup_rows_of_an_older_version_are_read_once_and_removed(tmp_path: Path) -> None:
    """Before the window lived in memory only, every id had a meta row ``dedup/<id>`` =
    ``seq:ts``. A row outlives its message (a work queue removes what was acked), so the live
    rows join the rebuilt window; then all of them go, in one transaction."""
    now = time.time_ns()
    stream, store = await a_stream(tmp_path, window_s=60)
    try:
        await store.apply(
            [
                Append("d.a", block(b"Nats-Msg-Id: kept"), b"", now - 20 * S),
                SetMetaOp("dedup/kept", b"1:%d" % (now - 20 * S)),
                SetMetaOp("dedup/acked", b"7:%d" % (now - 40 * S)),  # its message is gone
                SetMetaOp("dedup/expired", b"3:%d" % (now - 90 * S)),
                SetMetaOp("dedup/garbled", b"not a position"),
                SetMetaOp("ttl/9", b"%d" % (now + 60 * S)),
            ]
        )
        await stream.load()
        assert stream._dedup == {"acked": (7, now - 40 * S), "kept": (1, now - 20 * S)}
        assert list(stream._dedup) == ["acked", "kept"], "oldest first"
        assert await store.meta_items("dedup/") == []
        assert await store.meta_items("ttl/") == [("ttl/9", b"%d" % (now + 60 * S))]
    finally:
        await store.close()
    reopened, store = await a_stream(tmp_path, window_s=60)
    try:
        await reopened.load()
        assert reopened._dedup == {"kept": (1, now - 20 * S)}, "the rows were read once"
    finally:
        await store.close()


async def test_a_run_of_large_messages_in_a_stream_of_small_ones_is_read_in_smaller_reads(
    tmp_path: Path,
) -> None:
    """The rows per read come from the stream's average size; a run of large messages among
    many small ones makes one read more than the store can hold (SQLite refuses a value over
    1 GB, a StoreError): the scan reads fewer rows instead of failing the load, and sizes its
    next read by what the last one held."""
    now = time.time_ns()
    stream, store = await a_stream(tmp_path)
    limit = 1 << 20  # the store below refuses a read over 1 MiB, as SQLite one over 1 GB
    try:
        ops: list[Any] = [Append("d.a", None, b"small", now + i) for i in range(1000)]
        big = b"x" * (64 << 10)
        ops += [Append("d.a", block(b"Nats-Msg-Id: big%d" % i), big, now + 1000 + i) for i in range(40)]
        await store.apply(ops)
        assert dedup_window.rows_per_read(1040, (await store.state()).bytes) == dedup_window.SCAN_ROWS
        read = store.read_columns
        held: list[int] = []

        async def bounded(start: int, end: int, rows: int, subject_filter: str | None = None) -> Any:
            cols, covered = await read(start, end, rows, subject_filter)
            if cols.bytes_before(len(cols), 0) > limit:
                raise StoreError("read failed: string or blob too big")
            held.append(len(cols))
            return cols, covered

        store.read_columns = bounded  # type: ignore[method-assign,assignment]
        await stream.load()
        assert list(stream._dedup) == [f"big{i}" for i in range(40)]
        assert stream._last_msg_id == "big39"
        assert sum(held) == 1040
    finally:
        await store.close()


def test_a_read_holds_a_bounded_number_of_bytes() -> None:
    assert dedup_window.rows_per_read(0, 0) == dedup_window.SCAN_ROWS
    assert dedup_window.rows_per_read(1000, 1000 * 200) == dedup_window.SCAN_ROWS
    assert dedup_window.rows_per_read(10, 10 * (8 << 20)) == 2
    assert dedup_window.rows_per_read(10, 10 * (64 << 20)) == 1


async def test_a_publish_with_a_msg_id_stores_its_message_and_nothing_else(tmp_path: Path) -> None:
    """The id lives in memory and in the message's header: no meta row per publish. Such a
    publish (only Nats-Msg-Id and Nats-Expected-Stream) takes ``_decide_plain``, with the
    same outcomes as ``_decide``."""
    stream, store = await a_stream(tmp_path)
    try:
        await stream.load()

        def pub(reply: str, *lines: bytes) -> InboundMsg:
            return InboundMsg("d.a", reply, block(*lines), reply.encode(), None)  # type: ignore[arg-type]

        flight = await stream._admit(
            [
                pub("r1", b"Nats-Msg-Id: A"),
                pub("r2", b"Nats-Msg-Id: A"),
                pub("r3", b"Nats-Msg-Id: B", b"Nats-Expected-Stream: D"),
                pub("r4", b"Nats-Msg-Id: C", b"Nats-Expected-Stream: OTHER"),
            ]
        )
        plan = flight.plan
        assert [type(op) for op in plan.ops] == [Append, Append]
        assert [(r, type(o).__name__, getattr(o, "seq", None)) for r, o in plan.outcomes[:3]] == [
            ("r1", "_Stored", 1),
            ("r2", "_Dup", 1),
            ("r3", "_Stored", 2),
        ]
        assert plan.outcomes[3][1].err_code == 10060
        assert plan.last_msg_id == "B" and set(stream._dedup) == {"A", "B"}
        assert await store.apply(plan.ops) == [1, 2]
        assert await store.meta_items() == []
    finally:
        await store.close()
