"""Account routing: publish_many delivers exactly what a publish per message would."""

from __future__ import annotations

from core.server.accounts import Account, Subscription
from core.server.interest import LinkDelivery


class Recorder:
    """A receiver that records deliveries and, like a client connection, drops a subscription
    once it has had ``max_msgs`` messages."""

    echo = True

    def __init__(self, account: Account, log: list) -> None:
        self.account = account
        self.log = log

    def deliver(self, sub, subject, reply, headers, payload) -> None:
        self.log.append((sub.sid, subject, reply, headers, payload))
        sub.delivered += 1
        if sub.max_msgs is not None and sub.delivered >= sub.max_msgs:
            self.account.unsubscribe(sub)

    def deliver_many(self, sub, msgs) -> None:
        self.log.append(("run", sub.sid, len(msgs)))
        for m in msgs:
            self.deliver(sub, *m)


def _account(log: list, max_msgs: int | None = None) -> Account:
    acc = Account("A")
    rec = Recorder(acc, log)
    for sid, subject, queue in (("1", "inbox.x", None), ("2", "inbox.*", None), ("3", "inbox.x", "q")):
        sub = Subscription(rec, subject, queue, sid)
        if sid == "1":
            sub.max_msgs = max_msgs
        if sid == "2":
            sub.deny_filter = lambda subject: subject != "inbox.x"  # denied on this subject
        acc.subscribe(sub)
    return acc


MSGS = [(f"s.{i}", f"$JS.ACK.{i}", b"h" if i % 2 else None, b"%d" % i) for i in range(6)]


def test_publish_many_matches_one_publish_per_message():
    one, many = [], []
    acc = _account(one)
    for subject, reply, headers, payload in MSGS:
        acc.publish(subject, reply, headers, payload, route="inbox.x")
    _account(many).publish_many("inbox.x", MSGS)
    assert ("run", "1", len(MSGS)) in many, "a plain subscription gets the run in one call"
    many = [m for m in many if m[0] != "run"]
    assert sorted(many) == sorted(one)
    assert [m for m in many if m[0] == "1"] == [("1", *m) for m in MSGS], "in order, per subscription"
    assert not [m for m in many if m[0] == "2"], "the deny filter applies"


def test_publish_many_stops_a_subscription_at_its_max_msgs():
    one, many = [], []
    acc = _account(one, max_msgs=2)
    for subject, reply, headers, payload in MSGS:
        acc.publish(subject, reply, headers, payload, route="inbox.x")
    _account(many, max_msgs=2).publish_many("inbox.x", MSGS)
    assert not [m for m in many if m[0] == "run"], "one publish at a time while a subscription may end"
    assert many == one
    assert [m[4] for m in many if m[0] == "1"] == [b"0", b"1"]


class _Link(LinkDelivery):
    """The least a link needs to be: it records what it is told (runs as one ``forward`` per
    message, ``LinkDelivery``'s default, unless a subclass sends them as one)."""

    echo = True

    def __init__(self, kind) -> None:
        self.kind, self.name = kind, "link"
        self.frames: list = []
        self.forwarded: list = []

    def announce(self, frame) -> None:
        self.frames.append(str(frame))

    def forward(self, subject, reply, headers, payload, queues) -> None:
        self.forwarded.append((subject, queues))


def test_local_subscriptions_are_announced_to_each_link_and_withdrawn():
    from core.server.interest import LinkKind

    acc = Account("A")
    rec = Recorder(acc, [])
    before = Subscription(rec, "old.x", None, "1")
    acc.subscribe(before)
    link = _Link(LinkKind.LEAF_SOLICITED)
    acc.attach_link(link)
    assert link.frames[-1] == "LS+ old.x" and link.frames[0] == f"LS+ {acc.lds_subject}"
    sub = Subscription(rec, "new.x", "q", "2")
    acc.subscribe(sub)
    acc.subscribe(Subscription(rec, "new.x", "q", "3"))
    acc.unsubscribe(sub)
    acc.unsubscribe(before)
    assert link.frames[2:] == ["LS+ new.x q 1", "LS+ new.x q 2", "LS+ new.x q 1", "LS- old.x"]


