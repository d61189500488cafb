"""Blocking calls handed to a thread with little overhead.

``anyio.to_thread.run_sync`` costs ~90 us of CPU per call on this machine (a capacity limiter,
run variables, a cancel scope, a worker picked per call). A job on a ``SimpleQueue`` read by a
thread, and ``call_soon_threadsafe`` back, cost ~20 us. Stream creates and every meta entry of a
hub cluster (its RAFT log write) make such calls, on every server.

- ``run_job(submit, fn)``: ``fn()`` as a job given to ``submit`` (e.g. the store pool's);
- ``SerialThread``: one thread of its own, calls in order (a RAFT group's log writes: never
  behind other blocking work, and in order).

Like ``to_thread.run_sync``, a cancelled caller still waits until ``fn`` has returned: whoever
called it must not go on while the write may still be running.
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

Submit = Callable[[Callable[[], None]], None]


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # its waiter was cancelled by something outside anyio: nobody reads it
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


async def run_job(submit: Submit, fn: Callable[[], T]) -> T:
    """``fn()`` run by whatever thread ``submit`` gives it to; its result or its exception."""
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

    submit(job)
    with anyio.CancelScope(shield=True):
        result = await fut
    return result


class SerialThread:
    """Runs blocking calls, one at a time and in order, on one daemon thread (started on first
    use, ended by ``close``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread; its result or its exception."""
        return await run_job(self._submit, fn)

    def _submit(self, job: Callable[[], None]) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    t = threading.Thread(target=self._work, name=self._name, daemon=True)
                    t.start()
                    self._thread = t
        self._jobs.put(job)

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
