"""The MQTT bridge: one broker session <-> JetStream, as a NATS client (the IO shell).

Everything runs on one event loop: the broker session (``session.py``, MQTT packets from
``wire.py``) hands each inbound PUBLISH to :meth:`MqttBridge.on_message`, which queues it for the
pump; the pump pipelines messages into JetStream (``pipeline.py``) and PUBACKs them in order.
Commands out are pipelined likewise.

Invariants (see DESIGN.md):
* an inbound QoS>=1 message is acknowledged to the broker only after JetStream's PubAck (or, for a
  message that cannot be stored, after it reached the dead-letter subject or was rejected and counted);
* PUBACKs go out in the order the PUBLISHes arrived, whatever order the PubAcks come back in;
* an ack goes back only on the MQTT connection that delivered the message;
* an outbound stream message is acked only after the broker's PUBACK.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import anyio
import nats
import nats.errors
import nats.js.errors
from anyio.abc import TaskGroup, TaskStatus
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from core import faults
from core.lograte import worth_logging

from . import wire
from .config import MqttBridgeConfig, OutboundRoute
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
    JetStreamPipeline,
    MessageIds,
    NoStream,
    Outcome,
    Pending,
    Stored,
    TooLarge,
)
from .session import CONNECTION_LOST, Backoff, MqttSession

log = logging.getLogger("leafjet.bridge.mqtt")


class BridgeStats:
    """Counters a monitor (or a test) reads; written only on the event loop except where noted."""

    received: int = 0
    stored: int = 0
    duplicates: int = 0  # redeliveries JetStream recognised by Nats-Msg-Id
    id_collisions: int = 0  # reused packet id + same bytes, stored again under a fresh id
    dead_lettered: int = 0
    oversized: int = 0
    store_retries: int = 0
    dropped_properties: int = 0
    commands_sent: int = 0
    command_failures: int = 0
    commands_dead_lettered: int = 0
    mqtt_connects: int = 0
    mqtt_refusals: int = 0  # CONNACK with a failure reason (credentials, ...)
    mqtt_connect_failures: int = 0  # TCP/TLS connect failed, or no CONNACK
    nats_connect_failures: int = 0


class MqttBridge:
    def __init__(self, config: MqttBridgeConfig) -> None:
        self.config = config
        self.stats = BridgeStats()
        self.mqtt_connected = False
        self.nats_connected = False
        # Received, not yet planned. Past the limit the session stops reading from the broker.
        self._queue: deque[InboundMessage] = deque()
        self._queue_limit = config.max_inflight * 2
        self._session: MqttSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._mqtt_up: asyncio.Event | None = None
        # Inbound pipeline state.
        self._window = AckWindow(config.max_inflight)
        self._ids = MessageIds()
        self._retries: list[tuple[float, int, Pending]] = []  # (due, tie-breaker, message) heap
        self._retry_seq = 0
        self._pump_waiting = False  # the pump sleeps until a message arrives: on_message wakes it
        self._pump_full = False  # the pump sleeps until the window has room
        self._pipeline: JetStreamPipeline | None = None
        self._side_tasks: TaskGroup | None = None
        self._nc: Any = None
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
            session = self._session = MqttSession(self.config, self)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(session.run)  # connects, and reconnects with capped backoff, forever
                    if self.config.inbound:
                        tg.start_soon(self._inbound_pump, nc)
                    for route in self.config.outbound:
                        tg.start_soon(self._outbound_loop, route, js)
            finally:
                session.close()  # a clean DISCONNECT keeps a persistent session on the broker
                self.mqtt_connected = False
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.ack_timeout):
                await nc.close()

    async def _connect_nats(self) -> Any:
        cfg = self.config
        backoff = Backoff(cfg.reconnect_min, cfg.reconnect_max)

        async def on_error(e: Exception) -> None:
            if not self.nats_connected:
                self.stats.nats_connect_failures += 1
            log.warning("%s: NATS error: %s", self._who, str(e) or type(e).__name__)

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
                    str(e) or type(e).__name__,
                    backoff.delay,
                )
                await backoff.sleep()
                continue
            self.nats_connected = True
            log.info("%s: connected to NATS %s", self._who, cfg.nats_url)
            return nc

    # ------------------------------------------------------------------ session events (on the loop)

    def on_connected(self, session_present: bool) -> None:
        self.stats.mqtt_connects += 1
        self.mqtt_connected = True
        log.info(
            "%s: connected as %r (session present: %s)", self._who, self.config.client_id, session_present
        )
        if self._mqtt_up is not None:
            self._mqtt_up.set()

    def on_refused(self, reason: str) -> None:
        self.stats.mqtt_refusals += 1
        log.error(
            "%s: broker refused the connection: %s; retrying with backoff (up to %.0fs)",
            self._who,
            reason,
            self.config.reconnect_max,
        )

    def on_unreachable(self, problem: str, retry_in: float) -> None:
        self.stats.mqtt_connect_failures += 1
        log.warning("%s: cannot reach the broker (%s); retrying in %.1fs", self._who, problem, retry_in)

    def on_disconnected(self, reason: str, was_connected: bool) -> None:
        self.mqtt_connected = False
        if self._mqtt_up is not None:
            self._mqtt_up.clear()
        if was_connected:
            log.warning("%s: disconnected from the broker (%s); reconnecting", self._who, reason)

    def on_subscribed(self, topic_filter: str, code: int) -> None:
        if code >= 0x80:
            log.error(
                "%s: broker refused subscription %r: %s", self._who, topic_filter, wire.reason_text(code)
            )
        else:
            log.info("%s: subscribed to %r (granted QoS %d)", self._who, topic_filter, code)

    def on_message(self, item: InboundMessage) -> None:
        """An inbound PUBLISH, straight from the socket's data callback: queued for the pump."""
        self.stats.received += 1
        queue = self._queue
        queue.append(item)
        if len(queue) >= self._queue_limit and self._session is not None:
            # The window is full and the broker sends past it (mosquitto 2.0 was seen to exceed our
            # Receive Maximum): stop reading; TCP back-pressure holds the broker until we catch up.
            self._session.pause_reading()
        if self._pump_waiting:
            self._pump_waiting = False
            self._wake_pump()

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
        queue = self._queue
        session = self._session
        assert session is not None
        loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tg:
            self._side_tasks = tg
            while True:
                now = time.monotonic()
                pipeline.expire(now)
                while retries and retries[0][0] <= now:
                    await pipeline.send(heapq.heappop(retries)[2])
                while window.has_room():
                    if not queue:
                        break
                    item = queue.popleft()
                    p = self._plan(item)
                    window.add(p)
                    if not p.done:
                        await pipeline.send(p)
                self._release_acks()
                if len(queue) < self._queue_limit:
                    session.resume_reading()
                # Sleep until something changes: a message arrives (only if there is room for it),
                # room frees up, a retry falls due, or the oldest publish runs out of time.
                wakeup.clear()
                room = window.has_room()
                self._pump_full = not room
                self._pump_waiting = room  # on_message wakes us on the next message
                if room and queue:
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
        if p.dead_letter and not isinstance(outcome, TooLarge):
            # Not stored: no stream captures the subject, or (a core subscriber listening on it, a
            # stream refusing it) no PubAck came. Publish it for whoever listens and go on; retrying
            # the store would hold every later message's ack for as long as it fails.
            if not isinstance(outcome, NoStream):
                log.warning(
                    "%s: dead letter on %r not stored (%s); publishing it without a stream",
                    self._who,
                    p.subject,
                    outcome.problem,
                )
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
        self._retry_later(p, problem)

    def _retry_later(self, p: Pending, problem: str) -> None:
        """Publish ``p`` again after its backoff (the pump sends it)."""
        self.stats.store_retries += 1
        if worth_logging(p.attempt):
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
        except Exception as e:  # NATS is down: the whole attempt (store, then publish) is retried
            self._retry_later(p, f"{type(e).__name__}: {e}")
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
        session = self._session
        if session is not None and session.connected:
            generation = session.generation
            mids: list[int] = []
            for p in ready:
                item = p.item
                if item.qos and item.generation == generation:
                    mids.append(item.mid)
                    used = p.headers.get(H_MSG_ID)
                    if used is not None:
                        self._ids.acked(item.mid, used)
                # else: that connection is gone; the broker redelivers (DUP) and dedup catches it
            session.ack(mids)  # one write for the batch
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
        backoff = Backoff(cfg.reconnect_min, cfg.reconnect_max)
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
                except (nats.errors.TimeoutError, nats.js.errors.APIError) as e:
                    # A core subscriber but no stream (nobody answers), or a stream refusing it:
                    # publish for whoever listens and go on rather than hold the commands behind it.
                    log.warning(
                        "%s: dead letter on %r not stored (%s); publishing it without a stream",
                        self._who,
                        plan.subject,
                        str(e) or type(e).__name__,
                    )
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
            if worth_logging(attempt):
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

    async def _outbound_loop(self, route: OutboundRoute, js: Any) -> None:
        cfg = self.config
        backoff = Backoff(cfg.reconnect_min, cfg.reconnect_max)
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
                    str(e) or type(e).__name__,
                    backoff.delay,
                )
                await backoff.sleep()
        # Commands are pipelined: the next batch is fetched and sent to the broker while earlier ones
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
                            "%s: fetch from %r failed: %s",
                            self._who,
                            route.durable,
                            str(e) or type(e).__name__,
                        )
                        await anyio.sleep(cfg.reconnect_min)
                        continue
                    for msg in msgs:  # sent to the broker in stream order
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
            reason: int | None = None
            if cmd.published.done():  # most are acknowledged by now: no timer, no suspension
                reason = cmd.published.result()
            else:
                with anyio.move_on_after(max(0.0, cmd.deadline - time.monotonic())):
                    reason = await cmd.published
            ok = reason is not None and 0 <= reason < 0x80
            if reason == CONNECTION_LOST:
                log.warning(
                    "%s: command on %r not acknowledged: the broker connection is down",
                    self._who,
                    cmd.msg.subject,
                )
            elif reason is not None and not ok:
                log.warning(
                    "%s: broker refused command on %r: %s",
                    self._who,
                    cmd.msg.subject,
                    wire.reason_text(reason),
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
            log.warning(
                "%s: %s of command on %r failed: %s", self._who, what, subject, str(e) or type(e).__name__
            )

    def _mqtt_publish(self, plan: MqttPublish) -> asyncio.Future[int]:
        assert self._session is not None
        return self._session.publish(
            plan.topic, plan.payload, plan.qos, plan.retain, plan.content_type, plan.user_properties
        )


@dataclass(frozen=True, slots=True)
class _Command:
    """A stream message sent to the broker, waiting for its PUBACK until ``deadline``."""

    msg: Any
    published: asyncio.Future[int]  # the PUBACK's reason code, or CONNECTION_LOST
    deadline: float


def _topic_text(item: InboundMessage) -> str:
    return item.topic.decode("utf-8", errors="backslashreplace")


async def run_bridge(
    config: MqttBridgeConfig, *, task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Entry point for a task group (the agent's, or the standalone CLI's): runs until cancelled."""
    await MqttBridge(config).run(task_status=task_status)