def test_a_repeated_subscribe_of_one_entry_is_announced_once():
    """The sublist stores the same entry once; the links hear of it once, and its one removal
    withdraws it."""
    from core.server.interest import LinkKind

    acc = Account("A")
    link = _Link(LinkKind.LEAF_ACCEPTED)
    acc.attach_link(link)
    sub = Subscription(Recorder(acc, []), "a.b", None, "1")
    acc.subscribe(sub)
    acc.subscribe(sub)
    acc.unsubscribe(sub)
    acc.unsubscribe(sub)
    assert link.frames[1:] == ["LS+ a.b", "LS- a.b"]


def test_an_account_without_links_announces_nothing_and_has_no_loop_subject():
    acc = _account([])
    assert acc.links == [] and acc.lds_subject is None
    assert all(s.link is None and s.weight == 1 for s in acc.sublist.entries())
    assert len(acc.sublist) == 3


# ---------------------------------------------------------------- publish_run


class _RunRecorder(Recorder):
    """A receiver with ``deliver_run``, as a client connection has."""

    def deliver_run(self, sub, subject, payloads) -> None:
        self.log.append(("run", sub.sid, len(payloads)))
        for p in payloads:
            self.deliver(sub, subject, None, None, p)


class _RunLink(_Link):
    def forward_run(self, subject, payloads) -> None:
        self.forwarded.append(("run", len(payloads)))
        for _p in payloads:
            self.forward(subject, None, None, _p, ())


def _linked_account(log: list, links: dict, *, max_msgs: int | None = None, echo: bool = True):
    """An account with local plain, wildcard, denied and queue interest, and three links (a
    route, an accepted and a solicited leaf) holding plain and queue interest on ``a.b``."""
    import random

    from core.server.interest import LinkKind

    random.seed(7)
    acc = Account("A")
    me = _RunRecorder(acc, log)
    me.echo = echo
    other = Recorder(acc, log)
    for receiver, sid, subject, queue in (
        (me, "mine", "a.b", None),
        (other, "plain", "a.b", None),
        (other, "wild", "a.*", None),
        (other, "denied", "a.>", None),
        (other, "q1", "a.b", "q"),
        (me, "q2", "a.b", "q"),
    ):
        sub = Subscription(receiver, subject, queue, sid)
        if sid == "plain":
            sub.max_msgs = max_msgs
        if sid == "denied":
            sub.deny_filter = lambda subject: subject != "a.b"
        acc.subscribe(sub)
    for kind, cls in (
        (LinkKind.ROUTE, _RunLink),
        (LinkKind.LEAF_ACCEPTED, _Link),
        (LinkKind.LEAF_SOLICITED, _RunLink),
    ):
        link = links[kind] = cls(kind)
        acc.attach_link(link)
        acc.link_subscribe(link, "a.b")
        acc.link_subscribe(link, "a.b", "rq", 2)
    return acc, me


def _per_target(log: list, links: dict) -> dict:
    """What each subscription and link got, in order (runs flattened)."""
    got: dict = {}
    for entry in log:
        if entry[0] != "run":
            got.setdefault(entry[0], []).append(entry[4])
    for kind, link in links.items():
        got[kind] = [f for f in link.forwarded if f[0] != "run"]
    return got


def test_publish_run_delivers_what_one_publish_per_message_would():
    from core.server.interest import LinkKind

    payloads = [b"%d" % i for i in range(5)]
    for max_msgs in (None, 2):
        for echo in (True, False):
            for origin_kind in (None, "me", LinkKind.ROUTE, LinkKind.LEAF_ACCEPTED, LinkKind.LEAF_SOLICITED):
                one_log, one_links = [], {}
                acc, me = _linked_account(one_log, one_links, max_msgs=max_msgs, echo=echo)
                origin = me if origin_kind == "me" else one_links.get(origin_kind)
                for p in payloads:
                    acc.publish("a.b", None, None, p, origin)
                run_log, run_links = [], {}
                acc, me = _linked_account(run_log, run_links, max_msgs=max_msgs, echo=echo)
                origin = me if origin_kind == "me" else run_links.get(origin_kind)
                acc.publish_run("a.b", payloads, origin)
                case = (max_msgs, echo, origin_kind)
                assert _per_target(run_log, run_links) == _per_target(one_log, one_links), case
                if origin_kind not in (None, "me") and max_msgs is None:
                    # from a link no queue group is served: the run goes whole to each receiver
                    assert ("run", "mine", 5) in run_log and ("run", "plain", 5) in run_log, case


