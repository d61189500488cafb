"""A stream's sources: one worker per source, reading an upstream push consumer it creates.

A source is another stream, in this account or (``external.api``) behind another API prefix, such
as a leaf's ``$JS.EDGE.API``. Its worker does what the reference's ``setupSourceConsumer`` and
``processInboundSourceMsg`` do (../shared/research/federation-wire.md §3), through the account
only: it subscribes to a fresh deliver subject and reply inbox, publishes the consumer create
request, and reads what arrives. Nothing here knows about leaf links: a request to
``$JS.EDGE.API`` and the deliveries back are ordinary account traffic, and the federation
package routes them (core never imports federation; see DESIGN.md, "Sources and mirrors").

Exactly once: the stream stores each batch of delivered messages together with the upstream
sequence of the last one (``Stream.ingest_sourced``, one store transaction), and every
(re)creation of the upstream consumer starts right after that stored sequence. A flow-control
reply goes out only after what came before it is committed. On an Interest or WorkQueue
upstream that reply is the ack (ADR-60: the upstream makes the consumer a durable acked by flow
control), so a message leaves the upstream only once it is stored here; that durable is reset
(``CONSUMER.RESET``, back to its ack floor), never created anew or deleted.

The worker's states and their transitions are data (``SourceState``, ``TRANSITIONS``); it is
the only writer of its state. A failure (a store error, garbage from upstream, a bug) ends that
attempt, is logged and shown in the stream's info, and the worker tries again after the
reference's backoff; the stream is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import random
import re
import secrets
import time
from collections import deque
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from core.api_errors import ApiError, ApiErrorSpec, api_error
from core.errors import StoreError
from core.jetstream.gotime import parse_rfc3339, rfc3339_nano
from core.jetstream.source_health import (
    GAP_SKIPPED,
    GAP_STARTED_PAST,
    SOURCE_GAP_EVENT,
    SOURCE_GAP_NAMESPACE,
    SOURCE_GAP_SUBJECT,
    UpstreamGaps,
    detects_gaps,
    gap_advisory,
    leafjet_extras,
)
from core.jetstream.sourced_batch import Delivery, SourcedColumns
from core.jetstream.transforms import first_match, source_transforms
from core.protocol.headers import encode_headers, slice_header
from core.server.accounts import Account, Subscription
from core.server.failures import describe_failure
from core.server.interest import split_ack_subject
from core.server.internal import InboundMsg, InternalReceiver, inbound_size
from core.server.mailbox import Mailbox
from core.store.api import SequenceMismatch, StreamState

if TYPE_CHECKING:
    from core.jetstream.stream import Stream, _Flight

log = logging.getLogger("leafjet.sourcing")

# The reference's constants (server/stream.go)
HEARTBEAT_NS = 1_000_000_000  # sourceHealthHB: the upstream consumer's idle heartbeat
INACTIVE_THRESHOLD_NS = 10_000_000_000  # sourceHealthCheckInterval: the upstream consumer's
HEALTH_INTERVAL = 10.0  # s without a message or heartbeat: the source is stalled and recreated
CREATE_WAIT = 30.0  # srcConsumerWaitTime: how long a consumer create is waited for
RESET_WAIT = 5.0  # srcDurableConsumerWaitTime: how long a durable consumer's reset is waited for
REQUEST_THROTTLE = 2.0  # sourceConsumerRetryThreshold: at most one create per 2 s per source
RETRY_BACKOFF = 5.0  # retryBackOff: 5 s x 2 x fails ...
RETRY_MAXIMUM = 120.0  # ... up to retryMaximum
ACK_WAIT_NS = 22 * 3600 * 1_000_000_000
API_LEVEL = 5  # what a source asks of the upstream first (Nats-Required-Api-Level)
# After a link comes up, a source that heard nothing for this long is recreated at once.
KICK_STALE = 2.0
LOG_REPEAT = 60.0  # s: the same failure logged again within this goes to the debug log

# Deliveries stored per transaction (and its fsync). 4096 rather than 1024: a hub catching up
# from a nats-server leaf (1 KiB messages, bench sources --pairs ref-lj, three alternating
# pairs) took 79.0k/90.6k/85.5k msgs/s against 76.4k/79.5k/73.0k; MAX_BATCH_BYTES still bounds
# a batch of large messages.
MAX_BATCH = 4096
MAX_BATCH_BYTES = 4 * 1024 * 1024
# A source's batches submitted to the store and not settled yet: each one after the first is
# conditional on the one before it having committed (SourcePosOp.expect), so they commit back
# to back without a round trip to the event loop between the commits.
PIPELINE_DEPTH = 4
INBOX_CAPACITY = 65536  # past it a delivery is dropped: a dseq gap, and the consumer is recreated

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CONTROL = b"NATS/1.0 100 "
_API_PREFIX = "$JS.API"
STREAM_SOURCE = "Nats-Stream-Source"
STREAM_IDENTITY = "Nats-Stream-Identity"
_REMOVED_PREFIXES = (b"Nats-Expected-", b"Nats-Batch-")
_EMPTY_HEADERS_LEN = len(b"NATS/1.0\r\n\r\n")


# ------------------------------------------------------------------------------ pure helpers


def get_hash(name: str, size: int = 8) -> str:
    """The reference's ``getHash``: sha256, each of the first ``size`` bytes taken mod 62."""
    b = hashlib.sha256(name.encode()).digest()
    return "".join(_BASE62[x % 62] for x in b[:size])


@functools.lru_cache(maxsize=1024)
def stream_identity(created_ns: int) -> str:
    """A stream's ``Nats-Stream-Identity``: the hash of its creation time (the reference's
    ``stream.identity``), so a stream deleted and created again under its name is told apart.
    Cached: a live bulk reply carries it (bulk_read.py), once per commit a source reads, and
    formatting the time and hashing it was a tenth of that reply's cost."""
    return get_hash(rfc3339_nano(created_ns))


def sync_subject(prefix: str) -> str:
    """``<prefix>.<8 random base62>``, as the reference's ``syncSubject``."""
    return prefix + "." + "".join(secrets.choice(_BASE62) for _ in range(8))


def index_name(src: Mapping[str, Any]) -> str:
    """The reference's ``composeIName``: ``<name>[:<hash(api)>][:C=<hash(consumer)>] <filter> <dest>``,
    filters and destinations of several transforms joined by a form feed, ``>`` for none."""
    iname = src["name"]
    ext = src.get("external")
    if ext is not None:
        iname += ":" + get_hash(ext.get("api", ""))
    cons = src.get("consumer")
    if cons is not None:
        iname += ":C=" + get_hash(cons.get("name", ""))
    transforms = src.get("subject_transforms") or []
    if transforms:
        source = "\f".join(t.get("src") or ">" for t in transforms)
        dest = "\f".join(t.get("dest") or ">" for t in transforms)
    else:
        source, dest = src.get("filter_subject") or ">", ">"
    return f"{iname} {source} {dest}"


def retry_backoff(fails: int) -> float:
    """The reference's ``calculateRetryBackoff``: 10 s, 20 s, 30 s ... up to 2 min."""
    return min(RETRY_BACKOFF * 2 * fails, RETRY_MAXIMUM)


class AckInfo(NamedTuple):
    """What a delivery's ack reply says (v1: 9 tokens; v2: 11 or more). A NamedTuple: one is
    made per delivery, and a frozen dataclass costs several times as much to build."""

    consumer: str
    delivered: int
    sseq: int
    dseq: int
    ts: int
    pending: int
    sseq_text: str = ""  # the upstream sequence as the reply spells it (for Nats-Stream-Source)


