"""A TCP proxy that a test controls: cut and restore links, add latency, throttle bandwidth.

The proxy runs its own asyncio loop in a daemon thread, so the same object serves sync tests and
async ones (its methods are plain calls that return once the proxy has applied them)::

    with Proxy(("127.0.0.1", hub_leaf_port)) as p:
        ... point a leaf at p.port ...
        p.cut()                # every live connection closed (RST), new ones reset at once
        p.restore()            # new connections are forwarded again
        p.freeze()             # live connections go silent and stay open: a peer that died
                               # where the other end cannot see it; new ones are forwarded
        p.delay(0.05)          # 50 ms added per direction
        p.throttle(1_000_000)  # 1 MB/s per direction (shared by all connections); None: unlimited
        p.bytes_forwarded      # {"up": client->target bytes, "down": target->client bytes}
        p.connections          # live forwarded connections

Directions: "up" is what clients send to the target, "down" what the target sends back.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from typing import Any

CHUNK = 64 * 1024
DIRECTIONS = ("up", "down")


class _Bucket:
    """A token bucket of ``rate`` bytes/s holding at most ``burst`` bytes (one per direction)."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self.tokens = 0.0
        self.last = time.monotonic()

    @property
    def burst(self) -> float:
        assert self.rate is not None
        return max(1024.0, self.rate / 20)  # 50 ms worth of bytes

    def set(self, rate: float | None) -> None:
        self.rate = rate
        self.tokens = 0.0
        self.last = time.monotonic()

    async def take(self, n: int) -> None:
        """Wait until ``n`` bytes may pass. Usually at most one burst (see ``piece``), but a
        read sized before the throttle was set can be larger: it passes a burst at a time (it
        used to wait for more tokens than the bucket holds, forever)."""
        left = float(n)
        while self.rate is not None and left > 0:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            step = min(left, self.burst)
            if self.tokens >= step:
                self.tokens -= step
                left -= step
                continue
            await asyncio.sleep((step - self.tokens) / self.rate)

    def piece(self) -> int:
        return CHUNK if self.rate is None else max(1, min(CHUNK, int(self.burst)))


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN: what a dead link or a middlebox does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    def __init__(self, target: tuple[str, int] | None, host: str = "127.0.0.1", port: int = 0) -> None:
        # ``target`` may be set later (a server that must advertise the proxy's address starts
        # after it); until then connections are reset
        self.target = target
        self._delay = 0.0
        self._cut = False
        self._buckets = {d: _Bucket() for d in DIRECTIONS}
        self._bytes = dict.fromkeys(DIRECTIONS, 0)
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._frozen: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-proxy", daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._handle, host, port))
        self.host, self.port = self._server.sockets[0].getsockname()[:2]

    # -- control, from any thread ---------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def bytes_forwarded(self) -> dict[str, int]:
        return dict(self._bytes)

    @property
    def connections(self) -> int:
        """Live forwarded connections (accepted and connected to the target)."""
        return len(self._pairs)

    @property
    def accepted(self) -> int:
        """Connections accepted so far, including those reset while cut."""
        return self._accepted

    def cut(self) -> None:
        """Close every live connection both ways (RST) and reset new ones until ``restore()``."""

        async def cut() -> None:
            self._cut = True
            for client, upstream in list(self._pairs | self._frozen):
                _reset(client)
                _reset(upstream)
            self._pairs.clear()
            self._frozen.clear()

        self._call(cut())

    def freeze(self) -> None:
        """Every live connection stops forwarding, both ways, and when one of its ends closes the
        other is kept open: as if the peer had vanished behind a middlebox that says nothing.
        Connections made afterwards are forwarded as usual; ``cut`` and ``close`` end frozen ones."""

        async def freeze() -> None:
            self._frozen |= self._pairs
            self._pairs.clear()

        self._call(freeze())

    def restore(self) -> None:
        async def restore() -> None:
            self._cut = False

        self._call(restore())

    def delay(self, seconds: float) -> None:
        """Added latency in each direction (0 for none); the order of bytes is kept."""
        self._delay = max(0.0, seconds)

    def throttle(self, bytes_per_second: float | None) -> None:
        """Limit each direction to ``bytes_per_second`` (None: unlimited)."""

        async def throttle() -> None:
            for b in self._buckets.values():
                b.set(bytes_per_second)

        self._call(throttle())

    def close(self) -> None:
        if not self._loop.is_running():
            return

        async def shutdown() -> None:
            self._server.close()
            for client, upstream in list(self._pairs | self._frozen):
                client.transport.abort()
                upstream.transport.abort()
            self._pairs.clear()
            self._frozen.clear()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # -- the loop's side ------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        if self._cut or self.target is None:
            _reset(c_writer)
            return
        try:
            u_reader, u_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(c_writer)
            return
        if self._cut:  # cut while we were dialling
            _reset(c_writer)
            _reset(u_writer)
            return
        pair = (c_writer, u_writer)
        self._pairs.add(pair)
        done = asyncio.Event()
        self._spawn(self._pump(c_reader, u_writer, "up", pair, done))
        self._spawn(self._pump(u_reader, c_writer, "down", pair, done))

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: str,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        done: asyncio.Event,
    ) -> None:
        """Read, throttle, hold for the delay, write: one direction of one connection."""
        bucket = self._buckets[direction]
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        writer_task = self._loop.create_task(self._deliver(queue, writer, direction))
        try:
            while True:
                data = await reader.read(bucket.piece())
                if not data:
                    break
                if pair in self._frozen:
                    continue
                await bucket.take(len(data))
                queue.put_nowait((time.monotonic() + self._delay, data))
            queue.put_nowait((0.0, b""))  # end of stream: half-close after what is queued
            await writer_task
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await writer_task
            if not done.is_set() and pair not in self._frozen:
                done.set()
                # one side ended: end the other too (a proxy does not keep half of a link)
                for w in pair:
                    if self._cut:
                        w.transport.abort()
                    else:
                        w.close()
            self._pairs.discard(pair)

    async def _deliver(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, direction: str
    ) -> None:
        while True:
            due, data = await queue.get()
            if not data:
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            self._bytes[direction] += len(data)
