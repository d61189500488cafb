"""A source's batch in flight never needs its source to be settled.

A source settles its previous batch when it submits the next one, under the stream's lock. A
caller that holds the lock and drains the stream (another source starting an attempt, a purge,
a stream update) must therefore settle that batch itself: waiting for the source waited for
ever (a hub sourcing two leaves stalled, API and all)."""

from __future__ import annotations

import time

import anyio
import pytest

from core.errors import StoreError
from core.jetstream.models import StreamConfig
from core.jetstream.sourcing import Delivery
from core.jetstream.stream import Stream
from core.server.accounts import Account
from core.store.memory import MemoryStore

pytestmark = pytest.mark.anyio


def a_stream() -> Stream:
    cfg = StreamConfig.from_json({"name": "AGG", "storage": "memory", "subjects": ["agg.>"]})
    return Stream(cfg, MemoryStore(), time.time_ns(), Account("A"), None)


def deliveries(*seqs: int) -> list[Delivery]:
    return [Delivery(s, f"orders.{s}", None, b"x", 0) for s in seqs]


async def test_a_purge_settles_a_source_batch_its_source_has_not() -> None:
    stream = a_stream()
    _taken, _refusal, flight = await stream.submit_sourced("ORDERS > >", deliveries(1, 2))
    assert flight is not None
    with anyio.fail_after(5):  # the purge drains under the lock
        assert await stream.purge(None, None, None) == 2
    await stream.settle_sourced(flight)  # the source's own settle: done already, no error
    assert (await stream.state()).last_seq == 2


async def test_a_second_source_starting_does_not_wait_for_the_first() -> None:
    stream = a_stream()
    _t, _r, first = await stream.submit_sourced("E1 > >", deliveries(1, 2))
    with anyio.fail_after(5):  # no ``before``: it drains first, under the lock
        _t, _r, second = await stream.submit_sourced("E2 > >", deliveries(1))
    assert first is not None and second is not None
    await stream.settle_sourced(first)
    await stream.settle_sourced(second)
    assert (await stream.state()).msgs == 3


async def test_a_failed_commit_settled_by_a_drain_still_fails_its_source() -> None:
    stream = a_stream()
    _t, _r, flight = await stream.submit_sourced("ORDERS > >", deliveries(1))
    assert flight is not None
    flight.error = StoreError("disk full")  # as if its commit had failed
    flight.commit = None
    with anyio.fail_after(5):
        await stream.drain()
    with pytest.raises(StoreError):  # its source still hears it: the position did not move
        await stream.settle_sourced(flight)
