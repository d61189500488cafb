"""One MQTT broker session on the event loop: connect, subscribe, receive, acknowledge, publish.

Replaces paho-mqtt's network thread. Everything happens on the bridge's event loop, so an inbound
PUBLISH reaches the bridge as a plain call from ``data_received`` (no thread handoff, no GIL
ping-pong between two busy threads) and a batch of PUBACKs leaves in one write. Packets are encoded
and decoded by ``wire.py``.

* Reconnects forever with capped backoff; a refused CONNACK is logged with its reason and retried.
* Keepalive as paho did it: when nothing went out or came in for ``keepalive`` seconds, PINGREQ; no
  PINGRESP (nor any other packet) within another ``keepalive`` -> the connection is closed (a
  stalled broker), which the bridge sees as a disconnect. Not while we have paused reading: then
  the broker's silence is ours.
* ``generation`` names the connection: it changes whenever one ends, and :meth:`ack` drops an ack
  meant for an earlier connection (the broker redelivers that message on the new one).
* Outbound QoS 1 publishes respect the broker's Receive Maximum (the rest wait in order); each one
  gets a future with the PUBACK's reason code, or :data:`CONNECTION_LOST`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from . import wire
from .config import MQTT_V5, MqttBridgeConfig
from .messages import InboundMessage

log = logging.getLogger("leafjet.bridge.mqtt")

CONNECTION_LOST = -1  # an outbound publish's outcome when its connection ended before the PUBACK


class SessionEvents(Protocol):
    """What the session tells its owner (all called on the loop, none may block)."""

    def on_connected(self, session_present: bool) -> None: ...
    def on_disconnected(self, reason: str, was_connected: bool) -> None: ...
    def on_refused(self, reason: str) -> None: ...
    def on_unreachable(self, problem: str, retry_in: float) -> None: ...
    def on_subscribed(self, topic_filter: str, code: int) -> None: ...
    def on_message(self, msg: InboundMessage) -> None: ...


class _Protocol(asyncio.Protocol):
    __slots__ = ("_session",)

    def __init__(self, session: MqttSession) -> None:
        self._session = session

    def data_received(self, data: bytes) -> None:
        self._session._data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._session._lost(exc)


def tls_context(config: MqttBridgeConfig) -> ssl.SSLContext | None:
    if not config.use_tls:
        return None
    tls = config.tls
    ctx = ssl.create_default_context(cafile=tls.ca_file if tls else None)
    if tls is not None and tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls is not None and tls.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Backoff:
    """Retry delays that double from ``first`` up to ``most``."""

    __slots__ = ("_first", "_max", "delay")

    def __init__(self, first: float, most: float) -> None:
        self.delay = first  # the next sleep, for the log line before it
        self._first = first
        self._max = most

    def reset(self) -> None:
        self.delay = self._first

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self._max)


class MqttSession:
    def __init__(self, config: MqttBridgeConfig, events: SessionEvents) -> None:
        self.config = config
        self.events = events
        self.v5 = config.protocol == MQTT_V5
        self.generation = 0
        self.connected = False
        self._transport: Any = None  # asyncio's or uvloop's transport
        # Holds at most one packet's worth of a message we could store: a larger PUBLISH is read
        # only as far as its head and rejected (see wire.PacketReader), never buffered whole.
        self._reader = wire.PacketReader(config.max_payload + wire.PUBLISH_HEAD_ROOM)
        self._connack: asyncio.Future[wire.ConnAck] | None = None
        self._lost_event = asyncio.Event()
        self._lost_reason = ""
        self._keepalive = config.keepalive
        self._last_in = self._last_out = 0.0
        self._ping_sent: float | None = None
        self._paused = False
        self._out: list[bytes] = []  # for the socket at the end of this turn of the loop
        self._out_scheduled = False
        # Outbound QoS 1: packet id -> future of the PUBACK reason; beyond the broker's Receive
        # Maximum, packets wait in _outbox (in order) for a free slot.
        self._outgoing: dict[int, asyncio.Future[int]] = {}
        self._outbox: deque[tuple[Callable[[int], bytes], asyncio.Future[int]]] = deque()
        self._send_quota = 65535
        self._next_pid = 0
        self._subscribe_pid: dict[int, list[str]] = {}

    # ------------------------------------------------------------------ the connection loop

    async def run(self) -> None:
        """Connect and serve, reconnecting with capped backoff, until cancelled."""
        backoff = Backoff(self.config.reconnect_min, self.config.reconnect_max)
        try:
            while True:
                if await self._connect_once(backoff):
                    backoff.reset()  # it worked: the next outage starts over
                    await self._serve()
                    self._end_connection()
                await backoff.sleep()
        finally:
            self.close()

    async def _connect_once(self, backoff: Backoff) -> bool:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._lost_event.clear()
        self._reader = wire.PacketReader(self._reader.max_size)
        try:
            ctx = tls_context(cfg)
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Protocol(self),
                    cfg.host,
                    cfg.port,
                    ssl=ctx,
                    server_hostname=cfg.host if ctx is not None else None,
                ),
                timeout=max(cfg.keepalive, 5),
            )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            self.events.on_unreachable(str(e) or type(e).__name__, backoff.delay)
            return False
        self._transport = transport  # an asyncio.Transport, or uvloop's (not a subclass of it)
        self._connack = loop.create_future()
        self._write(
            wire.encode_connect(
                cfg.client_id,
                cfg.keepalive,
                cfg.clean_session,
                self.v5,
                session_expiry=0 if cfg.clean_session else int(cfg.session_expiry),
                receive_maximum=cfg.max_inflight,
                username=cfg.username,
                password=cfg.password,
            )
        )
        try:
            ack = await asyncio.wait_for(asyncio.shield(self._connack), timeout=max(cfg.keepalive, 5))
        except (TimeoutError, ConnectionError, wire.ProtocolError) as e:
            self._abort()
            self.events.on_unreachable(f"no CONNACK: {e or type(e).__name__}", backoff.delay)
            return False
        if ack.reason >= 0x80 or (not self.v5 and ack.reason):
            self._abort()
            self.events.on_refused(wire.reason_text(ack.reason))
            return False
        self.connected = True
        self._send_quota = ack.receive_maximum
        self._keepalive = ack.server_keepalive if ack.server_keepalive else cfg.keepalive
        self.events.on_connected(ack.session_present)
        if cfg.inbound:
            # QoS 2 is subscribed as QoS 1 (see DESIGN.md).
            pid = self._packet_id()
            self._subscribe_pid[pid] = [r.filter for r in cfg.inbound]
            self._write(wire.encode_subscribe(pid, [(r.filter, min(r.qos, 1)) for r in cfg.inbound], self.v5))
        return True

    async def _serve(self) -> None:
        """Until the connection ends: the keepalive (PINGREQ when idle, close when unanswered)."""
        lost = self._lost_event
        while not lost.is_set():
            keepalive = self._keepalive
            now = time.monotonic()
            paused = self._paused
            if self._ping_sent is not None and self._last_in > self._ping_sent:
                self._ping_sent = None  # anything received shows the broker alive (a PINGRESP may
                # sit behind a backlog of PUBLISHes)
            if self._ping_sent is not None and not paused and now - self._ping_sent >= keepalive:
                self._lost_reason = f"no PINGRESP within the keepalive ({keepalive}s)"
                self._abort()
                break
            # While reading is paused (back-pressure) the broker's silence is ours, not a stall, but
            # it still needs a packet from us every keepalive.
            idle = now - self._last_out >= keepalive or (not paused and now - self._last_in >= keepalive)
            if idle and (self._ping_sent is None or paused):
                self._ping_sent = now
                self._write(wire.PINGREQ_PACKET)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), timeout=max(0.05, keepalive / 4))
        await lost.wait()

    def _end_connection(self) -> None:
        was = self.connected
        self.connected = False
        self.generation += 1  # acks for messages of the old connection are not sent
        self._transport = None
        self._ping_sent = None
        self._paused = False
        self._out = []
        pending = list(self._outgoing.values()) + [fut for _, fut in self._outbox]
        self._outgoing.clear()
        self._outbox.clear()
        self._subscribe_pid.clear()
        for fut in pending:
            if not fut.done():
                fut.set_result(CONNECTION_LOST)
        self.events.on_disconnected(self._lost_reason or "connection closed", was)
        self._lost_reason = ""

    def close(self) -> None:
        """A clean DISCONNECT (keeps a persistent session on the broker), then close."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self._flush_out()
            if self.connected:
                transport.write(wire.DISCONNECT_PACKET)
            transport.close()

    # ------------------------------------------------------------------ transport callbacks

    def _data(self, data: bytes) -> None:
        self._last_in = time.monotonic()
        v5 = self.v5
        events = self.events
        reader = self._reader
        try:
            for first, body in reader.feed(data):
                kind = first >> 4
                if kind == wire.PUBLISH:
                    # A PUBLISH cut to its head (reader.oversized) is read without its properties:
                    # the rest of the head counts as payload, over max_payload, so it is rejected.
                    events.on_message(
                        wire.decode_publish(first, body, v5 and not reader.oversized, self.generation)
                    )
                elif kind == wire.PUBACK:
                    self._puback(*wire.decode_puback(body))
                elif kind == wire.PINGRESP:
                    self._ping_sent = None
                elif kind == wire.CONNACK and self._connack is not None and not self._connack.done():
                    self._connack.set_result(wire.decode_connack(body, v5))
                elif kind == wire.SUBACK:
                    pid, codes = wire.decode_suback(body, v5)
                    for topic_filter, code in zip(self._subscribe_pid.pop(pid, ()), codes, strict=False):
                        events.on_subscribed(topic_filter, code)
                elif kind == wire.DISCONNECT:
                    self._lost_reason = (
                        f"the broker disconnected: {wire.reason_text(wire.decode_disconnect(body))}"
                    )
                    self._abort()
                    return
                elif kind == wire.PUBREL:  # never subscribed at QoS 2, but answer rather than hang a broker
                    if len(body) < 2:
                        raise wire.ProtocolError("short PUBREL")
                    self._write(b"\x70\x02" + body[:2])
                else:
                    log.debug("ignoring MQTT packet type %d", kind)
        except wire.ProtocolError as e:
            self._lost_reason = f"protocol error: {e}"
            log.error("%s: %s", self.config.name, self._lost_reason)
            self._abort()

    def _lost(self, exc: Exception | None) -> None:
        if exc is not None and not self._lost_reason:
            self._lost_reason = str(exc) or type(exc).__name__
        if self._connack is not None and not self._connack.done():
            self._connack.set_exception(ConnectionError(self._lost_reason or "connection closed"))
        self._lost_event.set()

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _write(self, data: bytes) -> None:
        """Queue ``data`` for the socket: everything written in one turn of the event loop goes out
        in one ``write`` at its end. PubAcks come back one at a time, so acks are released a few at
        a time, and commands go out one at a time: a system call each was a tenth of the bridge's
        CPU inbound and more outbound. What is queued when the connection ends is dropped with it."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._last_out = time.monotonic()
        self._out.append(data)
        if not self._out_scheduled:
            self._out_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_out)

    def _flush_out(self) -> None:
        self._out_scheduled = False
        out, self._out = self._out, []
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.write(b"".join(out))

    # ------------------------------------------------------------------ inbound

    def ack(self, mids: list[int]) -> None:
        """PUBACK these packet ids (of the current connection: the caller checks ``generation``)."""
        if mids and self.connected:
            puback = wire.encode_puback
            self._write(b"".join([puback(mid) for mid in mids]))

    def pause_reading(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    # ------------------------------------------------------------------ outbound

    def _packet_id(self) -> int:
        for _ in range(65535):
            self._next_pid = self._next_pid % 65535 + 1
            if self._next_pid not in self._outgoing and self._next_pid not in self._subscribe_pid:
                return self._next_pid
        raise RuntimeError("no free MQTT packet id")

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        content_type: str | None = None,
        user_properties: tuple[tuple[str, str], ...] = (),
    ) -> asyncio.Future[int]:
        """Send a PUBLISH; the future gets the PUBACK's reason code (0 at once for QoS 0), or
        :data:`CONNECTION_LOST`. QoS 2 is sent as QoS 1."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self.connected:
            fut.set_result(CONNECTION_LOST)
            return fut
        qos = min(qos, 1)
        v5 = self.v5

        def packet(pid: int) -> bytes:
            return wire.encode_publish(topic, payload, qos, retain, pid, v5, content_type, user_properties)

        if qos == 0:
            self._write(packet(0))
            fut.set_result(0)
        elif len(self._outgoing) < self._send_quota and not self._outbox:
            self._send(packet, fut)
        else:
            self._outbox.append((packet, fut))
        return fut

    def _send(self, packet: Callable[[int], bytes], fut: asyncio.Future[int]) -> None:
        pid = self._packet_id()
        self._outgoing[pid] = fut
        self._write(packet(pid))

    def _puback(self, pid: int, reason: int) -> None:
        fut = self._outgoing.pop(pid, None)
        if fut is not None and not fut.done():
            fut.set_result(reason)
        while self._outbox and len(self._outgoing) < self._send_quota:
            self._send(*self._outbox.popleft())