# A peer's sequence, timestamp or count has at most a uint64's 20 digits: a longer one is not
# taken apart (Python's int() refuses past 4300 digits with an error that would end the worker).
MAX_DIGITS = 20


def parse_ack_reply(reply: str | None) -> AckInfo | None:
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    t = reply.split(".")
    if len(t) == 9:
        off = 2
    elif len(t) >= 11:
        off = 4
    else:
        return None
    nums = t[off + 2 : off + 7]
    joined = "".join(nums)
    if not (joined.isascii() and joined.isdigit()):
        return None
    try:  # an empty token passes the test above and fails here
        dc, sseq, dseq, ts, pending = map(int, nums)
    except ValueError:
        return None
    return AckInfo(t[off + 1], dc, sseq, dseq, ts, pending, nums[1])


def is_control(headers: bytes | None, payload: bytes) -> bool:
    """A heartbeat or flow-control request: no body, a ``100`` status (the reference's test)."""
    return not payload and bool(headers) and headers.startswith(_CONTROL)  # type: ignore[union-attr]


def source_header_value(iname: str, reply: str, subject: str, ident: str) -> str:
    """``Nats-Stream-Source``: ``<name[:hash]> <upstream seq> <filter> <dest> <subject>[ <identity>]``
    (the reference's ``genSourceHeader``; the sequence is the ack reply's, "1" without one)."""
    name, flt, dest = iname.split(" ")
    t = reply.split(".")
    seq = "1"
    if len(t) >= 2 and t[0] == "$JS" and t[1] == "ACK":
        if len(t) == 9:
            seq = t[5]
        elif len(t) >= 11:
            seq = t[7]
    value = f"{name} {seq} {flt} {dest} {subject}"
    return f"{value} {ident}" if ident else value


def _remove_lines(hdr: bytes, match: Any) -> bytes:
    lines = hdr.split(b"\r\n")
    kept = [lines[0]] + [ln for ln in lines[1:] if not match(ln)]
    return b"\r\n".join(kept)


def sourced_headers(headers: bytes | None, value: str) -> bytes:
    """The stored header block of a sourced message, as the reference writes it: an incoming
    ``Nats-Stream-Source`` (a daisy chain) and any ``Nats-Expected-*`` and ``Nats-Batch-*``
    lines removed, then ``Nats-Stream-Source: <value>`` added last."""
    if headers and len(headers) > _EMPTY_HEADERS_LEN:
        exact = STREAM_SOURCE.encode() + b":"
        h = _remove_lines(headers, lambda ln: ln.startswith(exact) or ln.startswith(_REMOVED_PREFIXES))
        if len(h) > _EMPTY_HEADERS_LEN:
            return h[:-2] + f"{STREAM_SOURCE}: {value}\r\n\r\n".encode("utf-8", "surrogateescape")
    return f"NATS/1.0\r\n{STREAM_SOURCE}: {value}\r\n\r\n".encode("utf-8", "surrogateescape")


def mirrored_headers(headers: bytes | None) -> bytes | None:
    """A mirrored message's headers, as the reference stores them: as they came, less any
    ``Nats-Expected-*`` and ``Nats-Batch-*`` lines (they were checked upstream)."""
    if not headers or (b"Nats-Expected-" not in headers and b"Nats-Batch-" not in headers):
        return headers
    return _remove_lines(headers, lambda ln: ln.startswith(_REMOVED_PREFIXES))


def flow_control_reply(dseq: int, sseq: int) -> bytes:
    return f"NATS/1.0\r\nNats-Last-Consumer: {dseq}\r\nNats-Last-Stream: {sseq}\r\n\r\n".encode()


def _appends(cols: SourcedColumns) -> tuple[Any, Any, Any, Any, Any]:
    """The ``append`` of each of a batch's columns (sseqs, subjects, headers, payloads, ts)."""
    return cols.sseqs.append, cols.subjects.append, cols.headers.append, cols.payloads.append, cols.ts.append


def _header_int(headers: bytes, name: str) -> int:
    v = slice_header(headers, name)
    return int(v) if v and len(v) <= MAX_DIGITS and v.isascii() and v.isdigit() else -1


# ------------------------------------------------------------------------------ the worker


class SourceState(Enum):
    WAITING = "waiting"  # its turn to ask comes after the throttle and backoff
    CREATING = "creating"  # one consumer create in flight (never more than one per source)
    ACTIVE = "active"  # reading deliveries


TRANSITIONS: dict[SourceState, frozenset[SourceState]] = {
    SourceState.WAITING: frozenset({SourceState.CREATING}),
    SourceState.CREATING: frozenset({SourceState.ACTIVE, SourceState.WAITING}),
    SourceState.ACTIVE: frozenset({SourceState.WAITING}),
}


class _Recreate(Exception):
    """Make a new upstream consumer, at the stored position + 1."""

    def __init__(self, why: str, *, fail: bool = False, error: ApiError | None = None) -> None:
        super().__init__(why)
        self.fail = fail  # counts towards the backoff
        self.error = error


class InboundRun(NamedTuple):
    """A leaf link's run of deliveries to a source's deliver subject, as the link read them
    (``Account.publish_ack_run``): each reply is the ack reply with the stored subject after
    "@" (``interest.split_ack_subject``), no headers. One queue item for the whole run."""

    subject: str  # the deliver subject
    replies: Sequence[str]
    payloads: Sequence[bytes]
    sub: Subscription

    def split(self) -> list[InboundMsg]:
        """The run as the ``InboundMsg`` each of its messages would have been queued as."""
        out = []
        for reply, payload in zip(self.replies, self.payloads, strict=True):
            ack, stored = split_ack_subject(reply)
            out.append(InboundMsg(self.subject if stored is None else stored, ack, None, payload, self.sub))
        return out


Inbound = InboundMsg | InboundRun


class _SourceInbox(Mailbox[Inbound]):
    """A source's queue, whose capacity bounds the messages it holds, not its items: a run
    (up to ``parser.MAX_RUN_FRAMES`` deliveries) is one item, so an item bound let a link queue
    about a thousand times the messages ``INBOX_CAPACITY`` allows. A run that does not fit is
    refused whole, as a message that does not fit is."""

    __slots__ = ("_msgs",)

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._msgs = 0  # the messages queued: a run counts as its deliveries

    def send_nowait(self, item: Inbound) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        n = _inbound_count(item)
        if self._msgs + n > self._capacity:
            raise anyio.WouldBlock
        self._msgs += n
        self._items.append(item)
        self._item_ready.set()

    def receive_nowait(self) -> Inbound:
        item = super().receive_nowait()
        self._msgs -= _inbound_count(item)
        return item


class _Receiver(InternalReceiver):
    """A source's deliver subject and reply inbox: one queue, read by its worker. A link's run
    of deliveries is queued whole (``deliver_ack_run``), as one ``InboundRun``; the queue's
    capacity counts messages (``_SourceInbox``)."""

    inbox: Mailbox[Inbound]  # type: ignore[assignment]

    def __init__(self, name: str, account: Account, capacity: int = 65536) -> None:
        super().__init__(name, account, capacity)
        self.inbox = _SourceInbox(capacity)

    def deliver_ack_run(
        self, sub: Subscription, route: str, replies: Sequence[str], payloads: Sequence[bytes]
    ) -> None:
        try:
            self.inbox.send_nowait(InboundRun(route, replies, payloads, sub))
        except anyio.WouldBlock:
            self.dropped += len(payloads) - 1  # each of the run's messages is one dropped
            self._drop("queue full")
        except anyio.ClosedResourceError:
            pass


