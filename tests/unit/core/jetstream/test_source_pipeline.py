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
from core.jetstream.sourcing import Delivery, SourceWorker, _Recreate, parse_ack_reply
from core.jetstream.stream import _DECIDED_HEADERS, _acts_on
from core.protocol.headers import slice_header
from core.server.interest import _ack_suffix_index
from core.server.internal import InboundMsg

pytestmark = pytest.mark.anyio


class FakeStream:
    """``submit_sourced``/``settle_sourced`` as the stream's contract says: ``before`` is awaited
    before the batch is submitted; a flight whose commit fails raises on settling."""

    def __init__(self, failing: set[int]) -> None:
        self.name = "AGG"
        self.account = SimpleNamespace(name="APP")
        self.failing = failing  # batch numbers whose commit fails
        self.submitted: list[list[int]] = []
        self.stored: list[int] = []

    async def submit_sourced(self, key: str, msgs: list[Delivery], before: Any) -> tuple[int, None, Any]:
        if before is not None:
            await before()
        n = len(self.submitted)
        self.submitted.append([d.sseq for d in msgs])
        return len(msgs), None, SimpleNamespace(n=n, seqs=[d.sseq for d in msgs])

    async def settle_sourced(self, flight: Any) -> None:
        await anyio.sleep(0)
        if flight.n in self.failing:
            raise StoreError("disk full")
        self.stored.extend(flight.seqs)


def deliveries(*seqs: int) -> list[Delivery]:
    return [Delivery(s, "orders.a", None, b"x", 0) for s in seqs]


async def test_batches_are_pipelined_and_committed_moves_with_each_commit() -> None:
    stream = FakeStream(failing=set())
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    await w._flush(deliveries(1, 2))
    assert w.committed == 0  # submitted, not known committed
    await w._flush(deliveries(3))  # settles the first before submitting
    assert w.committed == 2 and stream.submitted == [[1, 2], [3]]
    await w._settle()
    assert w.committed == 3 and stream.stored == [1, 2, 3]


async def test_a_batch_is_never_submitted_after_the_one_before_failed() -> None:
    stream = FakeStream(failing={0})
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    await w._flush(deliveries(1, 2))
    with pytest.raises(StoreError):
        await w._flush(deliveries(3))
    assert stream.submitted == [[1, 2]] and w.committed == 0
    await w._settle_last()  # nothing left in flight; the position stays where the store has it
    assert w.committed == 0 and stream.stored == []


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


@pytest.mark.parametrize(
    "block",
    [
        b"NATS/1.0\r\nNats-Stream-Source: ORDERS 1 > > orders.a\r\n\r\n",
        b"NATS/1.0\r\nX-Origin: edge\r\nNats-Msg-Id: m1\r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id : m1\r\nNats-TTL:5s\r\n\r\n",
        b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence-Subject: a\r\n\r\n",
        b"NATS/1.0\r\nNats-Something\r\nNats-Rollup: all\r\n\r\n",
        b"NATS/1.0\r\nnats-msg-id: lower\r\n\r\n",
        b"NATS/1.0\r\nNats-",
    ],
)
def test_a_block_the_decision_skips_has_none_of_the_headers_it_acts_on(block: bytes) -> None:
    found = [n for n in _DECIDED_HEADERS if slice_header(block, n.decode()) is not None]
    assert _acts_on(block) == bool(found)


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
