"""The store contract (test_store_contract.py) holds for an ``OpeningStore``
(core/jetstream/opening_store.py): a SqliteStore whose open ends a little after the store was
handed out, so every test's first calls wait for it, and the ones made meanwhile keep their
order. Also: what it says of a new store before the open is what the open store says."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.jetstream.opening_store import OpeningStore
from core.store.api import Append, StreamStore
from core.store.sqlite import SqliteStore
from tests.unit.core.store.conftest import StoreHarness
from tests.unit.core.store.test_store_contract import *  # noqa: F403  (the contract's tests, run here)

pytestmark = pytest.mark.anyio

OPEN_DELAY = 0.005  # seconds the open takes longer than the hand-out


class OpeningHarness(StoreHarness):
    """Stores handed out while their open still runs (a task per store)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__("opening", tmp_path)
        self._opens: list[asyncio.Task[None]] = []

    async def _open(self, path: Path) -> StreamStore:
        opening = OpeningStore(path.name)

        async def open_later() -> None:
            await asyncio.sleep(OPEN_DELAY)
            try:
                opening.settle(await SqliteStore.open(path, wall_clock=self.clock))
            except Exception as e:
                opening.fail(str(e))

        self._opens.append(asyncio.create_task(open_later()))
        return opening

    async def aclose(self) -> None:
        await asyncio.gather(*self._opens)
        await super().aclose()


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[StoreHarness]:
    harness = OpeningHarness(tmp_path)
    await harness.start()
    try:
        yield harness
    finally:
        await harness.aclose()


async def test_calls_made_while_opening_keep_their_order(tmp_path: Path) -> None:
    harness = OpeningHarness(tmp_path)
    store = await harness.start()
    try:
        results: list[Any] = await asyncio.gather(
            *(store.apply([Append(subject, None, b"x", 1)]) for subject in "abcdefgh")
        )
        assert results == [[seq] for seq in range(1, 9)]  # stored in the order they were made
        assert [m.subject for m in await store.range(1)] == list("abcdefgh")
    finally:
        await harness.aclose()


async def test_a_new_store_reads_empty_before_and_after_its_open(tmp_path: Path) -> None:
    harness = OpeningHarness(tmp_path)
    store = await harness.start()
    try:
        assert isinstance(store, OpeningStore) and not store.ended
        before = [await store.state(), await store.state(with_deleted=True)]
        assert not store.ended  # answered without waiting
        await store.flush()  # waits for the open
        assert [await store.state(), await store.state(with_deleted=True)] == before
    finally:
        await harness.aclose()