def test_publish_run_without_queue_groups_is_one_call_per_receiver_and_link():
    from core.server.interest import LinkKind

    for with_links in (False, True):
        log: list = []
        acc = Account("A")
        for sid in ("1", "2"):
            acc.subscribe(Subscription(_RunRecorder(acc, log), "a.b", None, sid))
        acc.subscribe(Subscription(Recorder(acc, log), "a.*", None, "3"))
        links = [_RunLink(LinkKind.ROUTE), _Link(LinkKind.LEAF_ACCEPTED)] if with_links else []
        for link in links:
            acc.attach_link(link)
            acc.link_subscribe(link, "a.>")
        acc.publish_run("a.b", [b"x", b"y", b"z"])
        assert ("run", "1", 3) in log and ("run", "2", 3) in log, "deliver_run where a receiver has it"
        assert ("run", "3", 3) in log, "deliver_many otherwise"
        for sid in ("1", "2", "3"):
            assert [e[4] for e in log if e[0] == sid] == [b"x", b"y", b"z"], "in order"
        if with_links:
            route, leaf = links
            assert route.forwarded == [("run", 3)] + [("a.b", ())] * 3, "forward_run: one call"
            assert leaf.forwarded == [("a.b", ())] * 3, "a link without forward_run: one forward each"


def test_publish_run_to_a_queue_group_picks_a_member_per_message_as_publish_does():
    import random

    logs: list[list] = [[], []]
    accounts = []
    for log in logs:
        acc = Account("A")
        for sid in ("1", "2", "3"):
            acc.subscribe(Subscription(_RunRecorder(acc, log), "a.b", "q", sid))
        accounts.append(acc)
    payloads = [b"%d" % i for i in range(20)]
    random.seed(3)
    for p in payloads:
        accounts[0].publish("a.b", None, None, p)
    random.seed(3)
    accounts[1].publish_run("a.b", payloads)
    assert logs[1] == logs[0], "the same members, message by message"
    assert len({e[0] for e in logs[1]}) > 1 and len(logs[1]) == 20, "each message once, spread"


def test_publish_replies_matches_one_publish_per_reply():
    """A stream's acks (``publish_replies``): runs to one reply inbox go as one run; a reply
    with a max, a deny filter, a queue group or several subscribers goes one at a time; order
    and what each subscriber gets are a publish's per reply."""

    def accounts(log: list) -> Account:
        acc = Account("A")
        rec = Recorder(acc, log)
        subs = [
            ("1", "_INBOX.a.*", None, None, None),
            ("2", "_INBOX.b.*", None, None, None),
            ("3", "_INBOX.m.*", None, 2, None),  # a max: one at a time
            ("4", "_INBOX.d.*", None, None, "_INBOX.d.2"),  # a deny filter
            ("5", "_INBOX.q.*", "q", None, None),  # a queue group
            ("6", "_INBOX.w.*", None, None, None),
            ("7", "_INBOX.w.>", None, None, None),  # two plain subscribers
        ]
        for sid, subject, queue, max_msgs, denied in subs:
            sub = Subscription(rec, subject, queue, sid)
            sub.max_msgs = max_msgs
            if denied is not None:
                sub.deny_filter = lambda s, denied=denied: s != denied
            acc.subscribe(sub)
        return acc

    replies = [
        *((f"_INBOX.a.{i}", b"a%d" % i) for i in range(3)),
        ("_INBOX.b.1", b"b1"),
        ("_INBOX.a.9", b"a9"),
        *((f"_INBOX.m.{i}", b"m%d" % i) for i in range(3)),
        *((f"_INBOX.d.{i}", b"d%d" % i) for i in range(3)),
        ("_INBOX.q.1", b"q1"),
        ("_INBOX.w.1", b"w1"),
        ("_INBOX.nobody.1", b"lost"),
        ("_INBOX.a.10", b"a10"),
    ]
    one: list = []
    acc = accounts(one)
    for subject, payload in replies:
        acc.publish(subject, None, None, payload)
    many: list = []
    accounts(many).publish_replies(replies)
    assert [m for m in many if m[0] == "run"] == [
        ("run", "1", 3),
        ("run", "2", 1),
        ("run", "1", 1),
        ("run", "1", 1),
    ]
    assert [m for m in many if m[0] != "run"] == one
    assert [m[4] for m in one if m[0] == "3"] == [b"m0", b"m1"], "the max still ends the subscription"