def _inbound_size(m: Inbound) -> int:
    if type(m) is InboundRun:
        return sum(map(len, m.payloads)) + sum(map(len, m.replies)) + len(m.subject) * len(m.payloads)
    return inbound_size(m.subject, m.reply, m.headers, m.payload)  # type: ignore[union-attr]


def _inbound_count(m: Inbound) -> int:
    return len(m.payloads) if type(m) is InboundRun else 1


def _fill_source_batch(batch: list[Inbound], inbox: Mailbox[Inbound], max_msgs: int, max_bytes: int) -> None:
    """``internal.fill_batch`` for a source's queue, whose items may be runs: add what is queued
    now until the batch holds ``max_msgs`` messages or ``max_bytes`` bytes. Never waits."""
    count = sum(map(_inbound_count, batch))
    size = sum(map(_inbound_size, batch))
    while batch and count < max_msgs and size < max_bytes:
        try:
            m = inbox.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
        batch.append(m)
        count += _inbound_count(m)
        size += _inbound_size(m)


class SourceWorker:
    """One source of a stream: creates its upstream consumer, reads and stores its deliveries.

    ``MirrorWorker`` is the same machine with the mirror's request, start position, gap rules
    and storing; what differs is in the class constants and the methods it overrides."""

    SETUP_ERROR = "JSSourceConsumerSetupFailedErrF"  # 10045; a mirror's is 10029
    FAST_INGEST = True  # _handle's short path for the common delivery (a mirror has its own rules)
    REQUIRES_FC_ERROR = "JSSourceConsumerRequiresAckFCErr"  # 10217; a mirror's is 10214
    NAME_PREFIX = "JS_SRC_"
    META_PREFIX = "_nats.src"
    DELIVER_TOKEN = "S"  # $JS.S.<8> or <external.deliver>.S.<8>
    API_LEVEL = API_LEVEL
    KIND = "source"  # in log lines and the gap advisory

    def __init__(self, stream: Stream, spec: Mapping[str, Any], iname: str, position: int) -> None:
        self.stream = stream
        self.spec = dict(spec)
        self.iname = iname
        self._iname_parts = iname.split(" ") if iname else ["", "", ""]  # name, filter, dest
        self.upstream: str = spec["name"]
        self.transforms = source_transforms(spec)  # rewrite a delivery's subject before storing
        self.committed = position  # the last upstream sequence stored (SourcePosOp)
        self.sseq = position  # the last upstream sequence taken
        self.dseq = 0
        self.cname = ""
        self.ident = ""  # the upstream's Nats-Stream-Identity
        self.reset = False  # the upstream was recreated: start over (the reference's si.rc)
        self.lag = 0
        self.heard_ns = 0  # wall ns of the last message or heartbeat; 0: never
        self._heard = 0.0  # the same, monotonic
        self.error: ApiError | None = None
        self.fails = 0
        self.requests = 0
        self.gaps = UpstreamGaps(enabled=detects_gaps(spec))
        self._spoke = False  # the upstream sent something valid since the last create
        self._logged_key, self._logged_at = "", 0.0  # the last failure logged, and when
        self._last_request: float | None = None
        self.state = SourceState.WAITING
        self._kick = anyio.Event()
        self._kicked = False
        # _handle's short path: the current consumer's ack reply prefix (_learn_ack_prefix)
        self._fast_prefix, self._fast_cname, self._fast_v1 = "", "", True
        self._run_re: tuple[tuple[str, bool], re.Pattern[str]] | None = None  # _run_pattern's
        # the submitted batches, committing, oldest first, each with its last upstream sequence
        # (the position it writes): _flush, _settle
        self._flights: deque[tuple[_Flight, int]] = deque()
        # The position the store holds for this source, as far as the worker knows; None after
        # the upstream was made again (sequences start over, and a new position may equal the
        # old one) until a batch commits. Batches are pipelined only while it is known.
        self._stored: int | None = position
        # Durable sourcing (ADR-60): the upstream consumer that is asked to RESET instead of
        # being created again, and the deliver subject it keeps. A user's (``consumer`` in the
        # config) from the start; otherwise the one an Interest or WorkQueue upstream made
        # durable (its create answer says ack_policy flow_control), known until a reset fails.
        user = spec.get("consumer")
        self.user_consumer = isinstance(user, Mapping)
        self.durable_name: str = user.get("name", "") if isinstance(user, Mapping) else ""
        self.durable_deliver: str = user.get("deliver_subject", "") if isinstance(user, Mapping) else ""

    # ---------------------------------------------------------------- state

    def _to(self, state: SourceState) -> None:
        if state is not self.state:
            assert state in TRANSITIONS[self.state], f"{self.state} -> {state}"
            self.state = state

    def kick(self) -> None:
        """A link came up: the reference resets the backoff and retries a waiting or stale source."""
        self.fails = 0
        self._kicked = True
        self._kick.set()

    def info(self) -> dict[str, Any]:
        """The reference's ``StreamSourceInfo``."""
        d: dict[str, Any] = {"name": self.upstream}
        ext = self.spec.get("external")
        if ext is not None:
            d["external"] = {"api": ext.get("api", ""), "deliver": ext.get("deliver", "")}
        d["lag"] = self.lag
        if self.sseq:  # the reference's 2.15: the last upstream sequence taken (omitempty)
            d["seq"] = self.sseq
        d["active"] = time.time_ns() - self.heard_ns if self.heard_ns else -1
        if self.error is not None:
            d["error"] = self.error.to_json()
        if self.spec.get("filter_subject"):
            d["filter_subject"] = self.spec["filter_subject"]
        transforms = self.spec.get("subject_transforms") or []
        if transforms:
            d["subject_transforms"] = [
                {"src": t.get("src", ""), "dest": t.get("dest", "")} for t in transforms
            ]
        return d

    def leafjet_info(self) -> dict[str, Any]:
        """What the reference's info has no field for (``leafjet`` in /jsz's stream detail)."""
        return leafjet_extras(
            state=self.state.value, creates=self.requests, failures=self.fails, gaps=self.gaps
        )

    # ---------------------------------------------------------------- the loop

    async def run(self) -> None:
        while True:
            await self._wait_turn()
            try:
                await self._attempt()
            except _Recreate as r:
                if r.fail:
                    self.fails += 1
                if r.error is not None:
                    self.error = r.error
                if r.fail or r.error is not None:
                    self._log_failure(str(r), logging.WARNING)
                else:
                    log.debug(
                        "stream %s %s %s: recreating (%s)", self.stream.name, self.KIND, self.upstream, r
                    )
            except Exception as e:
                self.fails += 1
                why = str(e) if isinstance(e, StoreError) else describe_failure(e)
                self.error = api_error(self.SETUP_ERROR, err=why)
                self._log_failure("failed", logging.ERROR)
            finally:
                if self.state is not SourceState.WAITING:
                    self._to(SourceState.WAITING)
            self.sseq, self.dseq = self.committed, 0

    def _log_failure(self, what: str, level: int) -> None:
        """One line per failed attempt: what happened, the error the info shows, and when the
        next attempt is due. Failures back off, but a refusal or a stall retries every 2 s:
        the same line again within a minute goes to the debug log."""
        delay = retry_backoff(self.fails) if self.fails else REQUEST_THROTTLE
        err = self.error.to_json() if self.error is not None else {}
        key = f"{what}\0{err.get('description', '')}"
        now = time.monotonic()
        if key == self._logged_key and now - self._logged_at < LOG_REPEAT:
            level = logging.DEBUG
        else:
            self._logged_key, self._logged_at = key, now
        log.log(
            level,
            "stream %s %s %s: %s: %s (%s); retrying in about %.0f s",
            self.stream.name,
            self.KIND,
            self.upstream,
            what,
            err.get("description", ""),
            err.get("err_code", ""),
            delay,
        )

    def _heard_valid(self) -> None:
        """The upstream sent a valid delivery or heartbeat: the source works again."""
        self._spoke = True
        self.error = None
        self.fails = 0

    def _gap(self, after: int, next_seq: int, reason: str) -> None:
        """Report upstream sequences ``after + 1 .. next_seq - 1`` removed before they were read
        (core/jetstream/source_health.py): a log line and the leafjet advisory, once per range."""
        found = self.gaps.check(after, next_seq)
        if found is None:
            return
        first, last = found
        log.warning(
            "stream %s %s %s: upstream sequences %d-%d (%d messages) were removed before they were read",
            self.stream.name,
            self.KIND,
            self.upstream,
            first,
            last,
            last - first + 1,
        )
        fields = gap_advisory(self.stream.name, self.spec, self.KIND, first, last, reason)
        subject = f"{SOURCE_GAP_SUBJECT}.{self.stream.name}"
        self.stream.advise(subject, SOURCE_GAP_EVENT, fields, namespace=SOURCE_GAP_NAMESPACE)

    async def _wait_turn(self) -> None:
        """The reference's schedule: 2 s since the last request, the backoff after failures,
        100-200 ms of jitter. A kick (a link came up) cuts the backoff short."""
        while True:
            delay = 0.0
            if self._last_request is not None:
                delay = max(0.0, REQUEST_THROTTLE - (time.monotonic() - self._last_request))
                if self.fails:
                    delay += retry_backoff(self.fails)
            delay += 0.1 + random.random() * 0.1
            self._kick = anyio.Event()
            self._kicked = False
            with anyio.move_on_after(delay) as scope:
                await self._kick.wait()
            if scope.cancelled_caught:
                return
            # kicked: the backoff is gone (fails = 0), go again with only throttle and jitter

    def _start(self, st: StreamState) -> dict[str, Any]:
        """Where the new consumer starts (the reference's rules), given the stream's state."""
        first_seq, last_ts = st.first_seq, st.last_ts
        seq = 0 if self.reset else self.committed + 1
        spec = self.spec
        if seq > 1:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": seq}
        if spec.get("opt_start_seq"):
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": spec["opt_start_seq"]}
        if spec.get("opt_start_time"):
            start = spec["opt_start_time"]
            with contextlib.suppress(ValueError, TypeError):
                if last_ts and parse_rfc3339(start) < last_ts:
                    start = rfc3339_nano(last_ts)
            return {"deliver_policy": "by_start_time", "opt_start_time": start}
        if first_seq > 1 and last_ts and not self.reset:
            return {"deliver_policy": "by_start_time", "opt_start_time": rfc3339_nano(last_ts)}
        return {"deliver_policy": "all"}

    def _consumer_hash(self) -> str:
        stream = self.stream
        base = f"{stream.name} {stream.account.name}"
        if stream.domain:
            base += f" {stream.domain}"
        ident = get_hash(base)
        if sum(1 for s in stream.config.sources if s and s.get("name") == self.upstream) > 1:
            ident = f"{ident} {self.iname}"
        return get_hash(ident)

    def _headers(self, level: int) -> bytes | None:
        """``Nats-Required-Api-Level`` (and, from level 5, the upstream's identity we know)."""
        if level < 4:
            return None
        items = [("Nats-Required-Api-Level", str(level))]
        if level >= 5:
            items.append((STREAM_IDENTITY, self.ident))
        return encode_headers(items)

    def _request(
        self, deliver: str, level: int, sourcing: bool, start: dict[str, Any]
    ) -> tuple[str, bytes | None, bytes]:
        """The consumer create request the reference sends: subject, headers, body."""
        spec = self.spec
        name = f"{self.NAME_PREFIX}{self._consumer_hash()}"
        if not sourcing:
            name += "_" + "".join(secrets.choice(_BASE62) for _ in range(8))
        mp = self.META_PREFIX
        meta = {f"{mp}.stream": self.stream.name, f"{mp}.acc": self.stream.account.name}
        if self.stream.domain:
            meta[f"{mp}.domain"] = self.stream.domain
        cfg: dict[str, Any] = {"name": name, "deliver_subject": deliver, **start}
        cfg.update(ack_policy="none", ack_wait=ACK_WAIT_NS, max_deliver=1)
        flt = spec.get("filter_subject") or ""
        srcs = [t.get("src", "") for t in spec.get("subject_transforms") or []]
        if not flt and len(srcs) == 1:
            flt, srcs = srcs[0], []
        if flt:
            cfg["filter_subject"] = flt
        if srcs:
            cfg["filter_subjects"] = srcs
        cfg.update(replay_policy="instant", flow_control=True, idle_heartbeat=HEARTBEAT_NS)
        cfg.update(inactive_threshold=INACTIVE_THRESHOLD_NS, num_replicas=0, direct=True)
        if sourcing:
            cfg["sourcing"] = True
        cfg["metadata"] = meta
        tail = f"CONSUMER.CREATE.{self.upstream}"
        if flt:
            tail += f".{name}.{flt}"
        subject = self._api_subject(tail)
        headers = self._headers(level)
        body = {"stream_name": self.upstream, "config": cfg, "action": ""}
        return subject, headers, json.dumps(body, separators=(",", ":")).encode()

    def _resets(self) -> bool:
        """Whether this attempt resets a durable upstream consumer instead of creating one."""
        return self.user_consumer or (bool(self.durable_name) and not self.reset)

    async def _attempt(self) -> None:
        """Create (or reset) the upstream consumer and read it, until something calls for a
        new one."""
        account = self.stream.account
        rx = _Receiver(f"source:{self.stream.name}:{self.upstream}", account, INBOX_CAPACITY)
        try:
            if self._resets():
                early = await self._reset(rx)
            else:
                ext = self.spec.get("external")
                prefix = (ext or {}).get("deliver") or ""
                token = self.DELIVER_TOKEN
                deliver = (f"{prefix}.{token}." if prefix else f"$JS.{token}.").replace("..", ".")
                deliver = sync_subject(deliver[:-1])
                rx.subscribe(deliver)  # before asking: nothing the consumer sends is missed
                early = await self._create(rx, deliver)
            self._to(SourceState.ACTIVE)
            # the error and the backoff stay until the upstream sends something valid: an
            # upstream that answers creates and then sends garbage or nothing still shows why
            self._spoke = False
            self._heard = time.monotonic()
            await self._read(rx, early)
        finally:
            rx.close()
            await self._settle_last()

    async def _create(self, rx: _Receiver, deliver: str) -> list[Inbound]:
        """Send the consumer create (downgrading as the reference does) and wait for its answer;
        what arrived on the deliver subject meanwhile is returned, to be read first."""
        self._to(SourceState.CREATING)
        early: list[Inbound] = []
        level, sourcing = self.API_LEVEL, True
        start = self._start(await self.stream.state())
        while True:
            subject, headers, body = self._request(deliver, level, sourcing, start)
            resp, ccr = await self._ask(rx, "create", subject, headers, body, CREATE_WAIT, early)
            error = ccr.get("error")
            if isinstance(error, dict):
                code = error.get("err_code")
                if code == 10225:  # the upstream stream was deleted and created again
                    log.warning(
                        "stream %s: source stream %s was recreated, resetting source state",
                        self.stream.name,
                        self.upstream,
                    )
                    self.reset, self.ident = True, ""
                    raise _Recreate("upstream recreated")
                if sourcing and code in (10185, 10025):
                    if level > 4:
                        level -= 1
                    else:
                        level, sourcing = 0, False
                    continue
                raise _Recreate("create refused", fail=True, error=_remote_error(error))
            cfg = self._consumer_config(ccr, "create")
            await self._created(resp, _starts_after(ccr, cfg))
            self.cname = ccr["name"]
            self.dseq = 0
            other = cfg.get("deliver_subject")
            if isinstance(other, str) and other and other != deliver:
                rx.subscribe(other)
            if cfg.get("ack_policy") == "flow_control" and isinstance(other, str) and other:
                # An Interest or WorkQueue upstream made it durable, acked by our flow-control
                # replies (ADR-60): from now on it is reset, never created again or deleted
                # (that would lose the Interest stream's messages).
                self.durable_name, self.durable_deliver = self.cname, other
            return early

    def _api_subject(self, tail: str) -> str:
        """``$JS.API.<tail>`` on the upstream's side: under the source's ``external.api`` prefix
        when it has one."""
        subject = f"{_API_PREFIX}.{tail}"
        ext = self.spec.get("external")
        if ext is not None and ext.get("api"):
            subject = subject.replace(_API_PREFIX, ext["api"], 1).replace("..", ".")
        return subject

    def _reset_subject(self) -> str:
        return self._api_subject(f"CONSUMER.RESET.{self.upstream}.{self.durable_name}")

    def _forget_durable(self) -> None:
        """An upgraded durable that does not answer its reset is created again next time (the
        create names it, so the upstream finds it if it still exists). A user's stays."""
        if not self.user_consumer:
            self.durable_name = self.durable_deliver = ""

    async def _reset(self, rx: _Receiver) -> list[Inbound]:
        """Reset the durable upstream consumer (``CONSUMER.RESET``, empty body: delivery starts
        over after its ack floor, which is at most what we stored) and subscribe to its deliver
        subject once it answered: it delivers only to interest, so everything that arrives was
        numbered after the reset. The reference's ``setupSourceConsumer`` with a durable,
        downgrading the required API level as it does. An answer that is not a flow-control
        acked consumer is 10217 (a mirror's 10214)."""
        self._to(SourceState.CREATING)
        self._start(await self.stream.state())  # a mirror's position: its last sequence
        level = self.API_LEVEL
        subject = self._reset_subject()
        while True:
            try:
                resp, ccr = await self._ask(rx, "reset", subject, self._headers(level), b"", RESET_WAIT)
            except _Recreate:
                self._forget_durable()
                raise
            error = ccr.get("error")
            if isinstance(error, dict):
                if error.get("err_code") in (10185, 10025) and level > 4:
                    level -= 1
                    continue
                self._forget_durable()
                raise _Recreate("reset refused", fail=True, error=_remote_error(error))
            cfg = self._consumer_config(ccr, "reset")
            if cfg.get("ack_policy") != "flow_control":
                self._forget_durable()
                raise _Recreate(
                    "not acked by flow control", fail=True, error=api_error(self.REQUIRES_FC_ERROR)
                )
            await self._created(resp, _starts_after(ccr, cfg))
            self.cname = ccr["name"]
            self.dseq = 0
            deliver = self.durable_deliver or cfg.get("deliver_subject")
            if not isinstance(deliver, str) or not deliver:
                err = api_error(self.SETUP_ERROR, err="durable consumer has no deliver subject")
                raise _Recreate("no deliver subject", fail=True, error=err)
            rx.subscribe(deliver)
            return []

    async def _ask(
        self,
        rx: _Receiver,
        what: str,
        subject: str,
        headers: bytes | None,
        body: bytes,
        wait: float,
        early: list[Inbound] | None = None,
    ) -> tuple[InboundMsg, dict[str, Any]]:
        """Send the consumer ``what`` request (create, reset) to the upstream and return its
        answer with the answer's JSON object; what arrives meanwhile on ``rx``'s other
        subscriptions goes to ``early`` (dropped without one). No responders, no answer within
        ``wait`` and an answer that is no JSON object raise ``_Recreate``."""
        reply_sub = rx.subscribe(sync_subject("$JSC.R"))
        self._last_request = time.monotonic()
        self.requests += 1
        if not self.stream.account.publish(subject, reply_sub.subject, headers, body):
            err = api_error(self.SETUP_ERROR, err=f"no responders for {subject}")
            raise _Recreate("no responders", fail=True, error=err)
        resp: InboundMsg | None = None
        with anyio.move_on_after(wait):
            async for m in rx.inbox:
                if m.sub is reply_sub and type(m) is InboundMsg:
                    resp = m
                    break
                if early is not None:
                    early.append(m)
        self.stream.account.unsubscribe(reply_sub)
        rx.subs.remove(reply_sub)
        if resp is None:
            err = api_error(self.SETUP_ERROR, err="timeout")
            raise _Recreate(f"consumer {what} timed out", fail=True, error=err)
        try:
            ccr = json.loads(resp.payload)
            if not isinstance(ccr, dict):
                raise ValueError("not an object")
        except ValueError:
            err = api_error(self.SETUP_ERROR, err=f"invalid consumer {what} response")
            raise _Recreate(f"bad {what} response", fail=True, error=err) from None
        return resp, ccr

    def _consumer_config(self, ccr: dict[str, Any], what: str) -> dict[str, Any]:
        """A consumer ``what`` answer's config (it names the consumer), or ``_Recreate``."""
        cfg = ccr.get("config")
        if not isinstance(cfg, dict) or not isinstance(ccr.get("name"), str):
            err = api_error(self.SETUP_ERROR, err=f"invalid consumer {what} response")
            raise _Recreate(f"bad {what} response", fail=True, error=err)
        return cfg

    async def _created(self, resp: InboundMsg, delivered: int) -> None:
        """The consumer exists; ``delivered`` is the upstream sequence it says it starts after
        (its ``delivered.stream_seq``). A source keeps the upstream's identity, starts over
        when that changed, and does not take what lies before ``delivered``."""
        ident = slice_header(resp.headers, STREAM_IDENTITY) if resp.headers else None
        if self.reset or (ident and self.ident and ident != self.ident):
            self.sseq = 0
            self._stored = None
        self.reset = False
        self.ident = ident or ""
        if delivered > self.sseq:
            self._gap(self.sseq, delivered + 1, GAP_STARTED_PAST)
            self.sseq = delivered

    async def _read(self, rx: _Receiver, early: list[Inbound]) -> None:
        inbox = rx.inbox
        pending = early
        while True:
            if not pending:
                if self._flights:  # nothing more yet: let what was read commit
                    try:
                        pending = [inbox.receive_nowait()]
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        await self._settle_while_quiet(inbox)
                if not pending:
                    with anyio.move_on_after(1.0):
                        pending = [await inbox.receive()]
                _fill_source_batch(pending, inbox, MAX_BATCH, MAX_BATCH_BYTES)
            if not pending:
                quiet = time.monotonic() - self._heard
                if quiet > HEALTH_INTERVAL:
                    why = f"no message or heartbeat from upstream for {HEALTH_INTERVAL:.0f} s"
                    raise _Recreate("stalled", error=api_error(self.SETUP_ERROR, err=why))
                if self._kicked and quiet > KICK_STALE:
                    raise _Recreate("link came up, source quiet")
                continue
            msgs, pending = pending, []
            await self._handle(msgs)

    async def _handle(self, msgs: Sequence[Inbound]) -> None:
        """The reference's gap rules, per message, in order; the batch is stored before a
        flow-control reply, and before any recreate.

        A source's common delivery -- the next one of its consumer, delivered once, past the
        last upstream sequence taken -- takes a short path (``FAST_INGEST``): its ack reply
        starts with the consumer's own prefix, so only the five numbers after it are read,
        and it goes straight into the batch's columns (no AckInfo or Delivery). Anything
        else takes the general rules below it."""
        batch = self._new_batch()
        account = self.stream.account
        if any(not m.sub.subject.startswith("$JSC.R.") for m in msgs):  # not only late create answers
            self._heard = time.monotonic()
            self.heard_ns = time.time_ns()
            self._kicked = False  # the consumer is alive: a link's kick is spent, not kept for later
        fast = self._fast_prefix if self._fast_cname == self.cname and self.FAST_INGEST else ""
        fast_len, fast_v1 = len(fast), self._fast_v1
        name, flt, dest = self._iname_parts
        ident_tail = f" {self.ident}" if self.ident else ""
        transforms = self.transforms
        cols = batch if isinstance(batch, SourcedColumns) else None
        if cols is None:
            fast = ""
        else:  # the columns' appends, bound once (this loop runs per delivery)
            add_sseq, add_subject, add_headers, add_payload, add_ts = _appends(cols)
        # a delivery without headers (the common one) stores this block with its two fields filled
        bare_head = f"NATS/1.0\r\n{STREAM_SOURCE}: {name} "
        bare_tail = f" {flt} {dest} "
        bare_end = f"{ident_tail}\r\n\r\n"
        pending = ""  # the last fast delivery's pending count (the lag), as its reply spells it
        headers_fmt = (bare_head, bare_tail, bare_end)
        for item in msgs:
            if type(item) is InboundRun:
                if fast and cols is not None:  # the whole run in one pass, when it is all common
                    taken = self._take_run(item, cols, headers_fmt)
                    if taken is not None:
                        pending = taken
                        continue
                items: Sequence[InboundMsg] = item.split()
            else:
                items = (item,)  # type: ignore[assignment]
            for m in items:
                reply = m.reply
                if fast and reply is not None and reply.startswith(fast):
                    nums = reply[fast_len:].split(".")
                    if len(nums) == 5 if fast_v1 else len(nums) > 5:
                        dc, sseq_text, dseq_text, ts_text, pending_text = nums[:5]
                        digits = dc + sseq_text + dseq_text + ts_text + pending_text
                        # (an empty number passes the digits test: the general rules refuse it)
                        # (and a number longer than a uint64's 20 digits: the general rules
                        # refuse it as an invalid delivery, where int() would raise)
                        if (
                            dc == "1"
                            and digits.isascii()
                            and digits.isdigit()
                            and "" not in nums[:5]
                            and max(map(len, nums[:5])) <= MAX_DIGITS
                        ):
                            sseq, dseq = int(sseq_text), int(dseq_text)
                            if dseq == self.dseq + 1 and sseq > self.sseq and self._spoke:
                                if sseq > self.sseq + 1:
                                    self._gap(self.sseq, sseq, GAP_SKIPPED)
                                self.dseq, self.sseq = dseq, sseq
                                subject = m.subject  # the header names the upstream's subject
                                add_sseq(sseq)
                                add_subject(first_match(transforms, subject) if transforms else subject)
                                if m.headers is None:  # sourced_headers(None, value), in one formatting
                                    hdr = f"{bare_head}{sseq_text}{bare_tail}{subject}{bare_end}"
                                    add_headers(hdr.encode("utf-8", "surrogateescape"))
                                else:
                                    value = f"{name} {sseq_text} {flt} {dest} {subject}{ident_tail}"
                                    add_headers(sourced_headers(m.headers, value))
                                add_payload(m.payload)
                                add_ts(int(ts_text))
                                pending = pending_text
                                continue
                if m.sub.subject.startswith("$JSC.R."):
                    continue  # a late create response
                headers = m.headers
                if headers and is_control(headers, m.payload):
                    if m.reply:  # flow control: answered once what came before it is stored
                        self._set_lag(pending)
                        await self._flush(batch)
                        await self._settle()
                        batch = self._new_batch()
                        cols = batch if isinstance(batch, SourcedColumns) else None
                        if cols is not None:  # the appends of the new batch's columns
                            add_sseq, add_subject, add_headers, add_payload, add_ts = _appends(cols)
                        account.publish(m.reply, None, flow_control_reply(self.dseq, self.sseq), b"")
                    else:
                        last = _header_int(headers, "Nats-Last-Consumer")
                        if last > 0 and last != self.dseq:
                            await self._flush(batch)
                            raise _Recreate(f"heartbeat says delivered {last}, got {self.dseq}")
                        stalled = slice_header(headers, "Nats-Consumer-Stalled")
                        if stalled:
                            account.publish(stalled, None, None, b"")
                    if not self._spoke:
                        self._heard_valid()
                    continue
                ack = parse_ack_reply(m.reply)
                if ack is None:
                    # only the upstream consumer publishes to this fresh deliver subject, always
                    # with an ack reply: anything else is a broken upstream, not a message to store
                    await self._flush(batch)
                    why = f"invalid delivery from upstream: reply {str(m.reply)[:80]!r} is not an ack subject"
                    raise _Recreate("invalid delivery", fail=True, error=api_error(self.SETUP_ERROR, err=why))
                if ack.consumer != self.cname or ack.delivered > 1:
                    continue
                if not fast and self.FAST_INGEST:
                    fast = self._learn_ack_prefix(m.reply or "")
                    fast_len, fast_v1 = len(fast), self._fast_v1
                if not self._spoke:
                    self._heard_valid()
                try:
                    take = self._gap_rule(ack)
                except _Recreate:
                    await self._flush(batch)
                    raise
                if not take:
                    continue
                self.lag, pending = (ack.pending - 1 if ack.pending else 0), ""
                delivery = self._delivery(ack, m)
                if isinstance(batch, list):
                    batch.append(delivery)
                else:
                    batch += (delivery,)
        self._set_lag(pending)
        await self._flush(batch)

    def _take_run(self, run: InboundRun, cols: SourcedColumns, fmt: tuple[str, str, str]) -> str | None:
        """A run of the short path's deliveries (the next ones of the current consumer,
        delivered once, each upstream sequence the one after the last) into the batch's
        columns in one pass: one regular expression over the joined replies, one comprehension
        per column. Returns the last one's pending count as its reply spells it; None, having
        taken nothing, when any delivery of the run is not such a one (the caller then takes
        them one at a time, by the general rules)."""
        if not self._spoke:
            return None
        replies = run.replies
        found = self._run_pattern().findall("\n".join(replies))
        if len(found) != len(replies):  # each line matches at most once (anchored), so: all did
            return None
        sseq_t, dseq_t, ts_t, pending_t, subjects = zip(*found, strict=True)
        n, d0 = len(found), self.dseq + 1
        if list(map(int, dseq_t)) != list(range(d0, d0 + n)):
            return None
        sseqs = list(map(int, sseq_t))
        s0 = sseqs[0]
        if s0 <= self.sseq or sseqs != list(range(s0, s0 + n)):  # a jump inside: one at a time
            return None
        if s0 > self.sseq + 1:
            self._gap(self.sseq, s0, GAP_SKIPPED)
        self.dseq, self.sseq = d0 + n - 1, sseqs[-1]
        head, tail, end = fmt  # sourced_headers(None, value), in one formatting each
        cols.sseqs += sseqs
        transforms = self.transforms
        cols.subjects += [first_match(transforms, x) for x in subjects] if transforms else subjects
        cols.headers += [
            f"{head}{q}{tail}{x}{end}".encode("utf-8", "surrogateescape")
            for q, x in zip(sseq_t, subjects, strict=True)
        ]
        cols.payloads += run.payloads
        cols.ts += map(int, ts_t)
        return str(pending_t[-1])

    def _run_pattern(self) -> re.Pattern[str]:
        """The current consumer's ack replies as a link carries them, one per line: the prefix,
        delivered once, sequence, consumer sequence, timestamp, pending (v2: more tokens after
        them), and the stored subject after the first "@" past them."""
        key = (self._fast_prefix, self._fast_v1)
        if self._run_re is None or self._run_re[0] != key:
            num = f"([0-9]{{1,{MAX_DIGITS}}})"  # a longer one: the run goes one message at a time
            nums = rf"1\.{num}\.{num}\.{num}\.{num}"
            rest = "@" if self._fast_v1 else r"\.[^@\n]*@"
            pattern = re.compile(f"^{re.escape(self._fast_prefix)}{nums}{rest}(.+)$", re.M | re.ASCII)
            self._run_re = (key, pattern)
        return self._run_re[1]

    def _new_batch(self) -> list[Delivery] | SourcedColumns:
        return SourcedColumns([], [], [], [], []) if self.FAST_INGEST else []

    def _set_lag(self, pending: str) -> None:
        if pending:
            n = int(pending)
            self.lag = n - 1 if n else 0

    def _learn_ack_prefix(self, reply: str) -> str:
        """The part of the current consumer's ack replies before the numbers (``$JS.ACK.<stream>.
        <consumer>.`` or with the domain and account hash), for ``_handle``'s short path."""
        t = reply.split(".")
        keep = 4 if len(t) == 9 else 6
        self._fast_prefix = ".".join(t[:keep]) + "."
        self._fast_v1 = len(t) == 9
        self._fast_cname = self.cname
        return self._fast_prefix

    def _gap_rule(self, ack: AckInfo) -> bool:
        """A source's: whether to take the delivery (``sseq`` and ``dseq`` move on), drop it,
        or (raising _Recreate) make a new consumer. ``sseq`` may jump: a source has sequences
        of its own and writes no skip markers."""
        if ack.sseq <= self.sseq:
            if ack.dseq == self.dseq + 1:
                self.dseq += 1
            return False
        if ack.dseq == self.dseq + 1:
            if ack.sseq > self.sseq + 1:
                self._gap(self.sseq, ack.sseq, GAP_SKIPPED)
            self.dseq, self.sseq = ack.dseq, ack.sseq
            return True
        if ack.dseq > self.dseq:
            raise _Recreate(f"delivery gap: {self.dseq} then {ack.dseq}")
        return False

    def _delivery(self, ack: AckInfo, m: InboundMsg) -> Delivery:
        # source_header_value's value, from the parsed reply (this runs per delivery)
        name, flt, dest = self._iname_parts
        value = f"{name} {ack.sseq_text} {flt} {dest} {m.subject}"  # the upstream's subject
        if self.ident:
            value = f"{value} {self.ident}"
        subject = first_match(self.transforms, m.subject) if self.transforms else m.subject
        return Delivery(ack.sseq, subject, sourced_headers(m.headers, value), m.payload, ack.ts)

    async def _flush(self, batch: Sequence[Delivery]) -> None:
        """Submit the batch; its commit is waited for later (pipelined: the next batches are read,
        decided and submitted while this one commits), by ``_settle``. Up to PIPELINE_DEPTH
        batches are in flight; each one expects the position the one before it writes, so the
        store refuses it if that one failed (core/jetstream/DESIGN.md). While the stored
        position is not known, a batch is submitted only after the one before it committed."""
        if not batch:
            return
        while len(self._flights) >= PIPELINE_DEPTH:
            await self._settle_oldest()
        before, after = None, None
        if self._flights:
            if self._stored is not None:
                after = self._flights[-1][1]
            else:
                before = self._settle
        taken, refusal, flight = await self.stream.submit_sourced(self.iname, batch, before, after)
        if flight is not None:
            self._flights.append((flight, batch[taken - 1].sseq))
        if refusal is not None:
            await self._settle()
            raise _Recreate(f"stream refused upstream sequence {batch[taken].sseq}", error=refusal)

    async def _settle_oldest(self) -> None:
        """Wait until the oldest batch in flight committed (``committed`` moves to its last
        upstream sequence); raises StoreError when it did not, after settling the batches
        behind it (the store refused them: they expected its position). The attempt then ends
        on this error with nothing in flight: left there, ``_settle_last`` would count the
        failure a second time (a doubled backoff) and log it as their PositionMismatch."""
        try:
            await self._settle_one()
        except StoreError:
            with contextlib.suppress(StoreError):
                await self._settle()
            raise

    async def _settle_one(self) -> None:
        flight, last = self._flights.popleft()
        await self.stream.settle_sourced(flight)
        self.committed = self._stored = last

    async def _settle(self) -> None:
        """Wait until every submitted batch committed; raises the first one's StoreError when
        one did not (the ones after it were refused: they expected its position)."""
        first: StoreError | None = None
        while self._flights:
            try:
                await self._settle_one()
            except StoreError as e:
                first = first or e
        if first is not None:
            raise first

    async def _settle_while_quiet(self, inbox: Mailbox[Inbound]) -> None:
        """While nothing arrives: settle the batches in flight, each as soon as its commit lands
        (the stream's consumers see its messages then). A delivery that arrives meanwhile is
        stored first: submitted behind those in flight, it commits right after them, where
        waiting for them all held it a whole commit (an fsync) plus a turn of the loop."""
        while self._flights and not len(inbox):
            commit = self._flights[0][0].commit
            if inbox.closed:  # the attempt ends: everything in flight, as before
                await self._settle()
                return
            if isinstance(commit, asyncio.Future) and not commit.done():
                commit.add_done_callback(lambda _f: inbox.wake())
                await inbox.wait()  # the commit landed, or a delivery came
                continue
            await self._settle_oldest()

    async def _settle_last(self) -> None:
        """At the end of an attempt: settle what is in flight; its failure is the source's error."""
        try:
            await self._settle()
        except StoreError as e:
            self.fails += 1
            self.error = api_error(self.SETUP_ERROR, err=str(e))
            log.error("stream %s source %s: store failed: %s", self.stream.name, self.upstream, e)


