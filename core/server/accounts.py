"""Accounts: isolated subject spaces, and the message router inside each.

A message published in one account is matched only against that account's subscriptions,
so accounts never see each other's traffic. Routing is synchronous and never blocks: a
delivery either lands in the receiver's bounded outbound buffer or the receiver is closed
as a slow consumer (see connection.py).

Federation links (leaf connections; later routes and gateways) are interest holders of an account
like any client: each ``LS+`` a link sent is one ``Subscription`` whose ``link`` slot names the
link. The account tells each link about the interest it may have (``interest.propagates``, through
the link's ``InterestLedger``) and routes messages to links by the rules of
``federation/DESIGN.md`` ("One interest graph"). An account with no links routes exactly as before.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from core.server.interest import (
    InterestLedger,
    Link,
    announces,
    new_lds_subject,
    propagates,
    with_ack_subject,
)
from core.sublist import Sublist, SublistResult

log = logging.getLogger("leafjet.accounts")


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

    __slots__ = (
        "delivered",
        "deny_filter",
        "link",
        "max_msgs",
        "queue",
        "receiver",
        "sid",
        "subject",
        "weight",
    )

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
        # The federation link holding this interest (then also its receiver), None for a local
        # client or service; set by Account.link_subscribe, never for a client's SUB.
        self.link: Link | None = None
        self.weight = 1  # a queue member's weight (a link's LS+ says it); 1 for everything local

    def __repr__(self) -> str:
        return f"Subscription({self.subject!r}, queue={self.queue!r}, sid={self.sid!r})"


class _Discard:
    """The receiver of an account's ``$LDS`` subject: interest that exists only to be announced."""

    echo = True

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None:
        pass

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        pass


class _Attached:
    """One attached link's state: what we announced to it, and the interest it holds here."""

    __slots__ = ("ledger", "link", "subs")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.ledger = InterestLedger()
        self.subs: dict[tuple[str, str | None], Subscription] = {}  # its LS+ keys


_PLANS_MAX = 4096


