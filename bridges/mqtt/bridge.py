"""The MQTT bridge: one broker session <-> JetStream, as a NATS client (the IO shell).

paho-mqtt runs its own network thread. Its callbacks never wait on the event loop: an inbound PUBLISH
is copied into a bounded handoff (``put`` with a deadline) and the loop is woken with
``call_soon_threadsafe`` when the pump sleeps; PUBACK/connect notifications reach the loop the same way.
The loop calls back into paho only through its thread-safe ``ack``/``publish``. Inbound messages are
pipelined into JetStream (``pipeline.py``), commands out likewise.

Invariants (see DESIGN.md):
* an inbound QoS>=1 message is acknowledged to the broker only after JetStream's PubAck (or, for a
  message that cannot be stored, after it reached the dead-letter subject or was rejected and counted);
* PUBACKs go out in the order the PUBLISHes arrived, whatever order the PubAcks come back in;
* an ack goes back only on the MQTT connection that delivered the message;
* an outbound stream message is acked only after the broker's PUBACK.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import socket
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import anyio
import nats
import nats.errors
import nats.js.errors
from anyio.abc import TaskGroup, TaskStatus
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from paho.mqtt.client import MQTT_ERR_SUCCESS, CallbackAPIVersion, Client, MQTTMessage, MQTTv5, MQTTv311
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from core import faults

from .buffered import BufferedClient
from .config import MQTT_V5, MqttBridgeConfig, OutboundRoute
from .messages import (
    H_MSG_ID,
    DeadLetter,
    InboundMessage,
    MqttPublish,
    Reject,
    plan_inbound,
    plan_outbound,
)
from .pipeline import (
    AckWindow,
    Failed,
    Handoff,
    JetStreamPipeline,
    MessageIds,
    NoStream,
    Outcome,
    Pending,
    Stored,
    TooLarge,
)

log = logging.getLogger("leafjet.bridge.mqtt")


@dataclass
class _Backoff:
    """Retry delays that double from ``reconnect_min`` up to ``reconnect_max``."""

    __slots__ = ("_max", "delay")

    def __init__(self, first: float, most: float) -> None:
        self.delay = first  # the next sleep, for the log line before it
        self._max = most

    async def sleep(self) -> None:
        await anyio.sleep(self.delay)
        self.delay = min(self.delay * 2, self._max)


class BridgeStats:
    """Counters a monitor (or a test) reads; written only on the event loop except where noted."""

    received: int = 0  # paho thread
    stored: int = 0
    duplicates: int = 0  # redeliveries JetStream recognised by Nats-Msg-Id
    id_collisions: int = 0  # reused packet id + same bytes, stored again under a fresh id
    dead_lettered: int = 0
    oversized: int = 0
    overflow: int = 0  # paho thread: queue full, left unacknowledged for redelivery
    store_retries: int = 0
    dropped_properties: int = 0
    commands_sent: int = 0
    command_failures: int = 0
    commands_dead_lettered: int = 0
    mqtt_connects: int = 0  # paho thread
    mqtt_refusals: int = 0  # paho thread: CONNACK with a failure reason (credentials, ...)
    mqtt_connect_failures: int = 0  # paho thread: TCP/TLS connect failed
    nats_connect_failures: int = 0


class MqttBridge:
    def __init__(self, config: MqttBridgeConfig) -> None:
        self.config = config
        self.stats = BridgeStats()
        self.mqtt_connected = False
        self.nats_connected = False
        self._queue = Handoff(config.max_inflight * 2)
        self._generation = 0
        self._gen_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._mqtt_up: asyncio.Event | None = None
        self._pub_waiters: dict[int, asyncio.Future[Any]] = {}
        # Inbound pipeline state, all on the loop except the two flags paho's thread reads.
        self._window = AckWindow(config.max_inflight)
        self._ids = MessageIds()
        self._retries: list[tuple[float, int, Pending]] = []  # (due, tie-breaker, message) heap
        self._retry_seq = 0
        self._pump_waiting = False  # the pump sleeps until a message arrives: paho must wake it
        self._pump_full = False  # the pump sleeps until the window has room
        self._pipeline: JetStreamPipeline | None = None
        self._side_tasks: TaskGroup | None = None
        self._nc: Any = None
        self._client: Client | None = None
        self._who = f"mqtt bridge {config.name!r} ({config.host}:{config.port})"

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled. Reports started at once: connecting (to NATS, then to the broker)
        is retried forever in the background, so whoever starts the bridge never waits on a peer."""
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._mqtt_up = asyncio.Event()
        task_status.started(self)
        nc = self._nc = await self._connect_nats()
        try:
            if faults.ARMED:
                faults.fault_point("mqtt_bridge", self.config.name)
            js = nc.jetstream(timeout=self.config.ack_timeout)
            client = self._start_mqtt()
            try:
                async with anyio.create_task_group() as tg:
                    if self.config.inbound:
                        tg.start_soon(self._inbound_pump, nc)
                    for route in self.config.outbound:
                        tg.start_soon(self._outbound_loop, route, js)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop_mqtt(client)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.ack_timeout):
                await nc.close()

    async def _connect_nats(self) -> Any:
        cfg = self.config
        backoff = _Backoff(cfg.reconnect_min, cfg.reconnect_max)

        async def on_error(e: Exception) -> None:
            if not self.nats_connected:
                self.stats.nats_connect_failures += 1
            log.warning("%s: NATS error: %s", self._who, e or type(e).__name__)

        async def on_disconnected() -> None:
            self.nats_connected = False
            log.warning("%s: disconnected from NATS %s; reconnecting", self._who, cfg.nats_url)

        async def on_reconnected() -> None:
            self.nats_connected = True
            log.info("%s: reconnected to NATS %s", self._who, cfg.nats_url)

        while True:
            try:
                nc = await nats.connect(
                    cfg.nats_url,
                    name=f"leafjet-mqtt-bridge-{cfg.name}",
                    connect_timeout=min(cfg.ack_timeout, 5.0),
                    max_reconnect_attempts=-1,
                    skip_subject_validation=True,  # subjects come from the (validating) topic mapping
                    reconnect_time_wait=min(cfg.reconnect_max, 2.0),
                    error_cb=on_error,
                    disconnected_cb=on_disconnected,
                    reconnected_cb=on_reconnected,
                )
            except Exception as e:
                self.stats.nats_connect_failures += 1
                log.warning(
                    "%s: cannot connect to NATS %s (%s); retrying in %.1fs",
                    self._who,
                    cfg.nats_url,
                    e or type(e).__name__,
                    backoff.delay,
                )
                await backoff.sleep()
                continue
            self.nats_connected = True
            log.info("%s: connected to NATS %s", self._who, cfg.nats_url)
            return nc

    def _start_mqtt(self) -> Client:
        cfg = self.config
        v5 = cfg.protocol == MQTT_V5
        client = BufferedClient(
            CallbackAPIVersion.VERSION2,
            client_id=cfg.client_id,
            protocol=MQTTv5 if v5 else MQTTv311,
            clean_session=None if v5 else cfg.clean_session,
            manual_ack=True,
            reconnect_on_failure=True,
        )
        client.enable_logger(logging.getLogger("leafjet.bridge.mqtt.paho"))
        client.reconnect_delay_set(cfg.reconnect_min, cfg.reconnect_max)  # type: ignore[arg-type]
        client.max_inflight_messages_set(cfg.max_inflight)
        client.max_queued_messages_set(0)
        if cfg.username is not None:
            client.username_pw_set(cfg.username, cfg.password)
        if cfg.use_tls:
            tls = cfg.tls
            client.tls_set(
                ca_certs=tls.ca_file if tls else None,
                certfile=tls.cert_file if tls else None,
                keyfile=tls.key_file if tls else None,
            )
            if tls is not None and tls.insecure:
                client.tls_insecure_set(True)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        client.on_publish = self._on_publish
        if v5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 0 if cfg.clean_session else int(cfg.session_expiry)
            props.ReceiveMaximum = cfg.max_inflight
            client.connect_async(
                cfg.host, cfg.port, cfg.keepalive, clean_start=cfg.clean_session, properties=props
            )
        else:
            client.connect_async(cfg.host, cfg.port, cfg.keepalive)
        client.loop_start()  # paho's thread: connects, and reconnects with capped backoff, forever
        self._client = client
        return client

    async def _stop_mqtt(self, client: Client) -> None:
        client.disconnect()  # a clean DISCONNECT keeps a persistent session on the broker
        await anyio.to_thread.run_sync(client.loop_stop)
        self.mqtt_connected = False
        for fut in self._pub_waiters.values():
            fut.cancel()
        self._pub_waiters.clear()

    # ------------------------------------------------------------------ paho thread

    def _to_loop(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: we are shutting down
            loop.call_soon_threadsafe(fn, *args)

    def _on_connect(self, client: Client, _u: Any, flags: Any, reason: Any, _props: Any) -> None:
        if reason.is_failure:
            self.stats.mqtt_refusals += 1
            log.error(
                "%s: broker refused the connection: %s; retrying with backoff (up to %.0fs)",
                self._who,
                reason,
                self.config.reconnect_max,
            )
            return
        self.stats.mqtt_connects += 1
        self.mqtt_connected = True
        log.info(
            "%s: connected as %r (session present: %s)",
            self._who,
            self.config.client_id,
            flags.session_present,
        )
        if self.config.inbound:
            # QoS 2 is subscribed as QoS 1: paho sends PUBREC (which hands ownership to us) before the
            # application sees the message, so a bridge killed then would lose it. See DESIGN.md.
            subs: list[Any] = [
                (
                    r.filter,
                    SubscribeOptions(qos=min(r.qos, 1)) if self.config.protocol == MQTT_V5 else min(r.qos, 1),
                )
                for r in self.config.inbound
            ]
            client.subscribe(subs)
        if self._mqtt_up is not None:
            self._to_loop(self._mqtt_up.set)

    def _on_connect_fail(self, _client: Client, _u: Any) -> None:
        self.stats.mqtt_connect_failures += 1
        log.warning("%s: cannot reach the broker; retrying with backoff", self._who)

    def _on_disconnect(self, _client: Client, _u: Any, _flags: Any, reason: Any, _props: Any) -> None:
        with self._gen_lock:
            self._generation += 1  # acks for messages of the old connection are not sent
        was = self.mqtt_connected
        self.mqtt_connected = False
        if self._mqtt_up is not None:
            self._to_loop(self._mqtt_up.clear)
        if was:
            log.warning("%s: disconnected from the broker (%s); reconnecting", self._who, reason)

    def _on_subscribe(self, _client: Client, _u: Any, _mid: int, reasons: Any, _props: Any) -> None:
        for route, rc in zip(self.config.inbound, reasons, strict=False):
            if rc.is_failure:
                log.error("%s: broker refused subscription %r: %s", self._who, route.filter, rc)
            else:
                log.info("%s: subscribed to %r (granted %s)", self._who, route.filter, rc)

    def _on_message(self, client: Client, _u: Any, m: MQTTMessage) -> None:
        self.stats.received += 1
        props = m.properties
        item = InboundMessage(
            generation=self._generation,
            mid=m.mid,
            qos=m.qos,
            dup=bool(m.dup),
            retain=bool(m.retain),
            topic=m._topic,  # bytes: paho raises on .topic for invalid UTF-8
            payload=bytes(m.payload),
            content_type=getattr(props, "ContentType", None),
            user_properties=tuple(getattr(props, "UserProperty", ()) or ()),
            response_topic=getattr(props, "ResponseTopic", None),
            correlation_data=getattr(props, "CorrelationData", None),
        )
        if m.qos == 0:
            queued = self._queue.put_nowait(item)  # at most once anyway: dropped (and counted) when full
        else:
            queued = self._queue.put(item, timeout=self.config.ack_timeout)
        if not queued:
            self.stats.overflow += 1
            if m.qos > 0:
                # Unacknowledged, the broker resends it only on a new connection: force one.
                log.error("%s: inbound queue full; reconnecting so the broker redelivers", self._who)
                shutdown = getattr(client.socket(), "shutdown", None)  # TCP or TLS: we open no websockets
                if shutdown is not None:
                    with contextlib.suppress(OSError):
                        shutdown(socket.SHUT_RDWR)
            return
        if self._pump_waiting and self._wakeup is not None:
            # Only when the pump sleeps: a wakeup per message would cost a syscall on both threads.
            self._pump_waiting = False
            self._to_loop(self._wakeup.set)

    def _on_publish(self, _client: Client, _u: Any, mid: int, reason: Any, _props: Any) -> None:
        self._to_loop(self._published, mid, reason)

    # ------------------------------------------------------------------ inbound: MQTT -> JetStream

    async def _inbound_pump(self, nc: Any) -> None:
        """Move inbound messages into JetStream, many at once, and acknowledge them in arrival order.

        One task does all the sending: new messages while the window has room, retries when their
        backoff is over, and timeouts of overdue publishes. Replies arrive on the pipeline's
        subscription and only mark messages done; acknowledgements follow in arrival order.
        """
        assert self._wakeup is not None
        cfg = self.config
        pipeline = JetStreamPipeline(nc, cfg.ack_timeout, self._on_outcome)
        await pipeline.start()
        self._pipeline = pipeline
        window = self._window
        retries = self._retries
        wakeup = self._wakeup
        loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tg:
            self._side_tasks = tg
            while True:
                now = time.monotonic()
                pipeline.expire(now)
                while retries and retries[0][0] <= now:
                    await pipeline.send(heapq.heappop(retries)[2])
                while window.has_room():
                    item = self._queue.get()
                    if item is None:
                        break
                    p = self._plan(item)
                    window.add(p)
                    if not p.done:
                        await pipeline.send(p)
                self._release_acks()
                # Sleep until something changes: a message arrives (only if there is room for it),
                # room frees up, a retry falls due, or the oldest publish runs out of time.
                wakeup.clear()
                room = window.has_room()
                self._pump_full = not room
                self._pump_waiting = room  # read by paho's thread: wake us on the next message
                if room and len(self._queue):
                    self._pump_waiting = False  # it arrived before the flag was up
                    continue
                due = [t for t in (retries[0][0] if retries else None, pipeline.next_deadline()) if t]
                timer = loop.call_at(min(due), wakeup.set) if due else None  # loop.time() is time.monotonic()
                await wakeup.wait()
                if timer is not None:
                    timer.cancel()
                self._pump_waiting = self._pump_full = False

    def _plan(self, item: InboundMessage) -> Pending:
        p = Pending(item, retry_delay=self.config.reconnect_min)
        plan = plan_inbound(item, self.config)
        if isinstance(plan, Reject):
            self.stats.oversized += 1
            log.warning("%s: rejected a message on %r: %s", self._who, _topic_text(item), plan.reason)
            p.done = True
        elif isinstance(plan, DeadLetter):
            log.warning(
                "%s: message on %r sent to dead-letter subject %r: %s",
                self._who,
                _topic_text(item),
                plan.subject,
                plan.reason,
            )
            p.subject, p.payload, p.headers, p.dead_letter = plan.subject, plan.payload, plan.headers, True
        else:
            if plan.dropped_properties:
                self.stats.dropped_properties += len(plan.dropped_properties)
                log.warning(
                    "%s: dropped user properties %s (reserved or not valid header names)",
                    self._who,
                    list(plan.dropped_properties),
                )
            p.subject, p.payload, p.headers = plan.subject, plan.payload, plan.headers
        base = p.headers.get(H_MSG_ID)
        if base is not None:
            chosen = self._ids.choose(item.mid, item.dup, base)
            if chosen != base:
                p.headers[H_MSG_ID] = chosen
        return p

    def _on_outcome(self, p: Pending, outcome: Outcome) -> None:
        """A publish attempt ended (on the loop): done, or scheduled again. Never blocks."""
        stats = self.stats
        if isinstance(outcome, Stored):
            headers = p.headers
            if outcome.duplicate and not p.item.dup and p.attempt == 1 and H_MSG_ID in headers:
                # Not a redelivery (no DUP flag) and not our own retry: a reused packet id with
                # identical bytes. Store it again under a fresh id.
                stats.id_collisions += 1
                old = headers[H_MSG_ID]
                p.headers = {**headers, H_MSG_ID: self._ids.fresh(old)}
                self._ids.renamed(p.item.mid, old, p.headers[H_MSG_ID])
                self._schedule(p, 0.0)
                return
            if p.dead_letter:
                stats.dead_lettered += 1
            elif outcome.duplicate:
                stats.duplicates += 1
            else:
                stats.stored += 1
            self._finish(p)
            return
        if isinstance(outcome, NoStream) and p.dead_letter:
            # Nobody stores dead letters: publish them for whoever listens.
            assert self._side_tasks is not None
            self._side_tasks.start_soon(self._publish_dead_letter, p)
            return
        if isinstance(outcome, TooLarge):
            stats.oversized += 1
            log.error(
                "%s: rejected a message on %r: %d bytes exceed the NATS server's max_payload",
                self._who,
                _topic_text(p.item),
                len(p.payload),
            )
            self._finish(p)
            return
        if isinstance(outcome, NoStream):
            problem = f"no stream captures subject {p.subject!r}"
        else:
            problem = outcome.problem
        stats.store_retries += 1
        if p.attempt & (p.attempt - 1) == 0:  # log attempts 1, 2, 4, 8, ...
            log.warning(
                "%s: cannot store on %r (%s); attempt %d, retrying in %.1fs",
                self._who,
                p.subject,
                problem,
                p.attempt,
                p.retry_delay,
            )
        delay = p.retry_delay
        p.retry_delay = min(delay * 2, self.config.reconnect_max)
        self._schedule(p, delay)

    def _schedule(self, p: Pending, delay: float) -> None:
        self._retry_seq += 1
        heapq.heappush(self._retries, (time.monotonic() + delay, self._retry_seq, p))
        self._wake_pump()

    async def _publish_dead_letter(self, p: Pending) -> None:
        try:
            await self._nc_publish_flushed(p.subject, p.payload, p.headers)
        except Exception as e:
            self._on_outcome(p, Failed(f"{type(e).__name__}: {e}"))
            return
        self.stats.dead_lettered += 1
        self._finish(p)

    async def _nc_publish_flushed(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        assert self._nc is not None
        await self._nc.publish(subject, payload, headers=headers)
        await self._nc.flush(timeout=self.config.ack_timeout)

    def _finish(self, p: Pending) -> None:
        p.done = True
        if p is self._window.oldest():
            self._release_acks()

    def _release_acks(self) -> None:
        ready = self._window.releasable()
        if not ready:
            return
        client = self._client
        if client is not None:
            with self._gen_lock:
                generation = self._generation
                for p in ready:
                    item = p.item
                    if item.qos and item.generation == generation:
                        client.ack(item.mid, item.qos)
                        used = p.headers.get(H_MSG_ID)
                        if used is not None:
                            self._ids.acked(item.mid, used)
                    # else: that connection is gone; the broker redelivers (DUP) and dedup catches it
        if self._pump_full:
            self._pump_full = False
            self._wake_pump()  # the pump waits for room

    def _wake_pump(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _store_dead_letter(self, js: Any, plan: DeadLetter) -> None:
        """Store an outbound dead letter, or publish it when no stream captures it: retried with capped
        backoff until one of those succeeds. One too large for the NATS server is logged and counted
        ``oversized`` (retrying cannot store it, and failing would redeliver the command forever).

        Inbound dead letters go through the pipeline; only the outbound path's (rare) ones come here."""
        cfg = self.config
        backoff = _Backoff(cfg.reconnect_min, cfg.reconnect_max)
        attempt = 0
        while True:
            attempt += 1
            try:
                try:
                    await js.publish(
                        plan.subject, plan.payload, timeout=cfg.ack_timeout, headers=plan.headers
                    )
                except nats.js.errors.NoStreamResponseError:  # nobody stores them: publish for listeners
                    await self._nc_publish_flushed(plan.subject, plan.payload, plan.headers)
                return
            except nats.errors.MaxPayloadError:
                self.stats.oversized += 1
                log.error(
                    "%s: dropped a dead letter on %r: %d bytes exceed the NATS server's max_payload",
                    self._who,
                    plan.subject,
                    len(plan.payload),
                )
                return
            except Exception as e:
                problem = f"{type(e).__name__}: {e}"
            self.stats.store_retries += 1
            if attempt & (attempt - 1) == 0:  # log attempts 1, 2, 4, 8, ...
                log.warning(
                    "%s: cannot store on %r (%s); attempt %d, retrying in %.1fs",
                    self._who,
                    plan.subject,
                    problem,
                    attempt,
                    backoff.delay,
                )
            await backoff.sleep()

    # ------------------------------------------------------------------ outbound: JetStream -> MQTT

    def _published(self, mid: int, reason: Any) -> None:
        fut = self._pub_waiters.pop(mid, None)
        if fut is not None and not fut.done():
            fut.set_result(reason)

    async def _outbound_loop(self, route: OutboundRoute, js: Any) -> None:
        cfg = self.config
        backoff = _Backoff(cfg.reconnect_min, cfg.reconnect_max)
        while True:
            try:
                sub = await js.pull_subscribe(
                    f"{route.subject_prefix}.>",
                    durable=route.durable,
                    stream=route.stream,
                    config=ConsumerConfig(
                        durable_name=route.durable,
                        ack_policy=AckPolicy.EXPLICIT,
                        deliver_policy=DeliverPolicy.ALL,
                        ack_wait=route.ack_wait,
                        max_ack_pending=max(route.batch * 4, cfg.max_inflight),
                    ),
                )
                break
            except Exception as e:
                log.warning(
                    "%s: cannot bind durable %r on stream %r (%s); retrying in %.1fs",
                    self._who,
                    route.durable,
                    route.stream,
                    e or type(e).__name__,
                    backoff.delay,
                )
                await backoff.sleep()
        # Commands are pipelined: the next batch is fetched and handed to paho while earlier ones
        # still wait for their PUBACK. The stream's capacity bounds how many are in flight.
        in_flight, settling = anyio.create_memory_object_stream[_Command](cfg.max_inflight)
        try:
            async with anyio.create_task_group() as tg, in_flight, settling:
                tg.start_soon(self._settle_commands, settling)
                while True:
                    assert self._mqtt_up is not None
                    await self._mqtt_up.wait()
                    try:
                        msgs = await sub.fetch(route.batch, timeout=1.0)
                    except nats.errors.TimeoutError:
                        continue
                    except Exception as e:
                        log.warning(
                            "%s: fetch from %r failed: %s", self._who, route.durable, e or type(e).__name__
                        )
                        await anyio.sleep(cfg.reconnect_min)
                        continue
                    for msg in msgs:  # handed to paho in stream order
                        plan = plan_outbound(msg.subject, msg.data, msg.headers, route, self.config)
                        if isinstance(plan, DeadLetter):
                            log.warning(
                                "%s: command on %r dead-lettered: %s", self._who, msg.subject, plan.reason
                            )
                            await self._store_dead_letter(js, plan)
                            self.stats.commands_dead_lettered += 1
                            await self._settle(msg.term(), "term", msg.subject)
                            continue
                        deadline = time.monotonic() + cfg.ack_timeout
                        await in_flight.send(_Command(msg, self._mqtt_publish(plan), deadline))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await sub.unsubscribe()

    async def _settle_commands(self, settling: Any) -> None:
        """Ack each command to the stream once the broker acknowledged it (in order); nak it if not."""
        async for cmd in settling:
            ok = False
            if cmd.published is not None:
                with anyio.move_on_after(max(0.0, cmd.deadline - time.monotonic())):
                    reason = await cmd.published
                    ok = not getattr(reason, "is_failure", False)
                    if not ok:
                        log.warning(
                            "%s: broker refused command on %r: %s", self._who, cmd.msg.subject, reason
                        )
            if ok:
                await self._settle(cmd.msg.ack(), "ack", cmd.msg.subject)
                self.stats.commands_sent += 1
            else:
                self.stats.command_failures += 1
                await self._settle(cmd.msg.nak(delay=self.config.reconnect_min), "nak", cmd.msg.subject)

    async def _settle(self, done: Awaitable[None], what: str, subject: str) -> None:
        """An ack, nak or term of a command: one that fails (a closed connection, a full
        reconnect buffer) is logged, not raised -- the stream redelivers the command after its
        ack_wait, and the bridge goes on."""
        try:
            await done
        except Exception as e:
            log.warning("%s: %s of command on %r failed: %s", self._who, what, subject, e or type(e).__name__)

    def _mqtt_publish(self, plan: MqttPublish) -> asyncio.Future[Any] | None:
        assert self._client is not None and self._loop is not None
        props = None
        if self.config.protocol == MQTT_V5 and (plan.content_type or plan.user_properties):
            props = Properties(PacketTypes.PUBLISH)
            if plan.content_type:
                props.ContentType = plan.content_type
            if plan.user_properties:
                props.UserProperty = list(plan.user_properties)
        info = self._client.publish(plan.topic, plan.payload, plan.qos, plan.retain, properties=props)
        if info.rc != MQTT_ERR_SUCCESS and plan.qos == 0:
            return None
        # on_publish reaches the loop through call_soon_threadsafe, so it cannot run before this line
        fut: asyncio.Future[Any] = self._loop.create_future()
        if info.is_published():
            fut.set_result(None)
        else:
            self._pub_waiters[info.mid] = fut
        return fut


@dataclass(frozen=True, slots=True)
class _Command:
    """A stream message handed to paho, waiting for the broker's PUBACK until ``deadline``."""

    msg: Any
    published: asyncio.Future[Any] | None  # None: QoS 0 that paho could not send
    deadline: float


def _topic_text(item: InboundMessage) -> str:
    return item.topic.decode("utf-8", errors="backslashreplace")


async def run_bridge(
    config: MqttBridgeConfig, *, task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Entry point for a task group (the agent's, or the standalone CLI's): runs until cancelled."""
    await MqttBridge(config).run(task_status=task_status)