class MirrorWorker(SourceWorker):
    """A stream's mirror: the source machinery with the reference's mirror rules
    (``setupMirrorConsumer``, ``processInboundMirrorMsg``). Each message is stored under its
    upstream sequence with its upstream timestamp, so the mirror's position is its own last
    sequence, committed with the messages by construction (no ``SourcePosOp``). An upstream
    gap (messages expired, deleted or purged before the mirror read them) becomes deleted
    sequences, as the reference's skip markers do."""

    SETUP_ERROR = "JSMirrorConsumerSetupFailedErrF"  # 10029
    FAST_INGEST = False
    REQUIRES_FC_ERROR = "JSMirrorConsumerRequiresAckFCErr"  # 10214
    NAME_PREFIX = "JS_MIRROR_"
    META_PREFIX = "_nats.mirror"
    DELIVER_TOKEN = "M"
    API_LEVEL = 4  # the mirror's request asks for level 4 and sends no identity
    KIND = "mirror"

    def info(self) -> dict[str, Any]:
        d = super().info()
        d.pop("seq", None)  # the reference's mirror info has no seq
        return d

    def _consumer_hash(self) -> str:
        """The reference's ``createStableConsumerHash``: one hash, a stream has one mirror."""
        stream = self.stream
        base = f"{stream.name} {stream.account.name}"
        if stream.domain:
            base += f" {stream.domain}"
        return get_hash(base)

    def _headers(self, level: int) -> bytes | None:
        return encode_headers([("Nats-Required-Api-Level", str(level))]) if level >= 4 else None

    def _start(self, st: StreamState) -> dict[str, Any]:
        """After the mirror's last sequence; an empty mirror that never held anything from
        the configured start, or from the upstream's first message."""
        self.committed = self.sseq = st.last_seq
        if st.msgs or st.last_seq:
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": st.last_seq + 1}
        spec = self.spec
        if spec.get("opt_start_seq"):
            return {"deliver_policy": "by_start_sequence", "opt_start_seq": spec["opt_start_seq"]}
        if spec.get("opt_start_time"):
            return {"deliver_policy": "by_start_time", "opt_start_time": spec["opt_start_time"]}
        return {"deliver_policy": "all"}

    async def _created(self, resp: InboundMsg, delivered: int) -> None:
        """The consumer starts after ``delivered``: what lies before it is gone upstream. An
        empty mirror moves its first sequence there, a non-empty one marks the sequences in
        between deleted (the reference's purge and skip)."""
        if delivered > self.committed:
            self._gap(self.committed, delivered + 1, GAP_STARTED_PAST)
            await self.stream.ingest_mirrored([], skip_to=delivered)
            self.committed = delivered
        self.sseq = max(self.sseq, delivered)

    def _gap_rule(self, ack: AckInfo) -> bool:
        """The reference's mirror rules: an older ``sseq`` is dropped; the next ``sseq`` is
        taken; a later one is taken when ``dseq`` is contiguous (the upstream lost what lies
        between: stored as deleted sequences) and recreates the consumer when it is not."""
        if ack.sseq <= self.sseq:
            if ack.dseq == self.dseq + 1:
                self.dseq += 1
            return False
        if ack.sseq == self.sseq + 1 or ack.dseq == self.dseq + 1:
            if ack.sseq > self.sseq + 1:
                self._gap(self.sseq, ack.sseq, GAP_SKIPPED)
            self.dseq, self.sseq = ack.dseq, ack.sseq
            return True
        raise _Recreate(f"delivery gap: {self.dseq} then {ack.dseq}")

    def _delivery(self, ack: AckInfo, m: InboundMsg) -> Delivery:
        subject = first_match(self.transforms, m.subject) if self.transforms else m.subject
        return Delivery(ack.sseq, subject, mirrored_headers(m.headers), m.payload, ack.ts)

    async def _flush(self, batch: Sequence[Delivery]) -> None:
        if not batch:
            return
        try:
            await self.stream.ingest_mirrored(batch)
        except SequenceMismatch as e:
            # the reference's errLastSeqMismatch: start again after what the mirror holds
            raise _Recreate(f"mirror holds up to {e.last_seq}, upstream sent {batch[0].sseq}") from None
        self.committed = batch[-1].sseq


