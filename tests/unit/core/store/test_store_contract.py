"""The StreamStore contract, run against every implementation: memory, sqlite, and sqlite reopened between
the writes and the reads (``h.reopen()``; a no-op for the others)."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest

from core.store import (
    Append,
    AppendBatch,
    DeleteOp,
    DelMetaOp,
    ExpireOp,
    InvalidOperation,
    PositionMismatch,
    PurgeOp,
    SequenceMismatch,
    SetMetaOp,
    SkipOp,
    SourcePosOp,
    StoreClosed,
    StreamStore,
    file_msg_size,
    msg_size,
)
from tests.unit.core.store.conftest import StoreHarness

pytestmark = pytest.mark.anyio

T0 = 1_000_000_000


async def fill(store: StreamStore, subjects: list[str], data: bytes = b"x") -> list[int]:
    """One message per subject, in order, with ts = T0 + seq."""
    st = await store.state()
    ops = [Append(s, None, data + str(i).encode(), T0 + st.last_seq + 1 + i) for i, s in enumerate(subjects)]
    return await store.apply(ops)  # type: ignore[return-value]


async def seqs(store: StreamStore) -> list[int]:
    return [m.seq for m in await store.range(1, limit=10_000)]


async def test_append_assigns_increasing_sequences_and_get_returns_the_message(h: StoreHarness) -> None:
    s1, ts1 = await h.store.append("orders.eu", b"NATS/1.0\r\nA: b\r\n\r\n", b"one")
    s2, ts2 = await h.store.append("orders.us", None, b"two", ts=42)
    s3, _ = await h.store.append("orders.eu", b"", b"")
    assert (s1, s2, s3) == (1, 2, 3)
    assert ts2 == 42 and ts1 > 0
    store = await h.reopen()
    m1, m2, m3 = await store.get(1), await store.get(2), await store.get(3)
    assert m1 is not None and m2 is not None and m3 is not None
    assert (m1.seq, m1.subject, m1.headers, m1.data, m1.ts) == (
        1,
        "orders.eu",
        b"NATS/1.0\r\nA: b\r\n\r\n",
        b"one",
        ts1,
    )
    assert (m2.headers, m2.data, m2.ts) == (None, b"two", 42)
    assert (m3.headers, m3.data) == (b"", b"")
    assert await store.get(4) is None
    assert await store.get(0) is None


async def test_state_counts_messages_bytes_and_subjects_the_reference_way(h: StoreHarness) -> None:
    await h.store.apply([Append("a.b", b"hh", b"data", 10), Append("a.c", None, b"xyz", 20)])
    store = await h.reopen()
    st = await store.state()
    assert st.msgs == 2
    # each store counts as the reference's store of its kind: memory, or file (the SQLite store)
    assert st.bytes == store.size_of("a.b", b"hh", b"data") + store.size_of("a.c", None, b"xyz")
    assert st.bytes in ((3 + 2 + 4 + 16) + (3 + 3 + 16), (3 + 4 + 30 + 2 + 4) + (3 + 3 + 30))
    assert msg_size("a.b", b"hh", b"data") == 3 + 2 + 4 + 16
    assert file_msg_size("a.b", b"hh", b"data") == 3 + 4 + 30 + 2 + 4
    assert (st.first_seq, st.first_ts, st.last_seq, st.last_ts) == (1, 10, 2, 20)
    assert (st.num_subjects, st.num_deleted, st.consumer_count) == (2, 0, 0)
    assert st.deleted is None
    assert (await store.state(with_deleted=True)).deleted == ()


async def test_new_stream_is_empty_with_first_seq_after_last(h: StoreHarness) -> None:
    st = await h.store.state(with_deleted=True)
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.first_ts, st.last_ts) == (0, 0, 1, 0, 0, 0)
    assert await h.store.first_after(1) is None
    assert await h.store.last_by_subject(">") is None
    assert await h.store.range(1) == []


async def test_last_by_subject_follows_every_change_of_the_subject(h: StoreHarness) -> None:
    # asked again after each change: a store that remembers answers must forget the stale ones
    async def last(subject: str = "kv.k") -> int | None:
        m = await h.store.last_by_subject(subject)
        return None if m is None else m.seq

    assert await last() is None
    await fill(h.store, ["kv.k", "kv.j"])
    assert (await last(), await last()) == (1, 1)
    await fill(h.store, ["kv.k"])
    assert await last() == 3
    await h.store.apply([DeleteOp(3)])
    assert await last() == 1
    await fill(h.store, ["kv.k", "kv.k"])
    await h.store.apply([PurgeOp(subject="kv.k", keep=1)])
    assert await last() == 5
    await h.store.apply([PurgeOp(subject="kv.k")])
    assert (await last(), await last("kv.j")) == (None, 2)
    await fill(h.store, ["kv.k"])
    await h.store.apply([PurgeOp(keep=1)])
    assert (await last(), await last("kv.j")) == (6, None)
    await h.reopen()
    assert await last() == 6


async def test_last_by_subject_with_literal_and_wildcard_filters(h: StoreHarness) -> None:
    await fill(h.store, ["a.b.c", "a.x.c", "a.b.d", "b.b.c", "a.b.c", "a.y"])
    store = await h.reopen()

    async def last(f: str) -> int | None:
        m = await store.last_by_subject(f)
        return None if m is None else m.seq

    assert await last("a.b.c") == 5
    assert await last("a.*.c") == 5
    assert await last("a.x.*") == 2
    assert await last("a.>") == 6
    assert await last("*.b.c") == 5
    assert await last("b.>") == 4
    assert await last(">") == 6
    assert await last("a.*") == 6
    assert await last("nope") is None
    assert await last("a.*.c.>") is None


async def test_first_after_finds_the_first_matching_message_at_or_after_a_sequence(h: StoreHarness) -> None:
    await fill(h.store, ["a.1", "b.1", "a.2", "b.2", "a.1", "c.1"])
    await h.store.apply([DeleteOp(3)])
    store = await h.reopen()

    async def fa(seq: int, f: str | None = None) -> int | None:
        m = await store.first_after(seq, f)
        return None if m is None else m.seq

    assert await fa(1) == 1
    assert await fa(3) == 4  # 3 is deleted
    assert await fa(0, "b.*") == 2
    assert await fa(3, "b.*") == 4
    assert await fa(5, "b.*") is None
    assert await fa(2, "a.1") == 5
    assert await fa(2, "a.*") == 5
    assert await fa(1, ">") == 1
    assert await fa(6, "*.1") == 6
    assert await fa(7) is None
    assert await fa(1, "zzz") is None
    assert await fa(-5) == 1


async def test_sequences_beyond_int64_hold_no_message(h: StoreHarness) -> None:
    """A client may name any uint64 sequence: beyond int64 there is nothing, and no error."""
    await fill(h.store, ["a.1", "b.1"])
    for seq in (1 << 63, (1 << 64) - 1):
        assert await h.store.get(seq) is None
        assert await h.store.first_after(seq) is None
        assert await h.store.first_after(seq, "a.*") is None
        assert await h.store.first_after(seq, "a.1") is None
        assert await h.store.num_pending(seq) == 0
        assert await h.store.num_pending(seq, "*.1") == 0
        assert await h.store.range(seq) == []
    assert [m.seq for m in await h.store.range(1, 1 << 64)] == [1, 2]
    assert await h.store.num_pending(-(1 << 64), "*.1") == 2


async def test_range_honours_start_end_limit_and_filter(h: StoreHarness) -> None:
    await fill(h.store, ["x.a", "x.b", "y.a", "x.a", "y.b", "x.c"])
    await h.store.apply([DeleteOp(2)])
    store = await h.reopen()

    async def r(*a: object, **kw: object) -> list[int]:
        return [m.seq for m in await store.range(*a, **kw)]  # type: ignore[arg-type]

    assert await r(1) == [1, 3, 4, 5, 6]
    assert await r(2, 4) == [3, 4]
    assert await r(1, limit=2) == [1, 3]
    assert await r(1, subject_filter="x.*") == [1, 4, 6]
    assert await r(2, 5, subject_filter="x.a") == [4]
    assert await r(1, subject_filter="*.a", limit=2) == [1, 3]
    assert await r(1, subject_filter=">") == [1, 3, 4, 5, 6]
    assert await r(5, 4) == []
    assert await r(1, limit=0) == []
    assert await r(7) == []
    msgs = await store.range(4, 4)
    assert [(m.subject, m.data) for m in msgs] == [("x.a", b"x3")]


async def test_purge_everything_keeps_last_seq_and_reports_first_seq_after_it(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b", "c"])
    assert await h.store.apply([PurgeOp()]) == [3]
    store = await h.reopen()
    st = await store.state(with_deleted=True)
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq, st.num_subjects, st.num_deleted) == (
        0,
        0,
        4,
        3,
        0,
        0,
    )
    assert st.first_ts == 0 and st.last_ts == T0 + 3
    assert st.deleted == ()
    seq, _ = await store.append("d", None, b"after")
    assert seq == 4
    store = await h.reopen()
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (1, 4, 4)
    assert await store.apply([PurgeOp(subject=">")]) == [1]
    assert (await store.state()).first_seq == 5


async def test_sequences_continue_after_purge_and_restart(h: StoreHarness) -> None:
    await fill(h.store, ["a"] * 5)
    await h.store.apply([PurgeOp()])
    store = await h.reopen()
    assert (await store.state()).last_seq == 5
    seq, _ = await store.append("a", None, b"z")
    assert seq == 6


async def test_purge_by_subject_filter(h: StoreHarness) -> None:
    await fill(h.store, ["kv.a", "kv.b", "other", "kv.a", "kv.c.d"])
    assert await h.store.apply([PurgeOp(subject="kv.*")]) == [3]
    store = await h.reopen()
    assert await seqs(store) == [3, 5]
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted) == (2, 3, 5, 1)
    assert await store.subjects_state() == {"other": 1, "kv.c.d": 1}
    assert await store.apply([PurgeOp(subject="kv.>")]) == [1]
    assert await store.apply([PurgeOp(subject="nothing.here")]) == [0]
    store = await h.reopen()
    assert await seqs(store) == [3]
    assert (await store.state()).last_seq == 5


async def test_purge_keep_leaves_the_newest_messages(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b", "a", "b", "a", "b"])
    await h.store.apply([DeleteOp(5)])
    assert await h.store.apply([PurgeOp(keep=3)]) == [2]
    store = await h.reopen()
    assert await seqs(store) == [3, 4, 6]
    assert await store.apply([PurgeOp(keep=10)]) == [0]
    assert await store.apply([PurgeOp(subject="b", keep=1)]) == [1]
    store = await h.reopen()
    assert await seqs(store) == [3, 6]
    st = await store.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (3, 6, 2)


async def test_purge_keep_counts_from_the_newest_whether_few_or_many_go(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b"] * 6)  # seqs 1..12: a on odd, b on even
    await h.store.apply([DeleteOp(11), DeleteOp(4)])
    assert await h.store.apply([PurgeOp(keep=8)]) == [2]  # few go: 1 and 2
    assert await seqs(h.store) == [3, 5, 6, 7, 8, 9, 10, 12]
    assert await h.store.apply([PurgeOp(keep=2)]) == [6]  # many go
    assert await h.store.apply([PurgeOp(subject="a", keep=1)]) == [0]  # only 12 (b) and 10 (b) left
    store = await h.reopen()
    assert await seqs(store) == [10, 12]
    await fill(store, ["a"] * 5)  # 13..17
    assert await store.apply([PurgeOp(subject="a", keep=4)]) == [1]  # few of the subject go
    assert await store.apply([PurgeOp(subject="a", keep=1)]) == [3]  # many go
    store = await h.reopen()
    assert await seqs(store) == [10, 12, 17]


async def test_purge_keep_dropping_hundreds_keeps_the_counts(h: StoreHarness) -> None:
    # past the few-rows path of the SQLite store (RETURNING_MAX), for the stream and one subject
    await fill(h.store, ["a", "b"] * 300)  # seqs 1..600: a on odd, b on even
    await h.store.apply([DeleteOp(599)])
    assert await h.store.apply([PurgeOp(subject="a", keep=5)]) == [294]
    assert await h.store.apply([PurgeOp(keep=250)]) == [55]  # b 2..110
    store = await h.reopen()
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (250, 112, 600)
    assert await store.subjects_state() == {"a": 5, "b": 245}
    assert st.bytes == sum(
        store.size_of(m.subject, m.headers, m.data) for m in await store.range(1, limit=1000)
    )


async def test_adjacent_subject_trims_in_one_call_act_one_after_another(h: StoreHarness) -> None:
    # A batch of KV puts ends with one keep-N purge per key; the SQLite store runs a run of them
    # as one statement. Each result must still be that purge's own, as if applied alone in order.
    await fill(h.store, ["k.1", "k.2", "k.3", "k.1", "k.2", "k.1", "big"] + ["big"] * 20)  # seqs 1..27
    await h.store.apply([DeleteOp(5)])  # k2's second
    results = await h.store.apply(
        [
            Append("k.2", None, b"new", T0),  # 28
            PurgeOp(subject="k.1", keep=1),  # 1, 4 go
            PurgeOp(subject="k.2", keep=1),  # 2 goes
            PurgeOp(subject="k.3", keep=1),  # alone: nothing goes
            PurgeOp(subject="k.1", keep=1),  # the same subject again: nothing left to go
            PurgeOp(subject="big", keep=1),  # many: 7..26 go
            PurgeOp(subject="nokey", keep=1),
            PurgeOp(subject="k.*", keep=2),  # a wildcard ends the run; of 3, 6 and 28, 3 goes
            PurgeOp(subject="k.2", keep=2),
        ]
    )
    assert results == [28, 2, 1, 0, 0, 20, 0, 1, 0]
    store = await h.reopen()
    assert await seqs(store) == [6, 27, 28]
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (3, 6, 28)
    assert await store.subjects_state() == {"big": 1, "k.1": 1, "k.2": 1}
    kept = await store.range(1, limit=100)
    assert st.bytes == sum(store.size_of(m.subject, m.headers, m.data) for m in kept)
    last = await store.last_by_subject("k.2")
    assert last is not None and (last.seq, last.data) == (28, b"new")


async def test_purge_up_to_seq_removes_below_it(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b", "a", "b", "a"])
    assert await h.store.apply([PurgeOp(up_to_seq=3)]) == [2]
    assert await h.store.apply([PurgeOp(subject="a", up_to_seq=5)]) == [1]
    assert await h.store.apply([PurgeOp(up_to_seq=1)]) == [0]
    store = await h.reopen()
    assert await seqs(store) == [4, 5]
    st = await store.state()
    assert (st.first_seq, st.last_seq) == (4, 5)


async def test_purge_up_to_seq_beyond_the_end_moves_last_seq_forward(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b"])
    assert await h.store.apply([PurgeOp(up_to_seq=10)]) == [2]
    store = await h.reopen()
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 10, 9)
    seq, _ = await store.append("a", None, b"next")
    assert seq == 10
    # With a filter, the sequence counters never move.
    assert await store.apply([PurgeOp(subject="a", up_to_seq=100)]) == [1]
    assert (await store.state()).last_seq == 10


async def test_purge_keep_and_up_to_seq_cannot_combine() -> None:
    with pytest.raises(InvalidOperation):
        PurgeOp(keep=1, up_to_seq=5)
    with pytest.raises(InvalidOperation):
        PurgeOp(keep=0)
    with pytest.raises(InvalidOperation):
        PurgeOp(subject="a..b")


async def test_interior_delete_is_counted_and_listed(h: StoreHarness) -> None:
    await fill(h.store, ["a"] * 6)
    assert await h.store.apply([DeleteOp(3), DeleteOp(4, erase=True), DeleteOp(3), DeleteOp(99)]) == [
        True,
        True,
        False,
        False,
    ]
    store = await h.reopen()
    st = await store.state(with_deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (4, 1, 6, 2, (3, 4))
    assert await store.get(4) is None


async def test_deleting_the_first_moves_first_seq_and_the_last_keeps_last_seq(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b", "c"])
    await h.store.apply([DeleteOp(1), DeleteOp(3)])
    store = await h.reopen()
    st = await store.state(with_deleted=True)
    assert (st.msgs, st.first_seq, st.first_ts, st.last_seq, st.last_ts) == (1, 2, T0 + 2, 3, T0 + 3)
    assert (st.num_deleted, st.deleted) == (1, (3,))
    await store.apply([DeleteOp(2)])
    st = await store.state(with_deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (0, 4, 3, 0, ())
    assert await store.subjects_state() == {}


async def test_expire_removes_old_messages_from_the_front(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b", "c", "d"])  # ts = T0+1 .. T0+4
    assert await h.store.apply([ExpireOp(T0 + 3)]) == [2]
    assert await h.store.apply([ExpireOp(T0 + 3)]) == [0]
    store = await h.reopen()
    assert await seqs(store) == [3, 4]
    assert await store.apply([ExpireOp(T0 + 100)]) == [2]
    store = await h.reopen()
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts) == (0, 5, 4, T0 + 4)


async def test_expire_stops_at_the_first_unexpired_message(h: StoreHarness) -> None:
    await h.store.apply([Append("a", None, b"", 10), Append("a", None, b"", 50), Append("a", None, b"", 20)])
    assert await h.store.apply([ExpireOp(30)]) == [1]
    store = await h.reopen()
    assert await seqs(store) == [2, 3]


async def test_skip_advances_last_seq_without_a_message(h: StoreHarness) -> None:
    assert await h.store.apply([SkipOp(5, ts=77)]) == [True]
    store = await h.reopen()
    st = await store.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts) == (0, 6, 5, 77)
    assert (await store.append("a", None, b""))[0] == 6
    assert await store.apply([SkipOp(8), SkipOp(7)]) == [True, False]
    store = await h.reopen()
    st = await store.state(with_deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (1, 6, 8, 2, (7, 8))
    assert (await store.append("a", None, b""))[0] == 9


async def test_explicit_sequence_append_keeps_the_origin_numbering(h: StoreHarness) -> None:
    assert await h.store.apply([Append("m", None, b"1", 1, seq=10), Append("m", None, b"2", 2, seq=13)]) == [
        10,
        13,
    ]
    assert await h.store.apply([Append("m", None, b"3", 3)]) == [14]
    store = await h.reopen()
    st = await store.state(with_deleted=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.deleted) == (3, 10, 14, (11, 12))


async def test_a_call_with_a_sequence_behind_the_stream_applies_nothing(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b"])
    with pytest.raises(SequenceMismatch):
        await h.store.apply(
            [Append("c", None, b"", 1), SetMetaOp("k", b"v"), Append("c", None, b"", 1, seq=3)]
        )
    with pytest.raises(SequenceMismatch):
        await h.store.apply([Append("c", None, b"", 1, seq=2)])
    store = await h.reopen()
    st = await store.state()
    assert (st.msgs, st.last_seq) == (2, 2)
    assert await store.meta_get("k") is None
    assert (await store.append("c", None, b""))[0] == 3


async def test_submitted_calls_apply_in_order_and_report_through_their_awaitables(h: StoreHarness) -> None:
    first = await h.store.submit([Append("a", None, b"1", 1), Append("b", None, b"2", 2)])
    bad = await h.store.submit([Append("c", None, b"", 3, seq=1)])  # behind the stream once `first` lands
    empty = await h.store.submit([])
    last = await h.store.submit([Append("a", None, b"3", 4)])
    assert await first == [1, 2]
    with pytest.raises(SequenceMismatch):
        await bad
    assert await empty == []
    assert await last == [3]
    store = await h.reopen()
    assert [(m.seq, m.data) for m in await store.range(1)] == [(1, b"1"), (2, b"2"), (3, b"3")]


async def test_meta_is_written_in_the_same_call_as_messages(h: StoreHarness) -> None:
    res = await h.store.apply(
        [
            Append("a", None, b"x", 1),
            SetMetaOp("dedup/abc", b"1"),
            SetMetaOp("dedup/abd", b"2"),
            SetMetaOp("consumer/c1", b"\x00\xff"),
        ]
    )
    assert res == [1, None, None, None]
    assert await h.store.apply([SetMetaOp("dedup/abc", b"3"), DelMetaOp("dedup/abd"), DelMetaOp("zz")]) == [
        None,
        True,
        False,
    ]
    store = await h.reopen()
    assert await store.meta_get("dedup/abc") == b"3"
    assert await store.meta_get("dedup/abd") is None
    assert await store.meta_items("dedup/") == [("dedup/abc", b"3")]
    assert await store.meta_items() == [("consumer/c1", b"\x00\xff"), ("dedup/abc", b"3")]
    # Meta survives a purge (duplicate tracking does, in the reference).
    await store.apply([PurgeOp()])
    store = await h.reopen()
    assert await store.meta_get("consumer/c1") == b"\x00\xff"


async def test_a_source_position_commits_with_the_messages_it_stored_and_survives_reopen(
    h: StoreHarness,
) -> None:
    """A sourcing stream writes the last upstream sequence of each source in the same call as
    the messages: both are there after a reopen, or (a refused call) neither."""
    assert await h.store.source_positions() == {}
    res = await h.store.apply(
        [Append("a", None, b"1", 1), Append("a", None, b"2", 2), SourcePosOp("ORDERS > >", 7)]
    )
    assert res == [1, 2, None]
    with pytest.raises(SequenceMismatch):  # the call is refused whole: no message, no position
        await h.store.apply(
            [Append("a", None, b"3", 3), SourcePosOp("ORDERS > >", 9), Append("a", None, b"x", 4, seq=1)]
        )
    await h.store.apply([SourcePosOp("OTHER:abc orders.> >", 3)])
    store = await h.reopen()
    assert await store.source_positions() == {"ORDERS > >": 7, "OTHER:abc orders.> >": 3}
    assert [m.data for m in await store.range(1)] == [b"1", b"2"]
    # Purges and deletes leave the positions (a purged sourcing stream does not source again).
    await store.apply([PurgeOp(), SourcePosOp("ORDERS > >", 8)])
    store = await h.reopen()
    assert await store.source_positions() == {"ORDERS > >": 8, "OTHER:abc orders.> >": 3}
    # A snapshot carries them.
    chunks = [c async for c in store.snapshot()]
    target = await h.fresh()
    await target.restore(chunks)
    assert await target.source_positions() == {"ORDERS > >": 8, "OTHER:abc orders.> >": 3}
    with pytest.raises(InvalidOperation):
        SourcePosOp("x", -1)


async def test_a_conditional_source_position_applies_only_over_the_one_it_expects(h: StoreHarness) -> None:
    """``SourcePosOp(expect=...)``: the call applies only if the stored position is the expected
    one (0 when none is stored); otherwise nothing of it is -- a source's batch submitted behind
    one that failed must not commit. Calls before it in one group commit are honoured."""
    key = "ORDERS > >"
    with pytest.raises(PositionMismatch):  # nothing stored yet: the position is 0
        await h.store.apply([Append("a", None, b"0", 1), SourcePosOp(key, 3, expect=2)])
    assert (await h.store.state()).last_seq == 0
    assert await h.store.apply([Append("a", None, b"1", 1), SourcePosOp(key, 3, expect=0)]) == [1, None]
    # submitted back to back (one transaction on a durable store): the second sees the first's
    first = await h.store.submit([Append("a", None, b"2", 2), SourcePosOp(key, 5, expect=3)])
    second = await h.store.submit([Append("a", None, b"3", 3), SourcePosOp(key, 9, expect=5)])
    stale = await h.store.submit([Append("a", None, b"x", 4), SourcePosOp(key, 12, expect=7)])
    after = await h.store.submit([Append("a", None, b"4", 5), SourcePosOp(key, 11, expect=9)])
    assert await first == [2, None] and await second == [3, None]
    with pytest.raises(PositionMismatch) as refused:
        await stale
    assert (refused.value.expected, refused.value.stored) == (7, 9)
    assert await after == [4, None]  # a refused call is refused alone
    store = await h.reopen()
    assert await store.source_positions() == {key: 11}
    assert [m.data for m in await store.range(1)] == [b"1", b"2", b"3", b"4"]
    with pytest.raises(InvalidOperation):
        SourcePosOp(key, 1, expect=-1)


async def test_an_append_batch_stores_what_its_appends_would(h: StoreHarness) -> None:
    """``AppendBatch`` (columns) stores, counts and numbers its messages as the same run of
    ``Append`` ops does, in one call with other ops, and survives a reopen."""
    subjects = ["a.1", "a.2", "a.1", "b"]
    headers = [None, b"NATS/1.0\r\nX: 1\r\n\r\n", None, b"NATS/1.0\r\n\r\n"]
    data = [b"1", b"22", b"", b"4444"]
    await h.store.apply([Append("z", None, b"0", 5)])
    res = await h.store.apply([AppendBatch(subjects, headers, data, 7), SourcePosOp("S > >", 40, expect=0)])
    assert res == [5, None]
    res = await h.store.apply([AppendBatch(["c"], [None], [b"c"], 8), Append("d", None, b"d", 9)])
    assert res == [6, 7]
    store = await h.reopen()
    st = await store.state()
    expected_bytes = sum(
        store.size_of(s, hd, d)
        for s, hd, d in [
            ("z", None, b"0"),
            *zip(subjects, headers, data, strict=True),
            ("c", None, b"c"),
            ("d", None, b"d"),
        ]
    )
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts, st.bytes) == (7, 1, 7, 9, expected_bytes)
    msgs = await store.range(2, 5)
    assert [(m.seq, m.subject, m.headers, m.data, m.ts) for m in msgs] == [
        (i + 2, s, hd, d, 7) for i, (s, hd, d) in enumerate(zip(subjects, headers, data, strict=True))
    ]
    assert await store.subjects_state() == {"z": 1, "a.1": 2, "a.2": 1, "b": 1, "c": 1, "d": 1}
    assert await store.source_positions() == {"S > >": 40}
    for bad in (
        lambda: AppendBatch([], [], [], 1),
        lambda: AppendBatch(["a"], [None, None], [b"x"], 1),
        lambda: AppendBatch(["a.*"], [None], [b"x"], 1),
        lambda: AppendBatch(["a"], ["h"], [b"x"], 1),  # type: ignore[list-item]
        lambda: AppendBatch(["a"], [None], ["x"], 1),  # type: ignore[list-item]
        lambda: AppendBatch(["a"], [None], [b"x"], -1),
    ):
        with pytest.raises(InvalidOperation):
            bad()


async def test_a_large_append_batch_stores_what_its_appends_would(h: StoreHarness) -> None:
    """A batch of more rows than the live tail keeps and than one INSERT holds (the SQLite
    store inserts its full chunks straight from the columns, the rest as rows), between two
    appends of the same call: stored, counted and read as those appends would be -- by a live
    read right after the commit too (the transaction is no tail: its rows are not all kept)."""
    n = 3 * 64 + 9
    subjects = [f"s.{i % 5}" for i in range(n)]
    headers = [None if i % 3 else b"NATS/1.0\r\nX: %d\r\n\r\n" % i for i in range(n)]
    data = [b"%d" % i * (i % 7) for i in range(n)]
    await h.store.apply([Append("z", None, b"0", 5)])
    res = await h.store.apply(
        [Append("y", None, b"y", 6), AppendBatch(subjects, headers, data, 7), Append("x", None, b"x", 8)]
    )
    assert res == [2, n + 2, n + 3]
    expected = [
        (2, "y", None, b"y", 6),
        *[(i + 3, s, hd, d, 7) for i, (s, hd, d) in enumerate(zip(subjects, headers, data, strict=True))],
        (n + 3, "x", None, b"x", 8),
    ]
    live = await h.store.range(2, n + 3)  # starts right after the last sequence before the commit
    assert [(m.seq, m.subject, m.headers, m.data, m.ts) for m in live] == expected
    cols, last = await h.store.read_columns(2, n + 3, n + 10)
    assert last == n + 3 and list(cols.seqs) == [e[0] for e in expected]
    store = await h.reopen()
    st = await store.state()
    sizes = [store.size_of(s, hd, d) for _seq, s, hd, d, _ts in expected]
    assert (st.msgs, st.last_seq, st.bytes) == (n + 3, n + 3, store.size_of("z", None, b"0") + sum(sizes))
    msgs = await store.range(2, n + 3)
    assert [(m.seq, m.subject, m.headers, m.data, m.ts) for m in msgs] == expected
    assert (await store.subjects_state())["s.0"] == len(range(0, n, 5))


_N = 70  # more rows than the live tail keeps (TAIL_MAX_ROWS): the SQLite store inserts them from the columns
_BATCH_SHAPES = {
    "one subject, all with headers": (
        ["src.a"] * _N,
        [b"NATS/1.0\r\nNats-Stream-Source: S %d\r\n\r\n" % i for i in range(_N)],
        [b"x" * i for i in range(_N)],
    ),
    "one subject, none with headers, all empty": (["e"] * _N, [None] * _N, [b""] * _N),
    "empty headers and empty data": (
        [f"s.{i % 2}" for i in range(_N)],
        [b"" if i % 2 else None for i in range(_N)],
        [b"" if i % 3 else b"d" for i in range(_N)],
    ),
    "UTF-8 subjects": (
        [("grüße.ü" if i % 4 else "a.b") for i in range(_N)],
        [None] * _N,
        [b"\x00\xff" * (i % 3) for i in range(_N)],
    ),
    "one UTF-8 subject": (["日本.語"] * _N, [b"h"] * _N, [b"%d" % i for i in range(_N)]),
}


@pytest.mark.parametrize("shape", list(_BATCH_SHAPES))
async def test_a_large_append_batch_of_any_shape_stores_what_its_appends_would(
    h: StoreHarness, shape: str
) -> None:
    """Every shape of a large batch (one subject or many, headers absent, empty or present,
    empty data, subjects beyond ASCII) reads back as its appends would have stored it, with
    their sizes, before and after a reopen; and a removal takes off what each message added."""
    subjects, headers, data = _BATCH_SHAPES[shape]
    assert await h.store.apply([AppendBatch(subjects, headers, data, 9)]) == [_N]
    expected = [
        (i + 1, s, hd, d, 9) for i, (s, hd, d) in enumerate(zip(subjects, headers, data, strict=True))
    ]
    sizes = sum(h.store.size_of(s, hd, d) for s, hd, d in zip(subjects, headers, data, strict=True))
    for reopen in (False, True):
        store = await h.reopen() if reopen else h.store
        msgs = await store.range(1, _N)
        assert [(m.seq, m.subject, m.headers, m.data, m.ts) for m in msgs] == expected
        st = await store.state()
        assert (st.msgs, st.last_seq, st.bytes) == (_N, _N, sizes)
        assert await store.subjects_state() == dict(Counter(subjects))
        last = await store.last_by_subject(subjects[-1])
        assert last is not None and (last.seq, last.headers, last.data) == (_N, headers[-1], data[-1])
    # a removal takes off the size stored in each row
    await store.apply([DeleteOp(seq) for seq in (1, 2, 3)])
    gone = sum(store.size_of(s, hd, d) for s, hd, d in zip(subjects[:3], headers[:3], data[:3], strict=True))
    assert (await store.state()).bytes == sizes - gone


async def test_per_subject_counts(h: StoreHarness) -> None:
    await fill(h.store, ["kv.a", "kv.b", "kv.a", "x.y", "kv.a"])
    await h.store.apply([DeleteOp(3)])
    store = await h.reopen()
    assert await store.subjects_state() == {"kv.a": 2, "kv.b": 1, "x.y": 1}
    assert await store.subjects_state("kv.*") == {"kv.a": 2, "kv.b": 1}
    assert await store.subjects_state("kv.a") == {"kv.a": 2}
    assert await store.subjects_state("nope") == {}
    assert await store.msgs_for_subject("kv.a") == 2
    assert await store.msgs_for_subject("kv.*") == 3
    assert await store.msgs_for_subject("q") == 0
    assert (await store.state()).num_subjects == 3


async def test_num_pending_counts_matching_messages_from_a_sequence(h: StoreHarness) -> None:
    await fill(h.store, ["a.1", "b.1", "a.2", "b.2", "a.1"])
    await h.store.apply([DeleteOp(3)])
    store = await h.reopen()
    assert await store.num_pending(1) == 4
    assert await store.num_pending(3) == 2
    assert await store.num_pending(1, "a.*") == 2
    assert await store.num_pending(2, "a.*") == 1
    assert await store.num_pending(1, "a.1") == 2
    assert await store.num_pending(2, "a.1") == 1
    assert await store.num_pending(6) == 0
    assert await store.num_pending(0, ">") == 4
    assert await store.num_pending(1, "zz.*") == 0


async def test_snapshot_restores_into_a_fresh_store(h: StoreHarness) -> None:
    await fill(h.store, ["a.1", "b.1", "a.2", "b.2", "a.1"], data=b"payload" * 50)
    await h.store.apply(
        [
            DeleteOp(2),
            PurgeOp(up_to_seq=2),
            Append("h", b"NATS/1.0\r\nX: y\r\n\r\n", b"", 99),
            DeleteOp(6),
            SetMetaOp("dedup/x", b"6"),
        ]
    )
    store = await h.reopen()
    chunks = [c async for c in store.snapshot()]
    target = await h.fresh()
    await target.restore(chunks)
    assert await target.state(with_deleted=True) == await store.state(with_deleted=True)
    assert await target.range(1) == await store.range(1)
    assert await target.meta_items() == [("dedup/x", b"6")]
    assert (await target.append("z", None, b""))[0] == 7


async def test_a_restore_in_batches_builds_the_same_store(h: StoreHarness) -> None:
    """``batch_bytes`` applies the messages as they are decoded, a few at a time (a stream
    backup's restore): the same store as the one-call restore, interior deletes, metadata and
    the sequence after the last included; ``keep_meta`` leaves metadata out of a snapshot."""
    await fill(h.store, [f"s.{i % 4}" for i in range(60)], data=b"x" * 300)
    await h.store.apply(
        [DeleteOp(7), DeleteOp(60), SetMetaOp("consumer/C/config", b"{}"), SetMetaOp("k", b"v")]
    )
    chunks = [c async for c in h.store.snapshot()]
    target = await h.fresh()
    await target.restore(chunks, batch_bytes=1000)
    assert await target.state(with_deleted=True) == await h.store.state(with_deleted=True)
    assert await target.range(1) == await h.store.range(1)
    assert await target.meta_items() == [("consumer/C/config", b"{}"), ("k", b"v")]
    assert (await target.append("z", None, b""))[0] == 61
    other = await h.fresh()
    await other.restore([c async for c in h.store.snapshot(lambda key: not key.startswith("consumer/"))])
    assert await other.meta_items() == [("k", b"v")]


async def test_a_bad_snapshot_fails_a_restore_in_batches(h: StoreHarness) -> None:
    from core.store.snapshot import SnapshotError

    await fill(h.store, [f"s.{i}" for i in range(30)], data=b"y" * 200)
    whole = b"".join([c async for c in h.store.snapshot()])
    for bad in (whole[:-10], whole[:-5] + b"\x00" * 5, whole + b"more"):
        target = await h.fresh()
        with pytest.raises(SnapshotError):
            await target.restore([bad], batch_bytes=500)


async def test_snapshot_of_an_empty_purged_stream_keeps_its_sequences(h: StoreHarness) -> None:
    await fill(h.store, ["a", "b"])
    await h.store.apply([PurgeOp()])
    target = await h.fresh()
    await target.restore([c async for c in h.store.snapshot()])
    st = await target.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.last_ts) == (0, 3, 2, T0 + 2)


async def test_restore_refuses_a_store_that_is_not_empty(h: StoreHarness) -> None:
    await fill(h.store, ["a"])
    chunks = [c async for c in h.store.snapshot()]
    from core.store.snapshot import SnapshotError

    with pytest.raises(SnapshotError):
        await h.store.restore(chunks)
    target = await h.fresh()
    with pytest.raises(SnapshotError):
        await target.restore([b"LJSNAP\x00\x00\x01garbage"])
    assert (await target.state()).last_seq == 0


async def test_filters_are_validated(h: StoreHarness) -> None:
    for bad in ["a..b", "", "a.>.b", "a b"]:
        with pytest.raises(InvalidOperation):
            await h.store.first_after(1, bad)
        with pytest.raises(InvalidOperation):
            await h.store.last_by_subject(bad)
    with pytest.raises(InvalidOperation):
        Append("a.*", None, b"", 0)
    with pytest.raises(InvalidOperation):
        Append("a", None, "text", 0)  # type: ignore[arg-type]


async def test_a_subject_that_is_no_utf8_is_refused_before_anything_is_stored(h: StoreHarness) -> None:
    """A subject with surrogates (bytes that were no UTF-8, kept by ``surrogateescape``) cannot
    be stored or sized: the op refuses it (``InvalidOperation``), and the store is unchanged
    (the memory store counted a failed message half-way)."""
    await h.store.apply([Append("a", None, b"1", 1)])
    for subject in ("a.\udcff", "\udcc3\udca9"):
        with pytest.raises(InvalidOperation):
            await h.store.apply([Append(subject, None, b"x", 2)])
        with pytest.raises(InvalidOperation):
            await h.store.apply([AppendBatch(["a", subject], [None, None], [b"x", b"y"], 2)])
    await h.store.apply([Append("caf\u00e9", None, b"2", 3)])  # UTF-8 subjects are fine
    st = await h.store.state()
    assert (st.msgs, st.last_seq, st.num_subjects, st.num_deleted) == (2, 2, 2, 0)


async def test_a_closed_store_refuses_calls(h: StoreHarness) -> None:
    await h.store.append("a", None, b"")
    await h.store.close()
    with pytest.raises(StoreClosed):
        await h.store.append("a", None, b"")
    with pytest.raises(StoreClosed):
        await h.store.get(1)
    with contextlib.suppress(StoreClosed):
        await h.store.close()  # idempotent
