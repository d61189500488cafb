"""One stream: decides what a publish does, then applies it to the store in batches.

Every mutation goes through ``store.apply(ops)`` with typed operations, so a replicated hub can
later put RAFT between deciding the operations and applying them, and a follower can replay them.

Publishes are processed by one worker per stream. It takes every publish queued at that moment,
decides each one against the state as it stands after the ones before it in the batch (dedup,
expected-sequence headers, discard-new limits), applies the whole batch in one store call (one
transaction: one fsync), and only then sends the acknowledgements. If the commit fails, every
publisher of the batch gets an error and nothing of it is reported stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from core import subjects
from core.api_errors import ApiError, api_error
from core.config import JetStreamConfig
from core.errors import StoreError
from core.faults import fault_point
from core.jetstream import dedup_window
from core.jetstream.gotime import format_go_seconds, parse_go_duration, rfc3339_nano
from core.jetstream.sourced_batch import SourcedColumns
from core.jetstream.transforms import Republish, StreamTransforms, republish_message
from core.protocol.headers import HeaderError, encode_headers, parse_headers, replace_header, slice_header
from core.server.internal import Backlog, InboundMsg, InternalReceiver, fill_batch, inbound_size
from core.server.mailbox import Mailbox
from core.store.api import (
    Append,
    AppendBatch,
    DeleteOp,
    DelMetaOp,
    ExpireOp,
    InvalidOperation,
    Op,
    PositionMismatch,
    PurgeOp,
    SetMetaOp,
    SkipOp,
    SourcePosOp,
    StoredMsg,
    StreamState,
    StreamStore,
)

if TYPE_CHECKING:
    from core.jetstream.consumer import Consumer
    from core.jetstream.models import StreamConfig
    from core.jetstream.sourcing import Delivery, Sourcing
    from core.server.accounts import Account

_NEVER_NS = 1 << 63  # the housekeeper's next look when nothing is due

log = logging.getLogger("leafjet.stream")

# A batch of publishes is decided, committed and acknowledged together. Small batches keep a
# windowed publisher (nats-py's publish_async, 1000 acks outstanding) busy: its first acks come
# back after 64 messages, not 256, while the next batches are decided and committed behind them.
# A/B on this machine, async publish of 100k x 128 B, medians of 5 runs against the reference:
# 256 gave 0.82x (interval) and 0.85x (always), 64 gave 0.94-1.01x and 0.91-0.99x, with less
# server CPU per message. The store still merges the batches queued behind a commit into one
# transaction, so with sync=always the fsyncs stay grouped.
MAX_BATCH = 64
# A batch also ends past this many bytes: what the pipeline holds (PIPELINE_DEPTH batches) stays
# a few MiB with large messages (64 of 1 MiB each made 256 MiB in flight).
MAX_BATCH_BYTES = 4 * 1024 * 1024
# Scans over a stream (limits, interest, expiry) read this many messages at a time, and let
# other tasks run between reads: a memory store's read never yields to the event loop.
SCAN_CHUNK = 1024
_TOO_MANY_REQUESTS = b"NATS/1.0 429 Too Many Requests\r\n\r\n"
PIPELINE_DEPTH = 4
_MAX_HEADERS = 65535  # as the reference: a JetStream message's header block fits in 16 bits
_DEDUP_PREFIX = "dedup/"
_TTL_PREFIX = "ttl/"
_NEVER_PREFIX = "never/"  # messages with Nats-TTL: never, which max_age does not remove
# Set (meta) when a stream's first sequence was fixed before it held a message: by a first_seq
# in its config or by a purge. The reference reports first_seq 0 only for a stream that never
# had one; without this key an empty stream cannot tell the two apart.
FIRST_SEQ_SET_KEY = "first_seq_set"
_SECOND = 1_000_000_000


# The headers ``_decide`` acts on. A block naming none of them (a sourced message carries
# Nats-Stream-Source and whatever the upstream publisher sent) skips the dozen lookups.
_DECIDED_HEADERS = frozenset(
    {
        b"Nats-Batch-Id",
        b"Nats-Incr",
        b"Nats-Expected-Stream",
        b"Nats-TTL",
        b"Nats-Expected-Last-Subject-Sequence",
        b"Nats-Expected-Last-Subject-Sequence-Subject",
        b"Nats-Expected-Last-Sequence",
        b"Nats-Schedule",
        b"Nats-Msg-Id",
        b"Nats-Expected-Last-Msg-Id",
        b"Nats-Rollup",
    }
)


# The names as _decide looks them up, by their bytes in a block.
_DECIDED_NAMES = {name: name.decode() for name in _DECIDED_HEADERS}
# Decided headers _decide_plain also takes: a publish with only these (the MQTT bridge's, or
# any publisher's with a message id) is decided without _decide's dozen checks.
_PLAIN_HEADERS = frozenset({"Nats-Msg-Id", "Nats-Expected-Stream"})


def _decided_headers(block: bytes) -> dict[str, str]:
    """The headers of ``block`` that ``_decide`` acts on, by name, each read as ``slice_header``
    reads it (the first line ``<name>:``, spaces after the colon skipped, the rest of the line
    kept), in one pass over the block instead of one search per name. Empty: it acts on none."""
    found: dict[str, str] = {}
    i = block.find(b"\r\nNats-")
    while i >= 0:
        colon = block.find(b":", i + 2)
        if colon < 0:
            break
        name = _DECIDED_NAMES.get(block[i + 2 : colon])
        if name is not None and name not in found:
            start = colon + 1
            while block[start : start + 1] == b" ":
                start += 1
            end = block.find(b"\r\n", start)
            found[name] = block[start : len(block) if end < 0 else end].decode("utf-8", "surrogateescape")
        i = block.find(b"\r\nNats-", i + 2)
    return found


assert all(name.startswith(b"Nats-") for name in _DECIDED_HEADERS)  # (_any_acts_on counts on it)
# "<name>:" at the start of a header line, for each name _decide acts on (what _decided_headers finds)
_DECIDED_LINES = tuple(b"\r\n" + name + b":" for name in sorted(_DECIDED_HEADERS))


def _any_acts_on(blocks: list[bytes]) -> bool:
    """Whether ``_decided_headers`` finds anything in any of many header blocks, at once: each
    name searched for in all of them joined (a block ends with CRLF CRLF and the next starts
    with ``NATS/1.0``, so joining makes no line that was not there)."""
    joined = b"".join(blocks)
    if joined.count(b"\r\nNats-") == joined.count(b"\r\nNats-Stream-Source:"):
        return False  # the common case, in two scans: every decided name starts with "Nats-"
    return any(line in joined for line in _DECIDED_LINES)


def _is_delete_marker(headers: bytes | None) -> bool:
    """A subject delete marker, or a KV purge marker: expiring one leaves no marker behind.
    Read as the reference reads its own headers (``slice_header``)."""
    if not headers:
        return False
    return (
        bool(slice_header(headers, "Nats-Marker-Reason")) or slice_header(headers, "KV-Operation") == "PURGE"
    )


def parse_ttl(value: str) -> int | None:
    """Nats-TTL in ns, as the reference reads it: a Go duration (``90s``, ``1m30s``, ``1.5h``)
    or whole seconds, at least one second; ``never`` means no expiry (None)."""
    if value.lower() == "never":  # as the reference: no trimming ("5s " is no TTL)
        return None
    try:
        ns = parse_go_duration(value)  # the reference keeps whole seconds of it
        ns -= ns % _SECOND
    except ValueError:
        if not value.isdigit():
            raise ValueError(value) from None
        # The reference reads whole seconds into an int64 that wraps: 2^63 comes out negative
        # (refused), 2^64 + 1 comes out as 1.
        seconds = int(value) % (1 << 64)
        if seconds >= 1 << 63:
            raise ValueError(value) from None
        ns = seconds * _SECOND
    if ns < _SECOND:
        raise ValueError(value)  # the reference's minimum TTL is one second
    return ns


@dataclass(slots=True)
class _Batch:
    """What a batch of publishes decided, before it is applied."""

    ops: list[Op] = field(default_factory=list)
    # per publish in the batch: (reply, what to answer: _Stored, _Dup or an ApiError)
    outcomes: list[tuple[str | None, Any]] = field(default_factory=list)
    dedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    ttls: list[tuple[int, int]] = field(default_factory=list)  # (seq, expire ns)
    nevers: list[int] = field(default_factory=list)  # seqs stored with Nats-TTL: never
    last_msg_id: str | None = None  # of the batch's last stored publish ("" without one); None: none
    removes: bool = False  # the batch also removes messages (rollup, per-subject limit)
    removed_subjects: set[str] = field(default_factory=set)  # where it removes inside the stream
    trims: dict[str, None] = field(default_factory=dict)  # subjects over max_msgs_per_subject, in order
    republish: list[Republish] = field(default_factory=list)  # sent once the batch committed


# a commit storing messages of more subjects than this (or a batch of more messages) wakes every
# consumer: matching each one's filters against that many would cost more than the wake-ups
WAKE_SUBJECTS_MAX = 64


def stored_subjects(ops: Sequence[Op]) -> set[str] | None:
    """The subjects a commit's ops store, or None when there are too many to look at."""
    out: set[str] = set()
    for op in ops:
        if isinstance(op, Append):
            out.add(op.subject)
        elif isinstance(op, AppendBatch):
            if len(op.subjects) > WAKE_SUBJECTS_MAX:
                return None
            out.update(op.subjects)
        if len(out) > WAKE_SUBJECTS_MAX:
            return None
    return out


