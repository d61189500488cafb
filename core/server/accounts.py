"""Accounts: isolated subject spaces, and the message router inside each.

A message published in one account is matched only against that account's subscriptions,
so accounts never see each other's traffic. Routing is synchronous and never blocks: a
delivery either lands in the receiver's bounded outbound buffer or the receiver is closed
as a slow consumer (see connection.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from core.sublist import Sublist


class Receiver(Protocol):
    """Anything a subscription delivers to: a client connection or an internal service."""

    echo: bool

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None: ...

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        """``deliver`` of each ``(subject, reply, headers, payload)``, in order. The router calls
        it only for a subscription without a message limit (``max_msgs``): one that may end
        within the run gets the messages one publish at a time."""
        ...


class Subscription:
    """One SUB of one receiver. Identity-hashed: two SUBs on the same subject are two entries."""

    __slots__ = ("delivered", "deny_filter", "max_msgs", "queue", "receiver", "sid", "subject")

    def __init__(self, receiver: Receiver, subject: str, queue: str | None, sid: str) -> None:
        self.receiver = receiver
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.max_msgs: int | None = None  # auto-unsubscribe after this many deliveries
        self.delivered = 0
        # Set when the subscription is a wildcard that overlaps the owner's subscribe-deny list:
        # each message is then checked against the deny list before delivery.
        self.deny_filter: Callable[[str], bool] | None = None

    def __repr__(self) -> str:
        return f"Subscription({self.subject!r}, queue={self.queue!r}, sid={self.sid!r})"


class Account:
    __slots__ = ("name", "sublist")

    def __init__(self, name: str) -> None:
        self.name = name
        self.sublist: Sublist[Subscription] = Sublist()

    def subscribe(self, sub: Subscription) -> None:
        self.sublist.insert(sub.subject, sub.queue, sub)

    def unsubscribe(self, sub: Subscription) -> None:
        self.sublist.remove(sub.subject, sub.queue, sub)

    def publish(
        self,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        origin: Receiver | None = None,
        route: str | None = None,
    ) -> int:
        """Route one message to every matching subscription; returns how many received it.

        Each queue group gets the message once, at one member chosen at random. A receiver
        with ``echo`` off does not get its own messages. ``route``, when given, is the subject
        the subscriptions are matched on while the message keeps ``subject``: JetStream delivers
        a stored message, with its own subject, to a consumer's deliver subject or pull inbox.
        """
        target = subject if route is None else route
        result = self.sublist.match(target)
        count = 0
        for sub in result.plain:
            if sub.receiver is origin and not origin.echo:
                continue
            if sub.deny_filter is not None and not sub.deny_filter(target):
                continue
            sub.receiver.deliver(sub, subject, reply, headers, payload)
            count += 1
        for _queue, members in result.queues:
            if origin is not None and not origin.echo:
                members = tuple(m for m in members if m.receiver is not origin)
                if not members:
                    continue
            sub = members[0] if len(members) == 1 else random.choice(members)
            sub.receiver.deliver(sub, subject, reply, headers, payload)
            count += 1
        return count

    def publish_many(self, route: str, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]) -> None:
        """``publish(subject, reply, headers, payload, route=route)`` for each of ``msgs``, in order,
        with ``route`` matched once: JetStream hands a pull request a run of messages at a time."""
        result = self.sublist.match(route)
        if any(s.max_msgs is not None for s in result.plain) or any(
            s.max_msgs is not None for _q, members in result.queues for s in members
        ):
            # a subscription that ends after N messages must see the run one message at a time
            for subject, reply, headers, payload in msgs:
                self.publish(subject, reply, headers, payload, route=route)
            return
        for sub in result.plain:
            if sub.deny_filter is not None and not sub.deny_filter(route):
                continue
            sub.receiver.deliver_many(sub, msgs)
        for _queue, members in result.queues:
            for subject, reply, headers, payload in msgs:
                sub = members[0] if len(members) == 1 else random.choice(members)
                sub.receiver.deliver(sub, subject, reply, headers, payload)


class AccountRegistry:
    def __init__(self, names: tuple[str, ...] = ()) -> None:
        self._accounts: dict[str, Account] = {}
        for name in names:
            self.get(name)

    def get(self, name: str) -> Account:
        acc = self._accounts.get(name)
        if acc is None:
            acc = self._accounts[name] = Account(name)
        return acc

    def __iter__(self) -> Iterator[Account]:
        return iter(self._accounts.values())
