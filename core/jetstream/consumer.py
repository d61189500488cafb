"""One consumer of a stream: what it has delivered, what is pending, and who is waiting.

A consumer has one worker task. It wakes when the stream stores a message, a pull request
arrives, an ack frees room, or a redelivery falls due; it then delivers what it can. Acks arrive on
``$JS.ACK.<stream>.<consumer>.>`` through their own bounded queue, and so do the consumer's pull
requests (the API hands them over as they are routed), so each client's are taken in order.
Acks are applied in batches, and each batch's new state is committed to the stream's store (one
meta row) before any double ack is confirmed. After a crash, at most the acks of the last
uncommitted batch (milliseconds) are forgotten, so only unacknowledged messages can come back.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import random
import time
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from core import jsonsafe, subjects
from core.faults import fault_point
from core.jetstream.consumer_models import (
    GO_ZERO_TIME_NS,
    PullRequestError,
    consumer_info_json,
    parse_pull_request,
)
from core.jetstream.gotime import format_go_time, parse_go_duration
from core.protocol.headers import encode_headers, parse_headers, slice_header
from core.server.internal import Backlog, InboundMsg, InternalReceiver
from core.store.api import DeleteOp, SetMetaOp, StoredMsg

if TYPE_CHECKING:
    from core.jetstream.consumer_models import ConsumerConfig
    from core.jetstream.stream import Stream

log = logging.getLogger("leafjet.consumer")

STATE_PREFIX = "consumer/"
# Push flow control, as the reference: a window that starts at 1/16 of 32 MiB and doubles with
# every answered request; a request goes out at half the window, delivery stalls at a full one.
_FC_LIMIT = 32 << 20
# How often a push consumer without a subscriber on its deliver subject looks again, besides
# being woken when one subscribes (Account.watch_interest). It was every 10 ms: 100 durable
# consumers whose clients were away cost 0.37 of a core (bench/RESULTS.md), now 0.013
NO_INTEREST_LOOK = 1.0
# What a consumer's ack queue holds (acks, NAKs, pull requests, flow-control replies).
ACK_QUEUE_MSGS = 65536
ACK_QUEUE_BYTES = 16 * 1024 * 1024
# Messages read from the store per query. A read of 1024 x 1 KiB held up delivery while its
# rows were fetched and decoded: an ordered consumer's catch-up of 100k x 1 KiB ran at a median
# of 124k msgs/s with 1024 against 156k with 256 (4 runs each, same machine and hour).
READ_AHEAD = 256
PUSH_RUN = 256  # push messages delivered per turn of the loop, so acks and others run between
NAK_RECHECK_NS = 10_000_000  # the earliest a NAK with a delay brings its message back


def state_key(name: str) -> str:
    return f"{STATE_PREFIX}{name}/state"


def config_key(name: str) -> str:
    return f"{STATE_PREFIX}{name}/config"


@dataclass(slots=True)
class PullWaiter:
    """One outstanding pull request."""

    reply: str
    batch: int
    max_bytes: int  # 0 = no byte budget
    expires_at: int  # monotonic ns; 0 = never
    no_wait: bool
    heartbeat_ns: int
    delivered: int = 0
    bytes: int = 0
    last_sent: int = 0  # monotonic ns of the last thing sent to it


@dataclass(slots=True)
class Pending:
    dseq: int  # the first delivery's consumer sequence (redeliveries keep it)
    deliveries: int
    ts: int
    timer: int = 0  # token of the live redelivery timer; older heap entries are stale
    subject: str | None = None  # the message's (None when restored from saved state)


class Consumer:
    def __init__(self, stream: Stream, name: str, config: ConsumerConfig, created_ns: int) -> None:
        self.stream = stream
        self.name = name
        self.config = config
        self.created_ns = created_ns
        self.filters = consumer_filters(config)
        # delivery position and acknowledgement state
        self.next_sseq = 0  # next stream sequence to look at
        self.dseq = 0  # last consumer sequence delivered
        self.last_delivered_sseq = 0
        self.last_active_ns: int | None = None
        self.last_ack_ns: int | None = None
        self.ack_floor_dseq = 0
        self.ack_floor_sseq = 0
        self.pending: dict[int, Pending] = {}
        self.redeliver: list[int] = []  # stream sequences due again, delivered before new ones
        # Messages that reached max_deliver: no longer pending an ack, but the reference keeps
        # them under the ack floor and in num_redelivered until they are acknowledged.
        self.maxed: set[int] = set()
        self._timer_seq = 0
        self.initial: list[int] = []  # last_per_subject: sequences to deliver first
        self._timers: list[tuple[int, int, int]] = []  # (due wall ns, sseq, timer token)
        # pull requests and push flow control
        self.waiting: list[PullWaiter] = []
        self._fc_reply: str | None = None  # the outstanding flow-control request
        self._fc_count = 0
        self._fc_window = _FC_LIMIT // 16
        self._fc_pending_bytes = 0  # delivered and not yet covered by an answered request
        self._fc_size = 0  # pending bytes the outstanding request covers
        self._last_push_ns = time.monotonic_ns()
        # plumbing
        self._wake = anyio.Event()
        self._interest_watch: str | None = None  # the deliver subject the account watches for us
        # Bounded in bytes too: a flood of large messages to its ack subjects pauses the
        # publisher, and past the limit is dropped (core/server/internal.py).
        stall = stream.receiver.backlog.stall if stream.receiver.backlog is not None else None
        self.acks = InternalReceiver(
            f"acks:{stream.name}:{self.name}",
            stream.account,
            backlog=Backlog(ACK_QUEUE_MSGS, ACK_QUEUE_BYTES, stall=stall),
            release_on_receive=True,
        )
        self.deleted = False
        self.failed: str | None = None  # why its supervisor gave it up (engine._supervise)
        self._dirty = False
        self.last_interest_ns = time.monotonic_ns()
        self._remaining = -1
        self._interest_candidates: list[int] = []
        # messages the stream removed, noted by messages_removed until settle_removals runs
        self._removals = False
        self._removed_seqs: set[int] = set()
        self._removed_subjects: set[str] = set()
        self._buffer: deque[StoredMsg] = deque()  # read-ahead of the next messages to deliver
        self._reads = 0  # bumped when the read-ahead is dropped: a read in flight is then stale
        # As the reference: a memory-stored consumer (mem_storage: nats-py's ordered consumers,
        # so every KV watch, keys() and history()) does not outlive the server, so its config and
        # state are never written to the store (an update cannot change mem_storage).
        self.recorded = not config.mem_storage
        self._floor_stale = False
        # replay_policy original, as the reference: the stored spacing between one message and
        # the next, until delivery passes the stream's last sequence of when it began
        self._replaying = config.replay_policy == "original"
        self._replay_until: int | None = None
        self._replay_ts = 0  # the stored time of the last message replayed
        self._rate_tokens: float | None = None  # rate_limit_bps token bucket (bytes), filled at first use
        self._rate_at = 0.0
        self._pause_ends: int | None = None  # a pause (pause_until, wall ns) whose end is still to advise
        # Set by the API between a reset and its answer: the answer tells where delivery starts,
        # so nothing goes out before it (a sourcing stream skips what the answer says was delivered)
        self.held = False
        self._epoch = 0  # bumped by every reset: a message taken before one is not sent after it
        self._watch_pause()

    # ------------------------------------------------------------------ set-up

    @property
    def num_redelivered(self) -> int:
        """Messages delivered more than once and not yet done with (as the reference counts)."""
        return sum(1 for p in self.pending.values() if p.deliveries > 1) + len(self.maxed)

    def _arm(self, sseq: int, p: Pending, delay_ns: int) -> None:
        self._arm_at(sseq, p, time.time_ns() + delay_ns)

    def _arm_at(self, sseq: int, p: Pending, due_ns: int) -> None:
        if self.acks_by_flow_control:
            return  # no ack wait: as the reference, nothing is redelivered by time
        self._timer_seq += 1
        p.timer = self._timer_seq
        heapq.heappush(self._timers, (due_ns, sseq, p.timer))

    @property
    def is_pull(self) -> bool:
        return not self.config.deliver_subject

    @property
    def ack_none(self) -> bool:
        return self.config.ack_policy == "none"

    @property
    def acks_by_flow_control(self) -> bool:
        """ack_policy flow_control (ADR-60): an answered flow-control request is the ack,
        cumulative like ack all, up to its ``Nats-Last-Stream``. No ack subject, no ack wait, no
        redelivery by time: what was not acked comes back only through a reset."""
        return self.config.ack_policy == "flow_control"

    async def position_from_policy(self) -> None:
        """Where a new consumer starts, from its deliver policy, by the reference's rules (its
        starting sequence, ADR-1): clients see them as the floors a new consumer reports (ack
        floor and delivered are the starting sequence - 1)."""
        cfg = self.config
        store = self.stream.store
        st = await self.stream.state()
        policy = cfg.deliver_policy
        start = 0
        if policy == "all":
            start = st.first_seq
        elif policy == "new":
            start = st.last_seq + 1
        elif policy == "by_start_sequence":
            start = cfg.opt_start_seq
        elif policy == "by_start_time":
            start = await self.stream.seq_for_time(cfg.opt_start_time or 0)
            if self.filters:
                # as the reference: jump to the first message a filter takes when that is ahead
                # (and not the stream's last), instead of walking up to it
                ahead = st.last_seq
                for f in self.filters:
                    m = await store.first_after(st.first_seq, f)
                    if m is not None and start <= m.seq < ahead:
                        ahead = m.seq
                if start < ahead < st.last_seq:
                    start = ahead
        elif policy == "last":
            if not self.filters:
                start = st.last_seq
            for f in self.filters:
                m = await store.last_by_subject(f)
                if m is not None and m.seq > start:
                    start = m.seq
        elif policy == "last_per_subject":
            if self.stream.config.max_msgs_per_subject == 1:
                start = st.first_seq  # every message is the last of its subject
            else:
                seqs: set[int] = set()
                for f in self.filters or [">"]:
                    for subj in await store.subjects_state(f):
                        m = await store.last_by_subject(subj)
                        if m is not None:
                            seqs.add(m.seq)
                self.initial = sorted(seqs)
                start = self.initial[0] if self.initial else st.last_seq
        explicit = policy == "by_start_sequence"
        if st.msgs == 0 and st.last_seq == 0 and not explicit:
            start = 1  # a stream that never held a message: only new ones
        elif start > st.last_seq and not explicit:
            start = st.last_seq + 1
        elif start < st.first_seq:
            start = st.first_seq  # what was there is gone
        # last_per_subject delivers ``initial`` first, then what arrives after the last message
        self.next_sseq = st.last_seq + 1 if self.initial else start
        self.ack_floor_sseq = self.last_delivered_sseq = start - 1

    def state_json(self) -> bytes:
        return json.dumps(
            {
                "next": self.next_sseq,
                "dseq": self.dseq,
                "last": self.last_delivered_sseq,
                "floor": [self.ack_floor_dseq, self.ack_floor_sseq],
                "maxed": sorted(self.maxed),
                "pending": {str(s): [p.dseq, p.deliveries, p.ts] for s, p in self.pending.items()},
                "initial": self.initial,
            },
            separators=(",", ":"),
        ).encode()

    def restore_state(self, raw: bytes) -> None:
        d = json.loads(raw)
        self.next_sseq, self.dseq, self.last_delivered_sseq = d["next"], d["dseq"], d["last"]
        self.ack_floor_dseq, self.ack_floor_sseq = d["floor"]
        self.maxed = set(d.get("maxed", []))
        self.initial = list(d.get("initial", []))
        now = time.time_ns()
        for key, (dseq, deliveries, ts) in d.get("pending", {}).items():
            # Delivered before the restart and not acknowledged: due when its ack wait runs out.
            p = self.pending[int(key)] = Pending(dseq, deliveries, ts)
            self._arm(int(key), p, max(ts + self._ack_wait(deliveries) - now, 0))

    def subscribe(self) -> None:
        if not self.ack_none and not self.acks_by_flow_control:
            # As the reference: an ack-none (or flow-control-acked) consumer has no ack
            # subscription, so an ack sent with a reply gets no responders and a +NXT asks for
            # nothing.
            # The two forms the reference takes: 9 tokens, and 11 or more after a domain ("_"
            # without one) and the account's hash. Any other count has no responder.
            stream, name = self.stream.name, self.name
            self.acks.subscribe(f"$JS.ACK.{stream}.{name}.*.*.*.*.*")
            domain = self.stream.domain or "_"
            self.acks.subscribe(
                f"$JS.ACK.{domain}.{account_hash(self.stream.account.name)}.{stream}.{name}.*.*.*.*.>"
            )
        if self.config.flow_control:
            self.acks.subscribe(f"$JS.FC.{self.stream.name}.{self.name}.>")

    def wake(self) -> None:
        self._wake.set()

    def wants(self, stored: Collection[str]) -> bool:
        """Whether messages of the subjects ``stored``, just stored, can give this consumer something to
        deliver: not when it is a pull consumer nobody is pulling from (a pull request wakes it),
        nor when its filters take none of them. (Its timers wake it on their own.)"""
        if self.is_pull and not self.waiting:
            return False
        filters = self.filters
        return not filters or any(subjects.match(f, s) for f in filters for s in stored)

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._ack_loop)
            tg.start_soon(self._flusher)
            task_status.started()
            try:
                while not self.deleted:
                    fault_point("consumer", self.name)
                    self._wake = anyio.Event()
                    try:
                        self._pause_ended()
                        await self.settle_removals()
                        await self._deliver_available()
                        if self._interest_candidates:
                            await self.persist()  # ack none: what it delivered may go now
                    except Exception:
                        log.exception("consumer %s/%s: delivery failed", self.stream.name, self.name)
                    with anyio.move_on_after(self._next_wake_in()):
                        await self._wake.wait()
                    self._expire_timers()
            finally:
                self._unwatch_interest()
                tg.cancel_scope.cancel()

    def _watch_interest(self) -> None:
        subject = self.config.deliver_subject
        if self._interest_watch != subject:
            self._unwatch_interest()
            self.stream.account.watch_interest(subject, self._interest_arrived)
            self._interest_watch = subject

    def _unwatch_interest(self) -> None:
        if self._interest_watch is not None:
            self.stream.account.unwatch_interest(self._interest_watch, self._interest_arrived)
            self._interest_watch = None

    def _interest_arrived(self) -> None:
        self._interest_watch = None  # the account calls a watcher once and forgets it
        self.wake()

    def _next_wake_in(self) -> float:
        """Seconds until something time-based is due: a redelivery, a pull expiry, a heartbeat."""
        now_wall = time.time_ns()
        now = time.monotonic_ns()
        due = 1.0
        if self._timers:
            due = min(due, max(0.0, (self._timers[0][0] - now_wall) / 1e9))
        if self._pause_ends is not None:
            due = min(due, max(0.0, (self._pause_ends - now_wall) / 1e9))
        for w in self.waiting:
            if w.expires_at:
                due = min(due, max(0.0, (w.expires_at - now) / 1e9))
            if w.heartbeat_ns:
                due = min(due, max(0.0, (w.last_sent + w.heartbeat_ns - now) / 1e9))
        if not self.is_pull:
            if not self.has_interest():
                # the account wakes us when a subscriber comes (``_has_push_interest``); a look
                # every NO_INTEREST_LOOK besides. No heartbeat is due: nobody would get it (an
                # overdue one had a consumer whose client went away wake every millisecond).
                due = min(due, NO_INTEREST_LOOK)
            elif self.config.idle_heartbeat:
                due = min(due, max(0.0, (self._last_push_ns + self.config.idle_heartbeat - now) / 1e9))
        return max(due, 0.001)

    def _expire_timers(self) -> None:
        """Move messages whose ack wait ran out to the redelivery list (or give up on them)."""
        now = time.time_ns()
        expired = []
        while self._timers and self._timers[0][0] <= now:
            _due, sseq, token = heapq.heappop(self._timers)
            p = self.pending.get(sseq)
            if p is None or p.timer != token or sseq in self.redeliver:
                continue  # acked, or re-armed since
            if self.config.max_deliver > 0 and p.deliveries >= self.config.max_deliver:
                self._max_deliveries_reached(sseq, p)
                continue
            expired.append(sseq)
        # As the reference: what expired together goes in sequence order, behind what was
        # queued before (a NAKed message keeps its place ahead of a later expiry).
        self.redeliver.extend(sorted(expired))

    def _advisory(self, kind: str, event: str, fields: dict[str, Any], *, metric: bool = False) -> None:
        """Publish a consumer advisory (``$JS.EVENT.ADVISORY.CONSUMER.<kind>.<stream>.<consumer>``),
        or with ``metric`` a consumer metric (``$JS.EVENT.METRIC.CONSUMER.<kind>...``); ``fields``
        follow the stream and consumer names, in the reference's order."""
        family = "metric" if metric else "advisory"
        subject = f"$JS.EVENT.{family.upper()}.CONSUMER.{kind}.{self.stream.name}.{self.name}"
        self.stream.advise(
            subject, f"{family}.v1.{event}", {"stream": self.stream.name, "consumer": self.name, **fields}
        )

    def _sample_ack(self, tokens: list[str], base: int) -> None:
        """The ack metric of ``sample_freq`` (explicit acks of a pending message only, as the
        reference; "N%" samples about N in 100): the delivery answered (the ack subject's
        ``tokens``, numbers from ``base``) and its ack time."""
        if not self.config.sample_freq:  # the common case, on every ack: nothing more to parse
            return
        freq = self.config.sample_frequency
        ack = _ack_info(tokens, base)
        p = self.pending.get(ack.sseq)
        if freq <= 0 or p is None or self.config.ack_policy != "explicit":
            return
        if freq < 100 and random.randrange(100) > freq:
            return
        fields = {"consumer_seq": ack.dseq, "stream_seq": ack.sseq, "ack_time": time.time_ns() - p.ts}
        self._advisory("ACK", "consumer_ack", {**fields, "deliveries": ack.deliveries}, metric=True)

    def _terminated_advisory(self, ack: _AckInfo, reason: str) -> None:
        """MSG_TERMINATED, with the delivery count and consumer sequence of the delivery the
        +TERM answered (from its ack subject), as the reference: for any +TERM, pending or not."""
        fields: dict[str, Any] = {
            "consumer_seq": ack.dseq,
            "stream_seq": ack.sseq,
            "deliveries": ack.deliveries,
        }
        if reason:
            fields["reason"] = reason
        self._advisory("MSG_TERMINATED", "terminated", fields)

    def _max_deliveries_reached(self, sseq: int, p: Pending) -> None:
        self._advisory("MAX_DELIVERIES", "max_deliver", {"stream_seq": sseq, "deliveries": p.deliveries})
        del self.pending[sseq]
        self.maxed.add(sseq)
        self._dirty = True
        self._advance_floor()

    # ------------------------------------------------------------------ pause

    def pause_left(self, now_ns: int | None = None) -> int:
        """Nanoseconds left of a pause (``pause_until``, set at create or by CONSUMER.PAUSE); 0
        when the consumer is not paused. A paused consumer delivers nothing: pull requests
        wait (and expire, and get their heartbeats), push deliveries wait (heartbeats go on)."""
        until = self.config.pause_until
        if until is None:
            return 0
        return max(until - (time.time_ns() if now_ns is None else now_ns), 0)

    def _watch_pause(self) -> None:
        self._pause_ends = self.config.pause_until if self.pause_left() else None

    def pause_changed(self) -> None:
        """``pause_until`` changed (a consumer created paused, CONSUMER.PAUSE): the advisory,
        and delivery resumes at the new time (at once, for no pause)."""
        self.pause_advisory()
        self._watch_pause()
        self.wake()

    def pause_advisory(self) -> None:
        """``$JS.EVENT.ADVISORY.CONSUMER.PAUSE.<stream>.<consumer>``, as the reference sends it
        when a pause is set or changed, and when one ends."""
        until = self.config.pause_until
        fields = {
            "stream": self.stream.name,
            "consumer": self.name,
            "paused": self.pause_left() > 0,
            # Go's zero time when not paused (omitempty does not omit a time.Time)
            "pause_until": format_go_time(GO_ZERO_TIME_NS if until is None else until, 0),
        }
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.{self.stream.name}.{self.name}"
        self.stream.advise(subject, "advisory.v1.consumer_pause", fields)

    def _pause_ended(self) -> None:
        if self._pause_ends is not None and time.time_ns() >= self._pause_ends:
            self._pause_ends = None
            self.pause_advisory()

    # ------------------------------------------------------------------ delivery

    def _reset_meanwhile(self, epoch: int, msg: StoredMsg) -> bool:
        """Whether ``msg``, taken for delivery, must not go out now: a reset came while it was
        taken (it belongs to the old state, which is gone: dropped, the new state delivers it
        again), or one holds delivery (it is put back)."""
        if epoch != self._epoch:
            return True
        if self.held:
            self._unread(msg)
            return True
        return False

    async def _deliver_available(self) -> None:
        if self.held:
            return
        now = time.monotonic_ns()
        # Messages not yet delivered, counted once per round and counted down as they go out:
        # clients read it from the ack subject (nats-py's KV watchers end their initial values on 0).
        self._remaining = -1
        paused = self.pause_left() > 0
        if self.is_pull:
            self.expire_waiters(now)
            end_of_stream = False  # delivery stopped for want of messages, not for max_ack_pending
            while self.waiting and not paused:
                # max_ack_pending bounds new deliveries; redeliveries (already pending) still go
                room = self._room()
                if not room and not self.redeliver:
                    break
                waiter = self.waiting[0]
                # a run fills one request; with several waiting they take turns (below)
                if room and len(self.waiting) == 1 and self._can_deliver_run(waiter):
                    if not await self._deliver_run(waiter, now):
                        end_of_stream = True  # nothing (more) to deliver
                        break
                    continue
                epoch = self._epoch
                msg = await self._next_message(new=room)
                if msg is None:
                    end_of_stream = room
                    break
                waiter = self.waiting[0]
                # the reference's cost: subject + ack reply + headers + data, as delivered
                form = headers, payload = self._delivered_form(msg)
                size = len(msg.subject) + len(headers or b"") + len(payload)
                size += len(self._reply_subject(msg, self._peek_pending(msg)))
                if waiter.max_bytes and waiter.bytes + size > waiter.max_bytes:
                    self._status(
                        waiter.reply, 409, "Message Size Exceeds MaxBytes", self._pending_headers(waiter)
                    )
                    self.waiting.pop(0)
                    self._unread(msg)
                    continue
                await self._pace(msg)
                if not self.waiting or self.waiting[0] is not waiter:  # it expired while we paced
                    self._unread(msg)
                    continue
                after = await self._pending_after(msg)
                if self._reset_meanwhile(epoch, msg):
                    break
                self._send(msg, waiter.reply, after, form)
                waiter.delivered += 1
                waiter.bytes += size
                waiter.last_sent = now
                left = waiter.max_bytes - waiter.bytes if waiter.max_bytes else None  # byte budget
                if waiter.delivered >= waiter.batch or left == 0:
                    self.waiting.pop(0)
                    if left:  # as the reference: a batch done with bytes to spare says how many
                        extra = (("Nats-Pending-Messages", "0"), ("Nats-Pending-Bytes", str(left)))
                        self._status(waiter.reply, 409, "Batch Completed", extra)
                elif len(self.waiting) > 1:
                    # as the reference: waiting requests take turns, a message each
                    self.waiting.append(self.waiting.pop(0))
            if end_of_stream:
                # no_wait requests end here; one with an expiry only once it got something
                for w in [w for w in self.waiting if w.no_wait and (not w.expires_at or w.delivered)]:
                    self.waiting.remove(w)
                    self._status(w.reply, 404, "No Messages")
            for w in self.waiting:
                if w.heartbeat_ns and now - w.last_sent >= w.heartbeat_ns:
                    self._status(w.reply, 100, "Idle Heartbeat", self._last_headers())
                    w.last_sent = now
            return
        # push
        if not self._has_push_interest():
            return
        sent = 0
        while not paused and not self._fc_stalled():
            room = self._room()  # as for pull: max_ack_pending bounds new deliveries only
            if not room and not self.redeliver:
                break
            if room and self._can_deliver_run():
                n = await self._push_run()
                if not n:
                    break
                sent += n
                await anyio.sleep(0)  # let others (and acks) run during a long catch-up
                continue
            epoch = self._epoch
            msg = await self._next_message(new=room)
            if msg is None:
                break
            after = await self._pending_after(msg)  # as the reference: counted when taken, not after pacing
            await self._pace(msg)
            if self._reset_meanwhile(epoch, msg):
                break
            size = self._send(msg, self.config.deliver_subject, after)
            sent += 1
            if self.config.flow_control and self._fc_account(size):
                self._flow_control_request()
            if sent % 256 == 0:
                await anyio.sleep(0)  # let others (and acks) run during a long catch-up
        if sent:
            self._last_push_ns = time.monotonic_ns()  # the run may have been paced: its end
        elif self.config.idle_heartbeat and now - self._last_push_ns >= self.config.idle_heartbeat:
            self._heartbeat()
            self._last_push_ns = now
            if self.acks_by_flow_control and self.pending and self._fc_reply is None:
                # as the reference: an idle consumer asks, so the sender's answer acks the tail
                self._flow_control_request()

    def _can_deliver_run(self, waiter: PullWaiter | None = None) -> bool:
        """Whether a run (``_deliver_run``, ``_push_run``) may deliver next: only new messages in
        sequence order from the read-ahead, no byte budget of a pull request to weigh per
        message, nothing to pace."""
        cfg = self.config
        return (
            not (waiter is not None and waiter.max_bytes)
            and not self.redeliver
            and not self.initial
            and len(self.filters) <= 1
            and not cfg.headers_only
            and cfg.replay_policy != "original"
            and not (cfg.rate_limit_bps > 0 and not self.is_pull)
        )

    async def _read_ahead(self) -> bool:
        """Whether the read-ahead holds messages, after one store query if it was empty (one
        query serves many deliveries). With at most one filter; the stream clears the buffer
        whenever it removes messages (purge, delete, expiry, limits), and a read it overtook
        that way is dropped."""
        if not self._buffer:
            reads, filters = self._reads, self.filters
            got = await self.stream.store.range(
                self.next_sseq, limit=READ_AHEAD, subject_filter=filters[0] if filters else None
            )
            if reads == self._reads:
                self._buffer.extend(got)
        return bool(self._buffer)

    async def _run_start(self) -> bool:
        """Make the read-ahead hold the next messages and count what is left to deliver; False
        when there is nothing to deliver now (nothing stored, or the stream removed messages
        while we counted: then the consumer is woken to look again)."""
        buffer = self._buffer
        if not await self._read_ahead():
            return False
        if self._remaining < 0:
            # Once per round: what is left to deliver, the first buffered message included
            # (nothing before it matches); _run_take counts it down per message taken.
            first = buffer[0]
            self._remaining = await self.num_pending()
            if not buffer or buffer[0] is not first:
                self._remaining = -1
                self.wake()  # the stream removed messages meanwhile: start over
                return False
        return not self.held  # reset while reading: nothing goes out before its answer

    def _run_take(self, n: int, out: list[tuple[str, str, bytes | None, bytes]]) -> bool:
        """Take up to ``n`` read-ahead messages as delivered and add their (subject, ack subject,
        headers, data) to ``out``: the same sequences, pending entries, timers and counters as
        ``_next_message`` and ``_send`` a message at a time, without a coroutine or a route
        lookup per message. With flow control it stops after a message that makes a request
        due (True: the caller sends the run so far, then the request) or fills the window."""
        buffer = self._buffer
        n = min(n, len(buffer))
        if n <= 0:
            return False
        ack_none = self.ack_none
        fc = self.config.flow_control and not self.is_pull
        deliver_len = len(self.config.deliver_subject or "")
        now_wall = time.time_ns()
        due = now_wall + (0 if ack_none else self._ack_wait(1))
        pending = self.pending
        prefix = self._ack_prefix()
        dseq, remaining = self.dseq, self._remaining
        request_due = False
        done_on_delivery = self._interest_candidates if self.stream.config.retention == "interest" else None
        m = buffer[0]
        for _ in range(n):
            m = buffer.popleft()
            dseq += 1
            remaining = remaining - 1 if remaining > 0 else 0
            if not ack_none:
                pending[m.seq] = p = Pending(dseq, 1, now_wall, 0, m.subject)
                self._arm_at(m.seq, p, due)
            elif done_on_delivery is not None:
                done_on_delivery.append(m.seq)  # delivered is done, without an ack
            # _ack_subject and _wire_size inline: this runs per delivered message
            ack = f"{prefix}1.{m.seq}.{dseq}.{m.ts}.{remaining}"
            headers, data = m.headers, m.data
            out.append((m.subject, ack, headers, data))
            if fc:
                size = deliver_len + len(ack) + (len(headers) if headers else 0) + len(data)
                if self._fc_account(size):
                    request_due = True
                    break
                if self._fc_pending_bytes > self._fc_window:  # _fc_stalled (fc: flow control on)
                    break
        self.dseq, self._remaining = dseq, remaining
        self.next_sseq = m.seq + 1
        self._delivered_up_to(m.seq, now_wall)
        return request_due

    def _run_room(self, n: int) -> int:
        """``n`` capped by max_ack_pending."""
        limit = self.config.max_ack_pending
        if not self.ack_none and limit > 0:
            return min(n, limit - len(self.pending))
        return n

    async def _deliver_run(self, waiter: PullWaiter, now: int) -> int:
        """Deliver a run of read-ahead messages to the first pull request in one go; how many.

        For the common pull the request's inbox is matched once for the run, and no coroutine
        is made per message: a fetch of 500 spent most of its server CPU on that per-message
        machinery."""
        if not await self._run_start():
            return 0
        if not self.waiting or self.waiting[0] is not waiter:
            self.wake()  # the request went away while we counted: look again at once
            return 0
        out: list[tuple[str, str, bytes | None, bytes]] = []
        self._run_take(self._run_room(waiter.batch - waiter.delivered), out)
        if not out:
            return 0
        self.stream.account.publish_many(waiter.reply, out)
        waiter.delivered += len(out)
        waiter.last_sent = now
        if waiter.delivered >= waiter.batch:
            self.waiting.pop(0)
        return len(out)

    async def _push_run(self) -> int:
        """Deliver up to 256 read-ahead messages to the deliver subject, with the flow-control
        requests between them where a message at a time would have sent them; how many."""
        if not await self._run_start():
            return 0
        to = self.config.deliver_subject
        publish_many = self.stream.account.publish_many
        sent = 0
        while self._buffer and sent < PUSH_RUN and self._room() and not self._fc_stalled():
            out: list[tuple[str, str, bytes | None, bytes]] = []
            request_due = self._run_take(self._run_room(PUSH_RUN - sent), out)
            if out:
                publish_many(to, out)
                sent += len(out)
            if request_due:
                self._flow_control_request()
            elif not out:
                break
        return sent

    def _peek_pending(self, msg: StoredMsg) -> int:
        """What _pending_after will return for msg, without counting it (an estimate for sizing)."""
        if self._remaining < 0:
            return 0
        return self._remaining if msg.seq in self.pending else max(self._remaining - 1, 0)

    def _reply_subject(self, msg: StoredMsg, pending_after: int) -> str:
        p = self.pending.get(msg.seq)
        deliveries = p.deliveries + 1 if p is not None else 1
        return _ack_subject(self._ack_prefix(), deliveries, msg.seq, self.dseq + 1, msg.ts, pending_after)

    def _ack_prefix(self) -> str:
        return f"$JS.ACK.{self.stream.name}.{self.name}."

    async def _pace(self, msg: StoredMsg) -> None:
        """replay_policy "original" keeps the stored spacing; rate_limit_bps caps push bandwidth."""
        if self._replaying:
            if self._replay_until is None:
                self._replay_until = (await self.stream.state()).last_seq
            gap = msg.ts - self._replay_ts if self._replay_ts else 0
            if gap > 1_000_000:  # more than a millisecond, as the reference
                await anyio.sleep(min(gap / 1e9, 3600))
                self._remaining = -1  # the stream may have changed meanwhile: count again
            self._replay_ts = msg.ts
            if msg.seq >= self._replay_until:
                self._replaying = False  # caught up: what comes later goes out as it comes
        bps = self.config.rate_limit_bps
        if bps > 0 and not self.is_pull:
            # A token bucket as the reference's: bps/8 bytes a second, with a burst of the
            # stream's max_msg_size (else the default max payload).
            rate = bps / 8
            burst = self.stream.config.max_msg_size if self.stream.config.max_msg_size > 0 else 1 << 20
            # what the reference counts: stored subject, ack subject, headers and data
            need = min(_msg_size(msg) + len(self._reply_subject(msg, self._peek_pending(msg))), burst)
            clock = time.monotonic()
            if self._rate_tokens is None:
                self._rate_tokens, self._rate_at = float(burst), clock
            self._rate_tokens = min(burst, self._rate_tokens + (clock - self._rate_at) * rate)
            self._rate_at = clock
            if self._rate_tokens < need:
                await anyio.sleep((need - self._rate_tokens) / rate)
                self._remaining = -1  # the stream may have changed meanwhile: count again
                self._rate_tokens, self._rate_at = float(need), time.monotonic()
            self._rate_tokens -= need

    async def _pending_after(self, msg: StoredMsg) -> int:
        if msg.seq in self.pending:  # a redelivery does not change what is left to deliver
            return max(self._remaining, 0) if self._remaining >= 0 else await self.num_pending()
        if self._remaining < 0:
            self._remaining = await self.num_pending()
        else:
            self._remaining = max(self._remaining - 1, 0)
        return self._remaining

    def has_interest(self) -> bool:
        """A push consumer has interest while someone subscribes to its deliver subject the way
        it delivers, as the reference counts it: with a deliver group, a queue subscriber of that
        group; without one, a plain subscriber; either on the deliver subject itself, not on a
        wildcard covering it. Another subscriber still gets the messages delivered for those,
        but does not make the consumer deliver, or keep it alive (a monitor on ``_INBOX.>`` must
        not take the messages of a consumer whose client subscribes after creating it)."""
        subject = self.config.deliver_subject
        result = self.stream.account.sublist.match(subject)
        group = self.config.deliver_group
        if group:
            return any(
                queue == group and any(m.subject == subject for m in members)
                for queue, members in result.queues
            )
        return any(s.subject == subject for s in result.plain)

    def touch(self) -> None:
        self.last_interest_ns = time.monotonic_ns()

    def _has_push_interest(self) -> bool:
        """``has_interest``, noted: with a subscriber, the time it was seen (inactivity); without
        one, the account is asked to wake us when one subscribes (clients often create the
        consumer before their SUB arrives: nats-py's ordered consumers do)."""
        if self.has_interest():
            self.touch()
            return True
        self._watch_interest()
        return False

    def _room(self) -> bool:
        return self._run_room(1) > 0

    async def _next_message(self, new: bool = True) -> StoredMsg | None:
        """The next message to deliver: a redelivery first, else (if ``new``) the next new one."""
        store = self.stream.store
        epoch = self._epoch
        while self.redeliver:
            sseq = self.redeliver.pop(0)
            p = self.pending.get(sseq)
            if p is None:
                continue
            if 0 < self.config.max_deliver <= p.deliveries:
                # NAKed (or put back) after its last allowed delivery: as the reference, the
                # limit is checked when the message would go out again.
                self._max_deliveries_reached(sseq, p)
                continue
            m = await store.get(sseq)
            if epoch != self._epoch:
                return None  # reset meanwhile: this state is gone
            if m is None:
                self.pending.pop(sseq, None)
                self._advance_floor()
                continue
            return m
        if not new:
            return None
        while self.initial:
            m = await store.get(self.initial.pop(0))
            if epoch != self._epoch:
                return None
            if m is not None:
                return m
        filters = self.filters
        if len(filters) <= 1:
            if not await self._read_ahead():
                return None
            m = self._buffer.popleft()
        else:
            candidates = [await store.first_after(self.next_sseq, f) for f in filters]
            if epoch != self._epoch:
                return None
            found = [c for c in candidates if c is not None]
            m = min(found, key=lambda c: c.seq) if found else None
        if m is None:
            return None
        self.next_sseq = m.seq + 1
        return m

    def _unread(self, msg: StoredMsg) -> None:
        """Put a message taken for delivery back (it did not fit the request)."""
        if msg.seq in self.pending:
            self.redeliver.insert(0, msg.seq)
        elif msg.seq == self.next_sseq - 1:
            self.next_sseq = msg.seq
            if len(self.filters) <= 1:
                self._buffer.appendleft(msg)
        else:
            self.initial.insert(0, msg.seq)

    def invalidate_reads(self) -> None:
        """The stream removed messages, or the filters changed: what was read ahead may be gone."""
        self._buffer.clear()
        self._reads += 1

    def messages_removed(self, seqs: Iterable[int] = (), subjects: Iterable[str] = ()) -> None:
        """The stream removed messages (a delete, a purge, a limit, an expiry): everything below
        its first sequence, and ``seqs``, and some of those on ``subjects`` (filters) that it
        cannot name. The read-ahead goes now; the rest waits for ``settle_removals``."""
        self.invalidate_reads()
        self._removed_seqs.update(seqs)
        self._removed_subjects.update(subjects)
        self._removals = True
        self.wake()

    async def settle_removals(self) -> None:
        """Apply what ``messages_removed`` noted, as the reference does: a pending message the
        stream removed counts as acknowledged (so with ack_policy all, so does everything below
        it), one that had reached max_deliver is forgotten, and a last_per_subject start that
        went is dropped. Messages on a noted subject are looked up only if pending here."""
        if not self._removals:
            return
        seqs, subject_filters = self._removed_seqs, self._removed_subjects
        self._removals, self._removed_seqs, self._removed_subjects = False, set(), set()
        held = [*self.pending, *self.maxed]
        if not held and not self.initial:
            return
        first = (await self.stream.state()).first_seq
        self.initial = [s for s in self.initial if s >= first and s not in seqs]
        store = self.stream.store
        gone: set[int] = set()
        for s in held:
            if s < first or s in seqs:
                gone.add(s)
            elif subject_filters:
                p = self.pending.get(s)
                subject = p.subject if p is not None else None
                may_be_gone = subject is None or any(subjects.match(f, subject) for f in subject_filters)
                if may_be_gone and await store.get(s) is None:
                    gone.add(s)
        if not gone:
            return
        removals: list[int] = []  # workqueue: messages an ack-all acknowledged on the way
        for s in sorted(gone):
            if s in self.pending:
                self._ack(s, removals)
            elif s in self.maxed:
                self.maxed.discard(s)
                self._dirty = True
        self.redeliver = [s for s in self.redeliver if s in self.pending]
        self._floor_stale = False
        self._advance_floor()
        await self.persist([s for s in removals if s not in gone])

    def reconfigure(self, config: ConsumerConfig) -> None:
        """Take an update's config (already checked against the old one), as the reference does:
        new filters apply from the next undelivered message on, a new ack wait or backoff
        applies to the messages pending now, counted from their last delivery, and a new deliver
        subject gets the pending messages again at once."""
        old, self.config = self.config, config
        filters = consumer_filters(config)
        if filters != self.filters:
            self.filters = filters
            self.invalidate_reads()
        if (old.ack_wait, old.backoff) != (config.ack_wait, config.backoff):
            for sseq, p in self.pending.items():
                if sseq not in self.redeliver:
                    self._arm_at(sseq, p, p.ts + self._ack_wait(p.deliveries))
        if not self.is_pull and old.deliver_subject != config.deliver_subject:
            # As the reference: a new deliver subject gets everything pending at once, in
            # sequence order, except what reached max_deliver.
            limit = config.max_deliver
            self.redeliver.extend(
                sorted(
                    sseq
                    for sseq, p in self.pending.items()
                    if sseq not in self.redeliver and not 0 < limit <= p.deliveries
                )
            )
        self.wake()

    def _send(
        self, msg: StoredMsg, to: str, pending_after: int, form: tuple[bytes | None, bytes] | None = None
    ) -> int:
        """Deliver ``msg`` to ``to``; ``form`` is its ``_delivered_form`` when the caller has it.
        Returns what flow control counts of it, as the reference: ``to``, the ack subject,
        headers and data."""
        now = time.time_ns()
        p = self.pending.get(msg.seq)
        if p is not None:  # a redelivery: a new consumer sequence on the wire, but the pending
            # record keeps the first one (the ack floor's consumer sequence), as the reference
            p.deliveries += 1
            self.dseq += 1
            p.ts = now
            deliveries = p.deliveries
        else:
            self.dseq += 1
            deliveries = 1
            if not self.ack_none:
                self.pending[msg.seq] = p = Pending(self.dseq, 1, now, 0, msg.subject)
            elif self.stream.config.retention == "interest":
                self._interest_candidates.append(msg.seq)  # delivered is done, without an ack
        if p is not None:
            self._arm(msg.seq, p, self._ack_wait(deliveries))
        self._delivered_up_to(msg.seq, now)
        reply = _ack_subject(self._ack_prefix(), deliveries, msg.seq, self.dseq, msg.ts, pending_after)
        headers, payload = form if form is not None else self._delivered_form(msg)
        self.stream.account.publish(msg.subject, reply, headers, payload, route=to)
        return _wire_size(to, reply, headers, payload)

    def _delivered_form(self, msg: StoredMsg) -> tuple[bytes | None, bytes]:
        """The headers and payload a delivery carries: with headers_only, the stored headers plus
        Nats-Msg-Size and no payload."""
        if not self.config.headers_only:
            return msg.headers, msg.data
        items = list(parse_headers(msg.headers).items) if msg.headers else []
        items.append(("Nats-Msg-Size", str(len(msg.data))))
        return encode_headers(items), b""

    def _delivered_up_to(self, sseq: int, now: int) -> None:
        """What every delivery (``_send``, ``_run_take``) records after the consumer sequence
        moved to ``self.dseq`` with stream sequence ``sseq``: with ack none, that is the floor."""
        if sseq > self.last_delivered_sseq:
            self.last_delivered_sseq = sseq
        if self.ack_none:
            self.ack_floor_dseq, self.ack_floor_sseq = self.dseq, max(self.ack_floor_sseq, sseq)
        self.last_active_ns = now
        self._dirty = True

    def acks_expected_until(self) -> int:
        """When (wall ns) the last ack the consumer may still get is due: the latest delivery's
        time plus its ack wait, over the messages pending an ack; 0 with none."""
        return max((p.ts + self._ack_wait(p.deliveries) for p in self.pending.values()), default=0)

    def _ack_wait(self, deliveries: int) -> int:
        backoff = self.config.backoff
        if backoff:
            return backoff[min(deliveries, len(backoff)) - 1]
        return self.config.ack_wait or 30_000_000_000

    def _status(self, to: str, code: int, description: str, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.stream.account.publish(
            to, None, encode_headers(extra, status=code, description=description), b""
        )

    def _pending_headers(self, w: PullWaiter) -> tuple[tuple[str, str], ...]:
        return (
            ("Nats-Pending-Messages", str(max(w.batch - w.delivered, 0))),
            ("Nats-Pending-Bytes", str(max(w.max_bytes - w.bytes, 0) if w.max_bytes else 0)),
        )

    def server_shutdown(self) -> None:
        """Tell every waiting pull request that the server is going away."""
        waiting, self.waiting = self.waiting, []
        for w in waiting:
            self._status(w.reply, 409, "Server Shutdown", self._pending_headers(w))

    def expire_waiters(self, now: int) -> None:
        """End the pull requests that expired (with a 408), and drop, as the reference does,
        those whose requester is gone: nobody subscribes to the reply subject any more, so
        messages sent there would only sit pending until their ack wait ran out."""
        match = self.stream.account.sublist.match
        for w in list(self.waiting):
            if w.expires_at and w.expires_at <= now:
                self.waiting.remove(w)
                self._status(w.reply, 408, "Request Timeout", self._pending_headers(w))
            elif not match(w.reply):
                self.waiting.remove(w)

    def _last_headers(self) -> tuple[tuple[str, str], ...]:
        return (("Nats-Last-Consumer", str(self.dseq)), ("Nats-Last-Stream", str(self.last_delivered_sseq)))

    def _heartbeat(self) -> None:
        items = list(self._last_headers())
        if self._fc_reply is not None:
            items.append(("Nats-Consumer-Stalled", self._fc_reply))
        self.stream.account.publish(
            self.config.deliver_subject,
            None,
            encode_headers(items, status=100, description="Idle Heartbeat"),
            b"",
        )

    def _fc_account(self, size: int) -> bool:
        """Count a delivered message against the flow-control window; True when a request is due."""
        self._fc_pending_bytes += size
        if self._fc_reply is None:
            if self._fc_pending_bytes > self._fc_window // 2:
                return True
            # Acked by flow control: at max_ack_pending nothing more goes out until an answer
            # acks something. The reference asks when the limit is reached, and then waits a
            # round trip (and the sender's commit) with nothing to send; asking at half of it
            # keeps the other half going out meanwhile.
            limit = self.config.max_ack_pending
            return self.acks_by_flow_control and limit > 0 and len(self.pending) >= (limit + 1) // 2
        if self._fc_pending_bytes - self._fc_size >= self._fc_window:
            self._fc_size += size
        return False

    def _fc_stalled(self) -> bool:
        return self.config.flow_control and self._fc_pending_bytes > self._fc_window

    def _flow_control_answered(self) -> None:
        """The client took everything up to the request: widen the window and resume."""
        self._fc_window = min(self._fc_window * 2, _FC_LIMIT)
        self._fc_pending_bytes = max(self._fc_pending_bytes - self._fc_size, 0)
        self._fc_size = 0
        self._fc_reply = None

    def _flow_control_request(self) -> None:
        # Only an answer to the latest request counts. A random suffix, as the reference's, so
        # a late answer to a request of an earlier run (a durable outlives restarts) never does.
        self._fc_count += 1
        suffix = "".join(random.choices(_BASE62, k=4))
        self._fc_reply = f"$JS.FC.{self.stream.name}.{self.name}.{suffix}{self._fc_count}"
        self._fc_size = self._fc_pending_bytes
        self.stream.account.publish(
            self.config.deliver_subject,
            self._fc_reply,
            encode_headers((), status=100, description="FlowControl Request"),
            b"",
        )

    # ------------------------------------------------------------------ pull requests

    async def request_next(self, reply: str, body: bytes) -> None:
        """A pull request (``CONSUMER.MSG.NEXT``, or what follows ``+NXT`` in an ack): queued, or
        refused with the reference's status message to ``reply``.

        A no_wait request, as in the reference: with nothing to deliver and no expiry it gets
        404 at once; when the requests already waiting ask for more than there is, 408
        "Requests Pending"; else it waits like any request, and ends with 404 once delivery
        reached the end of the stream (with an expiry, only after it got something)."""
        try:
            req = parse_pull_request(body, self.config)
        except PullRequestError as e:
            self._status(reply, e.status, e.description)
            return
        if req.expires_ns < 0:  # expired on arrival: the 408 of any request that expired
            pending = (("Nats-Pending-Messages", str(req.batch)), ("Nats-Pending-Bytes", str(req.max_bytes)))
            self._status(reply, 408, "Request Timeout", pending)
            return
        if req.no_wait:
            if self.pause_left():
                self._status(reply, 404, "No Messages")  # as the reference: nothing while paused
                return
            available = await self.num_pending() + len(self.redeliver)
            if available == 0 and req.expires_ns == 0:
                self._status(reply, 404, "No Messages")
                return
            self.expire_waiters(time.monotonic_ns())
            asked = sum(w.batch - w.delivered for w in self.waiting)
            if 0 < available < asked:
                self._status(reply, 408, "Requests Pending")
                return
        expires_at = time.monotonic_ns() + req.expires_ns if req.expires_ns > 0 else 0
        budget = max(req.max_bytes, 0)  # a negative max_bytes is no budget, as in the reference
        batch = max(req.batch, 1)
        self.add_waiter(PullWaiter(reply, batch, budget, expires_at, req.no_wait, req.heartbeat_ns))

    def add_waiter(self, w: PullWaiter) -> None:
        self.touch()
        if self.config.max_waiting and len(self.waiting) >= self.config.max_waiting:
            if not w.heartbeat_ns:  # as the reference: a request with heartbeats is refused silently
                self._status(w.reply, 409, "Exceeded MaxWaiting")
            return
        w.last_sent = time.monotonic_ns()
        self.waiting.append(w)
        self.wake()

    # ------------------------------------------------------------------ acks

    async def _ack_loop(self) -> None:
        """Acks, flow-control replies and pull requests, in the order each client sent them.

        A fetch loop (nats-py's ``fetch`` then ``ack`` each) sends its next request right behind
        the acks of the last batch. When those acks cannot change what the request gets (plain
        acks only remove pending messages, and no redelivery is queued), the request is served
        first and the acks are counted while the messages go out: counting 500 acks took about
        0.8 ms, which the client spent waiting."""
        inbox = self.acks.inbox
        async for first in inbox:
            batch = [first]
            while len(batch) < 1024:
                try:
                    batch.append(inbox.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            asks = [i for i, msg in enumerate(batch) if _is_pull_request(msg)]
            if asks and self._requests_go_first(batch[: asks[-1]]):
                for i in asks:
                    await self.request_next(batch[i].reply or "", batch[i].payload)
                await anyio.sleep(0)  # the woken worker delivers before these acks are counted
                await self._take_acks([msg for msg in batch if not _is_pull_request(msg)])
                continue
            start = 0  # in the order sent: the acks before each request, then the request
            for i in asks:
                await self._take_acks(batch[start:i])
                await self.request_next(batch[i].reply or "", batch[i].payload)
                start = i + 1
            await self._take_acks(batch[start:])

    def _requests_go_first(self, ahead: list[InboundMsg]) -> bool:
        """Whether pull requests get the same messages before the acks ``ahead`` of them as
        after: only plain acks ahead of them, and no redelivery waiting."""
        if not self.is_pull or self.redeliver:
            return False
        # a NAK, WPI, TERM or +NXT ahead of a request is taken in order
        return all(msg.payload in _PLAIN_ACKS for msg in ahead if msg.subject.startswith("$JS.ACK."))

    async def _take_acks(self, batch: list[InboundMsg]) -> None:
        if not batch:
            return
        confirms: list[str] = []
        removals: list[int] = []
        requests: list[tuple[str, bytes]] = []  # +NXT: (reply, pull request)
        acks = 0
        for msg in batch:
            if msg.subject.startswith("$JS.FC."):
                if msg.subject == self._fc_reply:
                    self._flow_control_answered()
                    if self.acks_by_flow_control and msg.headers:
                        acks += self._flow_control_ack(msg.headers, removals)
                continue
            acks += 1
            try:
                self._on_ack(msg, confirms, removals, requests)
            except Exception:
                log.warning(
                    "consumer %s/%s: ignoring malformed ack on %s",
                    self.stream.name,
                    self.name,
                    msg.subject,
                )
        if self._floor_stale:
            self._floor_stale = False
            self._advance_floor()  # O(pending): once per batch, not once per ack
        if acks:
            # Acks are committed before double acks are confirmed; flow-control replies only
            # resume delivery (delivery progress is flushed by _flusher).
            await self.persist(removals)
        for reply in confirms:
            self.stream.account.publish(reply, None, None, b"")
        for reply, body in requests:  # +NXT, after the acks they came with
            await self.request_next(reply, body)
        self.wake()

    async def _flusher(self) -> None:
        """Delivery progress without acks (ack none, pending counts) is committed once a second."""
        while True:
            await anyio.sleep(1.0)
            if self._dirty:
                try:
                    await self.persist()
                except Exception:
                    log.exception("consumer %s/%s: saving state failed", self.stream.name, self.name)

    async def persist(self, removals: list[int] | None = None) -> None:
        """Commit the consumer's state (and any messages its acks remove) in one store call."""
        if self._interest_candidates:
            candidates, self._interest_candidates = self._interest_candidates, []
            removals = [*(removals or ()), *await self.stream.interest_done(candidates, self)]
        ops: list[Any] = [DeleteOp(s) for s in removals or ()]
        if (self._dirty or ops) and self.recorded:
            ops.append(SetMetaOp(state_key(self.name), self.state_json()))
        self._dirty = False
        await self.stream.apply_consumer_ops(ops)

    def _on_ack(
        self, msg: InboundMsg, confirms: list[str], removals: list[int], requests: list[tuple[str, bytes]]
    ) -> None:
        tokens = msg.subject.split(".")
        base = _ack_numbers_at(len(tokens))
        if base is None:
            return
        sseq = _ack_num(tokens[base + 1])  # the other numbers are read only where they are used
        # As the reference: no confirmation for stream sequence 0, nor for an ack (or +TERM) of a
        # message not delivered yet.
        delivered = sseq < self.next_sseq
        confirm = sseq != 0
        # The reference's reading of an ack body: exact words, except the kinds that take an
        # argument (+NXT <request>, -NAK <delay>, +TERM <reason>), which match as prefixes.
        body = msg.payload
        if not body or body == b"+ACK" or body == b"+OK":
            confirm = confirm and delivered
            if delivered:
                self._sample_ack(tokens, base)
                self._ack(sseq, removals)
        elif body.startswith(b"+NXT"):
            if delivered:
                self._sample_ack(tokens, base)
                self._ack(sseq, removals)
            if msg.reply:
                requests.append((msg.reply, body[4:]))
            return  # the messages (or a status) are the answer
        elif body.startswith(b"-NAK"):
            self._nak(_ack_info(tokens, base), body[4:].strip())
        elif body == b"+WPI":
            p = self.pending.get(sseq)
            if p is not None and sseq not in self.redeliver:
                self._arm(sseq, p, self._ack_wait(p.deliveries))  # the older timer goes stale
        elif body.startswith(b"+TERM"):
            # As the reference: a termination is an acknowledgement (so with ack_policy all it
            # acknowledges everything up to the message), plus an advisory.
            confirm = confirm and delivered
            if delivered:
                self._ack(sseq, removals)
            self._terminated_advisory(_ack_info(tokens, base), body[5:].strip().decode(errors="replace"))
        # anything else changes nothing, and is confirmed all the same (as the reference)
        if msg.reply and confirm:
            confirms.append(msg.reply)

    def _nak(self, ack: _AckInfo, arg: bytes) -> None:
        """-NAK: redeliver now (after the other NAKed ones), or after the delay given as JSON
        (``{"delay": ns}``) or as a Go duration (``-NAK 2s``). As the reference: a delay that does
        not parse is a plain NAK, one that parses goes the delayed way, and comes back no sooner
        than ``NAK_RECHECK_NS`` (the reference looks at a delayed NAK 10 ms after it: a delay of
        0 or below lets the next messages go first); a NAK of a delivery outside (ack floor, last
        delivered] is ignored. The MSG_NAKED advisory names the delivery answered."""
        sseq = ack.sseq
        p = self.pending.get(sseq)
        if p is None or not self.ack_floor_dseq < ack.dseq <= self.dseq:
            return
        fields = {"consumer_seq": ack.dseq, "stream_seq": sseq, "deliveries": ack.deliveries}
        self._advisory("MSG_NAKED", "nak", fields)
        delay = parse_nak_delay(arg) if arg else None
        if delay is not None:
            self._arm(sseq, p, max(delay, NAK_RECHECK_NS))
        elif sseq not in self.redeliver:
            self.redeliver.append(sseq)  # in NAK order, as the reference

    def _ack(self, sseq: int, removals: list[int]) -> None:
        if self.ack_none:
            return
        if self.config.ack_policy == "all":
            acked = [s for s in self.pending if s <= sseq]
            self.maxed = {s for s in self.maxed if s > sseq}
            p = self.pending.get(sseq)
            if p is not None and p.dseq > self.ack_floor_dseq:
                # as the reference: the floor is the acknowledged message itself
                self.ack_floor_sseq, self.ack_floor_dseq = sseq, p.dseq
        else:
            acked = [sseq] if sseq in self.pending else []
            if sseq in self.maxed:
                # It no longer holds the floor, but as in the reference the floor moves only
                # with the next ack of a pending message.
                self.maxed.discard(sseq)
                self._dirty = True
        if not acked:
            return
        self._forget_acked(acked, removals)
        self._floor_stale = True  # recomputed once per ack batch

    def _forget_acked(self, acked: list[int], removals: list[int]) -> None:
        """Acked messages leave ``pending``; a work queue removes them (``removals``), an
        interest stream looks whether every consumer has acked them."""
        for s in acked:
            del self.pending[s]
        self.last_ack_ns = time.time_ns()
        self._dirty = True
        retention = self.stream.config.retention
        if retention == "workqueue":
            removals.extend(acked)
        elif retention == "interest":
            self._interest_candidates.extend(acked)

    def _flow_control_ack(self, headers: bytes, removals: list[int]) -> int:
        """An answered flow-control request acks everything up to its ``Nats-Last-Stream``
        (the reference's ``processFlowControl``), as an ack-all ack: the sender says it stored
        that much. Capped at what was delivered: after a reset the sender may say more than we
        sent again, and those come back and are acked by a later answer. Returns 1 when the
        state changed (to be committed)."""
        last_stream = _header_number(slice_header(headers, "Nats-Last-Stream"))
        if last_stream <= 0:
            return 0
        last_consumer = max(_header_number(slice_header(headers, "Nats-Last-Consumer")), 0)
        sseq = min(last_stream, self.last_delivered_sseq)
        if sseq <= self.ack_floor_sseq:
            return 0
        acked = sorted(s for s in self.pending if s <= sseq)
        p = self.pending.get(sseq)
        dseq = p.dseq if p is not None else min(max(last_consumer, self.ack_floor_dseq), self.dseq)
        self._forget_acked(acked, removals)
        self.ack_floor_sseq, self.ack_floor_dseq = sseq, dseq
        return 1

    def release(self) -> None:
        """The answer to a reset is out: delivery may go on."""
        self.held = False
        self.wake()

    def reset(self, seq: int, start_time_seq: int = 0) -> int:
        """``CONSUMER.RESET`` (ADR-60), the reference's ``resetStartingSeq``: delivery starts
        over at ``seq`` with consumer sequence 1; pending and redelivery state go. ``seq`` 0 is
        the ack floor + 1 (the floor stays); a later ``seq`` makes ``seq - 1`` the floor, allowed
        with deliver policy all, or not below the configured start (``start_time_seq``: the
        stream's first sequence at ``opt_start_time``, looked up by the caller). Returns the sequence
        delivery restarts at; raises ValueError with the reference's reason when not allowed.
        Synchronous on purpose: nothing is delivered between the old state and the new. Delivery
        is then ``held`` until the caller ``release``s it, once its answer is out."""
        cfg = self.config
        if seq == 0:
            seq = self.ack_floor_sseq + 1
        elif cfg.deliver_policy == "by_start_sequence":
            if seq < cfg.opt_start_seq:
                raise ValueError("below start seq")
        elif cfg.deliver_policy == "by_start_time":
            if seq < start_time_seq:
                raise ValueError("below start time")
        elif cfg.deliver_policy != "all":
            raise ValueError("not allowed")
        seq = max(seq, 1)
        self.pending.clear()
        self.maxed.clear()
        self.redeliver.clear()
        self._timers.clear()
        self.initial = []
        self.next_sseq = seq
        self.dseq = 0
        self.last_delivered_sseq = self.ack_floor_sseq = seq - 1
        self.ack_floor_dseq = 0
        self.last_active_ns = self.last_ack_ns = None
        self._fc_reply, self._fc_pending_bytes, self._fc_size = None, 0, 0
        self._remaining = -1
        self.invalidate_reads()
        self._dirty = True
        self.held = True
        self._epoch += 1
        return seq

    def _advance_floor(self) -> None:
        """The ack floor: just below the lowest message still held, counted in its first
        delivery's consumer sequence; everything delivered when nothing is held. As in the
        reference, it moves only when its consumer sequence does (an ack that leaves the lowest
        held message in place, such as one of a filtered consumer's later messages, moves
        neither number)."""
        held = [*self.pending, *self.maxed]
        if held:
            low = min(held)
            if low in self.pending:
                dseq = self.pending[low].dseq - 1
                if dseq > self.ack_floor_dseq:
                    self.ack_floor_sseq, self.ack_floor_dseq = low - 1, dseq
            # a message that reached max_deliver holds the floor where it is
        else:
            self.ack_floor_sseq = self.last_delivered_sseq
            self.ack_floor_dseq = self.dseq

    def has_acked(self, sseq: int, subject: str) -> bool:
        """Is this consumer done with the message (for interest retention)?"""
        if self.filters and not any(subjects.match(f, subject) for f in self.filters):
            return True
        return sseq not in self.pending and sseq < self.next_sseq

    # ------------------------------------------------------------------ info

    async def info(self) -> dict[str, Any]:
        """The consumer's info as CONSUMER.INFO answers it and /jsz shows it: counters after the
        stream's latest deletes and purges, and only the pull requests still alive."""
        await self.settle_removals()
        if self.is_pull:
            self.expire_waiters(time.monotonic_ns())
        return consumer_info_json(
            self.stream.name,
            self.name,
            self.config,
            self.created_ns,
            delivered=(self.dseq, self.last_delivered_sseq, self.last_active_ns),
            ack_floor=(self.ack_floor_dseq, self.ack_floor_sseq, self.last_ack_ns),
            num_ack_pending=len(self.pending),
            num_redelivered=self.num_redelivered,
            num_waiting=len(self.waiting),  # after expire_waiters above
            num_pending=await self.num_pending(),
            push_bound=self.has_interest() if not self.is_pull else False,
        )

    async def num_pending(self) -> int:
        store = self.stream.store
        st = await self.stream.state()
        if st.num_deleted == 0 and (
            not self.filters or sum([await store.msgs_for_subject(f) for f in self.filters]) == st.msgs
        ):
            # No gaps, and every message matches the filters (the usual filter: the stream's own
            # subject): arithmetic instead of counting rows (a COUNT is O(stream) in SQLite).
            # Filters never overlap, so their counts add up.
            return max(st.last_seq - max(self.next_sseq, st.first_seq) + 1, 0) + len(self.initial)
        if not self.filters:
            n = await store.num_pending(self.next_sseq)
        else:
            n = sum([await store.num_pending(self.next_sseq, f) for f in self.filters])
        return n + len(self.initial)

    def purged(self, start: int, subject_filter: str | None) -> None:
        """The stream was purged (of messages on ``subject_filter``, or of all): as the
        reference, the delivered position and the ack floor move up to ``start`` (the first
        message left that this purge concerned); pending messages below it count as
        acknowledged. What else was pending or waiting to start and went is settled like any
        removal (``messages_removed``)."""
        if self.next_sseq < start:
            self.next_sseq = start
        if self.last_delivered_sseq < start - 1:
            self.last_delivered_sseq = start - 1
        if self.ack_floor_sseq < start - 1:
            self.ack_floor_sseq = start - 1
            below = [p.dseq for s, p in self.pending.items() if s < start]
            self.ack_floor_dseq = max([self.ack_floor_dseq, *below])
        self._dirty = True
        self._advance_floor()
        self.messages_removed(subjects=(subject_filter,) if subject_filter else ())

    def close(self) -> None:
        self.deleted = True
        # Pull requests routed here but not yet read (sent right behind the DELETE) end like
        # the waiting ones: the reference's consumer answers whatever reached it.
        queued: list[str] = []
        while True:
            try:
                msg = self.acks.inbox.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            if _is_pull_request(msg) and msg.reply:
                queued.append(msg.reply)
        self.acks.close()
        for reply in [w.reply for w in self.waiting] + queued:
            self._status(reply, 409, "Consumer Deleted")
        self.waiting.clear()
        self.wake()


_PLAIN_ACKS = frozenset({b"", b"+ACK", b"+OK"})
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _header_number(value: str | None) -> int:
    """A header's decimal value; -1 when it is missing or not a plain number."""
    return int(value) if value and value.isascii() and value.isdigit() else -1


def _is_pull_request(msg: InboundMsg) -> bool:
    """A pull request the API handed over (``$JS[.<domain>].API.CONSUMER.MSG.NEXT…``); the rest
    of the queue is acks (``$JS.ACK.``) and flow-control replies (``$JS.FC.``)."""
    subject = msg.subject
    return not (subject.startswith("$JS.ACK.") or subject.startswith("$JS.FC."))


def consumer_filters(cfg: ConsumerConfig) -> list[str]:
    if cfg.filter_subjects:
        return [f for f in cfg.filter_subjects if f and f != ">"] or []
    if cfg.filter_subject and cfg.filter_subject != ">":
        return [cfg.filter_subject]
    return []


class _AckInfo(NamedTuple):
    """The numbers of an ack subject: of the delivery it answers."""

    deliveries: int
    sseq: int
    dseq: int


_UINT64_MAX = (1 << 64) - 1


def _ack_num(token: str) -> int:
    # As the reference reads them: anything but digits is -1, as an unsigned 64-bit number.
    return int(token) if token.isdigit() and token.isascii() else _UINT64_MAX


def _ack_numbers_at(ntokens: int) -> int | None:
    """Where the numbers (deliveries, stream sequence, consumer sequence, timestamp, pending)
    start in an ack subject of ``ntokens`` tokens: after ``$JS.ACK.<stream>.<consumer>`` in the
    9-token form, after ``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>`` in the 11+-token
    form; None for any other count."""
    if ntokens == 9:
        return 4
    return 6 if ntokens >= 11 else None


def _ack_info(tokens: list[str], base: int) -> _AckInfo:
    return _AckInfo(_ack_num(tokens[base]), _ack_num(tokens[base + 1]), _ack_num(tokens[base + 2]))


def account_hash(name: str) -> str:
    """The reference's 8-character hash of an account name (in its v2 ack subjects)."""
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(_HASH_DIGITS[b % len(_HASH_DIGITS)] for b in digest[:8])


_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def parse_nak_delay(arg: bytes) -> int | None:
    """A -NAK's delay in nanoseconds, read as the reference reads it; None when it does not parse
    (a plain NAK). JSON: ``{"delay": <integer>}`` with the key in any case (the last one wins),
    null or absent being 0, a fraction, exponent or string not parsing; else a Go duration."""
    if arg[:1] != b"{":
        try:
            return parse_go_duration(arg.decode())
        except (ValueError, UnicodeDecodeError):
            return None
    try:  # an object (it starts with "{"), read as a list of its pairs
        pairs = jsonsafe.loads(arg, object_pairs_hook=list)  # NaN, deep nesting: not read
    except ValueError:
        return None
    delay = 0
    for key, value in pairs:
        if key.lower() != "delay" or value is None:
            continue
        if type(value) is not int or not -(1 << 63) <= value < (1 << 63):
            return None  # a fraction, an exponent, a string...: Go's int64 refuses it
        delay = value
    return delay


def _wire_size(to: str, reply: str, headers: bytes | None, payload: bytes) -> int:
    """What flow control counts of a delivery, as the reference: the deliver subject, the ack
    subject, headers and data."""
    return len(to) + len(reply) + len(headers or b"") + len(payload)


def _ack_subject(prefix: str, deliveries: int, sseq: int, dseq: int, ts: int, pending: int) -> str:
    """The reply subject of a delivery: ``$JS.ACK.<stream>.<consumer>.`` (the prefix), then
    deliveries, stream sequence, consumer sequence, timestamp and pending count, as the reference."""
    return f"{prefix}{deliveries}.{sseq}.{dseq}.{ts}.{pending}"


def _msg_size(m: StoredMsg) -> int:
    return len(m.data) + (len(m.headers) if m.headers else 0) + len(m.subject)