def advise(
    account: Account,
    domain: str | None,
    subject: str,
    event_type: str,
    fields: dict[str, Any],
    *,
    namespace: str = "io.nats.jetstream",
) -> None:
    """Publish a JetStream event, framed as the reference frames them: ``type``
    (``io.nats.jetstream.<event_type>``; leafjet's own events name another ``namespace``), a
    unique ``id``, ``timestamp``, then ``fields``, then ``domain`` when the server has one."""
    body: dict[str, Any] = {
        "type": f"{namespace}.{event_type}",
        "id": secrets.token_hex(11),
        "timestamp": rfc3339_nano(time.time_ns()),
        **fields,
    }
    if domain:
        body["domain"] = domain
    account.publish(subject, None, None, json.dumps(body).encode())


class Stream:
    def __init__(
        self,
        config: StreamConfig,
        store: StreamStore,
        created_ns: int,
        account: Account,
        domain: str | None,
        backlog: Backlog | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.created_ns = created_ns
        self.account = account
        self.domain = domain
        self.lock = asyncio.Lock()  # excludes the publish pipeline from purge, delete, reconfigure
        # What publishers handed the stream and it has not answered yet: bounded, with
        # back-pressure (see core/server/internal.py and DESIGN.md).
        if backlog is None:
            defaults = JetStreamConfig()  # the reference's (jetstream.max_buffered_msgs / _size)
            backlog = Backlog(defaults.max_buffered_msgs, defaults.max_buffered_size)
        self.receiver = InternalReceiver(
            f"stream:{config.name}", account, backlog=backlog, refused=self._too_many_requests
        )
        self.consumers: dict[str, Consumer] = {}
        self._state: StreamState | None = None
        self._dedup: dict[str, tuple[int, int]] = {}
        self._last_msg_id: str | None = None
        self._reconfigured = anyio.Event()  # wakes the housekeeping after a config update
        self._ttl: dict[int, int] = {}  # seq -> expire ns
        # (expire ns, seq), soonest first; an entry that no longer matches _ttl is stale
        self._ttl_heap: list[tuple[int, int]] = []
        self._never: set[int] = set()  # seqs stored with Nats-TTL: never
        self._closed = False
        # the pipeline: batches admitted but not yet answered, and the state they predict
        self._inflight = 0
        # submit_sourced's, not yet settled, in submission order (a drain settles them so)
        self._sourced_flights: dict[_Flight, None] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._predicted: _Running | None = None
        self._ack_prefix: bytes | None = None
        self.first_seq_set = False  # see FIRST_SEQ_SET_KEY
        self._sdm_pending: dict[int, int] = {}  # seq -> when its delete marker was published
        self._next_expiry_ns = 0  # when the housekeeper looks next (wall ns)
        self.failed: str | None = None  # why the pipeline was given up (see fail)
        # consumers whose records could not be read at recovery, by name: why (engine.py)
        self.damaged_consumers: dict[str, str] = {}
        self.sourcing: Sourcing | None = None  # its sources' workers (core/jetstream/sourcing.py)
        self._appended: anyio.Event | None = None  # see appended()
        self.transforms = StreamTransforms.of(config.subject_transform, config.republish)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def wake_consumers(self, subjects: Collection[str] | None = None) -> None:
        """Messages were stored: consumers and waiting bulk reads look again. Given the
        subjects stored (``stored_subjects``), only the consumers that may have something to
        deliver now (``Consumer.wants``): a wake-up of each of 1,000 consumers on a publish
        took 24 ms (the reference's publish: 0.2 ms)."""
        for c in self.consumers.values():
            if subjects is None or c.wants(subjects):
                c.wake()
        if self._appended is not None:
            self._appended.set()
            self._appended = None

    def appended(self) -> anyio.Event:
        """An event set at the next commit that stores messages (or when the stream closes):
        a bulk read waiting for messages (core/jetstream/bulk_read.py) waits on it."""
        if self._appended is None:
            self._appended = anyio.Event()
        return self._appended

    def _removed_messages(self, seqs: Iterable[int] = (), subjects: Iterable[str] = ()) -> None:
        """Messages went away (delete, expiry, limits): all below the new first sequence, and
        ``seqs``, and some on ``subjects``. Consumers drop their read-ahead and settle their
        pending ones (``Consumer.messages_removed``)."""
        self._state = None
        seqs, subjects = tuple(seqs), tuple(subjects)
        for c in self.consumers.values():
            c.messages_removed(seqs, subjects)

    async def apply_consumer_ops(self, ops: list[Op]) -> None:
        """Consumer state and the deletions acks cause (workqueue, interest) go to the same store."""
        if not ops:
            return
        await self.store.apply(ops)
        if any(type(op) is DeleteOp for op in ops):
            self._state = None

    def _has_interest(self, subject: str) -> bool:
        """Whether a consumer would deliver a message on ``subject`` (interest retention)."""
        return any(
            not c.filters or any(subjects.match(f, subject) for f in c.filters)
            for c in self.consumers.values()
        )

    async def recheck_interest(self, acked_only: bool = False) -> None:
        """After a consumer went away, with interest retention: remove the messages no remaining
        consumer still needs (with no consumer left, all of them), as the reference does. With
        ``acked_only`` (a stream turned to interest that has consumers), only messages up to the
        highest ack floor are looked at: the reference removes what its consumers acknowledged,
        and keeps what none of them was ever given. The caller holds the stream's lock."""
        if self.config.retention != "interest":
            return
        await self.drain()
        consumers = list(self.consumers.values())
        limit = max((c.ack_floor_sseq for c in consumers), default=0) if acked_only else None
        start = (await self.state()).first_seq
        gone: list[int] = []
        while chunk := await self.store.range(start, limit=SCAN_CHUNK):
            if limit is not None:
                chunk = [m for m in chunk if m.seq <= limit]
                if not chunk:
                    break
            gone.extend(m.seq for m in chunk if all(c.has_acked(m.seq, m.subject) for c in consumers))
            start = chunk[-1].seq + 1
            await anyio.lowlevel.checkpoint()  # a memory store's read does not yield
        if gone:
            self._predicted = None
            await self.store.apply([DeleteOp(s) for s in gone])
            self._removed_messages(seqs=gone)

    async def interest_done(self, seqs: list[int], acked_by: Consumer) -> list[int]:
        """Of the messages ``acked_by`` just acknowledged, those every consumer is done with."""
        done = []
        for seq in seqs:
            msg = await self.store.get(seq)
            if msg is None:
                continue
            if all(c.has_acked(seq, msg.subject) for c in self.consumers.values() if c is not acked_by):
                done.append(seq)
        return done

    # ------------------------------------------------------------------ lifecycle

    async def load(self, *, fresh: bool = False) -> list[tuple[str, bytes]]:
        """Rebuild the in-memory indexes from the store: the dedup window from the stored
        messages' ``Nats-Msg-Id`` headers (dedup_window.py), TTLs from the metadata. Returns
        the metadata rows it read, the consumers' records among them (the engine recovers the
        consumers from them). ``fresh``: the store was built empty just now, so it has nothing
        to read."""
        st = self._state = await self.store.state()
        if fresh:
            return []
        # all the metadata in one read (a trip to a store thread each: a restart of a server
        # with thousands of streams made five per stream)
        meta = await self.store.meta_items()
        self.first_seq_set = any(key == FIRST_SEQ_SET_KEY for key, _v in meta)
        now = time.time_ns()
        window = self.config.duplicate_window
        # none is in the window, or a mirror (it stores what its upstream decided; nothing is
        # deduplicated against its window)
        if window > 0 and st.msgs and st.last_ts >= now - window and self.config.mirror is None:
            since = now - window
            rows = dedup_window.rows_per_read(st.msgs, st.bytes)
            first = await self.seq_for_time(since)
            self._dedup, last_id = await dedup_window.scan_msg_ids(
                self.store, first, st.last_seq, since, rows
            )
            if last_id is not None:
                self._last_msg_id = last_id
        await self._migrate_dedup_rows(now, [(k, v) for k, v in meta if k.startswith(_DEDUP_PREFIX)])
        for key, value in meta:
            if key.startswith(_TTL_PREFIX):
                self._add_ttl(int(key[len(_TTL_PREFIX) :]), int(value))
        self._never = {int(key[len(_NEVER_PREFIX) :]) for key, _v in meta if key.startswith(_NEVER_PREFIX)}
        return meta

    async def _migrate_dedup_rows(self, now: int, rows: list[tuple[str, bytes]]) -> None:
        """Files written before the window lived in memory only hold a meta row per id
        (``dedup/<id>`` = ``seq:ts``). They are read once: the ids still in the window join the
        rebuilt ones (the row outlives its message, so a removed message's id is kept until
        the window passes, as before), then every row is deleted in one transaction."""
        if not rows:
            return
        window = self.config.duplicate_window
        entries = [(ts, seq, mid) for mid, (seq, ts) in self._dedup.items()]
        for key, value in rows:
            seq_s, _, ts_s = value.decode(errors="replace").partition(":")
            if seq_s.isdigit() and ts_s.isdigit() and now - int(ts_s) <= window:
                entries.append((int(ts_s), int(seq_s), key[len(_DEDUP_PREFIX) :]))
        entries.sort()  # oldest first, as publishes add them: _expire finds the old ones in front
        merged: dict[str, tuple[int, int]] = {}
        for ts, seq, mid in entries:
            merged.pop(mid, None)
            merged[mid] = (seq, ts)
        self._dedup = merged
        await self.store.apply([DelMetaOp(key) for key, _v in rows])
        log.info("stream %s: %d dedup rows of an older version read and removed", self.name, len(rows))

    def subscribe(self) -> None:
        if self.failed is not None:
            return  # given up (see fail): publishes find no responder, even after an update
        for subj in self.config.subjects:
            self.receiver.subscribe(subj)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The stream's worker: a two-stage pipeline of publish batches, plus the expiry timers.

        Stage one (this task) decides a batch against the state predicted after the batches
        still in flight and submits its operations to the store; stage two (``_complete``)
        waits for each commit in order and only then answers the publishers. Deciding the next
        batch overlaps the fsync of the previous one; the hand-over holds at most ``depth``
        batches. (Mailbox, asyncio's Lock and the store's futures instead of anyio's streams,
        Lock and a task per batch: a sync publish is a batch of one, and those cost more CPU
        than the rest of the publish.)
        """
        depth = 1 if self.config.discard == "new" else PIPELINE_DEPTH
        flights: Mailbox[_Flight] = Mailbox(depth)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._housekeeping)
            tg.start_soon(self._complete, flights)
            task_status.started()
            inbox = self.receiver.inbox
            try:
                async for first in inbox:
                    flight = await self._submit(self._take_batch(first, inbox))
                    if self._inflight == 1 and (flight.commit is None or _done(flight.commit)):
                        # Nothing ahead of it and already committed (the store committed it
                        # inline): answer now instead of handing it to the second stage.
                        await self._settle(flight)
                    else:
                        await flights.send(flight)
            finally:
                flights.close()
            await self.drain()
            tg.cancel_scope.cancel()

    @staticmethod
    def _take_batch(first: InboundMsg, inbox: Mailbox[InboundMsg]) -> tuple[list[InboundMsg], int]:
        """``first`` and what is queued behind it, up to MAX_BATCH messages or MAX_BATCH_BYTES."""
        batch = [first]
        return batch, fill_batch(batch, inbox, MAX_BATCH, MAX_BATCH_BYTES)

    async def _submit(self, taken: tuple[list[InboundMsg], int]) -> _Flight:
        """Decide a batch and hand its operations to the store (stage one of ``run``)."""
        batch, size = taken
        try:
            fault_point("stream_pipeline", self.name)
            async with self.lock:
                flight = await self._admit(batch)
                flight.held = (len(batch), size)
                if flight.plan.ops:
                    try:
                        flight.commit = await self.store.submit(flight.plan.ops)
                    except StoreError as e:
                        flight.error = e
            return flight
        except BaseException as e:
            self._release(len(batch), size)
            if isinstance(e, Exception):
                # The supervisor (engine.py) restarts the pipeline; these publishers hear why.
                err = api_error("JSStreamStoreFailedF", err=f"stream pipeline failed: {e}")
                for msg in batch:
                    if msg.reply:
                        self.account.publish(msg.reply, None, None, self._nak(err))
            raise

    async def close(self) -> None:
        self._closed = True
        self.receiver.close()
        if self._appended is not None:  # bulk reads waiting for messages end now
            self._appended.set()
            self._appended = None

    def reset_pipeline(self) -> None:
        """After the pipeline task failed, before it runs again: the batches it held are gone
        (their publishers time out, or heard the error), the backlog counts what is queued."""
        self._inflight = 0
        self._idle.set()
        self._predicted = None
        self._state = None
        backlog = self.receiver.backlog
        if backlog is not None:
            queued = self.receiver.inbox.queued()
            size = sum(inbound_size(m.subject, m.reply, m.headers, m.payload) for m in queued)
            backlog.recount(len(queued), size)

    def fail(self, reason: str) -> None:
        """The pipeline keeps failing: the stream takes no more publishes (they find no
        responder) until the server restarts; reads, info and delete still work."""
        self.failed = reason
        self.receiver.unsubscribe_all()
        # What reached the queue before the unsubscribe is answered, not left to time out.
        nak = self._nak(api_error("JSStreamStoreFailedF", err=f"stream pipeline failed: {reason}"))
        for msg in self.receiver.inbox.queued():
            if msg.reply:
                self.account.publish(msg.reply, None, None, nak)
        self.receiver.close()

    def _housekeeping_interval(self) -> float:
        """Seconds until the housekeeper has something to do: an age limit to enforce (looked at
        every quarter of max_age, at most 1 s apart), a message TTL running out, a dedup id
        leaving the window. ``math.inf`` when nothing is due: an idle stream without limits costs
        no wake-up (a thousand idle streams woke a thousand times a second)."""
        interval = math.inf
        if self.config.max_age:
            interval = min(1.0, max(0.05, self.config.max_age / 1e9 / 4))
        now = time.time_ns()
        next_ttl = self._next_ttl()  # on time: a publish with an earlier one wakes us
        if next_ttl is not None:
            interval = min(interval, max(0.005, (next_ttl - now) / 1e9))
        if self._dedup:
            # oldest first: the first id leaves the window first (a publish of a new id wakes a
            # housekeeper that sleeps for good)
            _seq, ts = next(iter(self._dedup.values()))
            due = ts + self.config.duplicate_window
            interval = min(interval, max(1.0, (due - now) / 1e9))
        return interval

    async def _housekeeping(self) -> None:
        while True:
            interval = self._housekeeping_interval()  # a reconfigure wakes us to look again
            if interval == math.inf:
                self._next_expiry_ns = _NEVER_NS
            else:
                self._next_expiry_ns = time.time_ns() + int(interval * 1e9)
            self._reconfigured = anyio.Event()
            with anyio.move_on_after(interval):
                await self._reconfigured.wait()
            async with self.lock:
                try:
                    await self._expire()
                except StoreError as e:
                    log.error("stream %s: expiry failed: %s", self.name, e)

    def _add_ttl(self, seq: int, expire: int) -> None:
        self._ttl[seq] = expire
        heapq.heappush(self._ttl_heap, (expire, seq))

    def _next_ttl(self) -> int | None:
        """When the next message TTL runs out (wall ns), or None: O(log n), not a scan."""
        heap, ttl = self._ttl_heap, self._ttl
        while heap and ttl.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # removed or re-timed since it was pushed
        return heap[0][0] if heap else None

    def _due_ttls(self, now: int) -> list[int]:
        """Take the messages whose TTL ran out by ``now`` off the heap (``_expire`` puts them
        back if it cannot remove them)."""
        heap, ttl, due = self._ttl_heap, self._ttl, []
        while heap and heap[0][0] <= now:
            expire, seq = heapq.heappop(heap)
            if ttl.get(seq) == expire:
                due.append(seq)
        return due

    async def expire_due(self) -> None:
        """Remove what ran out (max_age, message TTLs, old dedup ids), now: at start, what ran
        out while the server was down goes before anyone reads the stream, as the reference."""
        async with self.lock:
            await self._expire()

    async def _expire(self) -> None:
        now = time.time_ns()
        ops: list[Op] = []
        due = self._due_ttls(now)
        markers = self.config.subject_delete_marker_ttl >= _SECOND
        if markers or (self._never and self.config.max_age):
            deleted = await self._expire_by_scan(now, due, ops, markers)
            # A message waiting for its marker keeps its TTL record and is looked at again in
            # 2 s, in case the marker was refused (its stored expiry stays: a restart retries).
            for seq in [seq for seq in due if seq in self._sdm_pending]:
                self._add_ttl(seq, now + 2 * _SECOND)
            due = [seq for seq in due if seq not in self._sdm_pending]
        else:
            deleted = due
            if self.config.max_age:
                st = await self.state()
                if st.msgs and st.first_ts and st.first_ts < now - self.config.max_age:
                    ops.append(ExpireOp(now - self.config.max_age))
            ops.extend(DeleteOp(seq) for seq in due)
        ops.extend(DelMetaOp(f"{_TTL_PREFIX}{seq}") for seq in due)
        window = self.config.duplicate_window
        # Oldest first (publishes append, load rebuilds in order): the walk stops at the first
        # live id, so it costs what expired, not every id in the window (millions with a busy
        # stream). Ids live in memory only: forgetting one writes nothing.
        old_ids: list[str] = []
        for mid, (_s, ts) in self._dedup.items():
            if now - ts <= window:
                break
            old_ids.append(mid)
        for mid in old_ids:
            del self._dedup[mid]
        if ops:
            try:
                await self.store.apply(ops)
            except BaseException:
                for seq in due:  # not removed: due again at the next look
                    heapq.heappush(self._ttl_heap, (self._ttl[seq], seq))
                raise
            for seq in due:
                self._ttl.pop(seq, None)
            self._removed_messages(seqs=deleted)

    async def _expire_by_scan(self, now: int, due: list[int], ops: list[Op], markers: bool) -> list[int]:
        """Expiry message by message, as the reference: a message stored with ``Nats-TTL:
        never`` outlives max_age, and with subject delete markers (``subject_delete_marker_ttl``,
        ADR-43) a message that ages out or whose TTL ran out is removed, except when it is the
        last on its subject and no marker itself. Then a marker takes its place: a message on
        the subject with ``Nats-Marker-Reason: MaxAge``, the marker TTL and a subject rollup,
        published through the stream like any other. Adds the removals to ``ops``; returns
        their sequences."""
        expired: dict[int, StoredMsg] = {}
        first = (await self.state()).first_seq
        gone_nevers = [s for s in self._never if s < first]
        self._never.difference_update(gone_nevers)
        ops.extend(DelMetaOp(f"{_NEVER_PREFIX}{s}") for s in gone_nevers)
        if self.config.max_age:
            cutoff, start = now - self.config.max_age, first
            while chunk := await self.store.range(start, limit=256):
                old = [m for m in chunk if m.ts < cutoff]
                expired.update((m.seq, m) for m in old if m.seq not in self._never)
                if len(old) < len(chunk):
                    break
                start = chunk[-1].seq + 1
                await anyio.lowlevel.checkpoint()
        for seq in due:
            if seq not in expired and (m := await self.store.get(seq)) is not None:
                expired[seq] = m
        self._sdm_pending = {s: t for s, t in self._sdm_pending.items() if now - t < 2 * _SECOND}
        removed: list[int] = []
        going: dict[str, int] = {}  # per subject, how many of its messages this pass removes
        for seq in sorted(expired):
            m = expired[seq]
            if seq in self._sdm_pending:
                continue  # its marker is on the way
            left = await self.store.msgs_for_subject(m.subject) - going.get(m.subject, 0)
            if markers and left == 1 and not _is_delete_marker(m.headers):
                self._sdm_pending[seq] = now
                self._publish_marker(m.subject)
            else:
                going[m.subject] = going.get(m.subject, 0) + 1
                removed.append(seq)
                ops.append(DeleteOp(seq))
        return removed

    def _publish_marker(self, subject: str) -> None:
        ttl = format_go_seconds(self.config.subject_delete_marker_ttl // _SECOND)
        headers = encode_headers(
            [("Nats-Marker-Reason", "MaxAge"), ("Nats-TTL", ttl), ("Nats-Rollup", "sub")]
        )
        if self.receiver.subs:  # into this stream's own queue: no core subscriber sees it
            self.receiver.deliver(self.receiver.subs[0], subject, None, headers, b"")

    # ------------------------------------------------------------------ advisories

    def advise(
        self, subject: str, event_type: str, fields: dict[str, Any], *, namespace: str = "io.nats.jetstream"
    ) -> None:
        """Publish a JetStream event about this stream or one of its consumers (``advise``)."""
        advise(self.account, self.domain, subject, event_type, fields, namespace=namespace)

    # ------------------------------------------------------------------ state

    async def state(self, with_deleted: bool = False) -> StreamState:
        if with_deleted or self._state is None:
            st = await self.store.state(with_deleted=with_deleted)
            if not with_deleted:
                self._state = st
            return st
        return self._state

    # ------------------------------------------------------------------ publish

    def _ack(self, seq: int, duplicate: bool = False) -> bytes:
        # Hot path: one per publish. The prefix ({"stream":…,"domain":…,"seq":) is built once.
        prefix = self._ack_prefix
        if prefix is None:
            head: dict[str, Any] = {"stream": self.name}
            if self.domain:
                head["domain"] = self.domain
            prefix = self._ack_prefix = json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"seq":'
        return prefix + (b'%d,"duplicate":true}' % seq if duplicate else b"%d}" % seq)

    def _nak(self, err: ApiError) -> bytes:
        body: dict[str, Any] = {"error": err.to_json(), "stream": self.name, "seq": 0}
        return json.dumps(body, separators=(",", ":")).encode()

    async def _admit(self, batch: list[InboundMsg]) -> _Flight:
        """Decide a batch (under the stream lock) and record the state it predicts."""
        run = await self._running()
        plan = _Batch()
        if not self._closed:
            plain = self._plain_publishes_ok()
            ingest = self.transforms.ingest
            for msg in batch:
                if ingest is not None and (subject := ingest.match(msg.subject)) is not None:
                    # the stream's subject_transform, before anything else (the reference's order)
                    msg = msg._replace(subject=subject)
                if not msg.subject.isascii():
                    # Bytes that are not UTF-8 (the parser keeps them as surrogates) cannot go
                    # into the store's text: stored as U+FFFD, as the reference's JSON shows them.
                    msg = msg._replace(subject=subjects.storable(msg.subject))
                h = msg.headers
                found: dict[str, str] | None = None
                if h is not None and len(h) <= _MAX_HEADERS:
                    found = _decided_headers(h)
                if (
                    plain
                    and (h is None or (found is not None and found.keys() <= _PLAIN_HEADERS))
                    and self._decide_plain(msg, plan, run, found)
                ):
                    continue
                try:
                    await self._decide(msg, plan, run, found)
                except ApiError as e:
                    plan.outcomes.append((msg.reply, e))
                except Exception as e:
                    # A bug deciding one publish must not take the stream (and the server) down:
                    # that publisher gets an error, the batch goes on.
                    log.exception("stream %s: deciding a publish on %s failed", self.name, msg.subject)
                    plan.outcomes.append((msg.reply, api_error("JSStreamStoreFailedF", err=str(e))))
            self._trim_now(plan)
            self._trim_max_msgs(plan, run)
        return self._admitted(plan, run)

    async def _running(self) -> _Running:
        """The state a batch is decided against: what the batches in flight predict, or the
        committed state when none is."""
        if self._inflight == 0 or self._predicted is None:
            st = await self.state()
            return _Running(msgs=st.msgs, bytes=st.bytes, last_seq=st.last_seq, last_msg_id=self._last_msg_id)
        return self._predicted

    def _trim_max_msgs(self, plan: _Batch, run: _Running) -> None:
        cfg = self.config
        if cfg.discard == "old" and 0 < cfg.max_msgs < run.msgs:
            # max_msgs goes into the batch's own transaction: one commit (one fsync) per
            # batch, not a second one after it to drop the oldest.
            plan.ops.append(PurgeOp(keep=cfg.max_msgs))
            run.msgs = cfg.max_msgs
            plan.removes = True

    def _admitted(self, plan: _Batch, run: _Running) -> _Flight:
        """A decided batch joins the pipeline: later batches are decided against what it predicts."""
        self._predicted = run
        # Later batches must see this batch's ids as duplicates even before it commits. An id
        # seen again (after its window) moves to the end, keeping the dict oldest first.
        dedup = self._dedup
        for mid, entry in plan.dedup.items():
            if mid in dedup:
                del dedup[mid]
            dedup[mid] = entry
        if self._inflight == 0:
            self._idle.clear()
        self._inflight += 1
        return _Flight(plan)

    async def _complete(self, flights: Mailbox[_Flight]) -> None:
        async for flight in flights:
            await self._settle(flight)

    async def _settle(self, flight: _Flight) -> None:
        """Wait for a flight's commit, then answer its publishers (in admission order)."""
        if flight.commit is not None:
            try:
                flight.results = await flight.commit
            except StoreError as e:
                flight.error = e
        try:
            await self._finish(flight)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()
            self._release(*flight.held)

    def _release(self, msgs: int, size: int) -> None:
        """Publishes answered (or given up): they leave the backlog, and a paused publisher may go on."""
        backlog = self.receiver.backlog
        if backlog is not None and msgs:
            backlog.release(msgs, size)

    def _too_many_requests(self, reply: str) -> None:
        """A publish refused at the backlog's limit, answered as the reference answers it
        (stream.go ``queueInbound``): status 429 and ``JSStreamTooManyRequests``."""
        body = self._nak(api_error("JSStreamTooManyRequests"))
        self.account.publish(reply, None, _TOO_MANY_REQUESTS, body)

    async def _finish(self, flight: _Flight) -> None:
        plan = flight.plan
        if flight.error is not None:
            e = flight.error
            if isinstance(e, PositionMismatch):  # behind a source's batch that failed (logged)
                log.info("stream %s: %s", self.name, e)
            else:
                log.error(
                    "stream %s: store failed, %d publishes refused: %s", self.name, len(plan.outcomes), e
                )
            self._state = None
            self._predicted = None  # later batches in flight get their true sequences from the store
            for mid in plan.dedup:
                self._dedup.pop(mid, None)
            err = api_error("JSStreamStoreFailedF", err=str(e))
            plan.outcomes = [(reply, o if isinstance(o, ApiError) else err) for reply, o in plan.outcomes]
            self._send_outcomes(plan, [])
            return
        if plan.ops:
            if plan.last_msg_id is not None:
                self._last_msg_id = plan.last_msg_id
            for seq, expire in plan.ttls:
                self._add_ttl(seq, expire)
                if expire < self._next_expiry_ns:
                    self._reconfigured.set()  # due before the housekeeper would look: wake it
            if plan.dedup and self._next_expiry_ns == _NEVER_NS:
                self._reconfigured.set()  # the housekeeper sleeps for good: it must now forget these ids
            self._never.update(plan.nevers)
            self._state = None
            if plan.removes:
                self._removed_messages(subjects=plan.removed_subjects)
            await self._enforce_limits()
            self.wake_consumers(stored_subjects(plan.ops))
            if plan.republish:  # after the commit, before the acks (as the reference)
                results = flight.results or []
                self._republish(plan.republish, lambda rp: int(results[rp.index]))
        self._send_outcomes(plan, flight.results or [])

    async def ingest_sourced(self, key: str, msgs: Sequence[Delivery]) -> tuple[int, ApiError | None]:
        """Store what source ``key`` delivered, in upstream order, and the upstream sequence
        of the last one taken in the same transaction (``SourcePosOp``;
        core/jetstream/DESIGN.md, "Sources and mirrors"). They are decided as publishes are
        (dedup, limits, retention), with no one to answer. Returns how many were taken
        (stored, or dropped as ``Nats-Msg-Id`` duplicates) and why the next one was not: all
        and None, or fewer when the one after them was refused (a discard-new limit, its
        size); the position is then the last taken's. A commit that fails raises StoreError:
        neither the messages nor the position were stored."""
        taken, refusal, flight = await self.submit_sourced(key, msgs)
        if flight is not None:
            await self.settle_sourced(flight)
        return taken, refusal

    async def submit_sourced(
        self,
        key: str,
        msgs: Sequence[Delivery],
        before: Callable[[], Awaitable[None]] | None = None,
        after: int | None = None,
    ) -> tuple[int, ApiError | None, _Flight | None]:
        """``ingest_sourced`` without waiting for the commit: decides the batch and submits it,
        returning its flight for ``settle_sourced`` (None when nothing was taken). A batch must
        never commit after an earlier one of its source failed (its position would be stored
        past messages that are not), and there are two ways to make sure:

        - ``before`` settles the same source's previous flight, still committing: this batch is
          decided while it commits (against the state it predicts) and submitted only after
          ``before`` returned. When ``before`` raises, this batch is forgotten and the
          exception propagates.
        - ``after`` is the position the source's last flight writes: this batch is submitted
          at once, behind the flights in flight, with a ``SourcePosOp`` that expects that
          position -- the store refuses it (``PositionMismatch``, nothing stored) unless the
          flight before it committed. Several batches of a source then commit back to back.
        """
        async with self.lock:
            if before is None and after is None:
                await self.drain()
            elif before is not None and (self._closed or self.failed is not None):
                await before()
            if self._closed or self.failed is not None:
                raise StoreError(f"stream {self.name} is closed")
            fast = await self._admit_plain_sourced(msgs)
            if fast is not None:
                flight = fast
                flight.plan.ops.append(SourcePosOp(key, msgs[-1].sseq, after))
                if before is not None:
                    try:
                        await before()
                    except BaseException:
                        self._unadmit(flight)
                        raise
                try:
                    flight.commit = await self.store.submit(flight.plan.ops)
                except StoreError as e:
                    flight.error = e
                self._sourced_flights[flight] = None  # settled by its source, or by a drain
                return len(msgs), None, flight
            batch = [InboundMsg(d.subject, None, d.headers, d.payload, None) for d in msgs]  # type: ignore[arg-type]
            flight = await self._admit(batch)
            outcomes = flight.plan.outcomes
            taken = next((i for i, (_r, o) in enumerate(outcomes) if isinstance(o, ApiError)), len(batch))
            refusal: ApiError | None = None
            if taken < len(batch):
                refusal = outcomes[taken][1]
                self._unadmit(flight)
                if before is not None:
                    await before()
                if taken == 0:
                    return 0, refusal, None
                await self.drain()  # _admit after _unadmit reads the committed state
                flight = await self._admit(batch[:taken])
            elif before is not None:
                try:
                    await before()
                except BaseException:
                    self._unadmit(flight)
                    raise
            flight.plan.ops.append(SourcePosOp(key, msgs[taken - 1].sseq, after))
            try:
                flight.commit = await self.store.submit(flight.plan.ops)
            except StoreError as e:
                flight.error = e
            self._sourced_flights[flight] = None  # settled by its source, or by a drain
        return taken, refusal, flight

    async def _admit_plain_sourced(self, msgs: Sequence[Delivery]) -> _Flight | None:
        """``_admit`` for a batch of sourced messages that all take ``_decide_plain`` (a config
        that refuses nothing, no header the stream acts on, no size over the limit): the same
        plan and prediction, with the batch as one ``AppendBatch`` (columns) and each check run
        over a whole column, so the hub's loop does no Python work per message here -- a bulk
        source stores thousands per batch. None: the batch needs ``_admit``, message by message."""
        if not msgs or self._closed or not self._plain_publishes_ok() or self.transforms.ingest is not None:
            return None  # (a subject_transform: _admit applies it to each message first)
        subjects: Sequence[str]
        headers: Sequence[bytes | None]
        payloads: Sequence[bytes]
        if isinstance(msgs, SourcedColumns):
            subjects, headers, payloads = msgs.subjects, msgs.headers, msgs.payloads
        else:
            _seqs, subjects, headers, payloads, _ts = zip(*msgs, strict=True)
        present = [h for h in headers if h]
        if present and (max(map(len, present)) > _MAX_HEADERS or _any_acts_on(present)):
            return None
        max_size = self.config.max_msg_size
        if max_size != -1 and any(
            len(d) + (len(h) if h else 0) > max_size for h, d in zip(headers, payloads, strict=True)
        ):
            return None
        joined = "".join(subjects)
        if not joined.isascii():
            return None  # _admit makes such a subject storable
        try:
            op = AppendBatch(subjects, headers, payloads, time.time_ns())
        except InvalidOperation:
            return None  # a subject the store refuses: _admit says so, message by message
        run = await self._running()
        plan = _Batch()
        n, seq = len(subjects), run.last_seq
        run.last_by_subject.update(zip(subjects, range(seq + 1, seq + n + 1), strict=True))
        run.last_seq, run.msgs = seq + n, run.msgs + n
        # the store's size_of summed: per message a fixed part, the subject, the data, and the
        # headers with their own fixed part (ASCII subjects: characters are bytes)
        size_of = self.store.size_of
        fixed = size_of("", None, b"")
        per_header = size_of("", b"h", b"") - fixed - 1
        run.bytes += n * fixed + len(joined) + sum(map(len, payloads))
        run.bytes += sum(map(len, present)) + per_header * len(present)
        run.last_msg_id = plan.last_msg_id = ""
        plan.ops.append(op)
        self._trim_max_msgs(plan, run)
        return self._admitted(plan, run)

    async def settle_sourced(self, flight: _Flight) -> None:
        """Wait for a ``submit_sourced`` flight's commit (once; again only re-raises): raises its
        StoreError when neither its messages nor its position were stored. Not cancelled
        half-way: the stream counts the flight in until it is settled."""
        await self._settle_sourced_once(flight)
        if flight.error is not None:
            raise flight.error

    async def _settle_sourced_once(self, flight: _Flight) -> None:
        """Settle a source's flight once, whoever comes first: its source, or ``drain``; the
        other waits until it is settled."""
        if flight.settling is not None:
            await flight.settling.wait()
            return
        flight.settling = asyncio.Event()
        self._sourced_flights.pop(flight, None)
        try:
            with anyio.CancelScope(shield=True):
                await self._settle(flight)
        finally:
            flight.settling.set()

    async def ingest_mirrored(self, msgs: Sequence[Delivery], skip_to: int = 0) -> None:
        """Store what a mirror's upstream delivered, each message under its upstream sequence
        and with its upstream timestamp, in one transaction: the mirror's position is its last
        sequence, committed with them. A sequence the batch jumps over becomes a deleted one
        (the reference's skip markers; on an empty mirror its first sequence moves up).
        ``skip_to`` first moves the last sequence there (an upstream consumer that starts
        later): an empty mirror is purged up to it, a non-empty one gets deleted sequences.
        Nothing is deduplicated or refused (the upstream decided); the discard-old limits
        apply. Raises SequenceMismatch when a sequence is not beyond the mirror's last
        (nothing was stored), StoreError when the commit failed."""
        async with self.lock:
            await self.drain()
            if self._closed or self.failed is not None:
                raise StoreError(f"stream {self.name} is closed")
            st = await self.state()
            tf = self.transforms
            if tf.ingest is not None:  # the mirror's own subject_transform, as for a publish
                msgs = [d._replace(subject=tf.ingest_subject(d.subject)) for d in msgs]
            if not all(d.subject.isascii() for d in msgs):  # bytes that are no UTF-8: as _admit
                msgs = [d._replace(subject=subjects.storable(d.subject)) for d in msgs]
            republish = await self._mirrored_republish(msgs) if tf.republish is not None else []
            ops: list[Op] = []
            if skip_to > st.last_seq:
                ops.append(PurgeOp(up_to_seq=skip_to + 1) if st.msgs == 0 else SkipOp(skip_to))
            ops.extend(Append(d.subject, d.headers, d.payload, d.ts, seq=d.sseq) for d in msgs)
            cfg = self.config
            trims = cfg.discard == "old" and 0 < cfg.max_msgs < st.msgs + len(msgs)
            if trims:
                ops.append(PurgeOp(keep=cfg.max_msgs))
            self._predicted = None
            self._state = None
            try:
                await self.store.apply(ops)
            finally:
                self._state = None
            if trims or (ops and type(ops[0]) is PurgeOp):
                self._removed_messages()
            touched = {d.subject for d in msgs} if cfg.max_msgs_per_subject > 0 else ()
            await self._enforce_limits(touched)
            if msgs:
                self.wake_consumers({d.subject for d in msgs} if len(msgs) <= WAKE_SUBJECTS_MAX else None)
            self._republish(republish, lambda rp: msgs[rp.index].sseq)

    async def _mirrored_republish(self, msgs: Sequence[Delivery]) -> list[Republish]:
        """What of a mirror's batch to republish once stored, each with the sequence of its
        subject's message before it."""
        out: list[Republish] = []
        last: dict[str, int] = {}
        for i, d in enumerate(msgs):
            to = self.transforms.republish_subject(d.subject)
            if to is not None:
                if d.subject not in last:
                    stored = await self.store.last_by_subject(d.subject)
                    last[d.subject] = stored.seq if stored else 0
                out.append(Republish(i, to, d.subject, d.headers, d.payload, d.ts, last[d.subject]))
            last[d.subject] = d.sseq
        return out

    def _republish(self, stored: Iterable[Republish], seq_of: Callable[[Republish], int]) -> None:
        publish, name, headers_only = self.account.publish, self.name, self.transforms.headers_only
        for rp in stored:
            headers, payload = republish_message(name, rp, seq_of(rp), headers_only)
            publish(rp.to, None, headers, payload)

    def _unadmit(self, flight: _Flight) -> None:
        """Forget a batch ``_admit`` decided and nothing submitted (the pipeline was drained)."""
        for mid in flight.plan.dedup:
            self._dedup.pop(mid, None)
        self._predicted = None
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    async def drain(self) -> None:
        """Wait until every admitted batch has been committed and answered. A source's batch is
        settled here if its source has not yet: the source settles it when it next submits,
        under the lock that a caller of ``drain`` may hold (waiting for the source would wait
        for ever: two sources of one stream, or a purge during a catch-up, stalled the stream)."""
        while self._sourced_flights:
            await self._settle_sourced_once(next(iter(self._sourced_flights)))
        while self._inflight:
            await self._idle.wait()

    def _send_outcomes(self, plan: _Batch, results: list[Any]) -> None:
        if self.config.no_ack:
            return  # as the reference: such a stream answers no publish, not even with an error
        ack = self._ack
        answers: list[tuple[str, bytes]] = []
        add = answers.append
        for reply, outcome in plan.outcomes:
            if not reply:
                continue
            if type(outcome) is _Stored:  # the common case first
                index = outcome.op_index
                add((reply, ack(int(results[index]) if index >= 0 else outcome.seq)))
            elif type(outcome) is _Dup:
                add((reply, ack(outcome.seq, duplicate=True)))
            else:
                add((reply, self._nak(outcome)))  # an ApiError
        if answers:
            # a publisher's acks, in a row to its reply inbox, go out as one run
            self.account.publish_replies(answers)

    def _plain_publishes_ok(self) -> bool:
        """Whether a publish without headers can take ``_decide_plain``: nothing in the config
        can refuse it or make it remove messages in the same transaction."""
        cfg = self.config
        return (
            not cfg.sealed
            and self.transforms.republish is None  # _decide notes what to republish
            and cfg.discard == "old"
            and cfg.max_msgs_per_subject <= 0
            and (cfg.retention != "interest" or any(not c.filters for c in self.consumers.values()))
        )

    def _decide_plain(
        self, msg: InboundMsg, plan: _Batch, run: _Running, found: dict[str, str] | None = None
    ) -> bool:
        """``_decide`` for the common publish, which is most of the traffic: a config that cannot
        refuse it, and no header it acts on (none at all, or a sourced message's) but
        ``Nats-Msg-Id`` and ``Nats-Expected-Stream`` (``found``: ``_decided_headers``). The
        same outcome, in the same order of checks, with a fraction of the work. False sends
        the publish through ``_decide`` (a size over max_msg_size, another stream expected, a
        subject the store refuses), which answers it."""
        subject, headers, payload = msg.subject, msg.headers, msg.payload
        size = len(payload) + (len(headers) if headers else 0)
        max_size = self.config.max_msg_size
        if max_size != -1 and size > max_size:
            return False
        now = time.time_ns()
        msg_id = ""  # a publish without Nats-Msg-Id clears the last one
        if found:
            expected_stream = found.get("Nats-Expected-Stream")
            if expected_stream and expected_stream != self.name:
                return False
            raw_id = found.get("Nats-Msg-Id")
            if raw_id:
                msg_id = subjects.storable(raw_id)
                dup = plan.dedup.get(msg_id) or self._dedup.get(msg_id)
                if dup is not None and now - dup[1] <= self.config.duplicate_window:
                    plan.outcomes.append((msg.reply, _Dup(dup[0])))
                    return True
        try:
            op = Append(subject, headers, payload, now)
        except InvalidOperation:
            return False
        ops = plan.ops
        seq = run.last_seq = run.last_seq + 1
        run.msgs += 1
        run.bytes += self.store.size_of(subject, headers, payload)
        run.last_by_subject[subject] = seq
        run.last_msg_id = plan.last_msg_id = msg_id
        if msg_id:
            plan.dedup[msg_id] = (seq, now)  # memory only, as in _decide
        plan.outcomes.append((msg.reply, _Stored(seq, len(ops))))
        ops.append(op)
        return True

    async def _decide(
        self, msg: InboundMsg, plan: _Batch, run: _Running, found: dict[str, str] | None = None
    ) -> None:
        """Decide one publish: every check the reference makes, in its order. ``found``: what
        ``_decided_headers`` read from its headers, when the caller already did."""
        cfg = self.config
        if cfg.sealed:
            raise api_error("JSStreamSealedErr")
        headers = msg.headers
        size = len(msg.payload) + (len(headers) if headers else 0)
        if cfg.max_msg_size != -1 and size > cfg.max_msg_size:
            raise api_error("JSStreamMessageExceedsMaximumErr")
        if headers is not None and len(headers) > _MAX_HEADERS:
            raise api_error("JSStreamHeaderExceedsMaximumErr")
        msg_id = None
        ttl_ns = None
        rollup = None
        ttl_error = ttl_never = False
        if headers and found is None:
            found = _decided_headers(headers)
        if headers and found:
            # The reference's order of checks, and its reading of the headers (exact names,
            # values as sent: see slice_header); an empty header counts as absent.
            hdr = found.get

            if hdr("Nats-Batch-Id"):
                raise api_error("JSAtomicPublishDisabledErr")  # atomic batches: not built
            incr = hdr("Nats-Incr")
            if incr:  # counters: not built
                valid = incr.lstrip("+-").isdigit()
                raise api_error("JSMessageIncrDisabledErr" if valid else "JSMessageIncrInvalidErr")
            expected_stream = hdr("Nats-Expected-Stream")
            if expected_stream and expected_stream != self.name:
                raise api_error("JSStreamNotMatchErr")
            ttl_hdr = hdr("Nats-TTL") or None
            if ttl_hdr is not None:
                try:
                    ttl_ns = parse_ttl(ttl_hdr)
                    ttl_never = ttl_ns is None
                except ValueError:
                    ttl_error = True  # reported after the other checks, as the reference does
                if not ttl_error and not cfg.allow_msg_ttl:
                    raise api_error("JSMessageTTLDisabledErr")
            expected_subj = hdr("Nats-Expected-Last-Subject-Sequence")
            subj_override = hdr("Nats-Expected-Last-Subject-Sequence-Subject")
            if expected_subj:
                checked = subj_override or msg.subject
                # a subject that is no subject matches nothing: its last sequence is 0
                valid = subjects.is_valid_subject(checked)
                last = await self._last_seq_for(checked, plan, run) if valid else 0
                if _int(expected_subj) != last:
                    raise api_error("JSStreamWrongLastSequenceErrF", seq=last)
            elif subj_override:
                raise api_error("JSStreamExpectedLastSeqPerSubjectInvalid")
            expected_last = hdr("Nats-Expected-Last-Sequence")
            if expected_last and _int(expected_last) != run.last_seq:
                raise api_error("JSStreamWrongLastSequenceErrF", seq=run.last_seq)
            if hdr("Nats-Schedule"):
                raise api_error("JSMessageSchedulesDisabledErr")  # schedules: not built
            raw_id = hdr("Nats-Msg-Id")
            msg_id = subjects.storable(raw_id) if raw_id else None
            if msg_id is not None:
                dup = plan.dedup.get(msg_id) or self._dedup.get(msg_id)
                if dup is not None and time.time_ns() - dup[1] <= cfg.duplicate_window:
                    plan.outcomes.append((msg.reply, _Dup(dup[0])))
                    return
            expected_id = hdr("Nats-Expected-Last-Msg-Id")
            if expected_id and expected_id != (run.last_msg_id or ""):
                raise api_error("JSStreamWrongLastMsgIDErrF", id=run.last_msg_id or "")
            rollup = (hdr("Nats-Rollup") or "").lower() or None
            if rollup is not None:
                if not cfg.allow_rollup_hdrs:
                    raise api_error("JSStreamRollupFailedF", err="rollup not permitted")
                if rollup not in ("sub", "all"):
                    raise api_error(
                        "JSStreamRollupFailedF", err=f"rollup value invalid: {json.dumps(rollup)}"
                    )
        appended = cfg.retention != "interest" or self._has_interest(msg.subject)
        if ttl_error and appended:  # as the reference: after a publish no consumer takes is let go
            raise api_error("JSMessageTTLInvalidErr")
        if ttl_ns is not None and cfg.subject_delete_marker_ttl >= _SECOND and cfg.max_msgs_per_subject != 1:
            # as the reference: no shorter than the marker TTL, or a marker could be missed
            floor = cfg.subject_delete_marker_ttl - cfg.subject_delete_marker_ttl % _SECOND
            if ttl_ns < floor:
                ttl_ns = floor
                headers = replace_header(headers or b"", "Nats-TTL", str(floor // _SECOND))
        stored_size = self.store.size_of(msg.subject, headers, msg.payload)
        held = 0  # the subject's messages before this one: stored, and taken earlier in the run
        if appended and cfg.max_msgs_per_subject > 0:
            committed = run.committed.get(msg.subject)
            if committed is None:
                committed = run.committed[msg.subject] = await self.store.msgs_for_subject(msg.subject)
            held = committed + run.per_subject.get(msg.subject, 0)
        if cfg.discard == "new" and appended:
            await self._check_discard_new(run, msg.subject, stored_size, rollup is not None, held)
        now = time.time_ns()
        index = len(plan.ops)
        if not appended:
            # No consumer's filter takes it: the publish gets a sequence, the stream keeps nothing.
            plan.ops.append(SkipOp(run.last_seq + 1, now))
        else:
            try:
                plan.ops.append(Append(msg.subject, headers, msg.payload, now))
            except InvalidOperation:
                # "a.*" routes to a stream on "a.>" (a publish subject is not checked unless the
                # client is pedantic), but a stored subject is literal: refuse it clearly.
                err = f"invalid publish subject {msg.subject!r}"
                raise api_error("JSStreamStoreFailedF", err=err) from None
            run.msgs += 1
            run.bytes += stored_size
        if appended and (to := self.transforms.republish_subject(msg.subject)) is not None:
            last = await self._last_seq_for(msg.subject, plan, run)
            plan.republish.append(Republish(index, to, msg.subject, headers, msg.payload, now, last))
        run.last_seq += 1
        run.last_by_subject[msg.subject] = run.last_seq
        run.per_subject[msg.subject] = run.per_subject.get(msg.subject, 0) + 1
        # as the reference: the last message id is the last stored message's, empty without one
        run.last_msg_id = plan.last_msg_id = msg_id or ""
        if msg_id is not None:
            # memory only: the stored message's header is the durable record (load rebuilds)
            plan.dedup[msg_id] = (run.last_seq, now)
        if ttl_ns is not None:
            plan.ttls.append((run.last_seq, now + ttl_ns))
            plan.ops.append(SetMetaOp(f"{_TTL_PREFIX}{run.last_seq}", str(now + ttl_ns).encode()))
        elif ttl_never and appended:
            plan.nevers.append(run.last_seq)
            plan.ops.append(SetMetaOp(f"{_NEVER_PREFIX}{run.last_seq}", b""))
        if rollup:
            self._trim_now(plan)  # what the batch's earlier publishes left over their subjects' limit
        if rollup and cfg.discard == "old" and 0 < cfg.max_msgs < run.msgs:
            # as the reference: max_msgs applies as the message is stored, before its rollup
            plan.ops.append(PurgeOp(keep=cfg.max_msgs))
            run.msgs = cfg.max_msgs
            plan.removes = True
        if rollup == "sub":
            plan.ops.append(PurgeOp(subject=msg.subject, up_to_seq=run.last_seq))
            plan.removes = True
            plan.removed_subjects.add(msg.subject)
        elif rollup == "all":
            plan.ops.append(PurgeOp(up_to_seq=run.last_seq))
            plan.removes = True
        elif (
            appended
            and 0 < cfg.max_msgs_per_subject <= held
            and not (cfg.discard == "new" and cfg.discard_new_per_subject)
        ):
            # The per-subject limit goes into the same transaction as the append: a KV put is one fsync.
            plan.trims[msg.subject] = None
            plan.removes = True
            plan.removed_subjects.add(msg.subject)
        plan.outcomes.append((msg.reply, _Stored(run.last_seq, index if appended else -1)))

    def _trim_now(self, plan: _Batch) -> None:
        """Trim the subjects the batch took over max_msgs_per_subject to their newest messages.

        Deferred from each publish to the end of the batch (or to a removal inside it, such as a
        rollup, whose outcome depends on what is stored): one trim per subject after its appends
        leaves what a trim after each append would, and the store runs adjacent trims as one
        statement."""
        if plan.trims:
            keep = self.config.max_msgs_per_subject
            plan.ops.extend(PurgeOp(subject=s, keep=keep) for s in plan.trims)
            plan.trims.clear()

    async def _check_discard_new(
        self, run: _Running, subject: str, size: int, rollup: bool, held: int
    ) -> None:
        """Discard new: refuse a publish the limits have no room for, as the reference does. A
        subject at max_msgs_per_subject (``held`` messages before this one) is refused with
        discard_new_per_subject (unless it is a rollup); otherwise its oldest message makes room,
        so the stream does not grow in messages, nor in bytes if that oldest one is at least as
        large."""
        cfg = self.config
        replaces = False
        if 0 < cfg.max_msgs_per_subject <= held:
            if cfg.discard_new_per_subject and not rollup:
                raise api_error("JSStreamStoreFailedF", err="maximum messages per subject exceeded")
            replaces = True
        if cfg.max_msgs > 0 and run.msgs >= cfg.max_msgs and not replaces:
            raise api_error("JSStreamStoreFailedF", err="maximum messages exceeded")
        freed = 0  # bytes of the subject's oldest message, when we looked it up
        if cfg.max_bytes > 0 and run.bytes + size > cfg.max_bytes:
            oldest = await self.store.first_after(0, subject) if replaces else None
            freed = self._size(oldest) if oldest is not None else 0
            if freed < size:
                raise api_error("JSStreamStoreFailedF", err="maximum bytes exceeded")
        if replaces:  # what the batch's per-subject purge will take away
            run.msgs -= 1
            run.bytes -= freed

    def _size(self, m: StoredMsg) -> int:
        """A stored message's size as the stream's store counts it in ``bytes``."""
        return self.store.size_of(m.subject, m.headers, m.data)

    async def _last_seq_for(self, subject: str, plan: _Batch, run: _Running) -> int:
        if subject in run.last_by_subject:
            return run.last_by_subject[subject]
        last = await self.store.last_by_subject(subject)
        return last.seq if last else 0

    async def _enforce_limits(self, touched: Iterable[str] = ()) -> None:
        """Discard-old limits: drop the oldest messages past max_bytes, and past max_msgs and
        max_msgs_per_subject (for the ``touched`` subjects) when a batch has not already: a
        publish batch puts those into its own transaction, a reconfigure relies on this."""
        cfg = self.config
        ops: list[Op] = []
        # discard "new" refuses per-subject overflow only with discard_new_per_subject (checked in
        # _decide); in every other case the oldest messages of the subject make room.
        if cfg.max_msgs_per_subject > 0 and not (cfg.discard == "new" and cfg.discard_new_per_subject):
            for subj in touched:
                if await self.store.msgs_for_subject(subj) > cfg.max_msgs_per_subject:
                    ops.append(PurgeOp(subject=subj, keep=cfg.max_msgs_per_subject))
        if ops:
            await self.store.apply(ops)
            self._removed_messages(
                subjects=[op.subject for op in ops if isinstance(op, PurgeOp) and op.subject]
            )
            ops = []
        if cfg.discard != "old" or (cfg.max_msgs <= 0 and cfg.max_bytes <= 0):
            return
        st = await self.state()
        cut = cut_bytes = 0
        if cfg.max_msgs > 0 and st.msgs > cfg.max_msgs:
            # In chunks: a limit lowered by a million messages is not one read of them all
            # (nor one loop over them that holds the event loop).
            drop, start = st.msgs - cfg.max_msgs, st.first_seq
            while drop > 0:
                chunk = await self.store.range(start, limit=min(drop, SCAN_CHUNK))
                if not chunk:
                    break
                drop -= len(chunk)
                cut = start = chunk[-1].seq + 1
                cut_bytes += sum(self._size(m) for m in chunk)
                await anyio.lowlevel.checkpoint()
        if cfg.max_bytes > 0 and st.bytes - cut_bytes > cfg.max_bytes:
            # what max_msgs already cuts counts towards the bytes to drop
            excess, start = st.bytes - cut_bytes - cfg.max_bytes, max(cut, st.first_seq)
            while excess > 0:
                chunk = await self.store.range(start, limit=256)
                if not chunk:
                    break
                for m in chunk:
                    if cut and m.seq < cut:
                        continue
                    excess -= self._size(m)
                    cut = m.seq + 1
                    if excess <= 0:
                        break
                start = chunk[-1].seq + 1
                await anyio.lowlevel.checkpoint()
        if cut:
            await self.store.apply([PurgeOp(up_to_seq=cut)])
            self._removed_messages()

    # ------------------------------------------------------------------ API operations

    async def reconfigure(self, cfg: StreamConfig) -> None:
        """Take a new (already validated) config: new subjects, and limits that may have tightened."""
        async with self.lock:
            await self.drain()
            self.receiver.unsubscribe_all()
            old_retention, self.config = self.config.retention, cfg
            self.transforms = StreamTransforms.of(cfg.subject_transform, cfg.republish)
            self._predicted = None
            self.subscribe()
            self._state = None
            touched = set(await self.store.subjects_state(">")) if cfg.max_msgs_per_subject > 0 else set()
            await self._enforce_limits(touched)
            await self._expire()  # a new max_age applies at once, as in the reference
            self._reconfigured.set()
            if old_retention != "interest":
                # A stream turned to interest drops what its consumers acknowledged, and
                # everything when it has none (as the reference).
                await self.recheck_interest(acked_only=bool(self.consumers))

    async def purge(self, subject: str | None, seq: int | None, keep: int | None) -> int:
        async with self.lock:
            await self.drain()
            self._predicted = None
            ops: list[Op] = [PurgeOp(subject=subject, up_to_seq=seq, keep=keep)]
            sets_first = subject is None and seq is None and keep is None and not self.first_seq_set
            if sets_first:
                ops.append(SetMetaOp(FIRST_SEQ_SET_KEY, b"1"))  # as the reference: now it has one
            purged = (await self.store.apply(ops))[0]
            self.first_seq_set = self.first_seq_set or sets_first
            self._state = None
            st = await self.state()
            start = st.first_seq
            if subject is not None:
                m = await self.store.first_after(st.first_seq, subject)
                start = m.seq if m is not None else st.last_seq + 1  # the first left on it
            for c in self.consumers.values():
                # As the reference: a consumer whose filters lie within the purged subject moves
                # up to what is left on it; one that takes more than the purged subject (no
                # filter, or a wider one) to the stream's first message; others keep theirs.
                if subject is None or any(subjects.is_subset(f, subject) for f in c.filters):
                    c.purged(start, subject)
                elif not c.filters or any(subjects.is_subset(subject, f) for f in c.filters):
                    c.purged(st.first_seq, subject)
                else:
                    c.messages_removed(subjects=(subject,))
            return int(purged or 0)

    async def delete_msg(self, seq: int, erase: bool) -> bool:
        async with self.lock:
            await self.drain()
            self._predicted = None
            results = await self.store.apply(
                [
                    DeleteOp(seq, erase=erase),
                    DelMetaOp(f"{_TTL_PREFIX}{seq}"),
                    DelMetaOp(f"{_NEVER_PREFIX}{seq}"),
                ]
            )
            self._ttl.pop(seq, None)
            self._never.discard(seq)
            self._removed_messages(seqs=(seq,))
            return bool(results[0])

    async def seq_for_time(self, ts: int) -> int:
        """The first stored sequence whose time is at or after ``ts`` (Unix ns), or the next
        sequence when none is. A binary search over sequences (times grow with sequences, as
        the reference also assumes): a few point reads, not a walk over the stream."""
        st = await self.state()
        lo, hi = st.first_seq, st.last_seq + 1
        while lo < hi:  # the lowest sequence from which the first message is not older than ts
            mid = (lo + hi) // 2
            m = await self.store.first_after(mid)
            if m is None or m.ts >= ts:
                hi = mid
            else:
                lo = mid + 1
        m = await self.store.first_after(lo)
        return m.seq if m is not None else st.last_seq + 1

    async def get_msg(
        self, seq: int | None = None, last_by_subject: str | None = None, next_by_subject: str | None = None
    ) -> StoredMsg | None:
        if last_by_subject is not None:
            return await self.store.last_by_subject(last_by_subject)
        if seq is None:
            return None
        if next_by_subject is not None:
            return await self.store.first_after(seq, next_by_subject)
        return await self.store.get(seq)

    def direct_headers(self, msg: StoredMsg, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
        """The header block of a direct-get reply: the message's own headers, then the Nats-* fields."""
        items: list[tuple[str, str]] = []
        if msg.headers:
            with contextlib.suppress(HeaderError):
                items.extend(parse_headers(msg.headers).items)
        items += [
            ("Nats-Stream", self.name),
            ("Nats-Subject", msg.subject),
            ("Nats-Sequence", str(msg.seq)),
            ("Nats-Time-Stamp", rfc3339_nano(msg.ts)),
            *extra,
        ]
        return encode_headers(items)


@dataclass(slots=True)
class _Running:
    msgs: int
    bytes: int
    last_seq: int
    last_msg_id: str | None
    last_by_subject: dict[str, int] = field(default_factory=dict)
    per_subject: dict[str, int] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)  # per-subject counts read from the store


class _Dup(NamedTuple):
    seq: int


class _Stored(NamedTuple):
    """A publish that will be stored (or, for interest retention, only sequenced).

    ``seq`` is the predicted sequence; ``index`` the position of its Append in the batch's
    operations (-1 for a sequence-only SkipOp). The acknowledgement uses the store's result
    for the Append, so it is true even if a prediction was not. (NamedTuples, as one is made
    per publish.)
    """

    seq: int
    op_index: int


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity (Stream._sourced_flights)
class _Flight:
    """A decided batch on its way through the store."""

    plan: _Batch
    commit: Awaitable[list[Any]] | None = None  # the store's answer, when the batch has operations
    results: list[Any] | None = None
    error: StoreError | None = None
    held: tuple[int, int] = (0, 0)  # (messages, bytes) of the backlog it releases when answered
    # set once settled (submit_sourced's flights: by their source, or by a drain); None: not begun
    settling: asyncio.Event | None = None


def _done(commit: Awaitable[list[Any]]) -> bool:
    return isinstance(commit, asyncio.Future) and commit.done()


def _int(value: str) -> int:
    """A header's number as the reference reads it: digits only ("5 " is no number), -1 else."""
    return int(value) if value.isascii() and value.isdigit() else -1