def _starts_after(ccr: Mapping[str, Any], cfg: Mapping[str, Any]) -> int:
    """The upstream sequence a created (or reset) consumer starts after: its
    ``delivered.stream_seq``, or for one acked by flow control its ack floor. What lies between
    those was delivered and not yet acked, by us: the consumer may have delivered it again
    before its answer was made (a durable already running), and it is ours to take."""
    key = "ack_floor" if cfg.get("ack_policy") == "flow_control" else "delivered"
    seqs = ccr.get(key)
    seq = seqs.get("stream_seq", 0) if isinstance(seqs, dict) else 0
    return seq if type(seq) is int and seq > 0 else 0


def _remote_error(error: Mapping[str, Any]) -> ApiError:
    """The upstream's create error, kept as it came (the reference stores it as returned)."""
    spec = ApiErrorSpec(
        "remote",
        _int_or(error.get("code"), 500),
        _int_or(error.get("err_code"), 10045),
        str(error.get("description", "")),
    )
    return ApiError(spec)


def _int_or(value: Any, default: int) -> int:
    return value if type(value) is int else default


# ------------------------------------------------------------------------------ a stream's sources


def _info(worker: SourceWorker, extras: bool) -> dict[str, Any]:
    d = worker.info()
    if extras:
        d["leafjet"] = worker.leafjet_info()
    return d


