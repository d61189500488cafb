"""Mailbox: a bounded queue with one reading task, for the per-message hot paths.

anyio's memory object streams cost several microseconds per item: each receive is a checkpoint
(a trip round the event loop) and each wake-up makes an Event. A stream, a consumer's acks or the
JetStream API see one item per message, so that cost showed up as a large share of the server's
CPU per publish. A Mailbox is a deque and at most one waiting future per side:

- ``send_nowait`` never blocks (the router is synchronous); it raises ``anyio.WouldBlock`` when the
  box is full and ``anyio.ClosedResourceError`` after ``close``.
- ``receive`` returns at once when an item is queued and waits otherwise; after ``close`` the
  queued items are still delivered, then ``anyio.EndOfStream`` (``async for`` simply ends).
- ``send`` waits (for the pipeline hand-overs that want back-pressure) until there is room.

It needs the asyncio event loop, like the SQLite store. Cancellation is the usual one: a task
cancelled while waiting leaves the Mailbox usable and loses no item.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Mailbox(Generic[T]):
    __slots__ = ("_capacity", "_closed", "_items", "_reader", "_writer")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._items: deque[T] = deque()
        self._capacity = capacity
        self._closed = False
        self._reader: asyncio.Future[None] | None = None  # the receiver waiting for an item
        self._writer: asyncio.Future[None] | None = None  # a sender waiting for room

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def send_nowait(self, item: T) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if len(self._items) >= self._capacity:
            raise anyio.WouldBlock
        self._items.append(item)
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def send(self, item: T) -> None:
        while len(self._items) >= self._capacity and not self._closed:
            fut = self._writer = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._writer = None
        self.send_nowait(item)

    def receive_nowait(self) -> T:
        if self._items:
            item = self._items.popleft()
            if self._writer is not None:
                _wake(self._writer)
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        while not self._items:
            if self._closed:
                raise anyio.EndOfStream
            fut = self._reader = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._reader = None
        item = self._items.popleft()
        _wake(self._writer)
        return item

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """No more sends; the reader gets what is queued, then the end."""
        self._closed = True
        _wake(self._reader)
        _wake(self._writer)


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)
