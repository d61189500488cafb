"""What a SQLite store costs the process: threads, open files, and what a failed open leaves.

An edge server may hold thousands of streams (a hub sourcing a thousand sites, an agent with many
KV buckets); each is a store. These check the bounds in DESIGN.md ("Shared pool, capped open
files"): threads do not grow with the number of stores, at most ``max_open_stores`` stores hold
files (idle ones close and reopen on use), and an open that fails partway releases what it took.
"""

from __future__ import annotations

import os
import re
import resource
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from core.errors import StoreError
from core.store import SqliteStore
from core.store.api import Append
from core.store.pool import FDS_PER_OPEN_STORE, POOL, SLOTS, WORKERS, set_max_open_stores

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _threads() -> int:
    """Threads besides the shared pool's (which starts its few threads as work comes)."""
    return sum(1 for t in threading.enumerate() if not re.fullmatch(r"leafjet-store-(\d+|timer)", t.name))


def _limit_leaving(free: int) -> int:
    """The soft RLIMIT_NOFILE that leaves exactly ``free`` descriptor numbers to open."""
    used = {int(fd) for fd in os.listdir("/proc/self/fd")}
    soft, n = 0, 0
    while True:
        if soft not in used:
            if n == free:
                return soft
            n += 1
        soft += 1


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _files_open_on(path: Path) -> int:
    """This process's descriptors on ``path`` or its -wal/-shm."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            n += 1
    return n


@pytest.fixture
def cap() -> Iterator[object]:
    """Set the cap on open stores for one test; the previous one comes back after it."""
    old = SLOTS.cap

    def set_cap(n: int) -> None:
        set_max_open_stores(n)

    yield set_cap
    set_max_open_stores(old)


async def _close_all(stores: list[SqliteStore]) -> None:
    for s in stores:
        await s.close()


async def test_threads_do_not_grow_with_the_number_of_open_stores(tmp_path: Path) -> None:
    warm = await SqliteStore.open(tmp_path / "warm.db", sync="interval", checkpoint_interval=0.01)
    await warm.append("a", None, b"x")
    await warm.close()
    before = _threads()
    stores: list[SqliteStore] = []
    try:
        for i in range(60):
            s = await SqliteStore.open(tmp_path / f"s{i}.db", sync="interval", checkpoint_interval=0.01)
            stores.append(s)
            await s.append("a", None, b"x")  # writer, housekeeping timer, reads: all used
            assert (await s.range(1, limit=10))[0].data == b"x"
        await anyio.sleep(0.05)  # the checkpoints fall due
        grown = _threads() - before
        assert grown == 0, f"{grown} threads more for 60 open stores"
        assert POOL.threads <= WORKERS + 1  # and the timer thread
    finally:
        await _close_all(stores)


async def test_two_hundred_stores_work_under_a_cap_of_sixteen_with_bounded_files(
    tmp_path: Path, cap: object
) -> None:
    cap(16)  # type: ignore[operator]
    before = _fds()
    stores: list[SqliteStore] = []
    try:
        for i in range(200):
            s = await SqliteStore.open(tmp_path / f"s{i}.db")
            stores.append(s)
            assert await s.append(f"s.{i}", None, b"first-%d" % i) == (1, await _ts(s, 1))
        most = _fds() - before
        # Interleaved use across all of them: each write and read may reopen a store closed for idleness.
        for rnd in range(2):
            for i, s in enumerate(stores):
                seq, _ = await s.append(f"s.{i}", None, b"r%d-%d" % (rnd, i))
                assert seq == rnd + 2
                most = max(most, _fds() - before)
        async with anyio.create_task_group() as tg:  # and all at once

            async def burst(i: int, s: SqliteStore) -> None:
                await s.apply([Append(f"s.{i}", None, b"burst", 1 + i)])

            for i, s in enumerate(stores):
                tg.start_soon(burst, i, s)
        most = max(most, _fds() - before)
        assert most <= 16 * FDS_PER_OPEN_STORE + 8, f"{most} descriptors for 200 stores under a cap of 16"
        for i, s in enumerate(stores):
            msgs = await s.range(1, limit=10)
            assert [m.data for m in msgs] == [b"first-%d" % i, b"r0-%d" % i, b"r1-%d" % i, b"burst"]
            assert (await s.last_by_subject(f"s.{i}")).data == b"burst"  # type: ignore[union-attr]
            assert (await s.state()).msgs == 4
        assert SLOTS.open <= 16
    finally:
        await _close_all(stores)
    # and on disk: every store, reopened
    for i in (0, 99, 199):
        s = await SqliteStore.open(tmp_path / f"s{i}.db")
        try:
            assert [m.seq for m in await s.range(1)] == [1, 2, 3, 4]
        finally:
            await s.close()


async def _settled(s: SqliteStore) -> None:
    """Wait until the pool job that answered the store's last call has let go of it (the answer
    can reach the loop first): only then is the store idle, the first to close for another."""
    with anyio.fail_after(10):
        while s._scheduled:
            await anyio.sleep(0.001)


async def _ts(s: SqliteStore, seq: int) -> int:
    m = await s.get(seq)
    assert m is not None
    return m.ts


@pytest.mark.parametrize("sync", ["always", "interval"])
async def test_a_store_closed_for_idleness_reopens_with_its_state(
    tmp_path: Path, cap: object, sync: str
) -> None:
    cap(2)  # type: ignore[operator]
    a = await SqliteStore.open(tmp_path / "a.db", sync=sync)  # type: ignore[arg-type]
    others: list[SqliteStore] = []
    try:
        await a.apply([Append(f"k.{i % 3}", None, b"v%d" % i, 1000 + i) for i in range(10)])
        state = await a.state()
        assert _files_open_on(tmp_path / "a.db") > 0
        await _settled(a)
        for name in ("b", "c"):  # two more: a, the least recently used, makes room
            s = await SqliteStore.open(tmp_path / f"{name}.db", sync=sync)  # type: ignore[arg-type]
            others.append(s)
            await s.append("x", None, b"y")
        assert _files_open_on(tmp_path / "a.db") == 0, "the idle store closed its files"
        assert not (tmp_path / "a.db-wal").exists(), "its close checkpointed the WAL away"
        # state and counters are answered from memory, without reopening
        assert await a.state() == state
        assert await a.subjects_state() == {"k.0": 4, "k.1": 3, "k.2": 3}
        assert _files_open_on(tmp_path / "a.db") == 0
        # a read reopens it
        assert (await a.get(5)).data == b"v4"  # type: ignore[union-attr]
        assert _files_open_on(tmp_path / "a.db") > 0
        for s in others:  # close a again: others take the room
            await s.append("x", None, b"z")
        assert (await a.last_by_subject("k.1")).data == b"v7"  # type: ignore[union-attr]
        for s in others:
            await s.append("x", None, b"z")
        # a write reopens it, with the sequence after its last
        assert await a.append("k.0", None, b"after", 2000) == (11, 2000)
        assert [m.seq for m in await a.range(1, subject_filter="k.0")] == [1, 4, 7, 10, 11]
        await a.flush()
    finally:
        await _close_all([a, *others])
    a = await SqliteStore.open(tmp_path / "a.db")
    try:
        assert (await a.state()).msgs == 11
    finally:
        await a.close()


async def test_an_open_beyond_the_cap_with_nothing_idle_fails_with_a_clear_error(
    tmp_path: Path, cap: object
) -> None:
    cap(1)  # type: ignore[operator]
    a = await SqliteStore.open(tmp_path / "a.db")
    try:
        snap = a.snapshot()  # a running snapshot keeps a busy
        await snap.__anext__()
        with pytest.raises(StoreError, match="max_open_stores"):
            await SqliteStore.open(tmp_path / "b.db", open_timeout=1.0)
        await snap.aclose()
        b = await SqliteStore.open(tmp_path / "b.db", open_timeout=5)  # a is idle now: it makes room
        await b.close()
    finally:
        await a.close()


async def test_an_open_that_fails_partway_leaves_no_thread_or_descriptor(tmp_path: Path) -> None:
    """Run out of descriptors at each point of an open in turn (EMFILE, as under a low
    RLIMIT_NOFILE): every open either works or fails with StoreError, and leaves nothing behind."""
    warm = await SqliteStore.open(tmp_path / "warm.db")
    await warm.append("a", None, b"x")
    assert (await warm.range(1))[0].data == b"x"
    await warm.close()
    threads, fds = _threads(), _fds()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    failed = 0
    try:
        for extra in range(8):
            path = tmp_path / f"s{extra}.db"
            resource.setrlimit(resource.RLIMIT_NOFILE, (_limit_leaving(extra), hard))
            try:
                store = await SqliteStore.open(path, open_timeout=10)
            except StoreError:
                failed += 1
            else:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                await store.close()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert _fds() == fds, f"descriptors left behind by an open with {extra} to spare"
            assert _threads() <= threads, f"threads left behind with {extra} to spare"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert failed >= 3  # the limit did bite at several points


def test_the_default_cap_is_half_the_soft_open_files_limit_at_five_per_store() -> None:
    from core.store.pool import default_max_open_stores

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        assert default_max_open_stores() == 102
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
