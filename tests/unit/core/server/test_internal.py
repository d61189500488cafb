"""Backlog: the bounded, back-pressured count of what a stream holds before storing it."""

from __future__ import annotations

import anyio
import pytest

from core.server.accounts import Account
from core.server.internal import LEN_LIMIT, SIZE_LIMIT, Backlog, InternalReceiver

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_backlog_refuses_at_either_limit_and_counts_into_its_parent() -> None:
    account = Backlog(1 << 62, 1000)
    stream = Backlog(4, 600, parent=account)
    assert [stream.admit(100) for _ in range(4)] == [None] * 4
    assert stream.admit(1) == LEN_LIMIT
    assert (stream.msgs, stream.bytes, account.bytes) == (4, 400, 400)
    stream.release(2, 200)
    assert stream.admit(500) == SIZE_LIMIT  # 200 + 500 > 600
    other = Backlog(10, 10_000, parent=account)
    assert other.admit(900) == SIZE_LIMIT  # the account holds 200 of 1000
    assert other.admit(500) is None
    assert account.bytes == 700
    stream.close()  # what it held leaves the account; a late release changes nothing
    stream.release(2, 200)
    assert account.bytes == 500 and account.msgs == 1


def test_past_half_a_limit_the_backlog_asks_its_publisher_to_pause() -> None:
    stalled: list[Backlog] = []
    account = Backlog(1 << 62, 10_000, stall=stalled.append)
    stream = Backlog(10, 1000, parent=account)
    for _ in range(5):
        stream.admit(10)
    assert stalled == []
    stream.admit(10)  # 6 of 10 messages
    assert stalled == [stream]
    big = Backlog(1000, 100_000, parent=account)
    big.admit(5001)  # past half the account's bytes
    assert stalled[-1] is account


async def test_a_paused_publisher_goes_on_at_a_quarter() -> None:
    backlog = Backlog(8, 1 << 20)
    for _ in range(8):
        backlog.admit(1)
    resumed = anyio.Event()

    async def publisher() -> None:
        await backlog.wait_drained()
        resumed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(publisher)
        await anyio.sleep(0.01)
        backlog.release(5, 5)  # 3 left: above a quarter (2)
        await anyio.sleep(0.01)
        assert not resumed.is_set()
        backlog.release(1, 1)
        with anyio.fail_after(5):
            await resumed.wait()


def test_a_receiver_refuses_at_its_backlog_limit_and_tells_a_publisher_with_a_reply() -> None:
    refused: list[str] = []
    rx = InternalReceiver("stream:S", Account("A"), backlog=Backlog(2, 1 << 20), refused=refused.append)
    sub = rx.subscribe("s.>")
    for i in range(4):
        rx.deliver(sub, "s.1", f"r.{i}" if i != 2 else None, None, b"x")
    assert len(rx.inbox) == 2 and rx.dropped == 2
    assert refused == ["r.3"]  # the one without a reply cannot be told
    rx.close()
    assert rx.backlog is not None and rx.backlog.closed


def test_a_queue_that_releases_on_receive_makes_room_as_its_reader_takes() -> None:
    backlog = Backlog(100, 250)
    rx = InternalReceiver("acks:S:C", Account("A"), backlog=backlog, release_on_receive=True)
    sub = rx.subscribe("ack.>")
    for _ in range(3):
        rx.deliver(sub, "ack.1", None, None, b"x" * 95)  # 100 bytes each with the subject
    assert (len(rx.inbox), rx.dropped, backlog.bytes) == (2, 1, 200)
    rx.inbox.receive_nowait()
    assert backlog.bytes == 100
    rx.deliver(sub, "ack.1", None, None, b"x" * 95)
    assert (len(rx.inbox), backlog.msgs) == (2, 2)
