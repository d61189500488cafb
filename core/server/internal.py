"""Internal receivers: in-process services (the JetStream API, streams) that subscribe like clients.

Routing is synchronous and must never block, so an internal receiver only puts what it gets into
a bounded in-memory queue; the service's own task (owned by the service's task group) does the
work.

A receiver with a ``Backlog`` (a stream's) counts the messages and bytes it holds until its
service says they are done (``Backlog.release``), against the reference's two limits
(``max_buffered_msgs``, ``max_buffered_size``) and an account-wide byte limit:
- past half of a limit, the publishing connection is marked stalled (``server.stalled``): it
  pauses after its current read chunk until the backlog is down to a quarter, or for at most
  ``write_deadline``, as it does for a slow client receiver. A plain publisher (no reply, no way
  to be told) is slowed, not dropped;
- at a limit, the message is refused as the reference refuses it (stream.go ``queueInbound``):
  a warning in the log, and a publisher with a reply subject gets ``refused(reply)`` (a stream
  answers "429 Too Many Requests", ``JSStreamTooManyRequests``).
The consumers' ack queues and the API's count with a backlog too, released as their task takes
each message (``release_on_receive``): a flood of large messages to ``$JS.ACK.…`` or
``$JS.API.…`` pauses its publisher, and past the limit is dropped, never queued without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

import anyio

from core.lograte import worth_logging
from core.server.accounts import Account, Subscription
from core.server.mailbox import Mailbox

log = logging.getLogger("leafjet.internal")

LEN_LIMIT = "IPQ len limit reached"  # the reference's errIPQLenLimitReached, in its log line
SIZE_LIMIT = "IPQ size limit reached"  # errIPQSizeLimitReached


class InboundMsg(NamedTuple):
    """One routed message. A NamedTuple, not a frozen dataclass: one is made per message, and a
    frozen dataclass's ``__init__`` costs about three times as much."""

    subject: str
    reply: str | None
    headers: bytes | None
    payload: bytes
    sub: Subscription


def inbound_size(subject: str, reply: str | None, headers: bytes | None, payload: bytes) -> int:
    """A queued message's size as the reference counts it (hdr + msg + reply + subject)."""
    return len(payload) + len(subject) + (len(headers) if headers else 0) + (len(reply) if reply else 0)


def fill_batch(batch: list[InboundMsg], inbox: Mailbox[InboundMsg], max_msgs: int, max_bytes: int) -> int:
    """Add to ``batch`` what is queued in ``inbox`` now, until it holds ``max_msgs`` messages or
    ``max_bytes`` bytes (``inbound_size``); its size in bytes. Never waits."""
    size = sum(inbound_size(m.subject, m.reply, m.headers, m.payload) for m in batch)
    while batch and len(batch) < max_msgs and size < max_bytes:
        try:
            m = inbox.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
        batch.append(m)
        size += inbound_size(m.subject, m.reply, m.headers, m.payload)
    return size


class Backlog:
    """Messages and bytes handed to a service and not yet done, with limits and watermarks.

    ``parent`` (the account's backlog) counts the bytes of all its children. A backlog past its
    high-water mark (half a limit) is handed to ``stall``, which marks it in ``server.stalled``;
    the publisher's reader then waits in ``wait_drained`` until it is down to its low-water mark
    (a quarter). Not thread-safe: the event loop's thread only.
    """

    __slots__ = (
        "_drained",
        "_high_bytes",
        "_high_msgs",
        "_low_bytes",
        "_low_msgs",
        "_watched",
        "bytes",
        "closed",
        "max_bytes",
        "max_msgs",
        "msgs",
        "parent",
        "stall",
    )

    def __init__(
        self,
        max_msgs: int,
        max_bytes: int,
        stall: Callable[[Backlog], None] | None = None,
        parent: Backlog | None = None,
    ) -> None:
        if max_msgs < 1 or max_bytes < 1:
            raise ValueError("backlog limits must be >= 1")
        self.max_msgs, self.max_bytes = max_msgs, max_bytes
        self._high_msgs, self._high_bytes = max_msgs // 2, max_bytes // 2
        self._low_msgs, self._low_bytes = max_msgs // 4, max_bytes // 4
        if stall is None and parent is not None:
            stall = parent.stall
        self.stall: Callable[[Backlog], None] | None = stall  # marks it in server.stalled
        self.parent = parent
        self.msgs = self.bytes = 0
        self.closed = False
        self._watched = False
        self._drained = asyncio.Event()

    def admit(self, size: int) -> str | None:
        """Count one message of ``size`` bytes; None, or why it cannot be taken (at a limit)."""
        parent = self.parent
        if self.msgs >= self.max_msgs:
            return LEN_LIMIT
        if self.bytes + size > self.max_bytes:
            return SIZE_LIMIT
        if parent is not None and parent.bytes + size > parent.max_bytes:
            return SIZE_LIMIT
        self.msgs += 1
        self.bytes += size
        if self.msgs > self._high_msgs or self.bytes > self._high_bytes:
            self._stalled()
        if parent is not None:
            parent.msgs += 1
            parent.bytes += size
            if parent.bytes > parent._high_bytes:
                parent._stalled()
        return None

    def release(self, msgs: int, size: int) -> None:
        """``msgs`` messages of ``size`` bytes in all are done (stored, answered or dropped)."""
        if self.closed:
            return  # close gave back what it held
        self.msgs -= msgs
        self.bytes -= size
        if self._watched and self.msgs <= self._low_msgs and self.bytes <= self._low_bytes:
            self._watched = False
            self._drained.set()
        if self.parent is not None:
            self.parent.release(msgs, size)

    def recount(self, msgs: int, size: int) -> None:
        """Its service lost track (its task failed and restarts): it holds ``msgs`` of ``size``."""
        self.release(self.msgs - msgs, self.bytes - size)

    def _stalled(self) -> None:
        if self.stall is not None and not self.closed:
            self.stall(self)

    async def wait_drained(self) -> None:
        """(``server.stalled``) Until this backlog is down to its low-water mark, or closed."""
        while not self.closed and (self.msgs > self._low_msgs or self.bytes > self._low_bytes):
            self._watched = True
            self._drained.clear()
            await self._drained.wait()

    def close(self) -> None:
        """No more messages: what it still counts leaves its parent; waiters go on."""
        if self.closed:
            return
        if self.parent is not None:
            self.parent.release(self.msgs, self.bytes)
        self.closed = True
        self.msgs = self.bytes = 0
        self._drained.set()


