"""The bulk read API's request checks and range read (core/jetstream/bulk_read.py), over real
memory and SQLite stores: what a reply covers, its bounds, and its errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from core.api_errors import ApiError
from core.jetstream import bulk_read
from core.jetstream.bulk_read import ReadRequest, parse_read_request, read_range
from core.jetstream.bulk_source import _check_follows
from core.jetstream.sourcing import _Recreate
from core.protocol.headers import encode_headers
from core.server.internal import InboundMsg
from core.store.api import Append, DeleteOp
from core.store.memory import MemoryStore
from core.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "sqlite-blocks"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryStore()
        return
    # "sqlite-blocks": column blocks of 2 messages, built while the test reads (core/store/colblocks.py)
    s = await SqliteStore.open(tmp_path / "s.db", block_rows=2 if request.param == "sqlite-blocks" else 0)
    try:
        yield s
    finally:
        await s.close()


def err_code(payload: bytes) -> int:
    with pytest.raises(ApiError) as e:
        parse_read_request(payload)
    return e.value.err_code


def test_a_minimal_request_takes_the_defaults() -> None:
    req = parse_read_request(b'{"v":1,"seq":5}', max_bytes=1000)
    assert req == ReadRequest(5, bulk_read.MAX_MSGS, 1000, (), 0, False)


def test_bounds_are_clamped_and_filters_kept_once() -> None:
    req = parse_read_request(
        b'{"v":1,"seq":1,"max_msgs":999999999,"max_bytes":999999999,"wait_ms":999999999,'
        b'"filter":["a.*","b","a.*"],"compress":"zstd","later_field":true}',
        max_bytes=4096,
    )
    assert (req.max_msgs, req.max_bytes, req.wait_ms) == (bulk_read.MAX_MSGS, 4096, bulk_read.MAX_WAIT_MS)
    assert req.filters == ("a.*", "b") and req.compress
    assert parse_read_request(b'{"v":1,"seq":1,"filter":["a",">"]}').filters == ()


def test_a_following_requests_budget_may_span_replies_and_is_clamped() -> None:
    big = b'{"v":1,"seq":1,"max_bytes":1000000000%s}'
    assert parse_read_request(big % b',"follow":2', max_bytes=1000).max_bytes == bulk_read.MAX_FOLLOW_BYTES
    # one reply (no follow, or follow 1): the reply ceiling
    assert parse_read_request(big % b"", max_bytes=1000).max_bytes == 1000
    assert parse_read_request(big % b',"follow":1', max_bytes=1000).max_bytes == 1000


def test_follow_is_clamped_and_checked() -> None:
    assert parse_read_request(b'{"v":1,"seq":1,"follow":7}').follow == 7
    assert parse_read_request(b'{"v":1,"seq":1,"follow":10000000}').follow == bulk_read.MAX_FOLLOW
    assert parse_read_request(b'{"v":1,"seq":1}').follow == 0
    for bad in (b"-1", b"1.5", b'"2"', b"true"):
        assert err_code(b'{"v":1,"seq":1,"follow":%s}' % bad) == 10003


def _reply(first: int, last: int, more: bool) -> InboundMsg:
    fields = [(bulk_read.H_READ, "1"), (bulk_read.H_FIRST, str(first)), (bulk_read.H_LAST, str(last))]
    if more:
        fields.append((bulk_read.H_MORE, "1"))
    return InboundMsg("_INBOX.x.1", None, encode_headers(fields), b"", None)  # type: ignore[arg-type]


def test_a_source_checks_that_each_followed_reply_goes_on_where_the_last_ended() -> None:
    assert _check_follows(_reply(5, 9, True), 5) == 10  # the next reply starts at 10
    assert _check_follows(_reply(10, 9, True), 10) == 10  # one that covers nothing (filtered)
    assert _check_follows(_reply(10, 12, False), 10) == 0  # the request's last: ask again
    with pytest.raises(_Recreate):  # one lost on the way: a hole, never a gap to report
        _check_follows(_reply(14, 20, True), 13)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"{", 10025),
        (b'{"v":1,"seq":1,"filter":["x"]', 10025),
        (b"", 10003),
        (b'"text"', 10003),
        (b'{"v":"1","seq":1}', 10003),
        (b'{"v":1,"seq":-1}', 10003),
        (b'{"v":1,"seq":1.5}', 10003),
        (b'{"v":1,"seq":true}', 10003),
        (b'{"v":1,"seq":1,"max_msgs":null}', 10003),
        (b'{"v":1,"seq":1,"filter":[1]}', 10003),
        (b'{"v":1,"seq":1,"filter":["a b"]}', 10003),
        (b'{"v":1,"seq":1,"wait_ms":1.0}', 10003),
    ],
)
def test_bad_requests_are_refused_with_the_apis_codes(payload: bytes, code: int) -> None:
    assert err_code(payload) == code


def test_too_many_filters_are_refused() -> None:
    many = ",".join(f'"f.{i}"' for i in range(bulk_read.MAX_FILTERS + 1))
    assert err_code(f'{{"v":1,"seq":1,"filter":[{many}]}}'.encode()) == 10003


async def fill(store: Any, subjects: list[str], size: int = 100) -> None:
    await store.apply([Append(s, None, b"x" * size, 1_000 + i) for i, s in enumerate(subjects)])


def req(seq: int = 1, **kw: Any) -> ReadRequest:
    fields: dict[str, Any] = {"max_msgs": 1000, "max_bytes": 1 << 20, **kw}
    return ReadRequest(seq, **fields)


async def test_a_read_covers_deleted_sequences_up_to_the_streams_last(store: Any) -> None:
    await fill(store, ["a"] * 10)
    await store.apply([DeleteOp(s) for s in (1, 2, 9, 10)])
    msgs, last, stream_last = await read_range(SimpleNamespace(store=store), req())  # type: ignore[arg-type]
    assert list(msgs.seqs) == [3, 4, 5, 6, 7, 8] and (last, stream_last) == (10, 10)
    msgs, last, _ = await read_range(SimpleNamespace(store=store), req(11))  # type: ignore[arg-type]
    assert len(msgs) == 0 and last == 10


async def test_the_byte_bound_cuts_between_messages_and_says_where(store: Any) -> None:
    await fill(store, ["a"] * 10, size=100)
    one = 1 + 100 + bulk_read.ROW_OVERHEAD
    msgs, last, _ = await read_range(SimpleNamespace(store=store), req(max_bytes=3 * one + 5))  # type: ignore[arg-type]
    assert list(msgs.seqs) == [1, 2, 3] and last == 3
    msgs, last, _ = await read_range(SimpleNamespace(store=store), req(4, max_bytes=1))  # type: ignore[arg-type]
    assert list(msgs.seqs) == [4] and last == 4  # the first message goes even when larger


async def test_filters_one_or_several(store: Any) -> None:
    await fill(store, ["a.1", "b.1", "a.2", "c", "b.2", "a.3"])
    stream = SimpleNamespace(store=store)
    msgs, last, _ = await read_range(stream, req(filters=("a.*",)))  # type: ignore[arg-type]
    assert list(msgs.seqs) == [1, 3, 6] and last == 6
    msgs, last, _ = await read_range(stream, req(filters=("b.*", "c"), max_msgs=2))  # type: ignore[arg-type]
    assert list(msgs.seqs) == [2, 4] and last == 4
    msgs, last, _ = await read_range(stream, req(filters=("x", "y")))  # type: ignore[arg-type]
    assert len(msgs) == 0 and last == 6


async def test_several_filters_scan_a_bounded_number_of_rows(store: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(bulk_read, "SCAN_ROWS", 300)
    await fill(store, ["n"] * 1000 + ["y"], size=1)
    msgs, last, _ = await read_range(SimpleNamespace(store=store), req(filters=("y", "z")))  # type: ignore[arg-type]
    assert len(msgs) == 0 and 300 <= last < 1001  # the next read goes on from there


async def test_requests_past_the_open_bound_are_refused_at_once_with_10167(monkeypatch: Any) -> None:
    """Each request is a task; while reads cannot keep up, at most MAX_OPEN are held, and the
    next one is refused (429 "too many requests") instead of queueing without a bound."""
    monkeypatch.setattr(bulk_read, "MAX_OPEN", 3)
    store = MemoryStore()
    await fill(store, ["a"])
    stream = SimpleNamespace(
        name="S", store=store, created_ns=1, config=SimpleNamespace(retention="limits"), appended=anyio.Event
    )
    replies: list[tuple[str, bytes | None]] = []

    def publish(subject: str, reply: str | None, headers: bytes | None, payload: bytes) -> bool:
        replies.append((subject, headers))
        return True

    ajs = SimpleNamespace(account=SimpleNamespace(publish=publish), streams={"S": stream})
    js = SimpleNamespace(server=SimpleNamespace(config=SimpleNamespace(max_payload=1 << 20), stalled=set()))
    reads = bulk_read.BulkReads(js)  # type: ignore[arg-type]
    reads._limiter = anyio.CapacityLimiter(1)
    async with anyio.create_task_group() as tg:
        await tg.start(reads.run)
        async with reads._limiter:  # the reads cannot go on: every request stays open
            for i in range(3):
                reads.start(ajs, stream, req(), f"r.{i}")  # type: ignore[arg-type]
            with pytest.raises(ApiError) as refused:
                reads.start(ajs, stream, req(), "r.3")  # type: ignore[arg-type]
            assert refused.value.err_code == 10167
        with anyio.fail_after(5):
            while reads.open:
                await anyio.sleep(0.01)
        assert sorted(s for s, _ in replies) == ["r.0", "r.1", "r.2"]
        assert all(h and b"Leafjet-Read: 1" in h for _, h in replies)
        reads.start(ajs, stream, req(), "r.4")  # type: ignore[arg-type]  # room again
        with anyio.fail_after(5):
            while reads.open:
                await anyio.sleep(0.01)
        assert replies[-1][0] == "r.4"
        tg.cancel_scope.cancel()


async def test_a_read_takes_several_store_chunks_when_the_mean_misleads(store: Any) -> None:
    """One large message makes the mean large, so the first chunk asks for few rows: the read
    goes on chunk after chunk (joining their columns) until a bound, not stopping at the first."""
    await store.apply([Append("big", None, b"x" * 2_000_000, 1)])
    await fill(store, ["s"] * 500, size=10)
    calls = 0
    read_columns = store.read_columns

    async def counted(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return await read_columns(*args)

    store.read_columns = counted
    msgs, last, stream_last = await read_range(SimpleNamespace(store=store), req(2, max_bytes=1 << 20))  # type: ignore[arg-type]
    assert calls > 1
    assert list(msgs.seqs) == list(range(2, 502)) and last == stream_last == 501
    assert bytes(msgs.data) == b"x" * 10 * 500 and list(msgs.data_offsets) == list(range(0, 5001, 10))


async def test_a_first_message_larger_than_a_reply_can_carry_is_10054(store: Any) -> None:
    await fill(store, ["a"], size=5000)
    with pytest.raises(ApiError) as e:
        await read_range(SimpleNamespace(store=store), req(max_bytes=1000), hard_limit=4096)  # type: ignore[arg-type]
    assert e.value.err_code == 10054


async def test_a_catch_up_whose_receiver_does_not_drain_in_write_deadline_ends_with_the_next_reply() -> None:
    """A following request's run of replies waits, between two, for the receiver the reply
    before took past its high-water mark; when it has not drained in write_deadline, the next
    reply is the request's last (no Leafjet-Read-More): going on fed the link up to its
    max_pending, a slow-consumer close of the whole link. Here every reply stalls a receiver
    that never drains."""
    store = MemoryStore()
    await fill(store, ["a"] * 40, size=1000)
    stream = SimpleNamespace(
        name="S", store=store, created_ns=1, config=SimpleNamespace(retention="limits"), appended=anyio.Event
    )

    class Stuck:
        async def wait_drained(self) -> None:
            await anyio.sleep_forever()

    config = SimpleNamespace(max_payload=bulk_read.HEADER_ROOM + 4096, write_deadline=0.01)
    server = SimpleNamespace(config=config, stalled=set())
    replies: list[bytes] = []

    def publish(subject: str, reply: str | None, headers: bytes | None, payload: bytes) -> bool:
        replies.append(headers or b"")
        server.stalled.add(Stuck())  # this reply took its receiver past the high-water mark
        return True

    ajs = SimpleNamespace(account=SimpleNamespace(publish=publish), streams={"S": stream})
    reads = bulk_read.BulkReads(SimpleNamespace(server=server))  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await tg.start(reads.run)
        reads.start(ajs, stream, req(wait_ms=60_000, follow=1000), "r")  # type: ignore[arg-type]
        with anyio.fail_after(20):  # a guard: without the bound the run went on, then waited 60 s
            while reads.open:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert [b"Leafjet-Read-More: 1" in h for h in replies] == [True, False]


async def test_replies_from_column_blocks_are_those_of_the_aggregate(tmp_path: Path) -> None:
    """A sealed stream read in replies cut by bytes and counts, from a store with column blocks
    and from one without: the same frames, and the blocks were used."""
    stores = [await SqliteStore.open(tmp_path / f"{n}.db", block_rows=n) for n in (0, 64)]
    try:
        for s in stores:
            for i in range(0, 1000, 100):  # commits of 100: the last one is the live tail
                await s.apply([Append(f"s.{j % 7}", None, b"p" * (j % 50), j) for j in range(i, i + 100)])
        with anyio.fail_after(30):
            while stores[1].block_stats().through < 960:
                await anyio.sleep(0.01)
        for max_msgs, max_bytes in ((1000, 1 << 20), (100, 1 << 20), (333, 4000), (1000, 20_000)):
            frames: list[list[Any]] = [[], []]
            for s, out in zip(stores, frames, strict=True):
                seq = 1
                while seq <= 1000:
                    cols, last, _ = await read_range(
                        SimpleNamespace(store=s), req(seq, max_msgs=max_msgs, max_bytes=max_bytes)
                    )  # type: ignore[arg-type]
                    out.append((last, bulk_read.build_reply(cols, seq, last, 1000, "id")[1]))
                    seq = last + 1
            assert frames[0] == frames[1], (max_msgs, max_bytes)
        assert stores[1].block_stats().served > 0
    finally:
        for s in stores:
            await s.close()
