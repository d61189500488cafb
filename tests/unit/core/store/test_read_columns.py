"""``read_columns``: the rows ``range`` returns, as columns, with the sequence the read covers -- for
every store kind (the contract's), and for SQLite stores whose rows are compressed or sealed (read
the row-by-row way), with a property test over arbitrary messages."""

from __future__ import annotations

import sqlite3
from array import array
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import vector
from core.errors import StoreError
from core.store import Append, CipherSpec, DeleteOp, PurgeOp, SqliteStore, StreamStore, sqlite_columns
from core.store.columns import MsgColumns, columns_of, concat
from tests.unit.core.store.conftest import FakeClock, StoreHarness

pytestmark = pytest.mark.anyio

T0 = 1_000_000_000

MESSAGES = [
    ("orders.eu", None, b"one"),
    ("orders.us", b"NATS/1.0\r\nA: b\r\n\r\n", b"\x00\xff binary \x00"),  # NULs, no UTF-8
    ("orders.eu", b"", b""),  # empty headers and an empty payload
    ("caf\u00e9.\u00fc", None, b"x" * 300),  # a subject of multi-byte characters
    ("orders.us", None, b"\xc3\x28"),
    ("other.a", b"NATS/1.0\r\n\r\n", b"y" * 70),
]


def rows_of(cols: MsgColumns) -> list[tuple[int, str, bytes | None, bytes, int]]:
    """Back to StoredMsg-shaped tuples (headers b"" and None both come back as None: the frame
    does not tell them apart)."""
    out = []
    so, ho, do = cols.subject_offsets, cols.header_offsets, cols.data_offsets
    subj, hdrs, data = bytes(cols.subjects), bytes(cols.headers), bytes(cols.data)
    for i, seq in enumerate(cols.seqs):
        h = hdrs[ho[i] : ho[i + 1]]
        subject = subj[so[i] : so[i + 1]].decode()
        out.append((seq, subject, h or None, data[do[i] : do[i + 1]], cols.timestamps[i]))
    return out


def expected(msgs: list) -> list[tuple[int, str, bytes | None, bytes, int]]:
    return [(m.seq, m.subject, m.headers or None, m.data, m.ts) for m in msgs]


async def fill(store: StreamStore, copies: int = 3) -> None:
    ops = [Append(s, h, d, T0 + i) for i, (s, h, d) in enumerate(MESSAGES * copies)]
    await store.apply(ops)


async def check_all_ranges(store: StreamStore) -> None:
    """Every (start, end, limit, filter) over the stream: the same rows as ``range``, and a
    covered sequence that leaves nothing out."""
    last = (await store.state()).last_seq
    for filt in (None, "orders.eu", "orders.*", "caf\u00e9.\u00fc", "nothing.here"):
        for start in (1, 2, 5, last, last + 1):
            for end in (start, last, last + 5):
                for limit in (1, 2, 7, 1000):
                    cols, covered = await store.read_columns(start, end, limit, filt)
                    assert start - 1 <= covered <= max(end, start - 1)
                    assert len(cols) <= limit
                    # exactly the matching messages in [start, covered]: none left out
                    msgs = await store.range(start, covered, 10_000, filt)
                    assert rows_of(cols) == expected(msgs), (start, end, limit, filt, covered)
                    # and progress: the read covers something when there is something to cover
                    if await store.range(start, end, 1, filt):
                        assert covered >= start


async def test_columns_are_the_rows_range_returns(h: StoreHarness) -> None:
    await fill(h.store)
    store = await h.reopen()
    await check_all_ranges(store)


async def test_columns_skip_deleted_sequences(h: StoreHarness) -> None:
    await fill(h.store)
    await h.store.apply([DeleteOp(3), DeleteOp(4), DeleteOp(10), PurgeOp(subject="other.a")])
    store = await h.reopen()
    await check_all_ranges(store)


