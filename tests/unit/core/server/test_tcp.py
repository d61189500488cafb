"""TcpStream: the client listener's byte stream over an asyncio transport (real sockets)."""

from __future__ import annotations

import asyncio
import socket

import anyio
import pytest

from core.server.tcp import TcpStream, listen

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # TcpStream is built on asyncio's transports


async def test_a_written_through_message_never_overtakes_one_waiting_for_room() -> None:
    """A send that waited for a paused transport goes out before anything ``try_send`` hands over
    in the moment between the transport's resume and the waiting task's turn (a JetStream run
    written through must not overtake the writer's older bytes)."""
    accepted: asyncio.Future[TcpStream] = asyncio.get_running_loop().create_future()
    server = await listen("127.0.0.1", 0, accepted.set_result)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    stream: TcpStream | None = None
    try:
        stream = await asyncio.wait_for(accepted, 5)
        protocol = stream._transport.get_protocol()
        protocol.pause_writing()  # what the transport calls when its buffer is full
        assert stream.try_send(b"never") is False
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.send, b"older ")
            await anyio.sleep(0.05)  # the sender now waits for room
            protocol.resume_writing()  # room again; the sender has not had its turn yet
            assert stream.try_send(b"newer") is False
        assert stream.try_send(b"newest") is True
        client.settimeout(5)
        got = b""
        while len(got) < len(b"older newest"):
            got += client.recv(100)
        assert got == b"older newest"
    finally:
        client.close()
        if stream is not None:
            await stream.aclose()
        server.close()


async def test_a_client_that_half_closes_still_gets_what_is_sent_after_its_eof() -> None:
    """EOF ends reading, not writing: the reference answers a PING that came just before a
    client's FIN, so the transport stays open until the stream is closed."""
    accepted: asyncio.Future[TcpStream] = asyncio.get_running_loop().create_future()
    server = await listen("127.0.0.1", 0, accepted.set_result)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    stream: TcpStream | None = None
    try:
        stream = await asyncio.wait_for(accepted, 5)
        client.sendall(b"PING\r\n")
        client.shutdown(socket.SHUT_WR)
        with anyio.fail_after(5):
            assert await stream.receive() == b"PING\r\n"
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
        await stream.send(b"PONG\r\n")
        await stream.aclose()
        client.settimeout(5)
        got = b""
        while chunk := client.recv(100):
            got += chunk
        assert got == b"PONG\r\n"
    finally:
        client.close()
        if stream is not None:
            await stream.aclose()
        server.close()


async def test_reads_queued_while_the_reader_was_busy_come_as_one_receive_up_to_its_size() -> None:
    """Socket reads queued before the reader asks are joined into one receive (the reader's cost
    per receive is paid once for them), never past ``max_bytes``, in order; a read larger than
    ``max_bytes`` is split."""
    accepted: asyncio.Future[TcpStream] = asyncio.get_running_loop().create_future()
    server = await listen("127.0.0.1", 0, accepted.set_result)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    stream: TcpStream | None = None
    try:
        stream = await asyncio.wait_for(accepted, 5)
        protocol = stream._transport.get_protocol()
        for part in (b"aaaa", b"bbbb", b"cccc", b"dddddddddd"):  # as the transport delivers them
            protocol.data_received(part)
        with anyio.fail_after(5):
            assert await stream.receive(12) == b"aaaabbbbcccc"
            assert await stream.receive(4) == b"dddd"
            assert await stream.receive(100) == b"dddddd"
    finally:
        client.close()
        if stream is not None:
            await stream.aclose()
        server.close()


async def test_parts_sent_as_they_are_arrive_in_order_after_a_waiting_send() -> None:
    """``send_all`` (a buffer's parts, views among them, not joined) waits for a paused
    transport as ``send`` does, and ``try_send_all`` takes parts only when ``try_send`` would."""
    accepted: asyncio.Future[TcpStream] = asyncio.get_running_loop().create_future()
    server = await listen("127.0.0.1", 0, accepted.set_result)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    stream: TcpStream | None = None
    try:
        stream = await asyncio.wait_for(accepted, 5)
        protocol = stream._transport.get_protocol()
        protocol.pause_writing()
        assert stream.try_send_all([b"never"]) is False
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.send_all, [b"one ", memoryview(b"xtwo x")[1:5], b"three "])
            await anyio.sleep(0.05)  # the sender now waits for room
            protocol.resume_writing()
        assert stream.try_send_all([memoryview(b"four"), b" five"]) is True
        want = b"one two three four five"
        client.settimeout(5)
        got = b""
        while len(got) < len(want):
            got += client.recv(100)
        assert got == want
    finally:
        client.close()
        if stream is not None:
            await stream.aclose()
        server.close()
