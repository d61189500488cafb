"""Links as interest holders: the propagation rule and the per-link interest ledger (pure).

A link (a leaf connection today; routes and gateways later) is one more holder of interest in an
account's ``Sublist`` (``accounts.Account.link_subscribe``). Two questions decide what crosses it:

- **who tells whom** (``propagates``): interest held by a link of one kind, or by local clients
  and services, is announced to links of some kinds only. Messages flow back along the same
  edges: a message that came in on link O goes out on link L only if L's interest was announced
  to O, ``propagates(L.kind, O.kind)``. The full rule and its reasons are in
  ``federation/DESIGN.md`` ("One interest graph");
- **what was already said** (``InterestLedger``): per link, what we announced to it, so that a
  second holder of the same subject sends nothing, the last one leaving sends ``LS-``, and a
  queue group's total weight is re-sent on every change (nats-server's ``smap``,
  leafnode.go ``updateSmap``).

Nothing here does IO: the account hands a link an ``LeafInterestFrame`` and the link shell
(``federation/leafnode/``) decides whether the peer may get it and writes it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from core.server.accounts import Subscription

LDS_PREFIX = "$LDS."  # an account's loop-detection subject is LDS_PREFIX + a nuid


class LinkKind(Enum):
    """What a link is to us; decides which interest crosses it (``propagates``)."""

    LEAF_ACCEPTED = "leaf-accepted"  # a leaf that dialled us: we are its hub
    LEAF_SOLICITED = "leaf-solicited"  # we dialled it: it is our hub, we are its spoke
    ROUTE = "route"  # a server of our own cluster (hub/routes/)
    GATEWAY = "gateway"  # another cluster (not used yet)


_LEAFS = frozenset({LinkKind.LEAF_ACCEPTED, LinkKind.LEAF_SOLICITED})
_EVERY = frozenset(LinkKind)

# origin of the interest (None: local clients and services) -> kinds of links it is announced to.
# A link's own interest is never announced back to that same link; the account skips it.
_EDGES: dict[LinkKind | None, frozenset[LinkKind]] = {
    None: _EVERY,  # local interest goes everywhere
    # a leaf of ours: to every other link (we are the hub that joins our leafs to the rest)
    LinkKind.LEAF_ACCEPTED: _EVERY,
    # our hub: only to our own leafs. A spoke tells a hub only its own and its own leafs'
    # interest, never another hub's (nats-server sublist.go 1566-1573, leafnode.go updateSmap):
    # two hubs joined through a spoke would otherwise each route the other's traffic through it.
    LinkKind.LEAF_SOLICITED: frozenset({LinkKind.LEAF_ACCEPTED}),
    # a route peer: to the leafs that dialled us and to gateways; never to another route (the
    # cluster is a full mesh: every peer already heard it from the server that holds it), and
    # never to our hub (nats-server's updateSmap: a spoke tells its hub only local and accepted-
    # leaf interest; each server of a cluster of spokes dials the hub itself, so the hub reaches
    # each directly and a message from it never crosses a route as well)
    LinkKind.ROUTE: frozenset({LinkKind.LEAF_ACCEPTED, LinkKind.GATEWAY}),
    # a gateway, for now like a route: to leafs and to the other mesh kind, never to its own kind
    # (gateways form a full mesh of clusters; a message never transits a cluster)
    LinkKind.GATEWAY: _LEAFS | {LinkKind.ROUTE},
}


def propagates(origin: LinkKind | None, target: LinkKind) -> bool:
    """Whether interest held by ``origin`` (a link's kind, ``None`` for local clients and
    services) is announced to a link of kind ``target``.

    The same table gives the direction messages may take: a message that arrived on a link of
    kind O is forwarded to a link of kind L only if ``propagates(L, O)``."""
    return target in _EDGES[origin]


def is_lds_subject(subject: str) -> bool:
    """A loop-detection subject (any account's, any server's). Such interest held by a link is
    announced to every other link, past the ``propagates`` table (nats-server updateSmap's
    ``!isLDS``): without that, a spoke joined to two hubs that are also joined to each other
    would never see its own ``$LDS`` come back, and every message would reach it twice."""
    return subject.startswith(LDS_PREFIX)


def announces(origin: LinkKind | None, target: LinkKind, subject: str, queue: str | None) -> bool:
    """Whether a holder's interest in ``subject`` (``queue``) reaches a link of kind ``target``:
    the ``propagates`` table, widened for a link's ``$LDS`` subject (``is_lds_subject``), except
    where a route is at either end. A route peer's ``$LDS`` never goes on to another route (one
    hop: every peer heard it directly) nor to our hub (each server of the cluster dials the hub
    itself, so the hub would see a spoke's ``$LDS`` come back through another spoke and call it a
    loop: nats-server tells them apart by cluster name, leafjet's leaf links carry none yet), and
    our hub's ``$LDS`` is not told to routes (nats-server sends routes no spoke interest)."""
    if propagates(origin, target):
        return True
    return (
        origin is not None
        and queue is None
        and is_lds_subject(subject)
        and origin is not LinkKind.ROUTE
        and target is not LinkKind.ROUTE
    )


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def nuid() -> str:
    """22 random base62 characters, the shape of nats-server's nuid (a subject token)."""
    return "".join(secrets.choice(_BASE62) for _ in range(22))


def new_lds_subject() -> str:
    """``$LDS.<nuid>``."""
    return LDS_PREFIX + nuid()


class LeafInterestFrame(NamedTuple):
    """One interest frame to send on a link.

    ``op`` is ``"LS+"`` or ``"LS-"``; ``queue`` is the queue group (None for a plain subject);
    ``weight`` is the group's total weight, only on a queue ``LS+`` (None otherwise)."""

    op: str
    subject: str
    queue: str | None = None
    weight: int | None = None

    def __str__(self) -> str:
        if self.queue is None:
            return f"{self.op} {self.subject}"
        if self.weight is None:
            return f"{self.op} {self.subject} {self.queue}"
        return f"{self.op} {self.subject} {self.queue} {self.weight}"

    def encode(self) -> bytes:
        """The wire line with its CRLF. Subjects and queue names are decoded with
        ``surrogateescape`` (core/server/DESIGN.md), so the bytes round-trip."""
        return (str(self) + "\r\n").encode("utf-8", "surrogateescape")


class InterestLedger:
    """What we announced to one link: plain subjects reference counted, queue keys weighted.

    ``apply(subject, queue, delta)`` records one holder's change and returns the frame to send,
    if any:
    - plain: ``delta`` is +1/-1 per holder; ``LS+`` on 0→n, ``LS-`` on n→0, nothing between;
    - queue: ``delta`` is the change of the group's weight (a local member weighs 1, a link's
      what the link said); ``LS+ subject queue <total>`` on every change, ``LS- subject queue``
      when the total reaches 0.

    A fresh ledger per attach: after a reconnect the peer learns our whole interest from scratch,
    so a flap can neither duplicate nor lose a key.
    """

    __slots__ = ("_plain", "_queues")

    def __init__(self) -> None:
        self._plain: dict[str, int] = {}
        self._queues: dict[tuple[str, str], int] = {}

    def apply(self, subject: str, queue: str | None, delta: int) -> LeafInterestFrame | None:
        """Record ``delta`` on the key; the frame to send, or None.

        A remove of a key that is not held is ignored (None), and a count never goes below 0.
        In normal flow neither happens: the account calls ``apply`` once per subscription actually
        inserted into and once per subscription actually removed from its ``Sublist`` (an insert
        of an entry already there, or a remove of one that is not, changes nothing and is not
        passed on), always with the same weight in both directions, and a ledger is created empty
        when its link attaches and then fed the whole current interest. The guard is there so
        that a bug elsewhere costs one missing ``LS-`` rather than a negative count that would
        hide the next ``LS+``.
        """
        if delta == 0:
            return None
        if queue is None:
            plain = self._plain
            n = plain.get(subject, 0)
            if n == 0:
                if delta < 0:
                    return None
                plain[subject] = delta
                return LeafInterestFrame("LS+", subject)
            m = n + delta
            if m <= 0:
                del plain[subject]
                return LeafInterestFrame("LS-", subject)
            plain[subject] = m
            return None
        queues = self._queues
        key = (subject, queue)
        w = queues.get(key, 0)
        if w == 0 and delta < 0:
            return None
        total = w + delta
        if total <= 0:
            del queues[key]
            return LeafInterestFrame("LS-", subject, queue)
        queues[key] = total
        return LeafInterestFrame("LS+", subject, queue, total)

    def frames(self) -> Iterator[LeafInterestFrame]:
        """One ``LS+`` per key for everything held, queue keys with their total weight: a new
        link's first burst, built in the ledger first so each key goes out once."""
        for subject in self._plain:
            yield LeafInterestFrame("LS+", subject)
        for (subject, queue), weight in self._queues.items():
            yield LeafInterestFrame("LS+", subject, queue, weight)

    def keys(self) -> Iterator[str]:
        """The announced keys as nats-server names them: ``"subject"`` or ``"subject queue"``."""
        yield from self._plain
        for subject, queue in self._queues:
            yield f"{subject} {queue}"

    def announced(self) -> dict[tuple[str, str | None], int]:
        """Everything currently announced: ``(subject, None)`` → how many holders stand behind the
        plain subject, ``(subject, queue)`` → the group's total weight the peer was told."""
        out: dict[tuple[str, str | None], int] = {(s, None): n for s, n in self._plain.items()}
        for (subject, queue), weight in self._queues.items():
            out[subject, queue] = weight
        return out

    def __len__(self) -> int:
        return len(self._plain) + len(self._queues)

    def __contains__(self, key: object) -> bool:
        """``(subject, queue)`` (queue None for plain) is announced."""
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        subject, queue = key
        return subject in self._plain if queue is None else key in self._queues


class Link(Protocol):
    """What an account needs from a link (a leaf connection; later a route or a gateway).

    Links are identity-keyed: the account tracks them by ``id()``, so a link class may define
    ``__eq__`` freely. ``announce`` and ``forward`` are called synchronously from the router
    (from inside ``Account.publish``/``subscribe``): they must not block, must not raise for a
    closing link (drop the frame instead), and must not call back into the account.
    """

    kind: LinkKind

    @property
    def name(self) -> str: ...  # for log lines

    echo: bool  # True: a link never gets its own messages back anyway (the router skips it)

    def announce(self, frame: LeafInterestFrame) -> None:
        """Send ``frame`` to the peer, unless the peer may not have it (its import/deny rules;
        a denied literal subject must never be announced, see federation/DESIGN.md "Domains").
        The ledger records the frame as announced either way, so the decision must depend on
        the subject alone: the ``LS-`` of a subject whose ``LS+`` was withheld is withheld too.
        """
        ...

    def forward(
        self,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        queues: tuple[str, ...],
    ) -> None:
        """Write one ``LMSG``/``HMSG``: ``queues`` are the queue groups the peer is to serve
        (empty: its plain subscribers only)."""
        ...

    def forward_many(self, subject: str, msgs: Sequence[tuple[str | None, bytes | None, bytes]]) -> None:
        """``forward(subject, reply, headers, payload, ())`` for each of ``msgs``, in order (a
        consumer's run of deliveries); a link may send them as one buffer."""
        ...

    def forward_run(self, subject: str, payloads: Sequence[bytes]) -> None:
        """``forward(subject, None, None, p, ())`` for each of ``payloads``, in order (a
        publisher's run of one subject); a link may send them as one buffer."""
        ...

    # A link is the ``receiver`` of the Subscriptions that hold its interest, so it is a
    # ``core.server.accounts.Receiver`` too. The account never calls these two on a link (it
    # routes link subscriptions through ``forward``); ``LinkDelivery`` implements them as a
    # forward without queues for any code that reaches a link through a plain subscription.
    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None: ...

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None: ...


class LinkDelivery:
    """Mixin for a link class: ``deliver``/``deliver_many`` as ``forward`` with no queue list,
    and ``forward_many``/``forward_run`` as one ``forward`` per message.

    ``Account`` never calls them on a link; they make a link a complete ``Receiver``, so code
    that holds a link subscription and delivers to it directly still sends a correct frame."""

    __slots__ = ()

    forward: Callable[[str, str | None, bytes | None, bytes, tuple[str, ...]], None]  # the link's own

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None:
        self.forward(subject, reply, headers, payload, ())

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        for subject, reply, headers, payload in msgs:
            self.forward(subject, reply, headers, payload, ())

    # a link that can send a run as one buffer overrides these two
    def forward_many(self, subject: str, msgs: Sequence[tuple[str | None, bytes | None, bytes]]) -> None:
        for reply, headers, payload in msgs:
            self.forward(subject, reply, headers, payload, ())

    def forward_run(self, subject: str, payloads: Sequence[bytes]) -> None:
        for payload in payloads:
            self.forward(subject, None, None, payload, ())


# ---------------------------------------------------------------------------------------------
# A JetStream delivery across a link. JetStream delivers a stored message (its own subject) to a
# deliver subject; across a link the frame carries the deliver subject (the peer's interest) and
# the message's subject rides after an "@" at the end of its ack reply, as nats-server does:
# ``$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>@<subject>``. Subject tokens may
# contain "@", so only the first "@" after the ack token's eight dots counts.

_ACK_PREFIX = "$JS.ACK."


def _ack_suffix_index(reply: str) -> int:
    if not reply.startswith(_ACK_PREFIX):
        return -1
    i = reply.find("@")
    while i != -1:  # the first "@" with eight dots before it (str methods: this runs per delivery)
        if reply.count(".", 0, i) >= 8:
            return i
        i = reply.find("@", i + 1)
    return -1


def with_ack_subject(reply: str, subject: str) -> str:
    """``reply`` carrying ``subject`` for the peer, when it is an ack reply not carrying one yet."""
    if not reply.startswith(_ACK_PREFIX) or _ack_suffix_index(reply) != -1:
        return reply
    return f"{reply}@{subject}"


def split_ack_subject(reply: str | None) -> tuple[str | None, str | None]:
    """``(reply, delivered subject)`` from a reply that came over a link: the subject the receiving
    client must see, or None when the reply carries none."""
    if reply is None:
        return None, None
    i = _ack_suffix_index(reply)
    if i == -1:
        return reply, None
    return reply[:i], reply[i + 1 :]