async def test_columns_are_read_the_same_without_numpy(
    h: StoreHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy is optional (core/vector.py): without it the integer columns are parsed, and the
    offsets summed and joined, by the fallbacks."""
    monkeypatch.setattr(vector, "_NUMPY", False)
    await fill(h.store)
    await h.store.apply([DeleteOp(3), DeleteOp(10)])  # the sequences come as a column too
    store = await h.reopen()
    await check_all_ranges(store)
    cols, _ = await store.read_columns(1, 100, 1000)
    assert rows_of(concat([cols.head(4), columns_of(await store.range(6, 100, 1000))])) == rows_of(cols)


@pytest.mark.parametrize("with_numpy", [True, False])
async def test_a_stored_subject_with_a_space_is_read_by_the_lengths(
    tmp_path: Path, with_numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SQLite store joins subjects with spaces and finds their ends from the spaces. The store
    API refuses a subject with a space, but a file may hold one anyway (written by hand or by an
    older version): the read is then asked again with the lengths, and gives the rows ``range``
    has."""
    if not with_numpy:
        monkeypatch.setattr(vector, "_NUMPY", False)
    path = tmp_path / "s.db"
    store = await SqliteStore.open(path, wall_clock=FakeClock())
    await store.apply([Append(f"s.{i}", None, b"d%d" % i, T0 + i) for i in range(6)])
    await store.close()
    with sqlite3.connect(path) as db:  # behind the store's back
        db.execute("UPDATE msgs SET subject = 'with space' WHERE seq = 2")
        db.execute("UPDATE msgs SET subject = ' lead' WHERE seq = 5")
    store = await SqliteStore.open(path, wall_clock=FakeClock())
    try:
        for start in range(1, 7):
            for limit in (1, 2, 100):
                cols, covered = await store.read_columns(start, 6, limit)
                assert rows_of(cols) == expected(await store.range(start, covered, 100)), (start, limit)
        cols, _ = await store.read_columns(1, 6, 100)
        assert [s for _q, s, *_r in rows_of(cols)][:2] == ["s.0", "with space"]
    finally:
        await store.close()


def test_subjects_joined_by_spaces_give_their_offsets() -> None:
    assert sqlite_columns._spaced(b"ab c.d e", 3) == (array("i", [0, 2, 5, 6]), b"abc.de")
    assert sqlite_columns._spaced(b"  ", 3) == (array("i", [0, 0, 0, 0]), b"")
    assert sqlite_columns._spaced(b"a b c", 2) is None  # a subject with a space: ask for the lengths
    many = [f"s.{i}" for i in range(3 * sqlite_columns.NUMPY_FROM)]  # numpy's way
    offsets, joined = sqlite_columns._spaced(" ".join(many).encode(), len(many)) or ((), b"")
    assert joined == "".join(many).encode()
    assert [joined[a:b].decode() for a, b in pairwise(offsets)] == many


async def test_an_empty_or_inverted_range_covers_nothing(h: StoreHarness) -> None:
    await fill(h.store, 1)
    cols, covered = await h.store.read_columns(5, 4, 10)
    assert (len(cols), covered) == (0, 4)
    cols, covered = await h.store.read_columns(3, 9, 0)
    assert (len(cols), covered) == (0, 2)


@pytest.mark.parametrize(
    "options",
    [{"compression": "zstd"}, {"cipher": CipherSpec(b"k" * 32, kdf="hkdf")}],
    ids=["zstd", "sealed"],
)
async def test_compressed_or_sealed_rows_are_read_one_by_one(tmp_path: Path, options: dict) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", wall_clock=FakeClock(), **options)
    try:
        await fill(store)
        await check_all_ranges(store)
    finally:
        await store.close()


async def test_a_store_that_changed_compression_mixes_both_kinds_of_rows(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", wall_clock=FakeClock(), compression="zstd")
    await fill(store)
    await store.close()
    store = await SqliteStore.open(tmp_path / "s.db", wall_clock=FakeClock())
    try:
        await fill(store)
        await check_all_ranges(store)
    finally:
        await store.close()


def test_fitting_and_head_cut_a_prefix_by_bytes() -> None:
    msgs = [(i + 1, "a.b", None, b"x" * (10 * i), i) for i in range(5)]  # rows of 3 + 10*i bytes
    cols = columns_of(msgs)
    assert cols.bytes_before(2, 1) == (3 + 0 + 1) + (3 + 10 + 1)
    assert cols.fitting(0, 1) == 0
    assert cols.fitting(18, 1) == 2
    assert cols.fitting(17, 1) == 1
    assert cols.fitting(10**9, 1) == 5
    head = cols.head(2)
    assert rows_of(head) == [(1, "a.b", None, b"", 0), (2, "a.b", None, b"x" * 10, 1)]
    assert rows_of(concat([cols.head(2), columns_of(msgs[2:])])) == rows_of(cols)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a.b", "a.c", "\u00e9.x"]),
            st.one_of(st.none(), st.binary(max_size=30)),
            st.binary(max_size=60),
            st.booleans(),  # deleted afterwards
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 50),
)
def test_any_messages_read_as_columns_as_by_range(tmp_path_factory, rows, limit) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    async def run() -> None:
        store = await SqliteStore.open(tmp_path_factory.mktemp("p") / "s.db", wall_clock=FakeClock())
        try:
            await store.apply([Append(s, h, d, T0 + i) for i, (s, h, d, _x) in enumerate(rows)])
            gone = [DeleteOp(i + 1) for i, r in enumerate(rows) if r[3]]
            if gone:
                await store.apply(gone)
            last = (await store.state()).last_seq
            for filt in (None, "a.b"):
                start = 1
                while start <= last:
                    cols, covered = await store.read_columns(start, last, limit, filt)
                    assert start - 1 <= covered <= last and len(cols) <= limit
                    assert rows_of(cols) == expected(await store.range(start, covered, 10_000, filt))
                    if covered < start:
                        assert await store.range(start, last, 1, filt) == []
                        break
                    start = covered + 1
        finally:
            await store.close()

    asyncio.run(run())