class _ManyLink(_Link):
    """A link with ``forward_many`` (a leaf link's), recording each frame's reply as well."""

    def forward(self, subject, reply, headers, payload, queues) -> None:
        self.forwarded.append((subject, reply, headers, payload, queues))

    def forward_many(self, subject, msgs) -> None:
        self.forwarded.append(("many", len(msgs)))
        for reply, headers, payload in msgs:
            self.forward(subject, reply, headers, payload, ())


def _delivery_account(log: list, links: dict, *, queue: bool = False, max_msgs: int | None = None):
    """An account with a local subscriber on the deliver subject ``inbox.x`` and two links holding
    interest on it: one with ``forward_many``, one without."""
    from core.server.interest import LinkKind

    acc = Account("A")
    sub = Subscription(Recorder(acc, log), "inbox.x", None, "local")
    sub.max_msgs = max_msgs
    acc.subscribe(sub)
    for kind, cls in ((LinkKind.LEAF_ACCEPTED, _ManyLink), (LinkKind.LEAF_SOLICITED, _RecordingLink)):
        link = links[kind] = cls(kind)
        acc.attach_link(link)
        acc.link_subscribe(link, "inbox.x", "q" if queue else None, 1)
    return acc


class _RecordingLink(_Link):
    def forward(self, subject, reply, headers, payload, queues) -> None:
        self.forwarded.append((subject, reply, headers, payload, queues))


def test_publish_many_across_links_sends_what_one_publish_per_message_would():
    """A consumer's run to a deliver subject with links attached: each link gets every frame on
    the deliver subject, the message's own subject after "@" in its ack reply, in order; a link
    with forward_many takes the run in one call, a queue group or a message limit goes message by
    message."""
    import random

    for queue, max_msgs in ((False, None), (True, None), (False, 2)):
        one_log, one_links, many_log, many_links = [], {}, [], {}
        random.seed(5)
        acc = _delivery_account(one_log, one_links, queue=queue, max_msgs=max_msgs)
        for subject, reply, headers, payload in MSGS:
            acc.publish(subject, reply, headers, payload, route="inbox.x")
        random.seed(5)
        _delivery_account(many_log, many_links, queue=queue, max_msgs=max_msgs).publish_many("inbox.x", MSGS)
        case = (queue, max_msgs)
        assert [e for e in many_log if e[0] != "run"] == one_log, case
        for kind, link in many_links.items():
            frames = [f for f in link.forwarded if f[0] != "many"]
            assert frames == one_links[kind].forwarded, case
        if not queue and max_msgs is None:
            from core.server.interest import LinkKind

            many = many_links[LinkKind.LEAF_ACCEPTED].forwarded
            assert many[0] == ("many", len(MSGS)), "forward_many: one call for the run"
            assert [f[1] for f in many[1:]] == [f"{r}@{s}" for s, r, _h, _p in MSGS], "subject after @"
            assert all(f[0] == "inbox.x" for f in many[1:]), "on the deliver subject"


def test_an_interest_watcher_is_told_once_when_its_exact_subject_is_subscribed():
    """Account.watch_interest: a push consumer waiting for a subscriber on its deliver subject
    hears of one at once, whether a local client or a link brings it; a wildcard covering the
    subject is no such subscriber (the consumer does not deliver for it), nor another subject."""
    from core.server.interest import LinkKind

    acc = Account("A")
    rec = Recorder(acc, [])
    told: list[str] = []

    def watcher(name: str):
        return lambda: told.append(name)

    local, remote, gone = watcher("local"), watcher("remote"), watcher("gone")
    acc.watch_interest("deliver.1", local)
    acc.watch_interest("deliver.1", local)  # once is enough
    acc.watch_interest("deliver.2", remote)
    acc.watch_interest("deliver.3", gone)
    acc.unwatch_interest("deliver.3", gone)
    acc.subscribe(Subscription(rec, "deliver.*", None, "1"))
    acc.subscribe(Subscription(rec, "other", None, "2"))
    assert told == []
    acc.subscribe(Subscription(rec, "deliver.1", None, "3"))
    acc.subscribe(Subscription(rec, "deliver.1", "q", "4"))  # told already: not again
    assert told == ["local"]
    link = _Link(LinkKind.LEAF_SOLICITED)
    acc.attach_link(link)
    acc.link_subscribe(link, "deliver.2")
    acc.subscribe(Subscription(rec, "deliver.3", None, "5"))
    assert told == ["local", "remote"]
