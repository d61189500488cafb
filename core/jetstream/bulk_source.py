"""A source read through the bulk read API when the upstream is a leafjet.

``BulkSourceWorker`` is a ``SourceWorker`` (sourcing.py) whose attempt first asks the upstream's
``<api>.LEAFJET.READ.<stream>`` (core/jetstream/bulk_read.py). A leafjet upstream answers with a
frame, and the attempt goes on in bulk mode; anything else (10003 "bad request", no responders,
silence) means the upstream is not a leafjet, and the attempt takes the consumer path as the
reference's sources do. The answer holds for the attempt; the next one asks again.

Bulk mode, per reply: the next request goes out at once (one request ahead, so the upstream reads
while we store), the reply's messages are stored with ONE ``submit_sourced`` (all of them and the
source's position in one store transaction), and the batch after it is submitted only once that
commit succeeded (``_flush``/``_settle``, as the consumer path) -- so exactly-once holds as
there: every attempt starts after the stored position. Requests long-poll (``WAIT_MS``) and
follow (``FOLLOW``): a source that is live gets each message as it is committed upstream, as
another reply to the same request, with no round trip in between; it asks again after the
request's last reply. A reply that does not start where the one before ended (one was lost on
the way) recreates the source, from the stored position. One that hears nothing for ``WAIT_MS`` +
``REPLY_GRACE`` is stalled and recreated. Flow control is the requests' byte bound: at most
``MAX_BYTES`` in flight per request (all its replies together), and one batch committing.

The upstream's ``Nats-Stream-Identity`` comes with every reply; when it changes (the upstream
stream was deleted and made again) the source starts over, as the consumer path does on 10225.
A start by time (``opt_start_time``, or a stream with messages of its own and no position) takes
the consumer path: the read API starts at a sequence.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from bisect import bisect_right
from typing import Any, TypeAlias

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from core.api_errors import ApiError, api_error
from core.jetstream.bulk_read import (
    H_ENCODING,
    H_FIRST,
    H_IDENTITY,
    H_LAST,
    H_MORE,
    H_READ,
    H_RETENTION,
    H_STREAM_LAST,
    READ_PATH,
    TYPE_NAME,
    VERSION,
)
from core.jetstream.models import API_TYPE_PREFIX
from core.jetstream.source_health import GAP_SKIPPED, GAP_STARTED_PAST
from core.jetstream.sourced_batch import SourcedColumns
from core.jetstream.sourcing import (
    KICK_STALE,
    STREAM_SOURCE,
    Delivery,
    MirrorWorker,
    SourceState,
    SourceWorker,
    _Receiver,
    _Recreate,
    _remote_error,
    mirrored_headers,
    sourced_headers,
    sync_subject,
)
from core.jetstream.transforms import SubjectTransform, first_match
from core.protocol.headers import slice_header
from core.protocol.readframe import FrameError, ReadFrame, decode_frame, decompress_frame
from core.server.internal import InboundMsg

log = logging.getLogger("leafjet.sourcing")

WAIT_MS = 4000  # a request's long poll
# Replies one request may get (the read API's ``follow``): a live source asks again only after
# this many commits upstream. Below the reply inbox's capacity (RX_CAPACITY), so the replies
# of a request that the reader has not taken yet never overflow it.
FOLLOW = 200
RX_CAPACITY = 256
REPLY_GRACE = 10.0  # s past its wait a reply may take (a loaded upstream, a slow link)
PROBE_WAIT = 10.0  # s the first request of an attempt is waited for before taking the consumer path
# Asked per request: the bytes all its replies may carry together (each reply within the
# upstream's max_payload; an older leafjet clamps the whole request to one reply). A catch-up
# then costs one round trip per MAX_BYTES instead of one per max_payload.
MAX_BYTES = 16 << 20
MAX_MSGS = 100_000
# Replies read but not stored yet (flow control: at most this many x the upstream's max_bytes,
# plus the one being stored); what is queued when the writer looks goes into one transaction,
# up to MERGE_MAX_MSGS.
QUEUED_REPLIES = 4
MERGE_MAX_MSGS = 20_000
OFFLOAD_ROWS = 2048  # a reply with more new messages than this becomes columns on a worker thread


# What a reply's frame becomes: a source's columns, a mirror's deliveries (stored one by one).
Batch: TypeAlias = list[Delivery] | SourcedColumns


class _NotLeafjet(Exception):
    """The upstream does not serve the read API: take the consumer path."""


class BulkSourceWorker(SourceWorker):
    """A source that reads a leafjet upstream through the bulk read API, and any other through
    the reference's consumer path."""

    bulk = False  # whether the current attempt runs in bulk mode (shown for tests and benches)
    # set when the reader queues a batch or the oldest batch in flight commits: wakes an idle writer
    _stir: asyncio.Event
    _started_at = 0  # the upstream sequence the current bulk attempt started after
    FOLLOWS_IDENTITY = True  # a source starts over when the upstream's identity changes

    def _read_subject(self) -> str:
        return self._api_subject(f"{'.'.join(READ_PATH)}.{self.upstream}")

    def _filters(self) -> list[str]:
        flt = self.spec.get("filter_subject") or ""
        srcs = [t.get("src", "") for t in self.spec.get("subject_transforms") or []]
        return [f for f in [flt, *srcs] if f and f != ">"]

    async def _attempt(self) -> None:
        start = self._start(await self.stream.state())
        policy = start.get("deliver_policy")
        if policy not in ("all", "by_start_sequence"):
            self.bulk = False
            await super()._attempt()
            return
        seq = start.get("opt_start_seq", 1) if policy == "by_start_sequence" else 1
        try:
            await self._bulk_attempt(max(1, int(seq)))
        except _NotLeafjet as why:
            log.debug("stream %s source %s: consumer path (%s)", self.stream.name, self.upstream, why)
            self.bulk = False
            # from what is stored (the bulk attempt settled what it submitted)
            self.sseq = self.committed
            if self.state is not SourceState.WAITING:
                self._to(SourceState.WAITING)
            await super()._attempt()

    def _read_body(self, seq: int) -> bytes:
        body: dict[str, Any] = {"v": VERSION, "seq": seq, "max_msgs": MAX_MSGS, "max_bytes": MAX_BYTES}
        body["wait_ms"] = WAIT_MS
        body["follow"] = FOLLOW
        flt = self._filters()
        if flt:
            body["filter"] = flt
        return json.dumps(body, separators=(",", ":")).encode()

    async def _bulk_attempt(self, seq: int) -> None:
        account = self.stream.account
        subject = self._read_subject()
        rx = _Receiver(f"source:{self.stream.name}:{self.upstream}", account, RX_CAPACITY)
        inbox = sync_subject("$JSC.R")
        n = 0

        def ask(at: int) -> str:
            nonlocal n
            n += 1
            reply = f"{inbox}.{n}"
            self._last_request = time.monotonic()
            if not account.publish(subject, reply, None, self._read_body(at)):
                err = api_error(self.SETUP_ERROR, err=f"no responders for {subject}")
                raise _Recreate("no responders", fail=True, error=err)
            return reply

        self._to(SourceState.CREATING)
        try:
            rx.subscribe(inbox + ".*")
            try:
                pending = ask(seq)
            except _Recreate:
                raise _NotLeafjet("no responders for the read API") from None
            msg = await self._reply(rx, pending, PROBE_WAIT, True)
            self._to(SourceState.ACTIVE)
            self.bulk = True
            # the error and the backoff stay until a valid frame comes (_heard_valid in _take)
            self._spoke = False
            self._started_at = self.sseq  # a first message past it: the upstream lost those
            send, receive = anyio.create_memory_object_stream[Batch](QUEUED_REPLIES)
            self._stir = asyncio.Event()
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._store_batches, receive)
                    async with send:
                        expect = seq  # where the next reply starts: where we asked, or the last ended
                        while True:
                            expect = _check_follows(msg, expect)
                            covered, batch = await self._take(msg)
                            if expect == 0:  # the request's last reply
                                pending = ask(covered + 1)  # one ahead: the upstream reads while we store
                                expect = covered + 1
                            if batch:
                                await send.send(batch)  # waits while QUEUED_REPLIES are queued
                                self._stir.set()  # an idle writer stores it before settling more
                            msg = await self._reply(rx, pending, WAIT_MS / 1000 + REPLY_GRACE, False)
            except BaseExceptionGroup as group:  # the reader's or the writer's failure, as it was
                raise _first(group) from None
        finally:
            rx.close()
            await self._settle_last()

    async def _store_batches(self, receive: MemoryObjectReceiveStream[Batch]) -> None:
        """The writer: stores what the reader queued, everything queued at once, so the batches
        grow while the store is busy. Up to PIPELINE_DEPTH batches are in flight (``_flush``:
        each commits only if the one before it did), and they are settled when nothing more is
        queued, so ``committed`` catches up when idle (``_settle_while_idle``)."""
        async with receive:
            async for batch in receive:
                while len(batch) < MERGE_MAX_MSGS:
                    try:
                        more = receive.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    batch += more  # type: ignore[operator]  # a worker's batches are of one kind
                await self._flush(batch)
                await self._settle_while_idle(receive)

    async def _settle_while_idle(self, receive: MemoryObjectReceiveStream[Batch]) -> None:
        """While nothing is queued: settle the batches in flight, each as soon as its commit
        lands (the stream's consumers see its messages then). A batch the reader queues
        meanwhile is stored first: submitted behind those in flight, it commits right after
        them, where waiting for them all here held it a whole commit (an fsync) plus a turn of
        the loop -- a live source's every message, on a busy hub."""
        stir = self._stir
        while self._flights and receive.statistics().current_buffer_used == 0:
            commit = self._flights[0][0].commit
            if isinstance(commit, asyncio.Future) and not commit.done():
                stir.clear()
                commit.add_done_callback(lambda _f: stir.set())
                await stir.wait()  # the commit landed, or the reader queued a batch
                continue
            await self._settle_oldest()

    async def _reply(self, rx: _Receiver, pending: str, wait: float, probe: bool) -> InboundMsg:
        """The reply to ``pending``; a probe that gets none, or a reply that is not the read
        API's, is no leafjet (``_NotLeafjet``)."""
        deadline = time.monotonic() + wait
        while True:
            with anyio.move_on_after(min(1.0, max(0.0, deadline - time.monotonic()))):
                async for m in rx.inbox:
                    if type(m) is not InboundMsg or m.subject != pending:
                        continue  # (a run: deliveries, never a read's reply)
                    if m.headers and slice_header(m.headers, H_READ) == str(VERSION):
                        retention = slice_header(m.headers, H_RETENTION)
                        if retention and retention != "limits":
                            # a read removes nothing from a work queue: ADR-60's durable does
                            raise _NotLeafjet(f"the upstream's retention is {retention}")
                        if probe:
                            self.requests += 1  # the attempt's one "create" (leafjet info)
                        return m
                    error, leafjet = _read_error(self, m.payload)
                    if not leafjet:  # the reference, or anything else: not our read API
                        if probe:
                            raise _NotLeafjet(f"the read API answered {m.payload[:200]!r}")
                        raise _Recreate("invalid read reply", fail=True, error=error)
                    if error.err_code == 10054:  # a message too large for a reply
                        raise _NotLeafjet("a message too large for the read API")
                    if probe:
                        self.requests += 1
                    # a leafjet's refusal (its stream is missing: 10059): the source's error
                    raise _Recreate("read refused", fail=True, error=error)
            if self.stream.failed is not None:
                raise _Recreate("stream failed")
            now = time.monotonic()
            if now >= deadline:
                if probe:
                    raise _NotLeafjet("no answer from the read API")
                why = f"no reply from the upstream's read API for {wait:.0f} s"
                raise _Recreate("stalled", error=api_error(self.SETUP_ERROR, err=why))
            if self._kicked and now - self._heard > KICK_STALE:
                raise _Recreate("link came up, source quiet")

    async def _take(self, msg: InboundMsg) -> tuple[int, Batch]:
        """A reply's messages as deliveries (with ``Nats-Stream-Source``), and the last upstream
        sequence it covers. Raises _Recreate for a reply that is no valid frame, and for an
        upstream that was made again (its identity changed)."""
        h = msg.headers or b""
        ident = slice_header(h, H_IDENTITY) or "" if self.FOLLOWS_IDENTITY else ""
        if ident and self.ident and ident != self.ident:
            log.warning(
                "stream %s: source stream %s was recreated, resetting source state",
                self.stream.name,
                self.upstream,
            )
            self.reset, self.ident = True, ""
            raise _Recreate("upstream recreated")
        if self.reset:  # the upstream is another stream now: its sequences start over
            self.sseq = self.committed = 0
            self._stored = None  # what is stored is the old upstream's position
            self.reset = False
        self.ident = ident
        try:
            last, stream_last = (int(slice_header(h, k) or "") for k in (H_LAST, H_STREAM_LAST))
            data = msg.payload
            if slice_header(h, H_ENCODING) == "zstd":
                data = decompress_frame(data)
            frame = decode_frame(data)
        except (ValueError, FrameError) as e:
            err = api_error(self.SETUP_ERROR, err=f"invalid read reply: {e}")
            raise _Recreate("bad read reply", fail=True, error=err) from None
        self._heard = time.monotonic()
        self.heard_ns = time.time_ns()
        self._kicked = False  # the upstream answers: a link's kick is spent
        if not self._spoke:
            self._heard_valid()
        self.lag = max(0, stream_last - last)
        batch = await self._batch(frame)
        return max(last, self.sseq), batch

    async def _batch(self, frame: ReadFrame) -> Batch:
        """``_frame_batch``, with the columns of a frame of more than ``OFFLOAD_ROWS`` new
        messages built on a worker thread: a full reply's took tens of milliseconds, which the
        hub's event loop spent on nothing else."""
        k = self._first_new(frame)
        build = (frame, k, self._iname_parts, self.ident, self.transforms)
        if len(frame) - k > OFFLOAD_ROWS:
            return self._took(await anyio.to_thread.run_sync(_source_columns, *build))
        return self._took(_source_columns(*build))

    def _frame_batch(self, frame: ReadFrame) -> Batch:
        """The frame's messages past ``sseq`` as columns, each with its ``Nats-Stream-Source``
        header (``_source_columns``); moves ``sseq`` to the last."""
        return self._took(
            _source_columns(frame, self._first_new(frame), self._iname_parts, self.ident, self.transforms)
        )

    def _first_new(self, frame: ReadFrame) -> int:
        """The index of the frame's first message past ``sseq``; reports the jumps after it."""
        seqs = frame.seqs
        k, n = bisect_right(seqs, self.sseq), len(seqs)  # a frame's sequences increase
        if k < n and (seqs[k] != self.sseq + 1 or seqs[n - 1] - seqs[k] != n - 1 - k):
            prev = self.sseq  # a jump somewhere: report each, as the consumer path does
            for seq in seqs[k:n]:
                if seq > prev + 1:
                    self._bulk_gap(prev, seq)
                prev = seq
        return k

    def _took(self, cols: SourcedColumns) -> SourcedColumns:
        if cols:
            self.sseq = cols.sseqs[-1]
        return cols

    def _bulk_gap(self, after: int, next_seq: int) -> None:
        """Upstream sequences a frame skips were removed before we read them (without a filter;
        ``_gap`` tells): reported as the consumer path reports them -- a first message past
        where the attempt started as the consumer's start, a later jump as a skip."""
        reason = GAP_STARTED_PAST if after == self._started_at else GAP_SKIPPED
        self._gap(after, next_seq, reason)


