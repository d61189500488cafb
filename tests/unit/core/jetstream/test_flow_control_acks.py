"""A consumer acked by flow control (ADR-60, ``ack_policy: flow_control``), without a server:
an answered flow-control request acks everything up to its ``Nats-Last-Stream``, as an ack-all
ack, and only then may a work queue drop those messages; ``max_ack_pending`` reached asks at
once; nothing is redelivered by time; a reset starts delivery over from the ack floor (or a
given sequence) and holds it until its answer is out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from core.jetstream.consumer import Consumer, Pending
from core.jetstream.consumer_models import ConsumerConfig
from core.protocol.headers import encode_headers
from core.server.accounts import Account
from core.server.internal import InboundMsg

pytestmark = pytest.mark.anyio


class FakeStream:
    """What a consumer reads of its stream here: names, account, retention, and a store call."""

    def __init__(self, retention: str) -> None:
        self.name = "ORDERS"
        self.domain = None
        self.account = Account("A")
        self.receiver = SimpleNamespace(backlog=None)
        self.config = SimpleNamespace(retention=retention)
        self.applied: list[list[Any]] = []

    async def apply_consumer_ops(self, ops: list[Any]) -> None:
        self.applied.append(ops)

    async def interest_done(self, seqs: list[int], acked_by: Consumer) -> list[int]:
        return list(seqs)  # the only consumer: what it acked is done


def flow_control_consumer(retention: str = "workqueue", **cfg: Any) -> Consumer:
    config = ConsumerConfig(
        durable_name="JS_SRC_x",
        deliver_subject="$JS.S.abc",
        ack_policy="flow_control",
        flow_control=True,
        idle_heartbeat=1_000_000_000,
        max_ack_pending=cfg.pop("max_ack_pending", 10),
        max_deliver=-1,
        **cfg,
    )
    return Consumer(FakeStream(retention), "JS_SRC_x", config, 0)  # type: ignore[arg-type]


def deliver(c: Consumer, *seqs: int) -> None:
    """As a delivery run records them: pending under the next consumer sequences."""
    for s in seqs:
        c.dseq += 1
        c.pending[s] = Pending(c.dseq, 1, 0)
        c._arm_at(s, c.pending[s], 0)
        c.last_delivered_sseq = s
        c.next_sseq = s + 1


def answer(c: Consumer, subject: str, last_stream: int | None, last_consumer: int = 0) -> InboundMsg:
    headers = None
    if last_stream is not None:
        headers = encode_headers(
            [("Nats-Last-Consumer", str(last_consumer)), ("Nats-Last-Stream", str(last_stream))]
        )
    return InboundMsg(subject, None, headers, b"", None)  # type: ignore[arg-type]


def removed(stream: Any) -> list[int]:
    return sorted(op.seq for ops in stream.applied for op in ops if type(op).__name__ == "DeleteOp")


async def test_an_answered_request_acks_everything_up_to_its_last_stream_sequence() -> None:
    c = flow_control_consumer()
    deliver(c, 1, 2, 3, 4, 5)
    c._flow_control_request()
    assert c._fc_reply is not None
    await c._take_acks([answer(c, c._fc_reply, 3, 3)])
    assert sorted(c.pending) == [4, 5]
    assert (c.ack_floor_sseq, c.ack_floor_dseq) == (3, 3)
    assert removed(c.stream) == [1, 2, 3]  # a work queue drops what the sender stored, no more


async def test_an_interest_stream_is_told_what_was_acked() -> None:
    c = flow_control_consumer("interest")
    deliver(c, 1, 2)
    c._flow_control_request()
    assert c._fc_reply is not None
    await c._take_acks([answer(c, c._fc_reply, 2, 2)])
    assert c.pending == {} and removed(c.stream) == [1, 2]


async def test_only_the_latest_request_with_its_sequences_acks() -> None:
    c = flow_control_consumer()
    deliver(c, 1, 2, 3)
    c._flow_control_request()
    stale = c._fc_reply
    assert stale is not None
    c._flow_control_answered()
    c._flow_control_request()
    assert c._fc_reply != stale
    await c._take_acks([answer(c, stale, 3, 3)])  # an answer to an older request
    assert sorted(c.pending) == [1, 2, 3] and removed(c.stream) == []
    latest = c._fc_reply
    assert latest is not None
    await c._take_acks([answer(c, latest, None)])  # the stalled reply: resumes, acks nothing
    assert c._fc_reply is None and sorted(c.pending) == [1, 2, 3]


async def test_an_ack_past_what_was_delivered_stops_at_the_last_delivery() -> None:
    c = flow_control_consumer()
    deliver(c, 1, 2)
    c._flow_control_request()
    assert c._fc_reply is not None
    await c._take_acks([answer(c, c._fc_reply, 9, 9)])  # after a reset the sender knows more
    assert c.pending == {} and c.ack_floor_sseq == 2 and removed(c.stream) == [1, 2]


async def test_ack_subjects_are_not_listened_to() -> None:
    c = flow_control_consumer()
    c.subscribe()
    subjects = sorted(s.subject for s in c.acks.subs)
    assert subjects == ["$JS.FC.ORDERS.JS_SRC_x.>"]


def test_nothing_is_redelivered_by_time() -> None:
    c = flow_control_consumer()
    deliver(c, 1, 2)
    assert c._timers == []  # no ack wait: pending stays pending until an answer or a reset


def test_half_of_max_ack_pending_asks_at_once() -> None:
    """The reference asks at max_ack_pending; asking at half keeps the rest going out while
    the answer (after the sender's commit) comes back."""
    c = flow_control_consumer(max_ack_pending=6)
    deliver(c, 1, 2)
    assert not c._fc_account(10)  # far below half the window, below half the limit
    deliver(c, 3)
    assert c._fc_account(10)


def test_an_explicit_ack_consumer_does_not_ask_at_max_ack_pending() -> None:
    c = flow_control_consumer(max_ack_pending=3)
    c.config = ConsumerConfig(
        deliver_subject="d", ack_policy="explicit", flow_control=True, max_ack_pending=3
    )
    deliver(c, 1, 2, 3)
    assert not c._fc_account(10)


def test_a_reset_without_a_sequence_keeps_the_ack_floor_and_holds_delivery() -> None:
    c = flow_control_consumer()
    deliver(c, 1, 2, 3, 4)
    c.ack_floor_sseq, c.ack_floor_dseq = 2, 2
    c._flow_control_request()
    assert c.reset(0) == 3
    assert (c.next_sseq, c.dseq, c.ack_floor_sseq, c.ack_floor_dseq) == (3, 0, 2, 0)
    assert c.pending == {} and c._fc_reply is None and c.held
    c.release()
    assert not c.held


def test_a_reset_to_a_sequence_follows_the_deliver_policy() -> None:
    c = flow_control_consumer()  # deliver all: anywhere
    assert c.reset(7) == 7 and c.ack_floor_sseq == 6
    by_seq = flow_control_consumer(deliver_policy="by_start_sequence", opt_start_seq=5)
    with pytest.raises(ValueError, match="below start seq"):
        by_seq.reset(4)
    assert by_seq.reset(5) == 5
    by_time = flow_control_consumer(deliver_policy="by_start_time", opt_start_time=1)
    with pytest.raises(ValueError, match="below start time"):
        by_time.reset(2, start_time_seq=3)
    new = flow_control_consumer(deliver_policy="new")
    with pytest.raises(ValueError, match="not allowed"):
        new.reset(2)
    assert new.reset(0) == 1  # to the ack floor: any policy


def test_a_message_taken_before_a_reset_is_not_sent_after_it() -> None:
    c = flow_control_consumer()
    epoch = c._epoch
    msg = SimpleNamespace(seq=5)
    c.reset(0)
    assert c._reset_meanwhile(epoch, msg)  # type: ignore[arg-type]
    c.release()
    assert not c._reset_meanwhile(c._epoch, msg)  # type: ignore[arg-type]