class Account:
    __slots__ = (
        "_attached",
        "_interest_watchers",
        "_plans",
        "lds_subject",
        "link_watchers",
        "links",
        "name",
        "sublist",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.sublist: Sublist[Subscription] = Sublist()
        self.links: list[Link] = []  # attached federation links, in attach order
        self._attached: dict[int, _Attached] = {}  # id(link) -> its state
        self.lds_subject: str | None = None  # $LDS.<nuid>, made when the first link attaches
        # Called after a link attached (its interest burst sent): JetStream's sourcing streams
        # retry a source that waits out a backoff at once (the reference's leaf-connect kick).
        self.link_watchers: list[Callable[[], None]] = []
        # subject -> callbacks told once when a subscription on exactly that subject arrives,
        # local or a link's: a push consumer created before its client subscribes to the
        # deliver subject (nats-py's ordered consumers do so) delivers at once, as the
        # reference's interest notifications make it, not at its next look
        self._interest_watchers: dict[str, list[Callable[[], None]]] = {}
        # A match result's plain subscriptions split into local ones and the distinct links,
        # kept per result object (results are immutable and replaced on any change, and the plan
        # holds its result, so an id is never reused while its plan lives): the per-message
        # loop then does no de-duplication.
        self._plans: dict[
            int, tuple[SublistResult[Subscription], tuple[Subscription, ...], tuple[Link, ...]]
        ] = {}

    def subscribe(self, sub: Subscription) -> None:
        """Add a local subscription (a client's SUB, an internal service's); with links, announce
        it to each of them through its ledger."""
        sublist = self.sublist
        if not self.links:
            sublist.insert(sub.subject, sub.queue, sub)
        else:
            n = len(sublist)
            sublist.insert(sub.subject, sub.queue, sub)
            if len(sublist) != n:  # a repeated insert of the same entry is no new interest
                self._announce(sub, sub.weight)
        if self._interest_watchers:
            self._interest_arrived(sub.subject)

    def watch_interest(self, subject: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when a subscription on exactly ``subject`` arrives (see
        ``_interest_watchers``); watching again with the same callback adds nothing."""
        callbacks = self._interest_watchers.setdefault(subject, [])
        if callback not in callbacks:
            callbacks.append(callback)

    def unwatch_interest(self, subject: str, callback: Callable[[], None]) -> None:
        callbacks = self._interest_watchers.get(subject)
        if callbacks is not None and callback in callbacks:
            callbacks.remove(callback)
            if not callbacks:
                del self._interest_watchers[subject]

    def _interest_arrived(self, subject: str) -> None:
        for callback in self._interest_watchers.pop(subject, ()):
            try:
                callback()
            except Exception:  # one watcher's fault must not undo the subscription
                log.exception("account %s: an interest watcher of %s failed", self.name, subject)

    def unsubscribe(self, sub: Subscription) -> None:
        if self.sublist.remove(sub.subject, sub.queue, sub) and self.links:
            self._announce(sub, -sub.weight)

    def publish(
        self,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        origin: Receiver | Link | None = None,
        route: str | None = None,
        queues: Sequence[str] | None = None,
    ) -> int:
        """Route one message to every matching subscription; returns how many received it.

        Each queue group gets the message once, at one member chosen at random. A receiver
        with ``echo`` off does not get its own messages. ``route``, when given, is the subject
        the subscriptions are matched on while the message keeps ``subject``: JetStream delivers
        a stored message, with its own subject, to a consumer's deliver subject or pull inbox.

        With links attached, ``_publish_linked`` (the federation rules); ``origin`` may then be a
        link, and ``queues`` the queue list of the frame it sent.
        """
        if self.links:
            return self._publish_linked(subject, reply, headers, payload, origin, route, queues)
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

    def publish_replies(self, replies: Sequence[tuple[str, bytes]]) -> None:
        """``publish(subject, None, None, payload)`` for each ``(subject, payload)``, in order:
        answers to many requesters at once (a stream's PubAcks for a batch). Answers in a row
        that reach exactly one subscription, the same one (a client's reply inbox, without a
        max or a deny filter), go to it as one run (``deliver_many``: one encode and one
        buffer entry, not one each); any other answer is published on its own."""
        if self.links:
            for subject, payload in replies:
                self.publish(subject, None, None, payload)
            return
        match = self.sublist.match
        run: list[tuple[str, str | None, bytes | None, bytes]] = []
        run_sub: Subscription | None = None
        for subject, payload in replies:
            result = match(subject)
            plain = result.plain
            if len(plain) == 1 and not result.queues:
                sub = plain[0]
                if sub.max_msgs is None and sub.deny_filter is None:
                    if sub is not run_sub:
                        if run_sub is not None:
                            run_sub.receiver.deliver_many(run_sub, run)
                            run = []
                        run_sub = sub
                    run.append((subject, None, None, payload))
                    continue
            if run_sub is not None:
                run_sub.receiver.deliver_many(run_sub, run)
                run, run_sub = [], None
            self.publish(subject, None, None, payload)
        if run_sub is not None:
            run_sub.receiver.deliver_many(run_sub, run)

    def publish_many(
        self,
        route: str,
        msgs: Sequence[tuple[str, str | None, bytes | None, bytes]],
        origin: Receiver | Link | None = None,
    ) -> None:
        """``publish(subject, reply, headers, payload, origin, route=route)`` for each of ``msgs``,
        in order, with ``route`` matched once: JetStream hands a pull request or a deliver subject
        a run of messages at a time, and a leaf link a run of deliveries it read."""
        if self.links:
            self._publish_many_linked(route, msgs, origin)
            return
        result = self.sublist.match(route)
        if any(s.max_msgs is not None for s in result.plain) or any(
            s.max_msgs is not None for _q, members in result.queues for s in members
        ):
            # a subscription that ends after N messages must see the run one message at a time
            for subject, reply, headers, payload in msgs:
                self.publish(subject, reply, headers, payload, origin, route=route)
            return
        skip_self = _deliver_run_locally(result.plain, route, msgs, origin)
        for _queue, members in result.queues:
            if skip_self:
                members = tuple(m for m in members if m.receiver is not origin)
                if not members:
                    continue
            for subject, reply, headers, payload in msgs:
                sub = members[0] if len(members) == 1 else random.choice(members)
                sub.receiver.deliver(sub, subject, reply, headers, payload)

    def publish_ack_run(
        self,
        route: str,
        replies: Sequence[str],
        payloads: Sequence[bytes],
        origin: Receiver | Link | None,
    ) -> bool:
        """Hand a link's run of messages on ``route`` (no headers, no queue list; each reply as
        it came, a delivery's ack reply still carrying its stored subject after "@") as it is to
        the one subscriber that takes such runs whole (``deliver_ack_run``: a stream source's
        deliver subject), when that subscriber is the only one the run goes to. Returns False,
        having routed nothing, otherwise: the caller then routes it as before. Why: a source's
        catch-up through a link is ~a thousand deliveries per read, and splitting each reply,
        making a tuple and an ``InboundMsg`` per message and queueing each one cost the hub about
        a fifth of its loop thread (py-spy, reference leaf -> leafjet hub)."""
        result = self.sublist.match(route)
        if result.queues or len(result.plain) != 1:
            return False
        sub = result.plain[0]
        take = getattr(sub.receiver, "deliver_ack_run", None)
        if (
            take is None
            or sub.link is not None
            or sub.max_msgs is not None
            or (sub.deny_filter is not None and not sub.deny_filter(route))
            or (origin is not None and not origin.echo and sub.receiver is origin)
        ):
            return False
        take(sub, route, replies, payloads)
        return True

    def _publish_many_linked(
        self,
        route: str,
        msgs: Sequence[tuple[str, str | None, bytes | None, bytes]],
        origin: Receiver | Link | None,
    ) -> None:
        """``publish_many`` with links attached: what ``_publish_linked`` does per message,
        routed once. Each local subscriber takes the run in one call; each link the message may
        go on to takes it in one call too (``forward_many`` where it has it: one buffer of
        frames, not one per message), every frame on ``route`` with the message's own subject
        after "@" in its ack reply. A queue group chooses per message (from a link no group is
        served: it names none), and a subscription with a message limit must see the messages
        one at a time: such a run goes message by message."""
        result = self.sublist.match(route)
        came_on = None if origin is None else self._attached.get(id(origin))
        okind = None if came_on is None else came_on.link.kind  # None: a local publisher
        plan = self._plans.get(id(result))
        if plan is None or plan[0] is not result:
            plan = self._plan(result)
        local = plan[1]
        if (result.queues and okind is None) or any(s.max_msgs is not None for s in local):
            for subject, reply, headers, payload in msgs:
                self.publish(subject, reply, headers, payload, origin, route=route)
            return
        _deliver_run_locally(local, route, msgs, origin)
        links = [
            link for link in plan[2] if link is not origin and (okind is None or propagates(link.kind, okind))
        ]
        if not links:
            return
        frames = [
            (reply if reply is None or subject == route else with_ack_subject(reply, subject), hdrs, payload)
            for subject, reply, hdrs, payload in msgs
        ]
        for link in links:
            link.forward_many(route, frames)

    def publish_run(
        self, subject: str, payloads: Sequence[bytes], origin: Receiver | Link | None = None
    ) -> None:
        """``publish(subject, None, None, p, origin)`` for each of ``payloads``, in order, routed
        once: one match, and each receiver and link gets the whole run in one call
        (``deliver_run`` where it has it, ``forward_run``), so a publisher's stream of one
        subject costs one routing per read, not one per message.

        A queue group picks a member per message, and a subscription with a message limit must
        see the messages one at a time: such a run is published message by message. A run that
        came over a link names no queue group (it serves none), so only plain interest counts."""
        result = self.sublist.match(subject)
        local: Sequence[Subscription]
        targets: Sequence[Link] = ()
        if self.links:
            came_on = None if origin is None else self._attached.get(id(origin))
            okind = None if came_on is None else came_on.link.kind
            if result.queues and okind is None:
                self._publish_each(subject, payloads, origin)
                return
            plan = self._plans.get(id(result))
            if plan is None or plan[0] is not result:
                plan = self._plan(result)
            local = plan[1]
            targets = [
                link
                for link in plan[2]
                if link is not origin and (okind is None or propagates(link.kind, okind))
            ]
        elif result.queues:
            self._publish_each(subject, payloads, origin)
            return
        else:
            local = result.plain
        for sub in local:
            if sub.max_msgs is not None:
                self._publish_each(subject, payloads, origin)
                return
        skip_self = origin is not None and not origin.echo
        msgs: list[tuple[str, str | None, bytes | None, bytes]] | None = None
        for sub in local:
            if skip_self and sub.receiver is origin:
                continue
            if sub.deny_filter is not None and not sub.deny_filter(subject):
                continue
            run = getattr(sub.receiver, "deliver_run", None)
            if run is not None:
                run(sub, subject, payloads)
                continue
            if msgs is None:
                msgs = [(subject, None, None, p) for p in payloads]
            sub.receiver.deliver_many(sub, msgs)
        for link in targets:
            link.forward_run(subject, payloads)

    def _publish_each(self, subject: str, payloads: Sequence[bytes], origin: Receiver | Link | None) -> None:
        for payload in payloads:
            self.publish(subject, None, None, payload, origin)

    # ------------------------------------------------------------------ federation links

    def attach_link(self, link: Link) -> None:
        """A link is up (its handshake done): track it with a fresh ledger and send it the whole
        interest it may have (the initial ``LS+`` burst), each key once.

        The first link makes the account's ``$LDS.<nuid>`` loop-detection subject: a local plain
        interest, so it is announced to every link like any other and comes back to us only
        through a cycle (``is_own_loop_subject``). It stays for the account's life, so every link
        and every reconnect sees the same subject."""
        if id(link) in self._attached:
            raise ValueError(f"link {link.name!r} is already attached to account {self.name!r}")
        if self.lds_subject is None:
            self.lds_subject = new_lds_subject()
            lds = Subscription(_Discard(), self.lds_subject, None, "$LDS")
            self.sublist.insert(lds.subject, None, lds)
        state = _Attached(link)
        ledger, kind = state.ledger, link.kind
        for sub in self.sublist.entries():
            holder = sub.link
            if holder is None:
                if not propagates(None, kind):
                    continue
            elif not announces(holder.kind, kind, sub.subject, sub.queue):
                continue
            ledger.apply(sub.subject, sub.queue, sub.weight)
        for frame in ledger.frames():  # each key once, a queue group with its total weight
            link.announce(frame)
        self._attached[id(link)] = state
        self.links.append(link)
        for watcher in list(self.link_watchers):
            watcher()

    def detach_link(self, link: Link) -> None:
        """A link is gone: remove every interest it held, each removal announced to the other
        links as an ``LS-`` would be, and forget its ledger. Unknown links are ignored."""
        state = self._attached.pop(id(link), None)
        if state is None:
            return
        self.links = [x for x in self.links if x is not link]  # by identity, as _attached
        for sub in state.subs.values():
            if self.sublist.remove(sub.subject, sub.queue, sub):
                self._announce(sub, -sub.weight)
        state.subs.clear()

    def link_subscribe(self, link: Link, subject: str, queue: str | None = None, weight: int = 1) -> bool:
        """An ``LS+`` arrived on ``link``; whether it was new interest (or a new weight).

        Plain: one subscription per (link, subject); a repeated ``LS+`` is a no-op. Queue: one
        per (link, subject, queue), weighing ``weight``; a repeated ``LS+`` sets the new weight and
        the other links hear the difference. Raises ValueError for an invalid subject or a
        weight below 1 (the link shell turns it into its protocol error), LookupError for a link
        that is not attached. The shell checks ``is_own_loop_subject`` first."""
        state = self._state(link)
        key = (subject, queue)
        sub = state.subs.get(key)
        if queue is None:
            if sub is not None:
                return False
            weight = 1
        elif weight < 1:
            raise ValueError(f"invalid queue weight {weight}")
        elif sub is not None:
            if weight == sub.weight:
                return False
            delta = weight - sub.weight
            sub.weight = weight
            self._announce(sub, delta)
            return True
        sub = Subscription(link, subject, queue, subject if queue is None else f"{subject} {queue}")
        sub.link = link
        sub.weight = weight
        self.sublist.insert(subject, queue, sub)  # raises ValueError before anything is recorded
        state.subs[key] = sub
        self._announce(sub, weight)
        if self._interest_watchers:
            self._interest_arrived(subject)
        return True

    def link_unsubscribe(self, link: Link, subject: str, queue: str | None = None) -> bool:
        """An ``LS-`` arrived on ``link``; False for a key it does not hold (ignored, as the
        reference ignores it)."""
        sub = self._state(link).subs.pop((subject, queue), None)
        if sub is None:
            return False
        if self.sublist.remove(subject, queue, sub):
            self._announce(sub, -sub.weight)
        return True

    def is_own_loop_subject(self, subject: str) -> bool:
        """``subject`` is this account's ``$LDS`` subject: an ``LS+`` for it means the interest
        graph has a cycle (the link shell answers the loop error and closes)."""
        return subject == self.lds_subject

    def link_interest(self, link: Link) -> list[tuple[str, str | None]]:
        """The (subject, queue) keys a link holds here (its LS+ interest), for monitoring."""
        state = self._attached.get(id(link))
        return list(state.subs) if state is not None else []

    def ledger(self, link: Link) -> InterestLedger:
        """What was announced to ``link`` (monitoring, tests)."""
        return self._state(link).ledger

    def _state(self, link: Link) -> _Attached:
        state = self._attached.get(id(link))
        if state is None:
            raise LookupError(f"link {link.name!r} is not attached to account {self.name!r}")
        return state

    def _announce(self, sub: Subscription, delta: int) -> None:
        """Pass one holder's change (``delta``: +-1 for a plain subject, the weight change for a
        queue member) to each link it propagates to, through that link's ledger."""
        holder = sub.link
        subject, queue = sub.subject, sub.queue
        origin = None if holder is None else holder.kind
        for state in self._attached.values():
            link = state.link
            if link is holder or not announces(origin, link.kind, subject, queue):
                continue
            frame = state.ledger.apply(subject, queue, delta)
            if frame is not None:
                link.announce(frame)

    def _plan(
        self, result: SublistResult[Subscription]
    ) -> tuple[SublistResult[Subscription], tuple[Subscription, ...], tuple[Link, ...]]:
        local = tuple(sub for sub in result.plain if sub.link is None)
        links: dict[int, Link] = {}
        for sub in result.plain:
            if sub.link is not None:
                links.setdefault(id(sub.link), sub.link)
        plan = (result, local, tuple(links.values()))
        if len(self._plans) >= _PLANS_MAX:
            self._plans.clear()
        self._plans[id(result)] = plan
        return plan

    def _publish_linked(
        self,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        origin: Receiver | Link | None,
        route: str | None,
        queues: Sequence[str] | None,
    ) -> int:
        """``publish`` in an account with links (federation/DESIGN.md "Routing").

        - local plain subscribers as without links;
        - each link at most once per message, never the link the message came from, and from a
          link only to a link whose interest was announced to it (``propagates(L.kind, O.kind)``);
          several of a link's subscriptions matching (``a.*`` and ``a.b``) still make one frame;
        - each queue group once: a local member if the group has one, else one link by weighted
          choice among its members, and that link's frame names the group in its queue list;
        - from a link: only the queue groups named in its frame (``queues``); none without.
        A link that gets plain interest and queue groups gets one frame with the queue list. Over
        a link the message goes on the matched subject (``route`` when given): the peer can only
        route it by the subject its interest was for (a JetStream delivery to a deliver subject
        crosses with that subject, not the stored message's own).
        Returns how many received it, each link counting once.
        """
        target = subject if route is None else route
        result = self.sublist.match(target)
        came_on = None if origin is None else self._attached.get(id(origin))
        okind = None if came_on is None else came_on.link.kind  # None: a local publisher
        skip_self = origin is not None and not origin.echo
        count = 0
        out: dict[int, tuple[Link, list[str]]] = {}  # id(link) -> (link, queue groups for it)
        plan = self._plans.get(id(result))
        if plan is None or plan[0] is not result:
            plan = self._plan(result)
        for sub in plan[1]:
            if skip_self and sub.receiver is origin:
                continue
            if sub.deny_filter is not None and not sub.deny_filter(target):
                continue
            sub.receiver.deliver(sub, subject, reply, headers, payload)
            count += 1
        for link in plan[2]:
            if link is not origin and (okind is None or propagates(link.kind, okind)):
                out[id(link)] = (link, [])
        if result.queues and (okind is None or queues):
            wanted = None if okind is None or not queues else frozenset(queues)
            for qname, members in result.queues:
                if wanted is not None and qname not in wanted:
                    continue
                local = [m for m in members if m.link is None and not (skip_self and m.receiver is origin)]
                if local:
                    sub = local[0] if len(local) == 1 else random.choice(local)
                    sub.receiver.deliver(sub, subject, reply, headers, payload)
                    count += 1
                    continue
                remote = [
                    m
                    for m in members
                    if m.link is not None
                    and m.link is not origin
                    and (okind is None or propagates(m.link.kind, okind))
                ]
                if not remote:
                    continue
                if len(remote) == 1:
                    sub = remote[0]
                else:
                    sub = random.choices(remote, weights=[m.weight for m in remote])[0]
                holder = sub.link
                assert holder is not None
                entry = out.get(id(holder))
                if entry is None:
                    out[id(holder)] = (holder, [qname])
                else:
                    entry[1].append(qname)
        if out and target != subject and reply is not None:
            # A JetStream delivery: the peer routes it by the deliver subject and must hand its
            # client the stored message's own subject, which rides at the end of the ack reply
            # (the reference's ``$JS.ACK.…@<subject>``; ``split_ack_subject`` undoes it).
            reply = with_ack_subject(reply, subject)
        for link, qnames in out.values():
            link.forward(target, reply, headers, payload, tuple(qnames))
        return count + len(out)


class AccountRegistry:
    def __init__(self, names: tuple[str, ...] = ()) -> None:
        self._accounts: dict[str, Account] = {}
        # Called with each account made after start-up: routes attach themselves to it, since a
        # route carries every account (hub/routes/).
        self.watchers: list[Callable[[Account], None]] = []
        for name in names:
            self.get(name)

    def get(self, name: str) -> Account:
        acc = self._accounts.get(name)
        if acc is None:
            acc = self._accounts[name] = Account(name)
            for watcher in list(self.watchers):
                watcher(acc)
        return acc

    def find(self, name: str) -> Account | None:
        """The account, if it exists (never makes one)."""
        return self._accounts.get(name)

    def __iter__(self) -> Iterator[Account]:
        return iter(self._accounts.values())


def _deliver_run_locally(
    subs: Sequence[Subscription],
    route: str,
    msgs: Sequence[tuple[str, str | None, bytes | None, bytes]],
    origin: Receiver | Link | None,
) -> bool:
    """``publish_many``'s run to each local plain subscription in one call (not the publisher's
    own without echo, not one whose deny filter refuses ``route``); whether the publisher's own
    are skipped."""
    skip_self = origin is not None and not origin.echo
    for sub in subs:
        if skip_self and sub.receiver is origin:
            continue
        if sub.deny_filter is not None and not sub.deny_filter(route):
            continue
        sub.receiver.deliver_many(sub, msgs)
    return skip_self
