"""A source while the store commits, on both paths -- a bulk source's writer
(``BulkSourceWorker._store_batches``) and the consumer path's reader (``SourceWorker._read``): a
batch that comes meanwhile is submitted at once, behind the one committing, and each batch is
settled (its messages shown to the stream's consumers, ``committed`` moved) as soon as its own
commit lands -- not after every batch in flight did. Without a server: the commits are futures
the test resolves."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from core.errors import StoreError
from core.jetstream.bulk_source import BulkSourceWorker
from core.jetstream.sourcing import Delivery, SourceWorker
from core.server.internal import InboundMsg
from core.server.mailbox import Mailbox

pytestmark = pytest.mark.anyio


class CommitLaterStream:
    """``submit_sourced`` hands back a flight whose commit is a future the test resolves (in
    submission order, as the store commits); ``settle_sourced`` waits for it."""

    def __init__(self) -> None:
        self.name = "AGG"
        self.account = SimpleNamespace(name="APP", publish=lambda *a: True)
        self.flights: list[Any] = []

    async def submit_sourced(
        self, key: str, msgs: list[Delivery], before: Any, after: int | None = None
    ) -> tuple[int, None, Any]:
        if before is not None:
            await before()
        commit = asyncio.get_running_loop().create_future()
        flight = SimpleNamespace(seqs=[d.sseq for d in msgs], after=after, commit=commit, error=None)
        self.flights.append(flight)
        return len(msgs), None, flight

    async def settle_sourced(self, flight: Any) -> None:
        await flight.commit
        if flight.error is not None:
            raise flight.error

    def land(self, i: int, error: StoreError | None = None) -> None:
        self.flights[i].error = error
        self.flights[i].commit.set_result([])


def bulk_writer(stream: CommitLaterStream) -> BulkSourceWorker:
    """A bulk source of ``ORDERS`` whose stored position is known (0): batches chain on it."""
    w = BulkSourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    w._stored = 0
    w._stir = asyncio.Event()
    return w


def consumer_reader(stream: CommitLaterStream) -> SourceWorker:
    """A consumer-path source of ``ORDERS`` through consumer ``C``, its position known (0)."""
    w = SourceWorker(stream, {"name": "ORDERS"}, "ORDERS > >", 0)  # type: ignore[arg-type]
    w.cname, w._stored, w._spoke, w._heard = "C", 0, True, time.monotonic()
    return w


def deliveries(*seqs: int) -> list[Delivery]:
    return [Delivery(s, "orders.a", None, b"x", 0) for s in seqs]


async def wait_until(cond: Any) -> None:
    with anyio.fail_after(10):
        while not cond():
            await anyio.sleep(0.001)


async def test_a_batch_queued_while_one_commits_is_submitted_at_once_and_each_settles_on_its_commit() -> None:
    stream = CommitLaterStream()
    w = bulk_writer(stream)
    send, receive = anyio.create_memory_object_stream[Any](4)
    async with send, anyio.create_task_group() as tg:
        tg.start_soon(w._store_batches, receive)
        await send.send(deliveries(1, 2))
        await wait_until(lambda: len(stream.flights) == 1)
        await send.send(deliveries(3))
        w._stir.set()  # as the reader does after queueing
        # the second batch goes to the store while the first still commits
        await wait_until(lambda: len(stream.flights) == 2)
        assert stream.flights[1].after == 2 and w.committed == 0
        stream.land(0)
        await wait_until(lambda: w.committed == 2)  # the first settles on its own commit
        assert not stream.flights[1].commit.done()
        stream.land(1)
        await wait_until(lambda: w.committed == 3)
        tg.cancel_scope.cancel()


async def test_a_failed_commit_seen_by_the_idle_writer_ends_it_with_that_error() -> None:
    stream = CommitLaterStream()
    w = bulk_writer(stream)
    send, receive = anyio.create_memory_object_stream[Any](4)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with send, anyio.create_task_group() as tg:
            tg.start_soon(w._store_batches, receive)
            await send.send(deliveries(1))
            await wait_until(lambda: len(stream.flights) == 1)
            stream.land(0, StoreError("disk full"))
            await anyio.sleep_forever()
    assert isinstance(caught.value.exceptions[0], StoreError) and w.committed == 0


def delivery(sseq: int) -> InboundMsg:
    """The consumer ``C``'s first delivery of upstream message ``sseq`` (its ``sseq``-th)."""
    reply = f"$JS.ACK.ORDERS.C.1.{sseq}.{sseq}.100.0"
    return InboundMsg("orders.a", reply, None, b"x", SimpleNamespace(subject="$JS.S.abcdefgh"))  # type: ignore[arg-type]


async def test_the_consumer_path_stores_a_delivery_that_comes_while_one_commits_at_once() -> None:
    stream = CommitLaterStream()
    w = consumer_reader(stream)
    inbox: Mailbox[InboundMsg] = Mailbox(64)
    async with anyio.create_task_group() as tg:
        tg.start_soon(w._read, SimpleNamespace(inbox=inbox), [])  # type: ignore[arg-type]
        inbox.send_nowait(delivery(1))
        await wait_until(lambda: len(stream.flights) == 1)
        inbox.send_nowait(delivery(2))
        await wait_until(lambda: len(stream.flights) == 2)  # while the first still commits
        assert stream.flights[1].after == 1 and w.committed == 0
        stream.land(0)
        await wait_until(lambda: w.committed == 1)  # the first settles on its own commit
        stream.land(1)
        await wait_until(lambda: w.committed == 2)
        tg.cancel_scope.cancel()


async def test_a_failed_commit_seen_while_quiet_settles_the_refused_ones_behind_it() -> None:
    """The consumer path: the first of two batches in flight fails while the reader is idle.
    The attempt ends on that error with nothing left in flight, so the end of the attempt
    (``_settle_last``) does not count the failure again as the second's PositionMismatch."""
    stream = CommitLaterStream()
    w = consumer_reader(stream)
    inbox: Mailbox[InboundMsg] = Mailbox(64)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with anyio.create_task_group() as tg:
            tg.start_soon(w._read, SimpleNamespace(inbox=inbox), [])  # type: ignore[arg-type]
            inbox.send_nowait(delivery(1))
            await wait_until(lambda: len(stream.flights) == 1)
            inbox.send_nowait(delivery(2))
            await wait_until(lambda: len(stream.flights) == 2)
            stream.land(0, StoreError("disk full"))
            stream.land(1, StoreError("refused: expected another position"))
            await anyio.sleep_forever()
    assert str(caught.value.exceptions[0]) == "disk full"
    assert not w._flights and w.committed == 0
    await w._settle_last()
    assert w.fails == 0 and w.error is None


async def test_a_failed_commit_seen_by_the_idle_writer_settles_the_refused_ones_behind_it() -> None:
    """The bulk path's writer, the same case."""
    stream = CommitLaterStream()
    w = bulk_writer(stream)
    send, receive = anyio.create_memory_object_stream[Any](4)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with send, anyio.create_task_group() as tg:
            tg.start_soon(w._store_batches, receive)
            await send.send(deliveries(1))
            await wait_until(lambda: len(stream.flights) == 1)
            await send.send(deliveries(2))
            w._stir.set()
            await wait_until(lambda: len(stream.flights) == 2)
            stream.land(0, StoreError("disk full"))
            stream.land(1, StoreError("refused: expected another position"))
            await anyio.sleep_forever()
    assert str(caught.value.exceptions[0]) == "disk full"
    assert not w._flights and w.committed == 0
    await w._settle_last()
    assert w.fails == 0 and w.error is None