async def test_a_long_run_of_deleted_sequences_is_covered_in_one_step(h: StoreHarness) -> None:
    """An unfiltered read that finds nothing covers up to the next message, however far."""
    await h.store.apply([Append("a", None, b"1", T0), Append("a", None, b"2", T0 + 1, seq=10**12)])
    store = await h.reopen()
    seen: list[int] = []
    start, calls = 2, 0
    while start <= 10**12:
        cols, covered = await store.read_columns(start, 10**12, 100)
        seen += cols.seqs
        start, calls = covered + 1, calls + 1
    assert seen == [10**12] and calls <= 2


@pytest.mark.parametrize("with_numpy", [True, False])
def test_a_column_past_an_i32_offset_is_a_store_error(
    with_numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not with_numpy:
        monkeypatch.setattr(vector, "_NUMPY", False)
    elif vector.numpy() is None:
        pytest.skip("numpy is not installed")
    else:  # numpy even for these few rows (it parses from NUMPY_FROM rows)
        monkeypatch.setattr(sqlite_columns, "NUMPY_FROM", 1)
    assert list(sqlite_columns._offsets("3,0,4", 3, "data")) == [0, 3, 3, 7]
    with pytest.raises(StoreError, match="larger than 2 GiB"):
        sqlite_columns._offsets(f"{(1 << 31) - 1},1", 2, "data")


@pytest.mark.parametrize("ts", ["x", 1.5])
def test_a_damaged_row_in_a_small_read_is_a_store_error(ts: object) -> None:
    """A few rows (no numpy: below NUMPY_FROM) whose timestamp or sequence text is not an
    integer of its column's type (a file changed outside leafjet): a StoreError, as numpy's
    count check gives for a larger read -- not a ValueError or OverflowError."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE msgs (seq INTEGER PRIMARY KEY, subject, hdr, data, ts, flags)")
    conn.execute("INSERT INTO msgs VALUES (1, 'a', NULL, x'00', 5, 0), (3, 'b', NULL, x'01', ?, 0)", (ts,))
    for sql, params in (
        (sqlite_columns.range_sql(True), (1, 3)),
        (sqlite_columns.subject_sql(), ("b", 1, 3, 5)),
    ):
        with pytest.raises(StoreError, match="timestamps"):
            sqlite_columns.parse(conn.execute(sql, params).fetchone())