MIRROR_KEY = "\0mirror"  # the mirror's worker among the sources' (no index name is so)


class Sourcing:
    """The workers of one stream's sources (or its mirror), started, reconciled on update, and
    stopped with it."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.workers: dict[str, tuple[SourceWorker, anyio.CancelScope]] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def info(self, *, extras: bool = False) -> list[dict[str, Any]]:
        """The sources' ``StreamSourceInfo``; with ``extras`` (/jsz) each with its ``leafjet``
        object (core/jetstream/source_health.py)."""
        return [_info(w, extras) for k, (w, _s) in self.workers.items() if k != MIRROR_KEY]

    def mirror_info(self, *, extras: bool = False) -> dict[str, Any] | None:
        entry = self.workers.get(MIRROR_KEY)
        return _info(entry[0], extras) if entry is not None else None

    def _kick(self) -> None:
        for w, _s in self.workers.values():
            w.kick()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        account = self.stream.account
        async with anyio.create_task_group() as tg:
            self._tg = tg
            account.link_watchers.append(self._kick)
            try:
                await self.reconcile()
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None
                with contextlib.suppress(ValueError):
                    account.link_watchers.remove(self._kick)
                tg.cancel_scope.cancel()

    async def reconcile(self) -> None:
        """Start a worker for each configured source that has none; stop the removed ones
        (their stored positions stay: the source comes back where it left off, as the
        reference's does). A mirror's config cannot change; removing it (the reference's
        promotion) stops its worker and leaves a stream of its own."""
        if self._tg is None:
            return
        wanted = {index_name(s): s for s in self.stream.config.sources if s}
        if self.stream.config.mirror is not None:
            wanted[MIRROR_KEY] = self.stream.config.mirror
        for iname in [k for k in self.workers if k not in wanted]:
            _w, scope = self.workers.pop(iname)
            scope.cancel()
        new = [k for k in wanted if k not in self.workers]
        if not new:
            return
        # sources and mirrors read a leafjet upstream through the bulk read API (bulk_source.py,
        # subclasses of these workers: imported here, not at the top, as it imports this module)
        from core.jetstream.bulk_source import BulkMirrorWorker, BulkSourceWorker

        positions = await self.stream.store.source_positions()
        for iname in new:
            spec = wanted[iname]
            # a user's durable (ADR-60 `consumer`) is read through that consumer only
            durable = bool(spec.get("consumer"))
            if iname == MIRROR_KEY:
                mirror = MirrorWorker if durable else BulkMirrorWorker
                worker: SourceWorker = mirror(self.stream, spec, "", 0)
            else:
                source = SourceWorker if durable else BulkSourceWorker
                worker = source(self.stream, spec, iname, positions.get(iname, 0))
            scope = anyio.CancelScope()
            self.workers[iname] = (worker, scope)
            self._tg.start_soon(self._run_worker, worker, scope)

    async def _run_worker(self, worker: SourceWorker, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await worker.run()
            except Exception as e:  # run contains its failures; this is the last line
                log.error(
                    "stream %s source %s ended: %s", self.stream.name, worker.upstream, describe_failure(e)
                )
