"""A source's pipelined batches over a real SQLite store: a commit that fails mid-pipeline
loses nothing and stores nothing twice. The batches behind the failed one expect its position
(``SourcePosOp.expect``) and are refused by the store; the source resumes from the stored
position, as a new attempt does."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.errors import StoreError
from core.jetstream.models import StreamConfig
from core.jetstream.sourcing import Delivery, SourceWorker
from core.jetstream.stream import Stream
from core.server.accounts import Account
from core.store import Op, PositionMismatch, SqliteStore, StoreFull

pytestmark = pytest.mark.anyio

KEY = "ORDERS > >"


async def a_stream(path: Path) -> tuple[Stream, SqliteStore]:
    cfg = StreamConfig.from_json({"name": "AGG", "subjects": ["agg.>"]})
    store = await SqliteStore.open(path / "msgs.db")  # sync="always": every commit fsyncs
    return Stream(cfg, store, time.time_ns(), Account("A"), None), store


def deliveries(first: int, last: int, size: int = 8) -> list[Delivery]:
    return [
        Delivery(s, f"orders.{s % 4}", None, b"%d:" % s + os.urandom(size), 0) for s in range(first, last + 1)
    ]


async def upstream_seqs(store: SqliteStore) -> list[int]:
    return [int(m.data.split(b":")[0]) for m in await store.range(1, limit=10_000)]


async def resume(w: SourceWorker, last: int, step: int) -> None:
    """What the next attempt does: read again from the stored position + 1."""
    seq = w.committed + 1
    while seq <= last:
        await w._flush(deliveries(seq, min(last, seq + step - 1)))
        seq += step
    await w._settle()


async def test_a_batch_that_fails_mid_pipeline_refuses_the_ones_behind_it(tmp_path: Path) -> None:
    stream, store = await a_stream(tmp_path)
    try:
        w = SourceWorker(stream, {"name": "ORDERS"}, KEY, 0)
        real_submit = store.submit
        calls = 0

        async def flaky(ops: Sequence[Op]) -> Awaitable[list[Any]]:
            nonlocal calls
            calls += 1
            if calls == 2:  # the second batch never reaches the store (a full write queue)
                raise StoreError("write queue full")
            return await real_submit(ops)

        store.submit = flaky  # type: ignore[method-assign]
        for first in (1, 4, 7, 10):  # four batches in flight, none settled in between
            await w._flush(deliveries(first, first + 2))
        assert calls == 4 and len(w._flights) == 4
        with pytest.raises(StoreError, match="write queue full"):  # the first failure is the error
            await w._settle()
        assert w.committed == 3 and not w._flights
        # the batches behind the failed one reached the store and were refused there, whole
        assert await store.source_positions() == {KEY: 3}
        assert await upstream_seqs(store) == [1, 2, 3]
        assert store.stats().requests >= 3
        store.submit = real_submit  # type: ignore[method-assign]
        await resume(w, 12, 3)
        assert await upstream_seqs(store) == list(range(1, 13))  # each once
        assert await store.source_positions() == {KEY: 12}
    finally:
        await store.close()


async def test_the_store_says_why_a_batch_behind_a_failed_one_was_refused(tmp_path: Path) -> None:
    stream, store = await a_stream(tmp_path)
    try:
        _t, _r, first = await stream.submit_sourced(KEY, deliveries(1, 2))
        assert first is not None
        await stream.settle_sourced(first)
        _t, _r, behind = await stream.submit_sourced(KEY, deliveries(5, 6), after=4)  # 3-4 never stored
        assert behind is not None
        with pytest.raises(PositionMismatch) as refused:
            await stream.settle_sourced(behind)
        assert (refused.value.expected, refused.value.stored) == (4, 2)
        assert (await stream.state()).last_seq == 2
    finally:
        await store.close()


async def test_a_full_disk_mid_pipeline_loses_nothing_and_stores_nothing_twice(tmp_path: Path) -> None:
    stream, store = await a_stream(tmp_path)
    try:
        w = SourceWorker(stream, {"name": "ORDERS"}, KEY, 0)
        await w._flush(deliveries(1, 10))
        await w._settle()
        await store.set_max_file_bytes(1)  # SQLite clamps it to the file's size: the disk is full
        for first in (11, 31, 51):
            await w._flush(deliveries(first, first + 19, size=8192))
        with pytest.raises(StoreFull):
            await w._settle()
        assert w.committed == 10 and await store.source_positions() == {KEY: 10}
        await store.set_max_file_bytes(None)  # space again
        await resume(w, 70, 20)
        assert await upstream_seqs(store) == list(range(1, 71))
        assert await store.source_positions() == {KEY: 70}
    finally:
        await store.close()
