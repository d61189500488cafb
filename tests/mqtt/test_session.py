"""The MQTT session against a scripted broker: bytes a real broker (mosquitto) never sends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from bridges.mqtt import wire
from bridges.mqtt.messages import InboundMessage
from bridges.mqtt.session import MqttSession
from tests.mqtt.conftest import bridge_config, eventually

pytestmark = [pytest.mark.mqtt, pytest.mark.anyio, pytest.mark.timeout(60)]

CONNACK_OK = b"\x20\x02\x00\x00"


class Events:
    def __init__(self) -> None:
        self.connects = 0
        self.lost: list[str] = []
        self.unreachable: list[str] = []
        self.messages: list[InboundMessage] = []

    def on_connected(self, session_present: bool) -> None:
        self.connects += 1

    def on_disconnected(self, reason: str, was_connected: bool) -> None:
        self.lost.append(reason)

    def on_refused(self, reason: str) -> None:
        pass

    def on_unreachable(self, problem: str, retry_in: float) -> None:
        self.unreachable.append(problem)

    def on_subscribed(self, topic_filter: str, code: int) -> None:
        pass

    def on_message(self, msg: InboundMessage) -> None:
        self.messages.append(msg)


class Broker:
    """Answers each CONNECT with ``connack``, then writes ``script`` and keeps what it receives."""

    def __init__(self, connack: bytes, script: list[bytes]) -> None:
        self.connack, self.script = connack, script
        self.received = bytearray()
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        await reader.read(65536)  # the CONNECT (and perhaps the SUBSCRIBE)
        writer.write(self.connack)
        for chunk in self.script:
            writer.write(chunk)
            await writer.drain()
        while data := await reader.read(65536):
            self.received += data
        writer.close()


@asynccontextmanager
async def session_with(broker: Broker, **fields: Any) -> AsyncIterator[tuple[MqttSession, Events]]:
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = bridge_config(f"mqtt://127.0.0.1:{port}", "nats://127.0.0.1:1", **fields)
    events = Events()
    session = MqttSession(config, events)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            yield session, events
            tg.cancel_scope.cancel()
    finally:
        server.close()
        for writer in broker.writers:
            writer.close()
        await server.wait_closed()


async def test_a_short_pubrel_ends_the_connection_as_a_protocol_error():
    broker = Broker(CONNACK_OK, [b"\x62\x01\x07"])  # PUBREL with a one-byte packet id
    async with session_with(broker, protocol="3.1.1") as (_, events):
        await eventually(lambda: events.lost, what="the connection ended")
        assert "protocol error: short PUBREL" in events.lost[0]
    assert b"\x70\x02\x07" not in broker.received  # no malformed PUBCOMP went back


async def test_a_receive_maximum_of_zero_is_refused_and_retried():
    connack = b"\x20\x06\x00\x00\x03\x21\x00\x00"  # MQTT 5, Receive Maximum 0
    async with session_with(Broker(connack, []), protocol="5") as (_, events):
        await eventually(lambda: len(events.unreachable) >= 2, what="two attempts")
        assert "Receive Maximum of 0" in events.unreachable[0] and not events.connects


async def test_a_publish_too_large_to_hold_is_cut_to_its_head_and_the_connection_kept():
    body_len = 2 + 3 + 2 + 400_000
    big = b"\x32" + wire._varint(body_len) + b"\x00\x03a/b\x00\x09" + b"x" * 400_000
    small = b"\x32\x08\x00\x03a/c\x00\x0a!"
    broker = Broker(CONNACK_OK, [big[i : i + 50_000] for i in range(0, len(big), 50_000)] + [small])
    async with session_with(broker, protocol="3.1.1", max_payload=1000) as (session, events):
        await eventually(lambda: len(events.messages) == 2, what="both messages")
        head, after = events.messages
        assert (head.topic, head.mid, after.topic, after.mid, after.payload) == (b"a/b", 9, b"a/c", 10, b"!")
        assert 1000 < len(head.payload) < 400_000  # over max_payload (rejected), never held whole
        session.ack([9, 10])
        await eventually(lambda: b"\x40\x02\x00\x09\x40\x02\x00\x0a" in broker.received, what="the acks")
        assert broker.connections == 1 and not events.lost
