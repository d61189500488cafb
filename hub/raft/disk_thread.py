"""One thread for a RAFT group's log writes, handed work with little overhead.

The driver persists every Ready that must be synced (on each server, once per meta entry at
least) off the event loop. ``anyio.to_thread.run_sync`` costs ~90 us of CPU per call here (a
capacity limiter, run variables, a cancel scope, a worker thread picked per call); a
``SimpleQueue`` to one thread of the group's own and ``call_soon_threadsafe`` back cost ~20 us.
One thread of its own also keeps the group's fsync from waiting behind other blocking work,
and keeps its writes in order (the driver has at most one in flight anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # its waiter was cancelled by something outside anyio: nobody reads it
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class DiskThread:
    """Runs blocking calls, one at a time and in order, on one daemon thread (started on first
    use, ended by ``close``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread; its result or its exception. Like ``to_thread.run_sync``,
        a cancelled caller still waits until ``fn`` has returned: whoever called it must not
        go on while the write may still be running."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (anyio on trio): the general way
            return await anyio.to_thread.run_sync(fn)
        fut: asyncio.Future[T] = loop.create_future()

        def job() -> None:
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as e:  # handed to the caller, whatever it is
                error = e
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, fut, result, error)

        self._ensure_started()
        self._jobs.put(job)
        with anyio.CancelScope(shield=True):
            result = await fut
        return result

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                t = threading.Thread(target=self._work, name=self._name, daemon=True)
                t.start()
                self._thread = t

    def _work(self) -> None:
        get = self._jobs.get
        while (job := get()) is not None:
            job()
            del job

    def close(self) -> None:
        """The thread ends once the calls queued before have run."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None
