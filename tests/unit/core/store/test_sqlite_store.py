"""SqliteStore behaviour beyond the shared contract: group commit, durability across a real process kill,
corruption and version checks, encryption, compression, a full disk, and the lifecycle."""

from __future__ import annotations

import os
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import anyio
import pytest

from core.errors import StoreError
from core.store import (
    Append,
    CipherSpec,
    DeleteOp,
    SetMetaOp,
    SourcePosOp,
    SqliteStore,
    StoreClosed,
    StoreFull,
    schema,
)
from core.store import sqlite as sqlite_module
from core.store.rowcodec import F_DATA_ZSTD, F_SEALED
from core.store.sqlite import INLINE_DURABLE_COMMIT_S
from tests.unit.core.store.conftest import FakeClock

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[4]


def wait_until(predicate, timeout: float = 5.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)
    return value


def raw_rows(path: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# ---------------------------------------------------------------------------------- group commit


async def test_concurrent_appends_are_group_committed(sqlite_store: SqliteStore) -> None:
    before = sqlite_store.stats().commits
    results: list[tuple[int, int]] = []

    async def one(i: int) -> None:
        results.append(await sqlite_store.append(f"gc.{i % 7}", None, b"x" * 64))

    async with anyio.create_task_group() as tg:
        for i in range(500):
            tg.start_soon(one, i)
    commits = sqlite_store.stats().commits - before
    assert sorted(seq for seq, _ in results) == list(range(1, 501))
    assert commits <= 50, f"500 concurrent appends took {commits} transactions"
    assert sqlite_store.stats().max_batch > 10
    assert (await sqlite_store.state()).msgs == 500


async def test_one_failing_call_does_not_fail_the_others_in_its_batch(sqlite_store: SqliteStore) -> None:
    outcomes: dict[str, object] = {}

    async def good(i: int) -> None:
        outcomes[f"g{i}"] = await sqlite_store.append("ok", None, b"")

    async def bad() -> None:
        try:
            await sqlite_store.apply([Append("bad", None, b"", 1, seq=1)])
        except StoreError as e:
            outcomes["bad"] = e

    await sqlite_store.append("first", None, b"")
    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(good, i)
        tg.start_soon(bad)
    assert isinstance(outcomes["bad"], StoreError)
    assert len([k for k in outcomes if k.startswith("g")]) == 20
    assert (await sqlite_store.state()).msgs == 21


# ---------------------------------------------------------------------------------- durability


def _read_acks(proc: subprocess.Popen[bytes], want: int, timeout: float) -> list[tuple[int, str]]:
    """Read acknowledged ``seq payload`` lines until ``want`` of them (or the deadline)."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    acks: list[tuple[int, str]] = []
    ready = False
    deadline = time.monotonic() + timeout
    try:
        while len(acks) < want and time.monotonic() < deadline:
            if not sel.select(timeout=0.2):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line == b"ready":
                    ready = True
                    continue
                seq, payload = line.decode().split(" ")
                acks.append((int(seq), payload))
    finally:
        sel.close()
    assert ready, "child never opened the store"
    return acks


@pytest.mark.parametrize("sync", ["always", "interval"])
def test_acked_message_survives_process_kill(tmp_path: Path, sync: str) -> None:
    """A child appends in a storm and prints each acknowledged sequence; SIGKILL it mid-storm, several
    rounds on the same file; every printed sequence must be stored with its payload, none reused.
    (With sync="interval" an acknowledgement means written to the OS: it survives a process kill,
    not a power cut; there, each group's first append commits on the loop, the rest on the writer.)"""
    db = tmp_path / "kill.db"
    rng = random.Random(7)
    acked: dict[int, str] = {}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for rnd in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.unit.core.store._kill_writer", str(db), f"r{rnd}", sync],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            acks = _read_acks(proc, want=rng.randint(100, 1500), timeout=8.0)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            assert proc.stdout is not None
            proc.stdout.close()
        assert acks, f"round {rnd} acknowledged nothing"
        for seq, payload in acks:
            assert seq not in acked, f"sequence {seq} reused: {acked[seq]} then {payload}"
            acked[seq] = payload
        # Every round continues after everything earlier rounds stored.
        assert min(s for s, _ in acks) > max((s for s in acked if acked[s][:2] != f"r{rnd}"), default=0)

    async def check() -> None:
        store = await SqliteStore.open(db)
        try:
            for seq, payload in acked.items():
                msg = await store.get(seq)
                assert msg is not None, f"acknowledged sequence {seq} lost"
                assert msg.data == payload.encode()
            st = await store.state()
            assert st.last_seq >= max(acked)
            seq, _ = await store.append("kill.test", None, b"after")
            assert seq == st.last_seq + 1
        finally:
            await store.close()

    anyio.run(check, backend="asyncio")


async def test_interval_mode_commits_a_lone_call_on_the_loop_and_keeps_the_order(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", sync="interval")
    try:
        first = await store.submit([Append("a", None, b"1", 1)])
        assert first.done(), "a lone call with the writer idle is committed when submit returns"
        second = await store.submit([Append("a", None, b"2", 2)])
        assert not second.done(), "the rest of the same turn of the loop goes to the writer"
        third = await store.submit([Append("a", None, b"3", 3)])
        assert [await first, await second, await third] == [[1], [2], [3]]
        # The writer thread posts the results before it lets go of the connection: under load
        # the loop can see them first. Wait (bounded) for it to let go.
        with anyio.fail_after(5):
            while not store._wlock.acquire(blocking=False):
                await anyio.sleep(0.001)
            store._wlock.release()
        await anyio.sleep(0)
        assert (await store.submit([Append("a", None, b"4", 4)])).done(), "the writer is idle again"
        big = [Append("a", None, b"5", 5)] * 17
        assert not (await store.submit(big)).done(), "a large call goes to the writer"
    finally:
        await store.close()
    store = await SqliteStore.open(tmp_path / "s.db", sync="always")
    try:
        assert [m.data for m in await store.range(1, limit=5)] == [b"1", b"2", b"3", b"4", b"5"]
        store._commit_cost = 0.01  # a slow disk's fsync: 10 ms
        lone = await store.submit([Append("a", None, b"x", 6)])
        assert not lone.done(), "with sync=always and slow commits, a commit (an fsync) runs on the writer"
        assert await lone == [22]
    finally:
        await store.close()


async def test_always_mode_commits_a_lone_call_on_the_loop_only_while_its_commits_are_fast(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", sync="always")
    try:
        fresh = await store.submit([Append("a", None, b"0", 1)])
        assert not fresh.done(), "a store that has not measured its disk yet commits on the writer"
        assert await fresh == [1]
        store._commit_cost = 10.0  # measured slow...
        await store.apply([Append("a", None, b"1", 2)])
        assert store._commit_cost < 10.0, "each transaction's wall time moves the average"
        await anyio.sleep(0)  # the next turn of the loop (one inline commit per turn)
        store._commit_cost = INLINE_DURABLE_COMMIT_S / 2  # ...then fast
        with anyio.fail_after(5):  # the writer posts its results before it lets go of the connection
            while not store._wlock.acquire(blocking=False):
                await anyio.sleep(0.001)
            store._wlock.release()
        fast = await store.submit([Append("a", None, b"2", 3)])
        assert fast.done(), "a lone call, with fast commits and the writer idle, is committed on the loop"
        assert await fast == [3]
        big = await store.submit([Append("a", None, b"3", 4)] * 17)
        assert not big.done(), "a large call still goes to the writer"
        await big
        with anyio.fail_after(5):
            while not store._wlock.acquire(blocking=False):
                await anyio.sleep(0.001)
            store._wlock.release()
        await anyio.sleep(0)
        store._commit_cost = INLINE_DURABLE_COMMIT_S / 2
        sourced = await store.submit([Append("a", None, b"s", 5), SourcePosOp("src", 1)])
        assert not sourced.done(), "a source's batch commits on the writer (the hub reads its link meanwhile)"
        await sourced
        store._commit_cost = INLINE_DURABLE_COMMIT_S * 4
        await anyio.sleep(0)
        slow = await store.submit([Append("a", None, b"4", 6)])
        assert not slow.done(), "slow commits go back to the writer, off the loop"
        await slow
    finally:
        await store.close()
    reopened = await SqliteStore.open(tmp_path / "s.db", sync="always")
    try:
        assert (await reopened.state()).msgs == 22
    finally:
        await reopened.close()


async def test_a_newest_message_read_across_a_commit_is_not_remembered(tmp_path: Path) -> None:
    """last_by_subject remembers what it read (SqliteStore._last), unless a commit changed the
    messages while the read ran: the answer may be stale by then. Here the commit is made to land
    between the query and its return, which a writer thread can otherwise do at any time."""
    store = await SqliteStore.open(tmp_path / "s.db")
    try:
        await store.append("kv.k", None, b"old")
        query = store._point_one

        async def query_then_commit(sql, params):  # type: ignore[no-untyped-def]
            found = await query(sql, params)
            await store.append("kv.k", None, b"new")
            return found

        store._point_one = query_then_commit  # type: ignore[method-assign]
        assert (await store.last_by_subject("kv.k")).data == b"old"  # type: ignore[union-attr]
        store._point_one = query  # type: ignore[method-assign]
        assert (await store.last_by_subject("kv.k")).data == b"new"  # type: ignore[union-attr]
        assert (await store.last_by_subject("kv.k")).data == b"new"  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_remembered_newest_messages_stay_within_their_byte_budget(tmp_path: Path) -> None:
    from core.store.sqlite import LAST_CACHE_BYTES

    store = await SqliteStore.open(tmp_path / "s.db", sync="interval")
    try:
        value = b"v" * 10_000
        n = LAST_CACHE_BYTES // len(value) * 2
        await store.apply([Append(f"kv.{i}", None, value + b"%d" % i, 1) for i in range(n)])
        await store.append("kv.big", None, b"b" * LAST_CACHE_BYTES, 1)
        for _ in range(2):
            for i in range(n):
                assert (await store.last_by_subject(f"kv.{i}")).data == value + b"%d" % i  # type: ignore[union-attr]
            assert (await store.last_by_subject("kv.big")).data == b"b" * LAST_CACHE_BYTES  # type: ignore[union-attr]
            assert 0 < store._last_bytes <= LAST_CACHE_BYTES
            assert "kv.big" not in store._last, "a message over 1/16 of the budget is never kept"
    finally:
        await store.close()


async def test_close_drains_queued_appends(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db")
    done: list[int] = []

    async def one() -> None:
        done.append((await store.append("d", None, b"x"))[0])

    async with anyio.create_task_group() as tg:
        for _ in range(100):
            tg.start_soon(one)
        await anyio.sleep(0)
        await store.close()
    assert len(done) == 100
    store = await SqliteStore.open(tmp_path / "s.db")
    try:
        assert (await store.state()).msgs == 100
    finally:
        await store.close()
    assert not Path(f"{tmp_path / 's.db'}-wal").exists(), "closing should checkpoint and remove the WAL"


async def test_interval_mode_flush_syncs_the_wal(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", sync="interval", sync_interval=30.0)
    try:
        await store.append("a", None, b"x")
        syncs = store.stats().syncs
        await store.flush()
        assert store.stats().syncs == syncs + 1
    finally:
        await store.close()


async def test_checkpoints_run_on_a_timer_and_truncate_past_the_brake(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", checkpoint_interval=0.05, wal_brake_bytes=16 << 10)
    try:
        await store.apply([Append("a", None, os.urandom(1024), 1) for _ in range(64)])
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: store.stats().wal_truncations >= 1))
        assert store.stats().checkpoints >= 1
        assert Path(f"{tmp_path / 's.db'}-wal").stat().st_size < 16 << 10
    finally:
        await store.close()


def _threads_in(function: str) -> int:
    """How many threads are inside ``function`` now (their stacks, innermost frame outwards)."""
    n = 0
    for frame in sys._current_frames().values():
        f: FrameType | None = frame
        while f is not None and f.f_code.co_name != function:
            f = f.f_back
        n += f is not None
    return n


async def test_a_busy_writer_is_not_held_up_by_a_truncation(tmp_path: Path) -> None:
    """Past the brake, the TRUNCATE checkpoint waits for an idle writer instead of waiting for
    its lock and then holding it (a catch-up's commits stalled behind it): the housekeeping
    job leaves the writer alone; the commit after arms the next try, which truncates."""
    store = await SqliteStore.open(tmp_path / "s.db", checkpoint_interval=0.05, wal_brake_bytes=16 << 10)
    try:
        await store.apply([Append("a", None, os.urandom(1024), 1) for _ in range(64)])
        assert store._wlock.acquire(timeout=5)  # the writer at work, as in a transaction
        try:
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: store.stats().checkpoints >= 1))
            await anyio.sleep(0.2)
            assert _threads_in("_checkpoint") == 0, "the housekeeping waits for the writer's lock"
            assert store.stats().wal_truncations == 0
        finally:
            store._wlock.release()
        await store.apply([Append("a", None, b"x", 2)])
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: store.stats().wal_truncations >= 1))
        assert Path(f"{tmp_path / 's.db'}-wal").stat().st_size < 16 << 10
    finally:
        await store.close()


# ---------------------------------------------------------------------------------- disk full


@pytest.mark.parametrize("sync", ["always", "interval"])
async def test_full_disk_fails_the_whole_batch_and_the_store_recovers(tmp_path: Path, sync: str) -> None:
    # With sync="interval" the first call of the burst commits (and fails) on the loop's thread.
    store = await SqliteStore.open(tmp_path / "s.db", sync=sync)  # type: ignore[arg-type]
    try:
        await store.append("a", None, b"before")
        await store.apply([SetMetaOp("k", b"v0")])
        await store.set_max_file_bytes(1)  # SQLite clamps the cap to the current size: "the disk is full"
        outcomes: list[object] = []

        async def one(i: int) -> None:
            try:
                outcomes.append(
                    await store.apply([Append("a", None, os.urandom(8192), 2), SetMetaOp("k", b"x")])
                )
            except StoreError as e:
                outcomes.append(e)

        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(one, i)
        assert outcomes and all(isinstance(o, StoreFull) for o in outcomes), outcomes
        assert store.stats().failed_commits >= 1
        # Nothing of the failed batches is visible; reads still work.
        st = await store.state()
        assert (st.msgs, st.last_seq) == (1, 1)
        assert (await store.get(1)).data == b"before"  # type: ignore[union-attr]
        assert await store.meta_get("k") == b"v0"
        # Space frees: writes work again and sequences continue where the stored ones end.
        await store.set_max_file_bytes(None)
        assert (await store.append("a", None, b"after"))[0] == 2
    finally:
        await store.close()
    store = await SqliteStore.open(tmp_path / "s.db")
    try:
        assert [m.data for m in await store.range(1)] == [b"before", b"after"]
    finally:
        await store.close()


# ---------------------------------------------------------------------------------- corruption


async def _make_store(path: Path, n: int = 300) -> None:
    store = await SqliteStore.open(path)
    try:
        await store.apply([Append(f"c.{i % 13}", None, os.urandom(200), i) for i in range(n)])
    finally:
        await store.close()


async def test_garbage_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError, match=str(db)):
        await SqliteStore.open(db)


