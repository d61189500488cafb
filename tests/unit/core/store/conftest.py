from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.store import MemoryStore, SqliteStore, StreamStore

# "sqlite-interval": sync="interval", where small calls commit on the loop's thread when the
# writer is idle (SqliteStore._commit_inline), so the contract covers both commit paths.
# "sqlite-blocks": column blocks of 3 messages (core/store/colblocks.py), built by the store's
# background job while the test runs, so reads meet blocks built, being built and not yet built.
KINDS = ["memory", "sqlite", "sqlite-reopened", "sqlite-interval", "sqlite-blocks"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # SqliteStore needs the asyncio event loop


class FakeClock:
    """Wall clock for stores: starts at a fixed instant and advances 1 ms per reading."""

    def __init__(self, start: int = 1_700_000_000_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1_000_000
        return self.now


class StoreHarness:
    """One store of a given kind, plus the means to reopen it and to make fresh ones.

    ``reopen()`` closes and reopens the SQLite store on the same file for ``sqlite-reopened`` (so a test's
    reads after it run against what reached the disk); it is a no-op for the other kinds.
    """

    def __init__(self, kind: str, tmp_path: Path, **options: Any) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.options = options
        self.clock = FakeClock()
        self._names = itertools.count()
        self._others: list[StreamStore] = []
        self.path = tmp_path / "stream.db"
        self.store: StreamStore = None  # type: ignore[assignment]

    async def _open(self, path: Path) -> StreamStore:
        if self.kind == "memory":
            return MemoryStore(wall_clock=self.clock)
        options = {"sync": "interval", **self.options} if self.kind == "sqlite-interval" else self.options
        if self.kind == "sqlite-blocks":
            options = {"block_rows": 3, **self.options}
        return await SqliteStore.open(path, wall_clock=self.clock, **options)

    async def start(self) -> StreamStore:
        self.store = await self._open(self.path)
        return self.store

    async def reopen(self) -> StreamStore:
        if self.kind == "sqlite-reopened":
            await self.store.close()
            self.store = await self._open(self.path)
        return self.store

    async def fresh(self) -> StreamStore:
        store = await self._open(self.tmp_path / f"fresh-{next(self._names)}.db")
        self._others.append(store)
        return store

    async def aclose(self) -> None:
        for s in [self.store, *self._others]:
            await s.close()


@pytest.fixture(params=KINDS)
async def h(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreHarness]:
    harness = StoreHarness(request.param, tmp_path)
    await harness.start()
    try:
        yield harness
    finally:
        await harness.aclose()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = await SqliteStore.open(tmp_path / "stream.db", wall_clock=FakeClock())
    try:
        yield store
    finally:
        await store.close()