def _source_columns(
    frame: ReadFrame,
    k: int,
    iname_parts: list[str],
    ident: str,
    transforms: tuple[SubjectTransform | None, ...],
) -> SourcedColumns:
    """The frame's messages from index ``k`` as a source's columns, each with the
    ``Nats-Stream-Source`` header (``iname_parts``: name, filter, dest; ``ident``: the upstream's
    identity) and its subject transformed. This is the hub's work per message on the way in,
    so each column is one comprehension over the frame's (no object or statement per message),
    and the header of a message that came without headers (most) is formatted from three
    constant pieces -- the bytes ``sourced_headers`` would make. Touches nothing but its
    arguments: a large frame's run on a worker thread."""
    seqs, n = frame.seqs, len(frame)
    if k >= n:  # all taken already (a reply to a request sent before a commit moved us)
        return SourcedColumns([], [], [], [], [])
    name, flt, dest = iname_parts
    ident_tail = f" {ident}" if ident else ""
    head = f"NATS/1.0\r\n{STREAM_SOURCE}: {name} ".encode()
    mid = f" {flt} {dest} ".encode()
    tail = ident_tail.encode() + b"\r\n\r\n"
    so, sb = frame.subject_offsets, bytes(frame.subject_bytes)
    ho, hb = frame.header_offsets, bytes(frame.header_bytes)
    do, db = frame.data_offsets, bytes(frame.data_bytes)
    sseqs = seqs[k:n].tolist()
    raws = [sb[a:b] for a, b in zip(so[k:n], so[k + 1 : n + 1], strict=True)]
    upstream = [r.decode("utf-8", "surrogateescape") for r in raws]
    headers: list[bytes | None] = [
        b"%s%d%s%s%s" % (head, seq, mid, raw, tail)
        if h0 == h1
        else sourced_headers(hb[h0:h1], f"{name} {seq} {flt} {dest} {subject}{ident_tail}")
        for seq, raw, subject, h0, h1 in zip(sseqs, raws, upstream, ho[k:n], ho[k + 1 : n + 1], strict=True)
    ]
    payloads = [db[a:b] for a, b in zip(do[k:n], do[k + 1 : n + 1], strict=True)]
    # the header names the upstream's subject, the stream stores the transformed one
    subjects = [first_match(transforms, x) for x in upstream] if transforms else upstream
    return SourcedColumns(sseqs, subjects, headers, payloads, frame.timestamps[k:n].tolist())


