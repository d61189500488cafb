"""Column blocks (core/store/colblocks.py): sealed ranges of a SQLite store kept as pre-built
columns. Every read here is compared, column by column, with the same read of a store that has
no blocks (``block_rows=0``: the aggregate statement) holding the same messages; and each test
checks that blocks were really built and served, so it fails when they are not used."""

from __future__ import annotations

import sqlite3
import time
from array import array
from pathlib import Path
from typing import Any

import anyio
import pytest

from core.errors import StoreError
from core.store import (
    Append,
    CipherSpec,
    DeleteOp,
    ExpireOp,
    PurgeOp,
    SqliteStore,
    colblocks,
)
from core.store.api import StoredMsg
from core.store.columns import MsgColumns, columns_of
from tests.unit.core.store.conftest import FakeClock

pytestmark = pytest.mark.anyio

ROWS = 8  # messages per block in these tests
T0 = 1_000_000_000


def message(i: int) -> tuple[str, bytes | None, bytes]:
    """Varied messages: empty and binary payloads, headers on some, multi-byte subjects."""
    region = "eu" if i % 3 else "caf\u00e9"
    subject = f"orders.{region}.{i % 5}"
    headers = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 4 == 0 else None
    data = bytes([i % 256]) * (i % 37)
    return subject, headers, data


def appends(first: int, n: int) -> list[Append]:
    return [Append(*message(i), T0 + i) for i in range(first, first + n)]


def columns(cols: MsgColumns) -> tuple[Any, ...]:
    """Every column of a read, as plain values."""
    return (
        list(cols.seqs),
        list(cols.timestamps),
        list(cols.subject_offsets),
        bytes(cols.subjects),
        list(cols.header_offsets),
        bytes(cols.headers),
        list(cols.data_offsets),
        bytes(cols.data),
    )


class Pair:
    """A store with blocks and one without, fed the same operations."""

    def __init__(self, blocks: SqliteStore, plain: SqliteStore) -> None:
        self.blocks, self.plain = blocks, plain

    async def apply(self, ops: list[Any]) -> None:
        """In commits of 5 operations: the newest commit's rows are the store's live tail, which
        reads of them take before blocks (DESIGN.md invariant 13)."""
        for i in range(0, len(ops), 5):
            assert await self.blocks.apply(ops[i : i + 5]) == await self.plain.apply(ops[i : i + 5])

    async def sealed(self, through: int) -> None:
        """Wait (a generous deadline: a loaded machine) until blocks cover up to ``through``."""
        with anyio.fail_after(30):
            while self.blocks.block_stats().through < through:
                await anyio.sleep(0.01)

    async def settled(self) -> None:
        """Wait until the block job has nothing left to do (stale blocks rebuilt)."""
        with anyio.fail_after(30):
            while self.blocks._blk_job_on or self.blocks._blk_stale:
                await anyio.sleep(0.01)

    async def same_reads(self, limits: tuple[int, ...] = (1, 3, 8, 13, 1000), exact: bool = True) -> None:
        """Every (start, limit) over the stream reads the same columns and covers the same. Not
        ``exact``: the other store reads row by row (compressed), and may cover more past the
        last message; then the rows of what this read covered are compared."""
        last = (await self.plain.state()).last_seq
        for start in range(1, last + 2):
            for limit in limits:
                got = await self.blocks.read_columns(start, last + 3, limit)
                if exact:
                    want = await self.plain.read_columns(start, last + 3, limit)
                    assert got[1] == want[1], (start, limit)
                else:
                    want = (columns_of(await self.plain.range(start, got[1], 10_000)), got[1])
                    assert got[1] >= min(start + limit - 1, last + 3), (start, limit)
                assert columns(got[0]) == columns(want[0]), (start, limit)


@pytest.fixture
async def pair(tmp_path: Path) -> Any:
    clock = FakeClock()
    blocks = await SqliteStore.open(tmp_path / "blocks.db", wall_clock=clock, block_rows=ROWS)
    plain = await SqliteStore.open(tmp_path / "plain.db", wall_clock=clock, block_rows=0)
    try:
        yield Pair(blocks, plain)
    finally:
        await blocks.close()
        await plain.close()


async def blocks_through(store: SqliteStore, seq: int) -> None:
    """Until ``store`` has built its blocks up to ``seq`` (30 s at most)."""
    with anyio.fail_after(30):
        while store.block_stats().through < seq:
            await anyio.sleep(0.01)


