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
from typing import Generic, Protocol, TypeVar

import anyio

T = TypeVar("T")


class Drains(Protocol):
    """What a publisher's reader waits on after routing fed it past its high-water mark
    (``server.stalled``): a slow client connection, or an internal service's ``internal.Backlog``."""

    async def wait_drained(self) -> None: ...


class Wakeup:
    """One waiting task's "something changed": ``wait`` parks it, ``set`` wakes it if it is parked
    (and does nothing otherwise: the waiter checks its condition again before it parks)."""

    __slots__ = ("_fut",)

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        fut = self._fut = asyncio.get_running_loop().create_future()
        try:
            await fut
        finally:
            self._fut = None

    def set(self) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)


class Mailbox(Generic[T]):
    __slots__ = ("_capacity", "_closed", "_item_ready", "_items", "_room_ready")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._items: deque[T] = deque()
        self._capacity = capacity
        self._closed = False
        self._item_ready = Wakeup()  # the receiver, waiting for an item
        self._room_ready = Wakeup()  # a sender, waiting for room

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def queued(self) -> list[T]:
        """A copy of what is queued, oldest first (for recounting after a reader failed)."""
        return list(self._items)

    def send_nowait(self, item: T) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if len(self._items) >= self._capacity:
            raise anyio.WouldBlock
        self._items.append(item)
        self._item_ready.set()

    async def send(self, item: T) -> None:
        while len(self._items) >= self._capacity and not self._closed:
            await self._room_ready.wait()
        self.send_nowait(item)

    def receive_nowait(self) -> T:
        if self._items:
            item = self._items.popleft()
            self._room_ready.set()
            return item
        if self._closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        while not self._items and not self._closed:
            await self._item_ready.wait()
        return self.receive_nowait()

    async def wait(self) -> None:
        """Until an item is queued, the box is closed, or ``wake`` is called: for a reader that
        waits for something else as well (it looks again at both when this returns)."""
        if not self._items and not self._closed:
            await self._item_ready.wait()

    def wake(self) -> None:
        """End the reader's ``wait`` (a ``receive`` goes on waiting for an item)."""
        self._item_ready.set()

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
        self._item_ready.set()
        self._room_ready.set()
