"""The outbound half every connection kind shares: a bounded buffer and the task that writes it.

A client connection and a federation link queue what they send in ``_out`` (never blocking the
router) and one writer task sends it. The writer arms ``write_deadline`` only while a send is
under way (one cancel scope for its whole life: a ``fail_after`` per send cost more CPU than the
send); a send past the deadline closes the connection as a slow consumer. A receiver past its
high-water mark joins ``server.stalled``, and the reader that fed it waits (bounded) for it to
drain: the back-pressure described in core/server/DESIGN.md.

A subclass says when it is open and closing, how to begin its close, and may transform what it
sends (a link compresses) or hand it to the transport directly (``_write_through``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream

from core import faults
from core.server.tcp import TcpStream

if TYPE_CHECKING:
    from core.config import ServerConfig
    from core.server.server import Server


Task = Callable[[], Coroutine[Any, Any, None]]


class BufferedOutput:
    """Mixin: the outbound buffer, its writer task and back-pressure (see the module docstring)."""

    stream: ByteStream
    server: Server
    cfg: ServerConfig
    close_reason: str
    _scope: anyio.CancelScope | None
    writer_fault: str | None = None  # core.faults kind checked at each wake-up (tests only)

    def _init_output(self) -> None:
        self._out: list[bytes | memoryview] = []  # a view: a run encoded without a copy
        self._pending = 0
        self._high_water = self.cfg.max_pending * 3 // 4
        # asyncio's Events, set and cleared in place: the writer wakes once per outbound burst,
        # and making an anyio Event per wake-up cost more than the rest of the wake-up.
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()

    # ------------------------------------------------------------------ what a subclass says

    def _is_open(self) -> bool:
        """Still taking deliveries (connected, not closing)."""
        raise NotImplementedError

    def _is_closing(self) -> bool:
        """Closing: the writer ends once the buffer is flushed."""
        raise NotImplementedError

    def _begin_close(self) -> None:
        raise NotImplementedError

    def _prepare(self, data: bytes | memoryview) -> bytes | memoryview:
        """What goes on the wire for ``data`` (a link may compress it)."""
        return data

    def _write_through(self) -> bool:
        """Hand what is buffered to the transport now, if it takes it without waiting."""
        return False

    def _write_through_tcp(self) -> bool:
        """``_write_through`` for a connection that sends its buffer unchanged (a client, a
        route): hand it to a plain TCP transport now when it takes it without waiting -- the
        writer task's wake-up per burst cost more than the write (core/server/DESIGN.md)."""
        stream = self.stream
        out = self._out
        # Asked before the join: while the peer is not reading (the transport paused), every
        # delivery would otherwise join the whole growing buffer again only to keep it.
        if type(stream) is TcpStream and out and stream.can_send():
            if len(out) == 1:
                stream.try_send(out[0])
            else:
                stream.try_send_all(out)  # not joined: the transport takes them as they are
            out.clear()
            self._pending = 0
            self._drained.set()
            return True
        return False

    def _slow_consumer(self) -> None:
        """Called when a send outlived ``write_deadline`` or a delivery overflowed ``max_pending``."""

    def close(self, reason: str, err: str | None = None) -> None:
        """Close from anywhere, telling the peer ``-ERR '<err>'`` first when given."""
        raise NotImplementedError

    # ------------------------------------------------------------------ buffer

    @property
    def pending_bytes(self) -> int:
        return self._pending

    def _queue(self, data: bytes) -> None:
        """Buffer ``data`` for the writer (no bound check: control frames, not deliveries)."""
        self._out.append(data)
        self._pending += len(data)
        self._wake.set()
        if self._drained.is_set():
            self._drained.clear()

    def _buffer_delivery(self, data: bytes | memoryview) -> bool:
        """Buffer a delivery (a message, or a run of them) for the writer; False, and the
        connection closed as a slow consumer, when it would take the buffer past max_pending. A
        receiver past its high-water mark joins ``server.stalled`` (back-pressure)."""
        size = len(data)
        if self._pending + size > self.cfg.max_pending:
            self._slow_consumer()
            self._out.clear()
            self._pending = 0
            self.close("slow consumer: max_pending exceeded", "Slow Consumer")
            return False
        self._out.append(data)
        self._pending += size
        if self._pending > self._high_water:
            self.server.stalled.add(self)
        if len(self._out) == 1:  # the buffer just became non-empty
            self._wake.set()
            if self._drained.is_set():
                self._drained.clear()
        return True

    def _deliver_through(self, data: bytes | memoryview) -> bool:
        """``_buffer_delivery`` of ``data`` then ``_write_through``, for a run written through at
        once: when nothing is buffered before it and a plain TCP transport takes it now, handed
        over without passing the buffer, so the writer task is not woken only to find it empty
        (a wake-up per read on the 1 KiB pub -> route -> sub path). A run past ``max_pending``
        still closes the receiver as a slow consumer, as through the buffer."""
        stream = self.stream
        if (
            not self._out
            and type(stream) is TcpStream
            and type(self)._prepare is BufferedOutput._prepare  # sent as it is (no compression)
            and len(data) <= self.cfg.max_pending
            and stream.try_send(data)
        ):
            return True
        if not self._buffer_delivery(data):
            return False
        self._write_through()
        return True

    async def wait_drained(self) -> None:
        """(A receiver in ``server.stalled``) Until its buffer is down to half its high-water mark."""
        while self._is_open() and self._pending > self._high_water // 2:
            await self._drained.wait()

    async def _wait_for_stalled(self) -> None:
        """Back-pressure: a publisher waits (bounded) while receivers past their high-water mark
        drain. Routing is synchronous, so the receivers marked during this chunk were fed by it."""
        stalled = self.server.stalled
        self.server.stalled = set()
        with anyio.move_on_after(self.cfg.write_deadline):
            for receiver in stalled:
                await receiver.wait_drained()

    # ------------------------------------------------------------------ the connection's tasks

    async def _run_io(self, reader: Task, *others: Task) -> None:
        """The connection's tasks in one group: the writer, ``others`` (the pinger, a handshake
        timer), and ``reader`` in this task. One failing cancels the rest; when the reader ends
        (EOF, protocol error, close requested) the writer gets ``write_deadline`` to flush."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._writer)
            for task in others:
                tg.start_soon(task)
            try:
                await reader()
            finally:
                self._begin_close()
                with anyio.move_on_after(self.cfg.write_deadline, shield=True):
                    await self._drained.wait()
                tg.cancel_scope.cancel()

    # ------------------------------------------------------------------ the writer task

    async def _writer(self) -> None:
        with anyio.CancelScope() as guard:
            try:
                await self._write_loop(guard)
            except BaseException:
                # Nobody will flush now: the reader's final wait for the drain must not wait
                # out write_deadline for a writer that is gone.
                self._drained.set()
                raise
        if guard.cancelled_caught:
            self.close_reason = "write deadline exceeded (slow consumer)"
            self._out.clear()
            self._drained.set()
            self._slow_consumer()
            self._begin_close()
            if self._scope is not None:
                self._scope.cancel()

    async def _write_loop(self, guard: anyio.CancelScope) -> None:
        deadline = self.cfg.write_deadline
        clock = asyncio.get_running_loop().time  # the clock anyio's deadlines use on asyncio
        while True:
            if not self._out:
                self._drained.set()
                if self._is_closing():
                    # Everything, including a final -ERR, is out: end the connection's tasks.
                    if self._scope is not None:
                        self._scope.cancel()
                    return
                await self._wake.wait()
                self._wake.clear()
                if faults.ARMED and self.writer_fault is not None:
                    faults.fault_point(self.writer_fault, str(getattr(self, "name", "")))
                continue
            # A plain TCP connection whose transport takes the bytes at once needs no deadline:
            # arming and disarming one (a timer on the loop) cost a tenth of a request's CPU.
            if self._write_through():
                continue
            stream = self.stream
            out = self._out
            parts: list[bytes | memoryview] | None = None
            if len(out) > 1 and type(stream) is TcpStream and type(self)._prepare is BufferedOutput._prepare:
                # sent as they are (``TcpStream.send_all``): a consumer slower than its
                # deliveries (the transport paused) had every burst joined into one more copy
                parts, self._out = out, []
                data: bytes | memoryview = b""
            else:
                data = b"".join(out) if len(out) > 1 else out[0]
                out.clear()
                data = self._prepare(data)
            self._pending = 0
            guard.deadline = clock() + deadline
            try:
                if isinstance(stream, TcpStream):
                    if parts is not None:
                        await stream.send_all(parts)
                    else:
                        await stream.send(data)
                else:  # anyio's streams (TLS) take bytes
                    await stream.send(data if isinstance(data, bytes) else bytes(data))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.close_reason = self.close_reason or "write failed"
                self._out.clear()
                self._drained.set()
                self._begin_close()
                if self._scope is not None:
                    self._scope.cancel()
                return
            guard.deadline = math.inf
