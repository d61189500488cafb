"""Mailbox: the bounded one-reader queue behind internal receivers and the stream pipeline."""

from __future__ import annotations

import anyio
import pytest

from core.server.mailbox import Mailbox

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Mailbox is built on asyncio futures


async def test_items_come_out_in_order_and_a_full_box_refuses_more() -> None:
    box: Mailbox[int] = Mailbox(2)
    box.send_nowait(1)
    box.send_nowait(2)
    with pytest.raises(anyio.WouldBlock):
        box.send_nowait(3)
    assert [await box.receive(), box.receive_nowait()] == [1, 2]
    with pytest.raises(anyio.WouldBlock):
        box.receive_nowait()


async def test_a_waiting_receiver_wakes_on_send() -> None:
    box: Mailbox[str] = Mailbox(4)
    got: list[str] = []

    async def reader() -> None:
        got.append(await box.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.sleep(0.01)  # the reader is parked on an empty box
        box.send_nowait("x")
    assert got == ["x"]


async def test_send_waits_for_room() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.send_nowait(1)
    sent = anyio.Event()

    async def sender() -> None:
        await box.send(2)
        sent.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await anyio.sleep(0.01)
        assert not sent.is_set() and len(box) == 1
        assert box.receive_nowait() == 1
        with anyio.fail_after(1):
            await sent.wait()
    assert box.receive_nowait() == 2


async def test_close_delivers_what_is_queued_then_ends() -> None:
    box: Mailbox[int] = Mailbox(4)
    box.send_nowait(1)
    box.send_nowait(2)
    box.close()
    with pytest.raises(anyio.ClosedResourceError):
        box.send_nowait(3)
    assert [item async for item in box] == [1, 2]
    with pytest.raises(anyio.EndOfStream):
        await box.receive()


async def test_close_wakes_a_parked_receiver() -> None:
    box: Mailbox[int] = Mailbox(4)
    ended = anyio.Event()

    async def reader() -> None:
        async for _ in box:
            pass
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.sleep(0.01)
        box.close()
        with anyio.fail_after(1):
            await ended.wait()


async def test_a_receiver_cancelled_while_waiting_loses_nothing() -> None:
    box: Mailbox[int] = Mailbox(4)
    with anyio.move_on_after(0.01):
        await box.receive()
    box.send_nowait(7)
    assert await box.receive() == 7


async def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Mailbox(0)