def _check_follows(msg: InboundMsg, expect: int) -> int:
    """Check that a reply starts at ``expect`` (a reply lost on the way would leave a hole that
    looks like messages removed upstream); returns where the request's next reply starts, or 0
    when this was its last (no ``Leafjet-Read-More``: an older server's one reply, too)."""
    h = msg.headers or b""
    try:
        first = int(slice_header(h, H_FIRST) or "")
        last = int(slice_header(h, H_LAST) or "")
    except ValueError:
        return 0  # not a frame's reply: _take says why
    if first != expect:
        raise _Recreate(f"a read reply starts at {first}, expected {expect}: one was lost")
    return last + 1 if slice_header(h, H_MORE) == "1" else 0


def _first(group: BaseExceptionGroup) -> BaseException:
    """The failure that ended a task group: the first that is not a cancellation."""
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            return _first(e)
        if not isinstance(e, anyio.get_cancelled_exc_class()):
            return e
    return group.exceptions[0]


def _read_error(worker: SourceWorker, payload: bytes) -> tuple[ApiError, bool]:
    """An error reply's error, and whether a leafjet read API sent it (its response type)."""
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return _remote_error(body["error"]), body.get("type") == API_TYPE_PREFIX + TYPE_NAME
    return api_error(worker.SETUP_ERROR, err="invalid read reply"), False


class BulkMirrorWorker(BulkSourceWorker, MirrorWorker):
    """A mirror of a leafjet upstream read through the bulk read API; the reference's consumer
    path for any other (``MirrorWorker``: its start, storing and gap rules). In bulk mode each
    message is stored under its upstream sequence with its upstream timestamp
    (``ingest_mirrored``): sequences a frame skips (deleted or expired upstream) become deleted
    sequences, as the consumer path's skips do. A mirror sends no identity on the consumer
    path, and ignores it here too."""

    FOLLOWS_IDENTITY = False

    async def _batch(self, frame: ReadFrame) -> Batch:
        return self._frame_batch(frame)

    def _frame_batch(self, frame: ReadFrame) -> Batch:
        floor = prev = self.sseq
        transforms = self.transforms
        batch: list[Delivery] = []
        append = batch.append
        for seq, subject, headers, data, ts in frame.rows():
            if seq <= floor:
                continue
            if seq > prev + 1:
                self._bulk_gap(prev, seq)
            prev = seq
            stored = first_match(transforms, subject) if transforms else subject
            append(Delivery(seq, stored, mirrored_headers(headers), data, ts))
        self.sseq = prev
        return batch
