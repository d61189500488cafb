"""The source worker's pipelined storing, without a server: a batch is submitted while the one
before it commits, never after that one failed, and ``committed`` moves only with a confirmed
commit. Also the per-delivery helpers the catch-up path was made cheaper with."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from core.api_errors import api_error
from core.errors import StoreError
from core.jetstream.sourcing import PIPELINE_DEPTH, Delivery, SourceWorker, _Recreate, parse_ack_reply
from core.jetstream.stream import _DECIDED_HEADERS, _any_acts_on, _decided_headers
from core.protocol.headers import slice_header
from core.server.interest import _ack_suffix_index
from core.server.internal import InboundMsg

pytestmark = pytest.mark.anyio


class FakeStream:
    """``submit_sourced``/``settle_sourced`` as the stream's contract says: ``before`` is awaited
    before the batch is submitted; a batch with ``after`` commits only if the position stored
    is ``after`` (the store's conditional SourcePosOp); a flight whose commit fails raises on
    settling. Commits happen in submission order, when settled."""

    def __init__(self, failing: set[int]) -> None:
        self.name = "AGG"
        self.account = SimpleNamespace(name="APP")
        self.failing = failing  # batch numbers whose commit fails
        self.submitted: list[list[int]] = []
        self.stored: list[int] = []
        self.position = 0
        self.unsettled: list[Any] = []

    async def submit_sourced(
        self, key: str, msgs: list[Delivery], before: Any, after: int | None = None
    ) -> tuple[int, None, Any]:
        if before is not None:
            await before()
        n = len(self.submitted)
        self.submitted.append([d.sseq for d in msgs])
        flight = SimpleNamespace(n=n, seqs=[d.sseq for d in msgs], after=after, error=None, done=False)
        self.unsettled.append(flight)
        return len(msgs), None, flight

    def _commit(self, flight: Any) -> None:
        flight.done = True
        if flight.n in self.failing:
            flight.error = StoreError("disk full")
        elif flight.after is not None and flight.after != self.position:
            flight.error = StoreError(f"position {self.position} stored, expected {flight.after}")
        else:
            self.stored.extend(flight.seqs)
            self.position = flight.seqs[-1]

    async def settle_sourced(self, flight: Any) -> None:
        await anyio.sleep(0)
        while not flight.done:  # the store commits in submission order
            self._commit(self.unsettled.pop(0))
        if flight.error is not None:
            raise flight.error


def deliveries(*seqs: int) -> list[Delivery]:
    return [Delivery(s, "orders.a", None, b"x", 0) for s in seqs]


async def test_batches_are_pipelined_and_committed_moves_with_each_commit() -> None:
    stream = FakeStream(failing=set())
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    await w._flush(deliveries(1, 2))
    assert w.committed == 0  # submitted, not known committed
    await w._flush(deliveries(3))  # submitted at once, behind the first: no settle
    assert w.committed == 0 and stream.submitted == [[1, 2], [3]] and stream.stored == []
    await w._settle()
    assert w.committed == 3 and stream.stored == [1, 2, 3]


async def test_the_pipeline_is_bounded() -> None:
    stream = FakeStream(failing=set())
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    for seq in range(1, 2 + PIPELINE_DEPTH):
        await w._flush(deliveries(seq))
    assert len(w._flights) == PIPELINE_DEPTH and w.committed == 1  # the oldest settled to make room
    await w._settle()
    assert w.committed == 1 + PIPELINE_DEPTH


async def test_a_batch_never_commits_after_the_one_before_failed() -> None:
    stream = FakeStream(failing={1})
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    for seqs in ((1, 2), (3, 4), (5,), (6,)):
        await w._flush(deliveries(*seqs))
    with pytest.raises(StoreError, match="disk full"):  # the first failure, not the refusals
        await w._settle()
    assert stream.stored == [1, 2] and w.committed == 2 and not w._flights
    await w._settle_last()  # nothing left in flight; the position stays where the store has it
    assert w.committed == 2


async def test_no_pipelining_while_the_stored_position_is_unknown() -> None:
    """After the upstream was made again its sequences start over, and a new position may
    equal the old one stored: each batch then waits for the one before it."""
    stream = FakeStream(failing={0})
    stream.position = 2  # the old upstream's
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 2)  # type: ignore[arg-type]
    w._stored = None  # as after a reset
    await w._flush(deliveries(1, 2))  # its position is the old one: 2
    with pytest.raises(StoreError):
        await w._flush(deliveries(3))  # settles the first (which failed) before submitting
    assert stream.submitted == [[1, 2]] and stream.stored == []


def _old_ack_suffix_index(reply: str) -> int:
    if not reply.startswith("$JS.ACK."):
        return -1
    dots = 0
    for i, ch in enumerate(reply):
        if ch == ".":
            dots += 1
        elif ch == "@" and dots >= 8:
            return i
    return -1


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.S.C.1.2.3.4.5@orders.a",
        "$JS.ACK.S.C.1.2.3.4.5",
        "$JS.ACK.S@x.C.1.2.3.4.5@a@b",
        "$JS.ACK.D.H.S.C.1.2.3.4.5.tok@sub.@.x",
        "$JS.ACK.@.@",
        "_INBOX.a@b.c.d.e.f.g.h.i",
        "",
    ],
)
def test_the_ack_subject_scan_finds_what_the_character_loop_found(reply: str) -> None:
    assert _ack_suffix_index(reply) == _old_ack_suffix_index(reply)


def test_the_ack_reply_is_parsed_strictly() -> None:
    ack = parse_ack_reply("$JS.ACK.S.C.1.007.3.4.5")
    assert ack is not None and (ack.sseq, ack.sseq_text, ack.dseq, ack.pending) == (7, "007", 3, 5)
    assert parse_ack_reply("$JS.ACK.S.C.1..3.4.5") is None
    assert parse_ack_reply("$JS.ACK.S.C.1.+2.3.4.5") is None
    assert parse_ack_reply("$JS.ACK.S.C.1.٣.3.4.5") is None


BLOCKS = [
    b"NATS/1.0\r\nNats-Stream-Source: ORDERS 1 > > orders.a\r\n\r\n",
    b"NATS/1.0\r\nX-Origin: edge\r\nNats-Msg-Id: m1\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id : m1\r\nNats-TTL:5s\r\n\r\n",
    b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence-Subject: a\r\n\r\n",
    b"NATS/1.0\r\nNats-Something\r\nNats-Rollup: all\r\n\r\n",
    b"NATS/1.0\r\nnats-msg-id: lower\r\n\r\n",
    b"NATS/1.0\r\nNats-",
    b"NATS/1.0\r\nNats-Stream-Source: A 1 > > a\r\nNats-Expected-Stream: S\r\n\r\n",
    b"NATS/1.0\r\nNats-Stream-Source: A 2 > > a\r\nNats-Other: 1\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id:   a b  \r\nNats-Msg-Id: second\r\nNats-Expected-Stream: S\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id-Not: x\r\nNats-Msg-Id:\r\nNats-TTL: 1s",
    b"NATS/1.0\r\nNats-Msg-Id",
    b"NATS/1.0\r\nNats-Msg-IdX",
    b"NATS/1.0\r\nNats-Msg-Id: \xff\xfe\r\n\r\n",
]


def test_the_column_check_finds_what_the_block_check_finds() -> None:
    """``_any_acts_on`` (a whole batch's header blocks at once) agrees with ``_decided_headers``
    run on each block, for every pair and for the lot."""
    for a in BLOCKS:
        for b in BLOCKS:
            assert _any_acts_on([a, b]) == bool(_decided_headers(a) or _decided_headers(b)), (a, b)
    plain = [BLOCKS[0], BLOCKS[5], BLOCKS[8]] * 100
    assert not _any_acts_on(plain) and _any_acts_on([*plain, BLOCKS[7]])


@pytest.mark.parametrize("block", BLOCKS)
def test_the_one_pass_header_scan_reads_what_slice_header_reads(block: bytes) -> None:
    """``_decide`` reads its headers in one pass (``_decided_headers``): each value is the one
    ``slice_header`` (the reference's reading) finds, and nothing else is found."""
    expected = {n.decode(): v for n in _DECIDED_HEADERS if (v := slice_header(block, n.decode())) is not None}
    assert _decided_headers(block) == expected


# ------------------------------------------------------------------ errors, kicks, garbage


def inbound(subject: str, reply: str | None, payload: bytes = b"x", headers: bytes | None = None) -> Any:
    return InboundMsg(subject, reply, headers, payload, SimpleNamespace(subject="$JS.S.abcdefgh"))


def active_worker() -> tuple[SourceWorker, FakeStream]:
    stream = FakeStream(failing=set())
    stream.account = SimpleNamespace(name="APP", publish=lambda *a: True)  # type: ignore[assignment]
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    w.cname = "C"
    return w, stream


async def test_a_delivery_without_an_ack_reply_fails_the_attempt_with_an_error() -> None:
    w, stream = active_worker()
    good = inbound("orders.a", "$JS.ACK.ORDERS.C.1.1.1.100.1")
    with pytest.raises(_Recreate) as raised:
        await w._handle([good, inbound("orders.a", "not.an.ack")])
    assert raised.value.fail and raised.value.error is not None
    assert "is not an ack subject" in raised.value.error.to_json()["description"]
    await w._settle()
    assert stream.stored == [1]  # what came before the garbage is stored, once


async def test_the_error_and_backoff_stay_until_the_upstream_sends_something_valid() -> None:
    w, _stream = active_worker()
    w.error, w.fails = api_error("JSSourceConsumerSetupFailedErrF", err="timeout"), 3
    w._spoke = False  # a create was just answered
    await w._handle([inbound("orders.a", "$JS.ACK.ORDERS.OTHER.1.1.1.100.0")])  # another consumer's
    assert w.error is not None and w.fails == 3
    heartbeat = b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"
    await w._handle([inbound("$JS.S.abcdefgh", None, b"", heartbeat)])
    assert w.error is None and w.fails == 0


async def test_a_kick_is_spent_once_the_consumer_is_heard() -> None:
    w, _stream = active_worker()
    w.kick()
    assert w._kicked
    await w._handle([inbound("orders.a", "$JS.ACK.ORDERS.C.1.1.1.100.0")])
    assert not w._kicked  # a later quiet spell waits for the 10 s health check, not the kick


def test_the_same_failure_is_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    w, _stream = active_worker()
    w.error = api_error("JSSourceConsumerSetupFailedErrF", err="stream refused upstream sequence 7")
    caplog.set_level(logging.DEBUG, logger="leafjet.sourcing")
    w._log_failure("refused", logging.WARNING)
    w._log_failure("refused", logging.WARNING)  # a refusal retries every 2 s
    w.error = api_error("JSSourceConsumerSetupFailedErrF", err="timeout")
    w._log_failure("create timed out", logging.WARNING)
    levels = [(r.levelno, "timeout" in r.getMessage()) for r in caplog.records]
    assert levels == [(logging.WARNING, False), (logging.DEBUG, False), (logging.WARNING, True)]


# ------------------------------------------------------------------ the consumer path's short path


@pytest.mark.parametrize(
    "ack",
    ["$JS.ACK.ORDERS.C.{dc}.{s}.{d}.100.{p}", "$JS.ACK.EDGE.HASH8888.ORDERS.C.{dc}.{s}.{d}.100.{p}.tok"],
)
async def test_the_short_path_takes_what_the_general_rules_take(ack: str) -> None:
    """Deliveries after the first of a consumer take ``_handle``'s short path; it must store,
    drop and recreate exactly as the general rules do (v1 and v2 ack replies)."""
    w, stream = active_worker()
    w.ident = "ID9"
    gaps: list[tuple[int, int]] = []
    w._gap = lambda after, next_seq, reason: gaps.append((after, next_seq))  # type: ignore[method-assign]

    def msg(dc: int, s: int, d: int, p: int, consumer: str = "C") -> Any:
        reply = ack.format(dc=dc, s=s, d=d, p=p).replace(".C.", f".{consumer}.")
        return inbound(f"orders.{s}", reply, b"%d" % s)

    await w._handle([msg(1, 1, 1, 9)])  # the general rules; the prefix is learned
    assert w._fast_prefix and w._fast_cname == "C"
    await w._handle(
        [
            msg(1, 2, 2, 8),
            msg(2, 3, 3, 7),  # redelivered: dropped (its dseq does not count)
            msg(1, 3, 3, 7, consumer="OLD"),  # another consumer's: dropped
            msg(1, 2, 3, 7),  # sseq not past the last: dropped, dseq moves
            msg(1, 5, 4, 5),  # sseq jumps: taken (a gap)
            msg(1, 6, 5, 4),
        ]
    )
    await w._settle()
    assert stream.stored == [1, 2, 5, 6] and (w.sseq, w.dseq, w.lag) == (6, 5, 3)
    assert gaps == [(2, 5)]  # 3 and 4
    with pytest.raises(_Recreate, match="delivery gap"):
        await w._handle([msg(1, 7, 6, 3), msg(1, 9, 8, 1)])  # dseq jumps: a new consumer
    await w._settle()
    assert stream.stored == [1, 2, 5, 6, 7]


async def test_the_short_path_writes_the_source_header_the_general_rules_write() -> None:
    w, stream = active_worker()
    w.ident = "ID9"
    seen: list[Any] = []
    submit = stream.submit_sourced

    async def keep(key: str, msgs: Any, before: Any, after: int | None = None) -> Any:
        seen.extend(msgs)
        return await submit(key, msgs, before, after)

    stream.submit_sourced = keep  # type: ignore[method-assign]
    hdr = b"NATS/1.0\r\nX: 1\r\n\r\n"
    await w._handle([inbound("orders.a", "$JS.ACK.ORDERS.C.1.1.1.100.1", b"a", hdr)])
    await w._handle([inbound("orders.b", "$JS.ACK.ORDERS.C.1.2.2.200.0", b"b", hdr)])
    assert [(d.sseq, d.subject, d.payload, d.ts) for d in seen] == [
        (1, "orders.a", b"a", 100),
        (2, "orders.b", b"b", 200),
    ]
    for d in seen:
        value = slice_header(d.headers, "Nats-Stream-Source")
        assert value == f"ORDERS {d.sseq} > > {d.subject} ID9" and slice_header(d.headers, "X") == "1"


async def test_the_short_path_refuses_an_ack_reply_with_an_empty_number_as_the_general_rules_do() -> None:
    """An ack reply with an empty token (``1..2``) passes a digits test of the joined numbers; the
    short path must not turn it into a ValueError but leave it to the general rules: an invalid
    delivery, what came before it stored."""
    w, stream = active_worker()
    await w._handle([inbound("orders.a", "$JS.ACK.ORDERS.C.1.1.1.100.2")])  # the prefix is learned
    assert w._fast_prefix
    good = inbound("orders.b", "$JS.ACK.ORDERS.C.1.2.2.200.1")
    for bad in ("$JS.ACK.ORDERS.C.1..3.300.0", "$JS.ACK.ORDERS.C.1.3.3..0", "$JS.ACK.ORDERS.C.1.3.3.300."):
        with pytest.raises(_Recreate) as raised:
            await w._handle([good, inbound("orders.c", bad)])
        assert raised.value.fail and raised.value.error is not None
        assert "ack" in raised.value.error.to_json()["description"]
        good = inbound("orders.b", "$JS.ACK.ORDERS.C.1.2.2.200.1")  # already taken: dropped from now on
    await w._settle()
    assert stream.stored == [1, 2]
