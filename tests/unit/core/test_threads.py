"""Blocking calls handed to threads (core/threads.py): results and exceptions come back, a
``SerialThread`` runs calls in order on one thread, and a cancelled caller still waits for its
call to finish."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from core.threads import SerialThread

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_results_exceptions_and_order_on_one_thread() -> None:
    disk = SerialThread("test-disk")
    seen: list[tuple[int, int]] = []
    try:
        for k in range(20):
            assert await disk.run(lambda k=k: seen.append((k, threading.get_ident())) or k) == k
        with pytest.raises(OSError, match="disk full"):
            await disk.run(lambda: (_ for _ in ()).throw(OSError("disk full")))
        assert await disk.run(lambda: "after an error") == "after an error"
    finally:
        disk.close()
    assert [k for k, _ in seen] == list(range(20))
    assert len({t for _, t in seen}) == 1 and seen[0][1] != threading.get_ident()


async def test_a_cancelled_caller_waits_until_the_call_has_run() -> None:
    disk = SerialThread("test-disk")
    started, finished = threading.Event(), threading.Event()

    def slow_write() -> None:
        started.set()
        time.sleep(0.2)
        finished.set()

    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def cancel_once_started() -> None:
                    while not started.is_set():
                        await anyio.sleep(0.005)
                    scope.cancel()

                tg.start_soon(cancel_once_started)
                await disk.run(slow_write)
                assert finished.is_set()  # the caller went on only after the write
        assert finished.is_set()
    finally:
        disk.close()
