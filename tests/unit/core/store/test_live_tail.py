"""A live reader's ``read_columns`` of what the newest commit appended is served from that commit's
rows (SqliteStore's ``_Tail``), with no query; every other read, and any read after a commit that
removed or rewrote messages, goes to SQLite. Either way it returns what ``range`` returns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.store import Append, AppendBatch, DeleteOp, PurgeOp, SourcePosOp, SqliteStore
from tests.unit.core.store.conftest import FakeClock
from tests.unit.core.store.test_read_columns import T0, expected, rows_of

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["always", "interval"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteStore]:
    # "interval": small calls commit on the loop (SqliteStore._commit_inline), "always" on the writer
    s = await SqliteStore.open(tmp_path / "stream.db", wall_clock=FakeClock(), sync=request.param)
    try:
        yield s
    finally:
        await s.close()


class QueryCounter:
    """Counts the reads that went to SQLite (on the loop or on the pool)."""

    def __init__(self, store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        for name in ("_point_fetch", "_fetch"):
            real = getattr(store, name)

            async def counted(*args: Any, _real: Any = real, **kw: Any) -> Any:
                self.n += 1
                return await _real(*args, **kw)

            monkeypatch.setattr(store, name, counted)


async def same_as_range(store: SqliteStore, start: int, end: int, limit: int, queries: QueryCounter) -> bool:
    """Check a read against ``range``; whether it went to SQLite."""
    before = queries.n
    cols, covered = await store.read_columns(start, end, limit)
    queried = queries.n > before
    assert start - 1 <= covered <= max(end, start - 1)
    assert len(cols) <= limit
    assert rows_of(cols) == expected(await store.range(start, covered, 10_000)), (start, end, limit)
    if await store.range(start, end, 1):
        assert covered >= start
    return queried


async def test_a_live_reader_reads_each_commit_without_a_query(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = QueryCounter(store, monkeypatch)
    pos = 1
    for i in range(20):
        await store.apply(
            [Append(f"orders.{i % 3}", b"NATS/1.0\r\nA: b\r\n\r\n" if i % 2 else None, b"x" * i, T0 + i)]
        )
        before = queries.n
        cols, covered = await store.read_columns(pos, (await store.state()).last_seq, 100)
        assert queries.n == before  # from the commit's rows
        assert list(cols.seqs) == [pos] and covered == pos
        assert rows_of(cols) == expected(await store.range(pos, pos, 10))
        pos = covered + 1
    # a consumer's read-ahead (``range``) of the newest commit: the same, unfiltered or by subject
    await store.apply([Append("orders.0", None, b"a", T0 + 50), Append("orders.1", b"", b"b", T0 + 51)])
    before = queries.n
    got = await store.range(pos, None, 100)
    by_subject = await store.range(pos, None, 100, "orders.1")
    first_only = await store.range(pos, None, 1)
    by_wildcard = await store.range(pos, None, 100, "orders.*")
    last_by_wildcard = await store.range(pos + 1, None, 100, ">")
    none_by_wildcard = await store.range(pos, None, 100, "orders.0.>")
    assert queries.n == before
    assert by_wildcard == got and last_by_wildcard == got[1:] and none_by_wildcard == []
    assert [(m.seq, m.subject, m.headers, m.data, m.ts) for m in got] == [
        (pos, "orders.0", None, b"a", T0 + 50),
        (pos + 1, "orders.1", b"", b"b", T0 + 51),
    ]
    assert by_subject == got[1:] and first_only == got[:1]
    pos += 2
    # a batch of several: read whole, from its middle, and cut by the limit
    await store.apply([AppendBatch(["a.b", "c.d", "e.f"], [None, b"", None], [b"1", b"22", b"333"], T0 + 99)])
    last = (await store.state()).last_seq
    for start, limit in ((pos, 100), (pos + 1, 100), (pos, 2), (last, 1)):
        assert not await same_as_range(store, start, last, limit, queries)


async def test_a_sourced_batch_with_its_position_is_read_without_a_query(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub's live source stores each batch with its upstream position (a meta row): its readers
    (the hub's consumers, a bulk reader) still read it from the commit's rows."""
    queries = QueryCounter(store, monkeypatch)
    pos = 1
    for i in range(1, 6):
        hdr = b"NATS/1.0\r\nNats-Stream-Source: U\r\n\r\n"
        ops: list[Any] = [AppendBatch([f"s.{i}"], [hdr], [b"m"], T0 + i), SourcePosOp("U", i, expect=i - 1)]
        await store.apply(ops)
        assert not await same_as_range(store, pos, pos, 100, queries)
        assert (await store.source_positions())["U"] == i
        pos += 1


async def test_reads_after_removals_go_to_sqlite(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.apply([Append("a", None, b"1", T0), Append("b", None, b"2", T0 + 1)])
    queries = QueryCounter(store, monkeypatch)
    await store.apply([Append("a", None, b"3", T0 + 2)])
    await store.apply([DeleteOp(3)])  # the newest message, removed by a later commit
    before = queries.n
    cols, covered = await store.read_columns(3, 3, 10)
    assert len(cols) == 0 and covered == 3 and queries.n > before
    # an append and a removal in one call: not a tail
    await store.apply([Append("a", None, b"4", T0 + 3), PurgeOp(subject="a")])
    assert await same_as_range(store, 4, 4, 10, queries)
    # a read from before the newest commit's messages goes to SQLite (they are not all in it)
    await store.apply([Append("c", None, b"5", T0 + 4)])
    assert await same_as_range(store, 1, 5, 10, queries)


async def test_an_explicit_sequence_past_a_gap_is_read_with_the_gap_covered(store: SqliteStore) -> None:
    await store.apply([Append("a", None, b"1", T0)])
    await store.apply([Append("a", None, b"2", T0 + 1, seq=5)])
    cols, covered = await store.read_columns(2, 5, 10)
    assert list(cols.seqs) == [5] and covered == 5
    assert rows_of(cols) == expected(await store.range(2, 5, 10))


async def test_a_large_commit_is_not_kept(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catch-up's batch is read by SQLite as before: the store keeps only a live commit's few rows."""
    await store.apply([Append("a", None, b"x", T0 + i) for i in range(100)])
    assert await same_as_range(store, 1, 100, 1000, QueryCounter(store, monkeypatch))


async def test_the_tails_of_all_stores_share_one_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the process's budget a commit keeps no tail (its live read queries, and is still
    right); a store's close gives its tail's bytes back."""
    from core.store import sqlite

    monkeypatch.setattr(sqlite.TAILS, "limit", sqlite.TAILS.held + 1500)
    a = await SqliteStore.open(tmp_path / "a.db", wall_clock=FakeClock())
    b = await SqliteStore.open(tmp_path / "b.db", wall_clock=FakeClock())
    try:
        qa, qb = QueryCounter(a, monkeypatch), QueryCounter(b, monkeypatch)
        await a.apply([Append("a.1", None, b"x" * 1000, T0)])
        assert not await same_as_range(a, 1, 1, 10, qa)  # a's tail fits
        await b.apply([Append("b.1", None, b"y" * 1000, T0)])
        assert await same_as_range(b, 1, 1, 10, qb)  # b's would not: queried
        await a.close()
        await b.apply([Append("b.2", None, b"z" * 1000, T0 + 1)])
        assert not await same_as_range(b, 2, 2, 10, qb)  # a's bytes were given back
    finally:
        await b.close()
        await a.close()  # idempotent