async def test_empty_file_is_refused_not_treated_as_new(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    with pytest.raises(StoreError, match=str(db)):
        await SqliteStore.open(db)


async def test_truncated_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "trunc.db"
    await _make_store(db)
    size = db.stat().st_size
    with db.open("r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(StoreError, match=str(db)):
        await SqliteStore.open(db)


async def test_damaged_page_is_detected_at_open(tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    await _make_store(db)
    page = raw_rows(db, "PRAGMA page_size")[0][0]
    with db.open("r+b") as f:
        f.seek(page * 3)
        f.write(os.urandom(page))
    with pytest.raises(StoreError, match=str(db)):
        await SqliteStore.open(db)


async def _store_with_a_damaged_middle_page(db: Path) -> None:
    """A cleanly closed store whose page holding a message in the middle is garbage: a page the
    open's own reads (the counters, the first and last message, the subject index) never touch."""
    store = await SqliteStore.open(db)
    try:
        await store.apply(
            [Append(f"c.{i % 13}", None, b"MSG-%05d-" % i + b"x" * 900, i) for i in range(2000)]
        )
    finally:
        await store.close()
    page = raw_rows(db, "PRAGMA page_size")[0][0]
    at = db.read_bytes().index(b"MSG-01000-")
    with db.open("r+b") as f:
        f.seek(at - at % page)
        f.write(os.urandom(page))


async def test_a_large_store_closed_cleanly_is_not_read_whole_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quick_check reads the whole file (a restart would grow with the data): past
    QUICK_CHECK_ALWAYS_BYTES a cleanly closed file opens without it, and the damage fails the
    read that meets it, with the file named."""
    monkeypatch.setattr(sqlite_module, "QUICK_CHECK_ALWAYS_BYTES", 0)
    db = tmp_path / "large.db"
    await _store_with_a_damaged_middle_page(db)
    store = await SqliteStore.open(db)
    try:
        with pytest.raises(StoreError, match=str(db)):
            await store.range(1, 2000, 2000)
    finally:
        await store.close()


async def test_a_store_whose_last_close_was_not_clean_is_checked_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "QUICK_CHECK_ALWAYS_BYTES", 0)
    db = tmp_path / "crashed.db"
    await _store_with_a_damaged_middle_page(db)
    db.with_name("crashed.db-wal").write_bytes(b"")  # what a crash leaves: the WAL, even empty
    with pytest.raises(StoreError, match=str(db)):
        await SqliteStore.open(db)


async def test_a_small_store_is_checked_at_open_however_it_was_closed(tmp_path: Path) -> None:
    db = tmp_path / "small.db"
    await _store_with_a_damaged_middle_page(db)
    assert db.stat().st_size <= sqlite_module.QUICK_CHECK_ALWAYS_BYTES
    with pytest.raises(StoreError, match=str(db)):
        await SqliteStore.open(db)


async def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    await _make_store(db, 1)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        await SqliteStore.open(db)


async def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "foreign.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a leafjet stream database"):
        await SqliteStore.open(db)


async def test_the_same_file_cannot_be_opened_twice(sqlite_store: SqliteStore) -> None:
    with pytest.raises(StoreError, match="already open"):
        await SqliteStore.open(sqlite_store.path)


# ---------------------------------------------------------------------------------- encryption


@pytest.mark.parametrize(
    "spec",
    [
        CipherSpec("correct horse battery staple"),
        CipherSpec("correct horse battery staple", algorithm="chacha20-poly1305"),
        CipherSpec(os.urandom(32), kdf="hkdf"),
    ],
    ids=["aes-gcm-scrypt", "chacha-scrypt", "aes-gcm-hkdf"],
)
async def test_encrypted_store_round_trips_and_keeps_plaintext_off_the_disk(
    tmp_path: Path, spec: CipherSpec
) -> None:
    db = tmp_path / "enc.db"
    secret = b"TOP-SECRET-PAYLOAD-" * 10
    store = await SqliteStore.open(db, cipher=spec)
    try:
        await store.apply(
            [
                Append("enc.a", b"NATS/1.0\r\nSecret: hdr\r\n\r\n", secret, 5),
                SetMetaOp("dedup/1", b"META-SECRET"),
            ]
        )
    finally:
        await store.close()
    raw = db.read_bytes() + (Path(f"{db}-wal").read_bytes() if Path(f"{db}-wal").exists() else b"")
    assert b"TOP-SECRET" not in raw and b"Secret: hdr" not in raw and b"META-SECRET" not in raw
    assert raw_rows(db, "SELECT flags FROM msgs") == [(F_SEALED,)]
    store = await SqliteStore.open(db, cipher=spec)
    try:
        m = await store.get(1)
        assert m is not None and m.data == secret and m.headers == b"NATS/1.0\r\nSecret: hdr\r\n\r\n"
        assert await store.meta_get("dedup/1") == b"META-SECRET"
    finally:
        await store.close()


async def test_wrong_encryption_key_is_detected_at_open(tmp_path: Path) -> None:
    db = tmp_path / "enc.db"
    store = await SqliteStore.open(db, cipher=CipherSpec("right"))
    await store.append("a", None, b"x")
    await store.close()
    with pytest.raises(StoreError, match="encryption key does not match the stream's data"):
        await SqliteStore.open(db, cipher=CipherSpec("wrong"))
    with pytest.raises(StoreError, match="no encryption key"):
        await SqliteStore.open(db)
    with pytest.raises(StoreError, match="chacha20-poly1305"):
        await SqliteStore.open(db, cipher=CipherSpec("right", algorithm="chacha20-poly1305"))


async def test_a_plain_store_refuses_a_key(tmp_path: Path) -> None:
    await _make_store(tmp_path / "plain.db", 1)
    with pytest.raises(StoreError, match="without encryption"):
        await SqliteStore.open(tmp_path / "plain.db", cipher=CipherSpec("k"))


async def test_swapped_encrypted_blobs_are_detected(tmp_path: Path) -> None:
    db = tmp_path / "enc.db"
    store = await SqliteStore.open(db, cipher=CipherSpec(os.urandom(32), kdf="hkdf"))
    spec = store._spec  # same key for the reopen below
    await store.apply([Append("a", None, b"one", 1), Append("a", None, b"two", 2)])
    await store.close()
    conn = sqlite3.connect(db)
    (d1,), (d2,) = conn.execute("SELECT data FROM msgs ORDER BY seq").fetchall()
    conn.execute("UPDATE msgs SET data = ? WHERE seq = 1", (d2,))
    conn.execute("UPDATE msgs SET data = ? WHERE seq = 2", (d1,))
    conn.commit()
    conn.close()
    store = await SqliteStore.open(db, cipher=spec)
    try:
        with pytest.raises(StoreError, match="authentication"):
            await store.get(1)
    finally:
        await store.close()


async def test_snapshot_of_an_encrypted_store_restores_into_a_plain_one(tmp_path: Path) -> None:
    src = await SqliteStore.open(tmp_path / "enc.db", cipher=CipherSpec("pw"), compression="zstd")
    dst = await SqliteStore.open(tmp_path / "plain.db")
    try:
        await src.apply([Append("a", None, b"z" * 1000, 1), SetMetaOp("m", b"v"), DeleteOp(1)])
        await src.append("b", b"h" * 100, b"y" * 100, ts=9)
        await dst.restore([c async for c in src.snapshot()])
        assert await dst.range(1) == await src.range(1)
        assert await dst.state(with_deleted=True) == await src.state(with_deleted=True)
        assert await dst.meta_items() == [("m", b"v")]
    finally:
        await src.close()
        await dst.close()


# ---------------------------------------------------------------------------------- compression


async def test_zstd_compression_round_trips_and_only_when_it_saves_space(tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    compressible = b"temperature=21.5;" * 200
    random_bytes = os.urandom(3000)
    store = await SqliteStore.open(db, compression="zstd")
    try:
        await store.apply(
            [
                Append("z.a", b"NATS/1.0\r\n" + b"K: v\r\n" * 30 + b"\r\n", compressible, 1),
                Append("z.b", None, random_bytes, 2),
                Append("z.c", None, b"tiny", 3),
            ]
        )
        st = await store.state()
        assert st.bytes == sum(store.size_of(m.subject, m.headers, m.data) for m in await store.range(1))
    finally:
        await store.close()
    rows = raw_rows(db, "SELECT seq, flags, length(data) FROM msgs ORDER BY seq")
    assert rows[0][1] & F_DATA_ZSTD and rows[0][2] < len(compressible) // 10
    assert rows[1][1] == 0 and rows[2][1] == 0
    # Reopened without compression, old compressed rows still read back.
    store = await SqliteStore.open(db)
    try:
        msgs = await store.range(1)
        assert [m.data for m in msgs] == [compressible, random_bytes, b"tiny"]
        assert msgs[0].headers == b"NATS/1.0\r\n" + b"K: v\r\n" * 30 + b"\r\n"
    finally:
        await store.close()


async def test_large_compressed_reads_decode_off_the_event_loop(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "z.db", compression="zstd")
    try:
        payloads = [bytes([i]) * 50_000 for i in range(20)]
        await store.apply([Append("big", None, p, i) for i, p in enumerate(payloads)])
        assert [m.data for m in await store.range(1)] == payloads
    finally:
        await store.close()


# ---------------------------------------------------------------------------------- reads, misc


async def test_broad_wildcards_over_many_subjects_use_the_scan_path(sqlite_store: SqliteStore) -> None:
    n = 600  # more subjects than SMALL_FANOUT
    await sqlite_store.apply([Append(f"dev.{i}.t", None, b"", i) for i in range(n)])
    await sqlite_store.apply([Append("dev.7.t", None, b"again", n)])
    assert (await sqlite_store.last_by_subject("dev.*.t")).seq == n + 1  # type: ignore[union-attr]
    assert (await sqlite_store.first_after(100, "dev.*.t")).seq == 100  # type: ignore[union-attr]
    assert len(await sqlite_store.range(1, subject_filter="dev.*.t", limit=5000)) == n + 1
    assert await sqlite_store.num_pending(500, "dev.>") == n + 2 - 500
    assert await sqlite_store.msgs_for_subject("dev.*.t") == n + 1


async def test_a_live_range_read_near_the_last_sequence_stays_on_the_loop(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader just behind the last sequence (a bulk read woken by a commit, a consumer's
    read-ahead) asks a large limit and finds a row or two: that read costs less than handing
    it to a reader thread and back, also with a narrow wildcard filter. A read that can find
    many rows still goes to the pool."""
    await sqlite_store.apply([Append(f"orders.{i % 3}", None, b"x" * 1024, i) for i in range(200)])
    pooled: list[str] = []
    fetch = sqlite_store._fetch

    async def counting_fetch(sql, params=()):  # type: ignore[no-untyped-def]
        pooled.append(sql)
        return await fetch(sql, params)

    monkeypatch.setattr(sqlite_store, "_fetch", counting_fetch)
    for flt in (None, "orders.1", "orders.>"):
        got = await sqlite_store.range(200, limit=18_000, subject_filter=flt)
        assert [m.seq for m in got] == [200]  # (orders.1)
        assert await sqlite_store.range(201, limit=18_000, subject_filter=flt) == []
    # a wildcard over the last few sequences: read by sequence, matched here, limited after
    await sqlite_store.apply(
        [Append(s, None, b"y", 0) for s in ("other.a", "orders.a.b", "orders.b", "orders.c")]
    )
    got = await sqlite_store.range(198, limit=3, subject_filter="orders.*")
    assert [(m.seq, m.subject) for m in got] == [(198, "orders.2"), (199, "orders.0"), (200, "orders.1")]
    got = await sqlite_store.range(200, limit=10, subject_filter="orders.*")
    assert [(m.seq, m.subject, m.data) for m in got] == [
        (200, "orders.1", b"x" * 1024),
        (203, "orders.b", b"y"),
        (204, "orders.c", b"y"),
    ]
    assert [m.seq for m in await sqlite_store.range(201, subject_filter="orders.>")] == [202, 203, 204]
    assert await sqlite_store.range(205, subject_filter="orders.>") == []
    assert pooled == []
    assert len(await sqlite_store.range(1, limit=18_000)) == 204  # 200 KiB: the pool's
    assert len(await sqlite_store.range(100, subject_filter="orders.*")) == 103  # 105 seqs: the pool's
    assert len(pooled) == 2


async def test_write_queue_is_bounded_and_callers_wait_for_space(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", max_pending=3)
    try:
        peak = 0

        async def one() -> None:
            nonlocal peak
            peak = max(peak, store.stats().pending)
            await store.append("q", None, b"")

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(one)
        assert peak <= 3
        assert (await store.state()).msgs == 50
    finally:
        await store.close()


async def test_a_cancelled_append_leaves_the_store_usable(sqlite_store: SqliteStore) -> None:
    with anyio.move_on_after(0):
        await sqlite_store.append("c", None, b"maybe")
    seq, _ = await sqlite_store.append("c", None, b"sure")
    assert seq in (1, 2)
    assert (await sqlite_store.get(seq)).data == b"sure"  # type: ignore[union-attr]


async def test_snapshot_is_consistent_while_writes_go_on(sqlite_store: SqliteStore) -> None:
    await sqlite_store.apply([Append("s", None, b"%200d" % i, i) for i in range(3000)])  # > 1 chunk
    chunks = []
    agen = sqlite_store.snapshot()
    chunks.append(await agen.__anext__())
    await sqlite_store.apply([Append("s", None, b"late", 1)])  # after the snapshot's read began
    chunks += [c async for c in agen]
    from core.store import MemoryStore

    assert len(chunks) > 2
    target = MemoryStore()
    await target.restore(chunks)
    assert (await target.state()).last_seq == 3000
    assert (await sqlite_store.state()).last_seq == 3001


async def test_state_is_loaded_from_disk_at_open(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await SqliteStore.open(db, wall_clock=FakeClock())
    await store.apply([Append(f"k.{i % 5}", None, b"v", i + 1) for i in range(50)] + [DeleteOp(10)])
    before = await store.state(with_deleted=True), await store.subjects_state()
    await store.close()
    store = await SqliteStore.open(db)
    try:
        assert (await store.state(with_deleted=True), await store.subjects_state()) == before
    finally:
        await store.close()


async def test_calls_after_close_fail_with_store_closed(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db")
    await store.close()
    with pytest.raises(StoreClosed):
        await store.flush()
    with pytest.raises(StoreClosed):
        await store.state()


async def test_a_dead_writer_fails_every_waiting_caller_and_later_calls(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db")

    def boom() -> None:
        raise RuntimeError("simulated writer bug")

    store._w_publish = boom  # type: ignore[method-assign]
    errors: list[BaseException] = []

    async def one() -> None:
        try:
            await store.append("a", None, b"")
        except StoreError as e:
            errors.append(e)

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(one)
    assert len(errors) == 20
    with pytest.raises(StoreError, match="writer failed"):
        await store.append("a", None, b"")
    assert store.stats().pending == 0
    await store.close()


async def test_a_new_file_takes_the_page_size_asked_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    """A stream fed by sources stores in large batches with larger pages (engine.py); the page
    size is the file's, fixed when it is made, so reopening with another leaves it be."""
    path = tmp_path / "bulk.db"
    store = await SqliteStore.open(path, page_size=16384)
    await store.append("a", None, b"x" * 1000)
    await store.close()
    store = await SqliteStore.open(path)  # the default size asked: the file's own stays
    await store.append("b", None, b"y")
    assert [m.data for m in await store.range(1, 2)] == [b"x" * 1000, b"y"]
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    with pytest.raises(ValueError, match="page_size"):
        await SqliteStore.open(tmp_path / "odd.db", page_size=5000)
