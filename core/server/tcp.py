"""The client listener: asyncio's server and protocol under an anyio ByteStream.

anyio's own TCP stream pauses the socket's reading whenever no task waits in ``receive`` and
resumes it on the next call: two ``epoll_ctl`` system calls, and a trip round the event loop, for
every read that finds no data queued. Request/reply traffic (a KV get, a sync publish, a pull
request) reads one small message at a time, so that was a large part of the server's CPU per
request. Here the protocol keeps reading and queues what arrives; reading pauses only when a
connection has ``READ_HIGH_WATER`` bytes queued that nobody has taken (back-pressure on a client
that sends faster than the server handles).

``TcpStream`` is an ``anyio.abc.ByteStream``, so the connection code, and anyio's ``TLSStream``
wrapped around it after INFO, work as they did. Needs the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute

from core.server.mailbox import Wakeup

READ_HIGH_WATER = 1 << 20
# What a connection's reader takes at most per receive: what uvloop reads from a socket at once.
# The reader's fixed cost per receive (a loop turn, routing the runs, one write per receiver) is
# paid per read: at 1 KiB a 64 KiB read held only ~60 messages and that cost dominated.
READ_SIZE = 256 << 10
# How much input a client connection's reader handles between two back-pressure checks
# (connection.py): the read size before READ_SIZE grew, which the stream queues' limits and
# their refusals were measured against.
FEED_SIZE = 64 << 10


class TcpStream(ByteStream):
    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._chunks: deque[bytes | memoryview] = deque()
        self._queued = 0
        self._eof = False
        self._error: BaseException | None = None
        self._closed = False
        self._data_ready = Wakeup()
        self._writable = asyncio.Event()
        self._writable.set()
        self._senders = 0  # tasks waiting in ``send`` for room: ``try_send`` must not overtake them
        self._reading_paused = False

    # -- protocol side

    def _data(self, data: bytes) -> None:
        self._chunks.append(data)
        self._queued += len(data)
        if self._queued > READ_HIGH_WATER and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        self._data_ready.set()

    def _end(self, exc: BaseException | None) -> None:
        self._eof = True
        if exc is not None and self._error is None:
            self._error = exc
        self._writable.set()  # a sender waiting for room learns the connection is gone
        self._data_ready.set()

    # -- ByteStream

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        if self._chunks:
            # Data was already queued: let the other tasks run first, as anyio's stream does.
            # Without it a client that sends continuously keeps this reader busy for whole
            # socket reads, and the stream it feeds cannot commit and acknowledge meanwhile.
            await asyncio.sleep(0)
        while not self._chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._eof:
                if self._error is not None:
                    raise anyio.BrokenResourceError from self._error
                raise anyio.EndOfStream
            await self._data_ready.wait()
        chunks = self._chunks
        chunk = chunks.popleft()
        if chunks and len(chunk) + len(chunks[0]) <= max_bytes:
            # Several socket reads queued (the reader was busy): one receive takes them all, up
            # to ``max_bytes``, so the reader's cost per receive is paid once for all of them.
            parts = [chunk]
            size = len(chunk)
            while chunks and size + len(chunks[0]) <= max_bytes:
                part = chunks.popleft()
                parts.append(part)
                size += len(part)
            chunk = b"".join(parts)
        if len(chunk) > max_bytes:
            # The rest stays queued as a view of the same bytes: copying it on every split made
            # a 256 KiB socket read cost several times its size in copies.
            view = memoryview(chunk)
            self._chunks.appendleft(view[max_bytes:])
            chunk = view[:max_bytes]
        if type(chunk) is not bytes:
            chunk = bytes(chunk)
        self._queued -= len(chunk)
        if self._reading_paused and self._queued <= READ_HIGH_WATER // 2:
            self._reading_paused = False
            self._transport.resume_reading()
        return chunk

    def can_send(self) -> bool:
        """Whether ``try_send`` would take its bytes now (ask before building a large buffer)."""
        return not (
            self._closed
            or self._eof
            or self._senders
            or not self._writable.is_set()
            or self._transport.is_closing()
        )

    def try_send(self, item: bytes | memoryview) -> bool:
        """Hand ``item`` to the transport now if that cannot block (the transport is not paused
        and the connection is healthy); False leaves it to ``send``, which waits or raises."""
        if not self.can_send():
            return False
        self._transport.write(item)
        return True

    def try_send_all(self, items: Sequence[bytes | memoryview]) -> bool:
        """``try_send`` of ``items`` in order, handed over as they are (``writelines``: uvloop
        writes them with one ``writev`` and keeps what the socket did not take without copying
        it), not joined into one buffer first: a copy of everything a burst buffered."""
        if not self.can_send():
            return False
        self._transport.writelines(items)
        return True

    async def send_all(self, items: Sequence[bytes | memoryview]) -> None:
        """``send`` of ``items`` in order, as ``try_send_all`` hands them over."""
        await self._wait_writable()
        self._transport.writelines(items)

    async def send(self, item: bytes | memoryview) -> None:
        await self._wait_writable()
        self._transport.write(item)

    async def _wait_writable(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if not self._writable.is_set():
            # Between the transport's resume and this task's turn, the room is there but these
            # bytes are not yet written: ``try_send`` (a JetStream run written through) waits too.
            self._senders += 1
            try:
                while not self._writable.is_set():
                    await self._writable.wait()
            finally:
                self._senders -= 1
        if self._eof and self._error is not None:
            raise anyio.BrokenResourceError from self._error
        if self._transport.is_closing():
            raise anyio.BrokenResourceError

    async def send_eof(self) -> None:
        if self._transport.can_write_eof():
            self._transport.write_eof()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._transport.close()
        self._data_ready.set()
        await anyio.lowlevel.checkpoint()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        sock: socket.socket = self._transport.get_extra_info("socket")
        return {
            SocketAttribute.family: lambda: sock.family,
            SocketAttribute.raw_socket: lambda: sock,
            SocketAttribute.local_address: lambda: sock.getsockname(),
            SocketAttribute.local_port: lambda: sock.getsockname()[1],
            SocketAttribute.remote_address: lambda: self._transport.get_extra_info("peername"),
            SocketAttribute.remote_port: lambda: self._transport.get_extra_info("peername")[1],
        }


class _Protocol(asyncio.Protocol):
    def __init__(self, accept: Callable[[TcpStream], None]) -> None:
        self._accept = accept
        self._stream: TcpStream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._stream = TcpStream(transport)  # type: ignore[arg-type]  # uvloop's transports are not subclasses
        self._accept(self._stream)

    def data_received(self, data: bytes) -> None:
        assert self._stream is not None
        self._stream._data(data)

    def eof_received(self) -> bool:
        assert self._stream is not None
        self._stream._end(None)
        # Keep the transport open for writing: a client that half-closes still gets what it
        # asked for before its FIN (the reference flushes a PONG to such a client). The
        # connection closes the transport once its writer has flushed.
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stream is not None:
            self._stream._end(exc)

    def pause_writing(self) -> None:
        assert self._stream is not None
        self._stream._writable.clear()

    def resume_writing(self) -> None:
        assert self._stream is not None
        self._stream._writable.set()


async def listen(host: str, port: int, accept: Callable[[TcpStream], None]) -> asyncio.Server:
    """Listen on host:port; ``accept`` is called (on the loop) with each new connection's stream."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Protocol(accept), host, port, reuse_address=True)


async def connect(host: str, port: int) -> TcpStream:
    """Dial host:port: the same stream as an accepted connection's, for a connection this server
    opens (a route) so that its reads and writes cost what a client's do (module docstring)."""
    loop = asyncio.get_running_loop()
    streams: list[TcpStream] = []
    await loop.create_connection(lambda: _Protocol(streams.append), host, port)  # TCP_NODELAY is set
    return streams[0]


def peer_address(stream: Any) -> str:
    """``host:port`` of the other end of an accepted connection, for its name in logs and
    monitoring; ``?`` when the peer is already gone."""
    try:
        host, port = stream.extra(SocketAttribute.remote_address)[:2]
        return f"{host}:{port}"
    except Exception:  # the peer may already be gone
        return "?"