class InternalReceiver:
    """A subscriber whose messages go to a bounded queue read by one service task."""

    echo = True

    def __init__(
        self,
        name: str,
        account: Account,
        capacity: int = 65536,
        *,
        backlog: Backlog | None = None,
        refused: Callable[[str], None] | None = None,
        release_on_receive: bool = False,
    ) -> None:
        self.name = name
        self.account = account
        self.backlog = backlog
        self.refused = refused  # told the reply subject of a message refused at the backlog's limit
        # With a backlog, its max_msgs is the bound; the mailbox's own is only a backstop.
        if backlog is None:
            self.inbox: Mailbox[InboundMsg] = Mailbox(capacity)
        elif release_on_receive:
            self.inbox = _ReleasingInbox(backlog.max_msgs + 1, backlog)
        else:  # the service releases what it is done with (Backlog.release)
            self.inbox = Mailbox(backlog.max_msgs + 1)
        self.subs: list[Subscription] = []
        self.dropped = 0

    def subscribe(self, subject: str, queue: str | None = None) -> Subscription:
        sub = Subscription(self, subject, queue, f"{self.name}.{len(self.subs)}")
        self.subs.append(sub)
        self.account.subscribe(sub)
        return sub

    def unsubscribe_all(self) -> None:
        for sub in self.subs:
            self.account.unsubscribe(sub)
        self.subs.clear()

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None:
        backlog = self.backlog
        if backlog is not None:
            if self.inbox.closed:
                return
            why = backlog.admit(inbound_size(subject, reply, headers, payload))
            if why is not None:
                self._drop(why)
                if reply and self.refused is not None:
                    self.refused(reply)
                return
        try:
            self.inbox.send_nowait(InboundMsg(subject, reply, headers, payload, sub))
        except anyio.WouldBlock:
            if backlog is not None:  # cannot happen: the backlog's max_msgs is below capacity
                backlog.release(1, inbound_size(subject, reply, headers, payload))
            self._drop("queue full")
        except anyio.ClosedResourceError:
            pass

    def _drop(self, why: str) -> None:
        self.dropped += 1
        if worth_logging(self.dropped):
            log.warning(
                "Dropping messages due to excessive ingest rate on '%s' > '%s': %s (%d dropped so far)",
                self.account.name,
                self.name,
                why,
                self.dropped,
            )

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        if self.backlog is not None:
            for subject, reply, headers, payload in msgs:
                self.deliver(sub, subject, reply, headers, payload)
            return
        # No backlog to count against (a source's deliveries): ``deliver``'s queueing, inline,
        # each InboundMsg made by tuple.__new__ (a NamedTuple's own __new__ is a Python frame)
        send, new = self.inbox.send_nowait, tuple.__new__
        for subject, reply, headers, payload in msgs:
            try:
                send(new(InboundMsg, (subject, reply, headers, payload, sub)))
            except anyio.WouldBlock:
                self._drop("queue full")
            except anyio.ClosedResourceError:
                return

    def close(self) -> None:
        self.unsubscribe_all()
        self.inbox.close()
        if self.backlog is not None:
            self.backlog.close()


class _ReleasingInbox(Mailbox[InboundMsg]):
    """A mailbox whose backlog lets go of a message as soon as its reader takes it."""

    __slots__ = ("_backlog",)

    def __init__(self, capacity: int, backlog: Backlog) -> None:
        super().__init__(capacity)
        self._backlog = backlog

    def receive_nowait(self) -> InboundMsg:
        m = super().receive_nowait()
        self._backlog.release(1, inbound_size(m.subject, m.reply, m.headers, m.payload))
        return m
