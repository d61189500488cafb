"""Internal receivers: in-process services (the JetStream API, streams) that subscribe like clients.

Routing is synchronous and must never block, so an internal receiver only puts what it gets into
a bounded in-memory queue; the service's own task (owned by the service's task group) does the
work. A full queue drops the message and counts it, as the reference drops for a slow consumer;
a JetStream publisher then gets no acknowledgement and retries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import anyio

from core.server.accounts import Account, Subscription
from core.server.mailbox import Mailbox

log = logging.getLogger("leafjet.internal")


class InboundMsg(NamedTuple):
    """One routed message. A NamedTuple, not a frozen dataclass: one is made per message, and a
    frozen dataclass's ``__init__`` costs about three times as much."""

    subject: str
    reply: str | None
    headers: bytes | None
    payload: bytes
    sub: Subscription


class InternalReceiver:
    """A subscriber whose messages go to a bounded queue read by one service task."""

    echo = True

    def __init__(self, name: str, account: Account, capacity: int = 65536) -> None:
        self.name = name
        self.account = account
        self.inbox: Mailbox[InboundMsg] = Mailbox(capacity)
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
        try:
            self.inbox.send_nowait(InboundMsg(subject, reply, headers, payload, sub))
        except anyio.WouldBlock:
            self.dropped += 1
            if self.dropped & (self.dropped - 1) == 0:  # log at powers of two, not per message
                log.warning("%s: queue full, %d messages dropped so far", self.name, self.dropped)
        except anyio.ClosedResourceError:
            pass

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        for subject, reply, headers, payload in msgs:
            self.deliver(sub, subject, reply, headers, payload)

    def close(self) -> None:
        self.unsubscribe_all()
        self.inbox.close()