def block_rows_in(path: Path) -> list[tuple[int, int, int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT lo, hi, count FROM colblocks ORDER BY lo").fetchall()
    finally:
        conn.close()


# -- the sans-IO part


def test_a_body_decodes_to_the_columns_it_was_made_of() -> None:
    msgs = [StoredMsg(10 + i, *message(i), T0 + i) for i in range(50)]
    cols = columns_of(msgs)
    for compress in (False, True):
        encoding, body = colblocks.pack(cols, compress)
        assert columns(colblocks.unpack(encoding, body)) == columns(cols)
    part = colblocks.rows_between(cols, 20, 33)
    assert columns(part) == columns(columns_of(msgs[10:24]))
    assert len(colblocks.rows_between(cols, 100, 200)) == 0


def test_a_damaged_body_is_refused() -> None:
    body = colblocks.encode(columns_of([]))
    with pytest.raises(StoreError):
        colblocks.decode(body[:-1] + b"x" + b"y")
    with pytest.raises(StoreError):
        colblocks.unpack(1, b"not zstd")
    with pytest.raises(StoreError):
        colblocks.unpack(7, body)


def test_a_body_with_rows_out_of_order_is_refused() -> None:
    c = columns_of([StoredMsg(10 + i, *message(i), T0 + i) for i in range(5)])
    swapped = array("Q", reversed(c.seqs))
    with pytest.raises(StoreError, match="sequences"):
        colblocks.decode(colblocks.encode(MsgColumns(swapped, *_rest(c, 1))))
    so = array("i", c.subject_offsets)
    so[1] = so[len(c)]  # the first subject ends past the second: offsets go down
    bad = MsgColumns(c.seqs, c.timestamps, so, *_rest(c, 3))
    with pytest.raises(StoreError, match="offsets"):
        colblocks.decode(colblocks.encode(bad))


def _rest(c: MsgColumns, skip: int) -> list[Any]:
    fields = [c.seqs, c.timestamps, c.subject_offsets, c.subjects]
    fields += [c.header_offsets, c.headers, c.data_offsets, c.data]
    return fields[skip:]


def test_which_blocks_a_read_takes() -> None:
    # blocks of 64 up to sequence 640; a partial block is taken for at least 4 of its rows
    assert colblocks.wanted(1, 64, 64, 640) == (0, 0)
    assert colblocks.wanted(62, 200, 64, 640) == (1, 3)  # 3 rows of block 0: not worth it
    assert colblocks.wanted(61, 196, 64, 640) == (0, 3)
    assert colblocks.wanted(61, 195, 64, 640) == (0, 2)
    assert colblocks.wanted(600, 900, 64, 640) == (9, 9)  # nothing built past 640
    assert colblocks.wanted(641, 900, 64, 640) is None
    assert colblocks.wanted(10, 11, 64, 640) is None


# -- the store


async def test_blocks_are_built_once_sealed_and_read_as_the_aggregate_reads(pair: Pair) -> None:
    await pair.apply(appends(0, 21))  # sequences 1..21: blocks 1-8 and 9-16 sealed, 17-24 not
    await pair.sealed(16)
    await anyio.sleep(0.05)
    assert pair.blocks.block_stats().through == 16  # never the unsealed range
    await pair.same_reads()
    assert pair.blocks.block_stats().served > 0
    await pair.apply(appends(21, 3))  # seals 17..24
    await pair.sealed(24)
    await pair.same_reads()
    assert [r[:2] for r in block_rows_in(pair.blocks.path)] == [(1, 8), (9, 16), (17, 24)]


async def test_a_delete_in_a_block_refuses_it_until_it_is_rebuilt(pair: Pair) -> None:
    await pair.apply(appends(0, 32))
    await pair.sealed(32)
    await pair.apply([DeleteOp(12), DeleteOp(13)])  # block 9..16 now holds 6 of its 8
    await pair.same_reads()
    await pair.settled()
    assert (9, 16, 6) in block_rows_in(pair.blocks.path)  # rebuilt with what is left
    served = pair.blocks.block_stats().served
    await pair.same_reads()
    assert pair.blocks.block_stats().served > served


async def test_a_block_built_before_a_delete_is_never_served_after_it(pair: Pair) -> None:
    """The check does not rely on the job's rebuild: a block whose count is above the rows in its
    range (built, then a row deleted) is refused by the read itself -- here with the job kept
    from rebuilding it."""
    await pair.apply(appends(0, 16))
    await pair.sealed(16)
    original = pair.blocks._blk_kick
    pair.blocks._blk_kick = lambda: None  # type: ignore[method-assign]
    try:
        await pair.apply([DeleteOp(3)])
        for _ in range(2):  # twice: the first read's "stale" note must not change the second
            cols, _ = await pair.blocks.read_columns(1, 16, 100)
            assert 3 not in cols.seqs
        await pair.same_reads()
    finally:
        pair.blocks._blk_kick = original  # type: ignore[method-assign]


@pytest.mark.parametrize(
    "removal",
    [
        [PurgeOp(up_to_seq=12)],  # a purge up to a sequence
        [PurgeOp(keep=10)],  # limits: max_msgs
        [ExpireOp(up_to_ts=T0 + 11)],  # max_age
        [PurgeOp(subject="orders.eu.>")],  # a filtered purge: holes in every block
        [PurgeOp()],  # everything
    ],
    ids=["purge-up-to", "keep", "expire", "subject", "all"],
)
async def test_removals_leave_reads_exact_and_drop_blocks_below_the_first(
    pair: Pair, removal: list[Any]
) -> None:
    await pair.apply(appends(0, 40))
    await pair.sealed(40)
    await pair.apply(removal)
    await pair.same_reads()
    await pair.apply(appends(40, 8))  # the next block boundary: the job runs again
    await pair.sealed(48)
    await pair.settled()
    await pair.same_reads()
    first = (await pair.blocks.state()).first_seq
    assert all(hi >= first for _lo, hi, _n in block_rows_in(pair.blocks.path))


async def test_blocks_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await SqliteStore.open(path, block_rows=ROWS)
    await store.apply(appends(0, 24))
    await blocks_through(store, 24)
    before = await store.read_columns(1, 24, 100)
    await store.close()
    store = await SqliteStore.open(path, block_rows=ROWS)
    try:
        assert store.block_stats().through == 24
        assert columns((await store.read_columns(1, 24, 100))[0]) == columns(before[0])
        assert store.block_stats().served == 24
    finally:
        await store.close()


async def test_another_block_size_drops_the_old_blocks(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = await SqliteStore.open(path, block_rows=ROWS)
    await store.apply(appends(0, 24))
    await blocks_through(store, 24)
    await store.close()
    store = await SqliteStore.open(path, block_rows=6)
    try:
        await blocks_through(store, 24)
        assert [(lo, hi) for lo, hi, _ in block_rows_in(path)] == [(1, 6), (7, 12), (13, 18), (19, 24)]
        cols, _ = await store.read_columns(1, 24, 100)
        assert list(cols.seqs) == list(range(1, 25))
    finally:
        await store.close()


async def test_a_store_opened_without_blocks_drops_those_it_holds(tmp_path: Path) -> None:
    """Column blocks turned off (``jetstream.column_blocks = false``, an agent's default):
    blocks built before are dropped at the open -- nothing would keep them in line with the
    messages -- and reads are the aggregate's."""
    path = tmp_path / "s.db"
    store = await SqliteStore.open(path, block_rows=ROWS)
    await store.apply(appends(0, 24))
    await blocks_through(store, 24)
    before = await store.read_columns(1, 24, 100)
    await store.close()
    assert len(block_rows_in(path)) == 3
    store = await SqliteStore.open(path, block_rows=0)
    try:
        assert block_rows_in(path) == []
        await store.apply(appends(24, 16))  # two more ranges sealed: none built
        assert columns((await store.read_columns(1, 24, 100))[0]) == columns(before[0])
        await anyio.sleep(0.2)
        assert block_rows_in(path) == [] and store.block_stats().served == 0
    finally:
        await store.close()


async def test_an_erase_removes_a_block_that_could_not_be_dropped(tmp_path: Path) -> None:
    """Blocks off, and dropping the old ones failed at the open (a full disk): an erased
    message's copy in its block still goes with it."""
    secret = b"SECRET-PAYLOAD-0123456789"
    path = tmp_path / "erase.db"
    store = await SqliteStore.open(path, block_rows=ROWS)
    ops = appends(0, 16)
    ops[4] = Append("orders.x", None, secret, T0 + 4)
    await store.apply(ops)
    await blocks_through(store, 16)
    await store.close()
    conn = sqlite3.connect(path)  # a trigger stands in for the disk that refused the drop
    conn.execute(
        "CREATE TRIGGER keep BEFORE DELETE ON colblocks WHEN (SELECT count(*) FROM colblocks) > 1 "
        "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    )
    conn.commit()
    conn.close()
    store = await SqliteStore.open(path, block_rows=0)
    try:
        assert store._blk_leftover and len(block_rows_in(path)) == 2
        conn = sqlite3.connect(path)
        conn.execute("DROP TRIGGER keep")
        conn.commit()
        conn.close()
        await store.apply([DeleteOp(5, erase=True)])
        assert [lo for lo, _, _ in block_rows_in(path)] == [9]
    finally:
        await store.close()
    assert secret not in path.read_bytes()


async def test_a_store_made_before_blocks_opens_and_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = await SqliteStore.open(path, block_rows=0)
    await store.apply(appends(0, 20))
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE colblocks")  # as a file made before this change
    conn.commit()
    conn.close()
    store = await SqliteStore.open(path, block_rows=ROWS)
    try:
        await blocks_through(store, 16)  # built at open for what is already sealed
        cols, last = await store.read_columns(1, 20, 100)
        assert (list(cols.seqs), last) == (list(range(1, 21)), 20)
        assert store.block_stats().served == 16
    finally:
        await store.close()


async def test_a_damaged_block_is_read_the_other_way_and_rebuilt(pair: Pair) -> None:
    await pair.apply(appends(0, 16))
    await pair.sealed(16)
    conn = sqlite3.connect(pair.blocks.path)
    conn.execute("UPDATE colblocks SET body = x'00112233' WHERE lo = 1")
    conn.commit()
    conn.close()
    await pair.same_reads()
    await pair.settled()
    assert len(colblocks.unpack(0, _body(pair.blocks.path, 1))) == 8


def _body(path: Path, lo: int) -> bytes:
    conn = sqlite3.connect(path)
    try:
        return bytes(conn.execute("SELECT body FROM colblocks WHERE lo = ?", (lo,)).fetchone()[0])
    finally:
        conn.close()


async def test_a_compressed_store_keeps_blocks_of_decoded_rows(tmp_path: Path) -> None:
    clock = FakeClock()
    blocks = await SqliteStore.open(tmp_path / "z.db", wall_clock=clock, block_rows=ROWS, compression="zstd")
    plain = await SqliteStore.open(tmp_path / "p.db", wall_clock=clock, block_rows=0, compression="zstd")
    pair = Pair(blocks, plain)
    try:
        big = [Append("orders.z", None, b"compress me " * (20 + i), T0 + i) for i in range(20)]
        await pair.apply(big + appends(20, 4))
        await pair.sealed(24)
        await pair.same_reads(exact=False)
        assert blocks.block_stats().served > 0
        encodings = sqlite3.connect(blocks.path).execute("SELECT DISTINCT encoding FROM colblocks").fetchall()
        assert encodings == [(colblocks.ZSTD,)]
    finally:
        await blocks.close()
        await plain.close()


async def test_an_encrypted_store_keeps_no_blocks(tmp_path: Path) -> None:
    path = tmp_path / "sealed.db"
    store = await SqliteStore.open(path, block_rows=ROWS, cipher=CipherSpec(b"k" * 32, kdf="hkdf"))
    try:
        await store.apply(appends(0, 24))
        await store.flush()
        time.sleep(0.05)
        cols, _ = await store.read_columns(1, 24, 100)
        assert list(cols.seqs) == list(range(1, 25))
        assert (store.block_stats().through, store.block_stats().built) == (0, 0)
        assert block_rows_in(path) == []
    finally:
        await store.close()


async def test_a_snapshot_restores_into_a_store_that_builds_its_blocks(pair: Pair, tmp_path: Path) -> None:
    await pair.apply(appends(0, 30))
    await pair.apply([DeleteOp(5)])
    await pair.sealed(24)
    chunks = [c async for c in pair.blocks.snapshot()]
    restored = await SqliteStore.open(tmp_path / "restored.db", block_rows=ROWS)
    try:
        await restored.restore(chunks)
        await blocks_through(restored, 24)
        got, _ = await restored.read_columns(1, 30, 100)
        want, _ = await pair.plain.read_columns(1, 30, 100)
        assert columns(got) == columns(want)
        assert restored.block_stats().served > 0
    finally:
        await restored.close()


async def test_many_blocks_in_one_read_with_a_few_holes(tmp_path: Path) -> None:
    """A larger run: 4096-row blocks as in production, reads across block edges and holes."""
    clock = FakeClock()
    blocks = await SqliteStore.open(tmp_path / "b.db", wall_clock=clock)
    plain = await SqliteStore.open(tmp_path / "p.db", wall_clock=clock, block_rows=0)
    pair = Pair(blocks, plain)
    try:
        n = 3 * colblocks.BLOCK_ROWS + 100
        for first in range(0, n, 2000):
            await pair.apply(appends(first, min(2000, n - first)))
        await pair.sealed(3 * colblocks.BLOCK_ROWS)
        await pair.apply([DeleteOp(5000), DeleteOp(9000)])
        for start, limit in ((1, 20_000), (3000, 8192), (4090, 4200), (8000, 100), (12000, 1000)):
            got = await blocks.read_columns(start, n, limit)
            want = await plain.read_columns(start, n, limit)
            assert got[1] == want[1]
            assert columns(got[0]) == columns(want[0])
        assert blocks.block_stats().served > 0
    finally:
        await blocks.close()
        await plain.close()


async def test_an_erased_message_leaves_no_copy_in_its_block(tmp_path: Path) -> None:
    secret = b"SECRET-PAYLOAD-0123456789"
    path = tmp_path / "erase.db"
    store = await SqliteStore.open(path, block_rows=ROWS)
    try:
        ops = appends(0, 16)
        ops[4] = Append("orders.x", None, secret, T0 + 4)
        for i in range(0, 16, 4):
            await store.apply(ops[i : i + 4])
        await blocks_through(store, 16)
        assert secret in _body(path, 1)
        await store.apply([DeleteOp(5, erase=True)])
        with anyio.fail_after(30):  # rebuilt without it
            while store._blk_job_on or store._blk_stale or (1, 8, 7) not in block_rows_in(path):
                await anyio.sleep(0.01)
        cols, _ = await store.read_columns(1, 16, 100)
        assert 5 not in cols.seqs and secret not in bytes(cols.data)
    finally:
        await store.close()
    assert secret not in path.read_bytes()  # the close checkpointed the WAL into the file


async def test_a_store_with_a_file_size_cap_builds_no_blocks(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "capped.db", block_rows=ROWS, max_file_bytes=64 << 20)
    try:
        for i in range(0, 24, 4):
            await store.apply(appends(i, 4))
        await store.flush()
        await anyio.sleep(0.1)
        assert store.block_stats().built == 0
    finally:
        await store.close()


async def test_a_block_that_cannot_be_built_is_left_out_without_a_busy_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", block_rows=ROWS)
    calls = 0

    def broken(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        raise StoreError("columnar read: the sequences are out of order")

    monkeypatch.setattr(store, "_blk_columns", broken)
    try:
        for i in range(0, 24, 4):
            await store.apply(appends(i, 4))
        with anyio.fail_after(30):
            while calls == 0 or store._blk_job_on:
                await anyio.sleep(0.01)
        await anyio.sleep(0.2)
        assert calls <= 3 and store.block_stats().built == 0  # one try per block, then left out
        assert "out of order" in (store.stats().last_error or "")
        cols, _ = await store.read_columns(1, 24, 100)
        assert list(cols.seqs) == list(range(1, 25))
    finally:
        await store.close()


async def test_a_block_job_that_fails_outside_a_build_lets_the_next_commit_queue_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", block_rows=ROWS)
    real, fails = store._blk_due, [True]

    def due() -> Any:
        if fails.pop() if fails else False:
            raise RuntimeError("a bug in the job")
        return real()

    monkeypatch.setattr(store, "_blk_due", due)
    try:
        await store.apply(appends(0, 8))
        with anyio.fail_after(30):
            while fails or store._blk_job_on:
                await anyio.sleep(0.01)
        assert "a bug in the job" in (store.stats().last_error or "")
        await store.apply(appends(8, 8))  # the next commit's kick: the job runs again
        await blocks_through(store, 16)
    finally:
        await store.close()


async def test_no_block_is_written_while_the_disk_is_full(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", block_rows=ROWS)
    try:
        await store.apply(appends(0, 4))
        store._disk_full = True  # as _w_fail leaves it after SQLITE_FULL
        await store.apply(appends(4, 8))  # seals block 0; this success clears the flag
        assert not store._disk_full
        await blocks_through(store, ROWS)
        store._disk_full = True
        assert store._blk_build(1) is False  # sealed, but the disk was full: not written
        assert [r[:2] for r in block_rows_in(store.path)] == [(1, ROWS)]
    finally:
        await store.close()


async def test_a_stream_of_large_messages_gets_no_new_blocks(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "large.db", block_rows=ROWS)
    try:
        for i in range(0, 16, 4):  # small messages: blocks
            await store.apply(appends(i, 4))
        await blocks_through(store, 16)
        big = b"b" * (2 * colblocks.MAX_MEAN_BYTES)
        for i in range(16, 80, 4):  # the mean goes past MAX_MEAN_BYTES: no more
            await store.apply([Append("orders.big", None, big, T0 + j) for j in range(i, i + 4)])
        await store.flush()
        await anyio.sleep(0.2)
        through = store.block_stats().through
        assert through <= 24  # 17..24 may be built: the mean passed the bound within it
        cols, _ = await store.read_columns(1, 80, 1000)
        assert list(cols.seqs) == list(range(1, 81)) and store.block_stats().served == through
    finally:
        await store.close()
