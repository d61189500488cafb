"""The bulk read API: ``$JS.API.LEAFJET.READ.<stream>`` answers with many messages per reply.

A leafjet extension (the reference answers it, as any unknown API subject, with 400 / 10003
"bad request"; a reader learns from that that the server is no leafjet). It reaches across
domains as every API subject does (``$JS.<domain>.API.LEAFJET.READ.<stream>``). Its users: a
stream sourcing another leafjet's stream (core/jetstream/bulk_source.py), and any client that
wants a stream's messages fast and in columns (a Spark source).

Request (JSON, version 1)::

    {"v": 1, "seq": N, "max_msgs": M, "max_bytes": B, "filter": ["subj", ...],
     "wait_ms": W, "compress": "zstd", "follow": R}

``seq`` (>= 1) is where to start; ``max_msgs`` and ``max_bytes`` bound the reply (clamped to
``MAX_MSGS`` and to ``MAX_BYTES`` / the server's max_payload less room for the reply's headers --
the reply ceiling -- or, for a following request, to ``MAX_FOLLOW_BYTES`` for all its replies
together; the first message is sent even when it alone is larger); ``filter`` (optional, at most
``MAX_FILTERS`` subjects, wildcards allowed) keeps the matching messages; ``wait_ms`` (optional,
at most ``MAX_WAIT_MS``) holds a request that finds nothing at or after ``seq`` until a message
arrives or the time runs out; ``compress: "zstd"`` compresses the frame itself (for a client whose
link is not compressed); ``follow`` (optional, at most ``MAX_FOLLOW``) lets the request be answered
up to R times (below). Unknown fields are ignored, so a later minor addition does not break an
older server; a ``v`` other than 1 is refused.

Following (``follow: R``, a live reader): after a reply with messages, the request stays open and
the next commit is sent as another reply on the same subject, each one starting where the one
before it ended, without a request in between (a round trip each message waited for). All the
replies together stay within the request's ``max_msgs`` and ``max_bytes`` (the first message of a
reply may go past what is left of them, as a first message may go past ``max_bytes``) and its
``wait_ms`` (counted from the request). Every reply but the request's last carries
``Leafjet-Read-More: 1``; the last is the one that reaches R replies or the budget, or an empty one
when the time runs out. A reader catching up uses the same: a reply cut by the reply ceiling
while the request has budget left is followed at once by the next (the request's ``max_bytes``
is the credit, in bytes, of one round trip), and between two such replies the server waits for
a receiver the reply before took past its high-water mark (a slow link) to drain, so a catch-up
never overflows a link.
A reader asks again after the last, and checks that each reply starts where the one before
ended (``Leafjet-Read-First``): one lost on the way is a gap it must not paper over. An older
server ignores ``follow`` and answers once, without the header.

Reply: one message. Headers ``Leafjet-Read: 1``, ``Leafjet-Read-First`` and ``Leafjet-Read-Last``
(the sequences the reply covers: every message of the stream in ``[first, last]`` that matches
the filter is in it, so the next request asks from ``last + 1``, also across deleted and
filtered-out ranges; ``last = first - 1`` when it covers nothing), ``Leafjet-Stream-Last`` (the
stream's last sequence, for lag), ``Nats-Stream-Identity`` (as a consumer create answers it: a
stream deleted and made again has another), and ``Leafjet-Read-Encoding: zstd`` when
compressed. The body is a frame (core/protocol/readframe.py). Errors are the API's JSON:
10025 for a body that is no JSON, 10003 for a bad request, 10059 for an unknown stream, 10054
when the first message at ``seq`` alone is too large for a reply (max_payload less 4 KiB).

Versioning: the request's ``v`` and the reply's ``Leafjet-Read`` name the API version; a change
that an older peer would misread gets a new version, and a server answers a version it does not
know with 10003, which makes a reader fall back (as it does against the reference).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import anyio

from core import subjects
from core.api_errors import ApiError, api_error
from core.errors import StoreError
from core.jetstream.models import decode_request, error_response
from core.jetstream.sourcing import stream_identity
from core.jetstream.task_owner import TaskOwner
from core.protocol.headers import encode_headers
from core.protocol.readframe import compress_frame, encode_columns
from core.store.api import StoredMsg
from core.store.columns import EMPTY, MsgColumns, columns_of, concat

if TYPE_CHECKING:
    from core.jetstream.engine import AccountJetStream, JetStream
    from core.jetstream.stream import Stream
    from core.server.mailbox import Drains

log = logging.getLogger("leafjet.jetstream.read")

VERSION = 1
READ_PATH = ("LEAFJET", "READ")
TYPE_NAME = "leafjet_read_response"
MAX_MSGS = 100_000
MAX_BYTES = 8 << 20
MAX_FILTERS = 256
MAX_WAIT_MS = 60_000
MAX_FOLLOW = 1000  # replies to one request (``follow``)
# What the replies to one following request may carry together (each reply stays within the
# reply ceiling, ``BulkReads.max_bytes``): half the default max_pending of the link they cross,
# and the follow loop waits for receivers past their high-water mark before each reply.
MAX_FOLLOW_BYTES = 32 << 20
ROW_OVERHEAD = 8 + 8 + 3 * 4  # a row's sequence, timestamp and three offsets in the frame
HEADER_ROOM = 4096  # what the reply's headers and the frame's fixed part may take
# At most this many reads run at once per account (each one holds its frame in memory); more
# wait their turn. At most MAX_PARKED requests wait for messages (wait_ms); past it a request
# that finds nothing is answered at once, as if its wait had run out. At most MAX_OPEN requests
# are taken and not yet answered (each is a task); past it a request is refused at once with
# 10167 "too many requests", as the reference refuses direct gets it cannot keep up with.
MAX_CONCURRENT = 8
MAX_PARKED = 1024
MAX_OPEN = 2 * MAX_PARKED
SCAN_ROWS = 16_384  # rows looked at per request when several filters are matched here
# A reply larger than this is built (and compressed) on a worker thread: joining a frame of a
# few MiB, and more so compressing it, would hold the event loop for milliseconds.
OFFLOAD_BYTES = 256 << 10

H_READ = "Leafjet-Read"
H_FIRST = "Leafjet-Read-First"
H_LAST = "Leafjet-Read-Last"
H_STREAM_LAST = "Leafjet-Stream-Last"
H_ENCODING = "Leafjet-Read-Encoding"
H_MORE = "Leafjet-Read-More"  # "1": another reply to this request follows (``follow``)
H_IDENTITY = "Nats-Stream-Identity"
# The stream's retention: a source reads a work-queue or interest stream through ADR-60's
# flow-control durable instead (a read removes nothing; the durable's acks do).
H_RETENTION = "Leafjet-Retention"


@dataclass(frozen=True, slots=True)
class ReadRequest:
    seq: int
    max_msgs: int
    max_bytes: int
    filters: tuple[str, ...] = ()  # empty: every subject
    wait_ms: int = 0
    compress: bool = False
    follow: int = 0  # replies the request may get (0 and 1: one)


def _positive(body: dict[str, Any], key: str, default: int | None, top: int) -> int:
    value = body.get(key, default)
    if type(value) is not int or value < 1:
        raise api_error("JSBadRequestErr")
    return min(value, top)


def parse_read_request(payload: bytes, max_bytes: int = MAX_BYTES) -> ReadRequest:
    """A version-1 request, validated and clamped (``max_bytes``: the server's own ceiling);
    raises the API's errors (10025 no JSON, 10003 anything else wrong)."""
    body = decode_request(payload)
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise api_error("JSBadRequestErr")
    seq = _positive(body, "seq", None, (1 << 63) - 1)
    max_msgs = _positive(body, "max_msgs", MAX_MSGS, MAX_MSGS)
    wait = body.get("wait_ms", 0)
    if type(wait) is not int or wait < 0:
        raise api_error("JSBadRequestErr")
    flt = body.get("filter")
    filters: tuple[str, ...] = ()
    if flt is not None:
        if (
            not isinstance(flt, list)
            or len(flt) > MAX_FILTERS
            or not all(isinstance(f, str) and subjects.is_valid_subject(f) for f in flt)
        ):
            raise api_error("JSBadRequestErr")
        filters = () if ">" in flt else tuple(dict.fromkeys(flt))
    compress = body.get("compress")
    if compress not in (None, "", "zstd"):
        raise api_error("JSBadRequestErr")
    follow = body.get("follow", 0)
    if type(follow) is not int or follow < 0:
        raise api_error("JSBadRequestErr")
    # a following request's replies together may carry up to MAX_FOLLOW_BYTES, each one within
    # the server's reply ceiling: a catch-up gets a run of replies per round trip
    ceiling = max(max_bytes, MAX_FOLLOW_BYTES) if follow > 1 else max_bytes
    nbytes = _positive(body, "max_bytes", max_bytes, ceiling)
    return ReadRequest(
        seq, max_msgs, nbytes, filters, min(wait, MAX_WAIT_MS), compress == "zstd", min(follow, MAX_FOLLOW)
    )


def _row_size(m: StoredMsg) -> int:
    """What a message takes of a request's ``max_bytes``."""
    return len(m.subject) + (len(m.headers) if m.headers else 0) + len(m.data) + ROW_OVERHEAD


def _matches(filters: tuple[str, ...], subject: str) -> bool:
    return any(subjects.match(f, subject) for f in filters)


async def read_range(
    stream: Stream, req: ReadRequest, hard_limit: int = MAX_BYTES
) -> tuple[MsgColumns, int, int]:
    """The messages a request gets: ``(columns, last covered, stream last)``. Reads by sequence
    (the store's ``read_columns``: columns built by the store, off the event loop for large
    ranges) in chunks sized from the mean message, until ``max_msgs``, ``max_bytes`` or the
    stream's last sequence as it stood at the start. The first message goes even past
    ``max_bytes``, but never past ``hard_limit`` (what a reply can carry across a link): a
    message that large raises 10054, and the reader takes another way to it (a source: the
    consumer path)."""
    store = stream.store
    st = await store.state()
    end = st.last_seq
    start = max(req.seq, 1)
    if start > end:
        return EMPTY, start - 1, end
    mean = max(64, st.bytes // st.msgs) if st.msgs else 1024
    if len(req.filters) > 1:
        msgs, last = await _read_matching(stream, req, start, end, mean, hard_limit)
        return columns_of(msgs), last, end
    single = req.filters[0] if req.filters else None
    # a row's share of a reply: the stored mean less what the store counts per message beyond
    # subject, headers and data, plus the frame's per-row columns -- so one chunk fills a reply
    row = max(1, mean - store.size_of("", None, b"")) + ROW_OVERHEAD
    parts: list[MsgColumns] = []
    budget, want, pos = req.max_bytes, req.max_msgs, start
    while True:
        # never more rows than there are sequences left up to ``end``: a live read (a message or
        # a few past the reader's position) is then small enough for the store to read on the
        # loop (its point reads), not as a pool job -- a thread hop there and back per commit
        limit = max(1, min(want, budget // row + 1, end - pos + 1))
        cols, covered = await store.read_columns(pos, end, limit, single)
        n = len(cols)
        fit = cols.fitting(budget, ROW_OVERHEAD)
        if not parts and n:
            if cols.bytes_before(1, ROW_OVERHEAD) > hard_limit:
                raise api_error("JSStreamMessageExceedsMaximumErr")
            fit = max(fit, 1)  # the first message goes even when it alone is past max_bytes
        if fit < n:  # the byte bound cuts this chunk: the reply covers up to the first row left out
            parts.append(cols.head(fit))
            return concat(parts), cols.seqs[fit] - 1, end
        parts.append(cols)
        want -= n
        budget -= cols.bytes_before(n, ROW_OVERHEAD)
        if covered >= end or want <= 0 or budget <= 0:
            return concat(parts), covered, end
        if n:  # the next chunk is sized from what this one held
            row = max(1, cols.bytes_before(n, ROW_OVERHEAD) // n)
        pos = covered + 1


async def _read_matching(
    stream: Stream, req: ReadRequest, start: int, end: int, mean: int, hard_limit: int
) -> tuple[list[StoredMsg], int]:
    """``read_range`` for several filters, matched here: at most ``SCAN_ROWS`` rows looked at."""
    store = stream.store
    out: list[StoredMsg] = []
    budget = req.max_bytes
    scanned = 0
    pos = start
    while pos <= end:
        want = req.max_msgs - len(out)
        limit = min(SCAN_ROWS, max(256, min(want, budget // (mean + ROW_OVERHEAD) + 1)))
        chunk = await store.range(pos, end, limit=limit)
        if not chunk:
            return out, end
        for m in chunk:
            if not _matches(req.filters, m.subject):
                continue
            size = _row_size(m)
            if out and size > budget:
                return out, m.seq - 1
            if size > hard_limit:
                raise api_error("JSStreamMessageExceedsMaximumErr")
            out.append(m)
            budget -= size
            if len(out) >= req.max_msgs:
                return out, m.seq
        scanned += len(chunk)
        if len(chunk) < limit:
            return out, end  # the store had no more up to end
        pos = chunk[-1].seq + 1
        if budget <= 0 or scanned >= SCAN_ROWS:
            return out, chunk[-1].seq
    return out, end


def frame_of(cols: MsgColumns) -> bytes:
    """``cols`` as a version-1 frame (core/protocol/readframe.py)."""
    return encode_columns(
        len(cols),
        cols.seqs,
        cols.timestamps,
        (cols.subject_offsets, cols.subjects),
        (cols.header_offsets, cols.headers),
        (cols.data_offsets, cols.data),
    )


def build_reply(
    cols: MsgColumns,
    first: int,
    last: int,
    stream_last: int,
    identity: str,
    retention: str = "limits",
) -> tuple[bytes, bytes]:
    """The reply's headers and (uncompressed) frame."""
    frame = frame_of(cols)
    headers = [
        (H_READ, str(VERSION)),
        (H_FIRST, str(first)),
        (H_LAST, str(last)),
        (H_STREAM_LAST, str(stream_last)),
        (H_IDENTITY, identity),
        (H_RETENTION, retention),
    ]
    return encode_headers(headers), frame


class BulkReads(TaskOwner):
    """Serves the account's read requests: each in a task of its own (a long poll must not hold
    the API's queue), at most ``MAX_CONCURRENT`` reading at once, at most ``MAX_PARKED``
    waiting for messages, at most ``MAX_OPEN`` in all. Owned by JetStream's task group (``run``)."""

    def __init__(self, js: JetStream) -> None:
        super().__init__()
        self.js = js
        self._limiter = anyio.CapacityLimiter(MAX_CONCURRENT)
        self.parked = 0
        self.open = 0  # requests started and not yet answered
        self.served = 0

    def max_bytes(self) -> int:
        return max(1024, min(MAX_BYTES, self.js.server.config.max_payload - HEADER_ROOM))

    def start(self, ajs: AccountJetStream, stream: Stream, req: ReadRequest, reply: str) -> None:
        if self._tg is None:
            raise api_error("JSStreamGeneralErrorF", err="bulk reads are not being served")
        if self.open >= MAX_OPEN:
            raise api_error("JSStreamTooManyRequests")
        self.open += 1
        self._tg.start_soon(self._serve, ajs, stream, req, reply)

    async def _serve(self, ajs: AccountJetStream, stream: Stream, req: ReadRequest, reply: str) -> None:
        try:
            await self._answer(ajs, stream, req, reply)
        except Exception as e:  # one failed read ends that read, answered with an error
            err = e if isinstance(e, ApiError) else api_error("JSStreamGeneralErrorF", err=_why(e))
            if not isinstance(e, ApiError | StoreError):
                log.exception("bulk read of %s failed", stream.name)
            body = json.dumps(error_response(TYPE_NAME, err), separators=(",", ":")).encode()
            ajs.account.publish(reply, None, None, body)
        finally:
            self.open -= 1

    async def _answer(self, ajs: AccountJetStream, stream: Stream, req: ReadRequest, reply: str) -> None:
        """Answer ``req``: once, or with ``follow`` once per commit that brings more, each
        reply going on from where the last ended, within the request's budget and time."""
        deadline = anyio.current_time() + req.wait_ms / 1000
        left = max(1, req.follow) if req.wait_ms else 1  # following is waiting for more
        while True:
            sent, last, size, more, fed = await self._answer_once(ajs, stream, req, reply, deadline, left > 1)
            left -= 1
            if not more:
                return  # the request's last reply went out
            req = replace(req, seq=last + 1, max_msgs=req.max_msgs - sent, max_bytes=req.max_bytes - size)
            if fed and not await self._wait_drained(fed):
                # Still past its high-water mark after write_deadline: the next reply (the one
                # the last promised) is the request's last, and the reader asks again a round
                # trip later. Going on fed a link that does not drain up to its max_pending (a
                # slow-consumer close of the whole link: a max_pending below the request's
                # credit, or several runs on one link).
                left = 1

    async def _wait_drained(self, fed: set[Drains]) -> bool:
        """Back-pressure between the replies of one request (a catch-up sends many back to back):
        wait, bounded by write_deadline, until the receivers the last reply took past their
        high-water mark (a link whose peer reads slower than we read the store) drained, as a
        client's reader does after its publishes (core/server/output.py). False when the time
        ran out first."""
        with anyio.move_on_after(self.js.server.config.write_deadline) as scope:
            for receiver in fed:
                await receiver.wait_drained()
        return not scope.cancelled_caught

    def _publish(self, ajs: AccountJetStream, reply: str, headers: bytes, frame: bytes) -> set[Drains]:
        """Publish a reply; returns the receivers it took past their high-water mark (routing is
        synchronous: those marked during the call were fed by it). They stay marked for the
        server's other publishers too."""
        server = self.js.server
        marked, server.stalled = server.stalled, set()
        try:
            ajs.account.publish(reply, None, headers, frame)
        finally:
            fed, server.stalled = server.stalled, marked
            marked |= fed
        return fed

    async def _answer_once(
        self, ajs: AccountJetStream, stream: Stream, req: ReadRequest, reply: str, deadline: float, more: bool
    ) -> tuple[int, int, int, bool, set[Drains]]:
        """One reply to ``req`` (waiting until ``deadline`` for a message at or after its seq);
        with ``more``, a reply that covers something and leaves budget says another will
        follow. Returns (messages sent, last sequence covered, their bytes, whether another
        reply follows, the receivers the reply took past their high-water mark)."""
        woken = stream.appended()  # taken before reading: a commit after the read still wakes us
        cap = self.max_bytes()  # one reply's ceiling; a following request's budget may be larger
        one = replace(req, max_bytes=cap) if req.max_bytes > cap else req  # what this reply may take
        await _acquire(self._limiter)
        try:
            cols, last, stream_last = await read_range(stream, one, cap)
        finally:
            self._limiter.release()
        if not cols and last < req.seq and req.wait_ms and self.parked < MAX_PARKED:
            # nothing at or after seq yet: hold the request until a commit, then read again
            self.parked += 1
            try:
                with anyio.move_on_after(deadline - anyio.current_time()):
                    while not cols and last < req.seq:
                        await woken.wait()
                        woken = stream.appended()
                        if ajs.streams.get(stream.name) is not stream:  # deleted meanwhile
                            raise api_error("JSStreamNotFoundErr")
                        await _acquire(self._limiter)
                        try:
                            cols, last, stream_last = await read_range(stream, one, cap)
                        finally:
                            self._limiter.release()
            finally:
                self.parked -= 1
        # A reply cut by the request's budget ends it. One that reached the stream's last (a live
        # reply) may leave budget for another, and so may one cut by the reply ceiling while the
        # request has budget beyond it (a catch-up: the next reply goes on without a round trip).
        reached = last >= stream_last or one is not req
        more = more and last >= req.seq and reached and len(cols) < req.max_msgs
        size = cols.bytes_before(len(cols), ROW_OVERHEAD) if more else 0
        more = more and size < req.max_bytes
        sent = len(cols)
        await _acquire(self._limiter)  # the frames being built count against the same bound
        try:
            encode = (stream, req, cols, last, stream_last)
            if cols.bytes_before(sent, ROW_OVERHEAD) > OFFLOAD_BYTES:
                headers, frame = await anyio.to_thread.run_sync(_encode_reply, *encode)
            else:
                headers, frame = _encode_reply(*encode)
            del cols, encode
            if more:
                headers = headers[:-2] + f"{H_MORE}: 1\r\n\r\n".encode()
            self.served += 1
            fed = self._publish(ajs, reply, headers, frame)
        finally:
            self._limiter.release()
        return sent, last, size, more, fed


async def _acquire(limiter: anyio.CapacityLimiter) -> None:
    """A token of ``limiter``: taken at once when one is free, else waited for. anyio's
    ``acquire`` yields to the loop even when a token is free, and a live reply took two: two
    turns of a busy loop on every message's way to a source."""
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        await limiter.acquire()


def _encode_reply(
    stream: Stream, req: ReadRequest, cols: MsgColumns, last: int, stream_last: int
) -> tuple[bytes, bytes]:
    """``build_reply`` for ``req``, its frame compressed (and said so) when it asks."""
    identity = stream_identity(stream.created_ns)
    headers, frame = build_reply(cols, req.seq, last, stream_last, identity, stream.config.retention)
    if req.compress:
        frame = compress_frame(frame)
        headers = headers[:-2] + f"{H_ENCODING}: zstd\r\n\r\n".encode()
    return headers, frame


def _why(e: Exception) -> str:
    return str(e) or type(e).__name__
