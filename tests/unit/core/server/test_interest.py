"""Links as interest holders of an account: the ledger, the propagation rule, routing, loops.

Fake links record the frames the account hands them (keeping the peer's view, which fails on a
duplicate ``LS+`` or an ``LS-`` for an unknown key) and the messages they are asked to forward.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.server.accounts import Account, Subscription
from core.server.interest import (
    InterestLedger,
    LeafInterestFrame,
    LinkDelivery,
    LinkKind,
    is_lds_subject,
    propagates,
)

LA, LS, ROUTE, GW = LinkKind.LEAF_ACCEPTED, LinkKind.LEAF_SOLICITED, LinkKind.ROUTE, LinkKind.GATEWAY


class FakeLink(LinkDelivery):
    echo = True

    def __init__(self, name: str, kind: LinkKind) -> None:
        self.name = name
        self.kind = kind
        self.frames: list[LeafInterestFrame] = []
        self.forwarded: list[tuple] = []
        self.peer: dict[tuple[str, str | None], int] = {}  # what the peer believes we hold

    def announce(self, frame: LeafInterestFrame) -> None:
        self.frames.append(frame)
        key = (frame.subject, frame.queue)
        if frame.op == "LS+":
            if frame.queue is None:
                assert key not in self.peer, f"duplicate {frame}"
                self.peer[key] = 1
            else:
                assert frame.weight is not None and frame.weight > 0
                self.peer[key] = frame.weight
        else:
            assert frame.op == "LS-"
            assert key in self.peer, f"{frame} for a key never announced"
            del self.peer[key]

    def forward(self, subject, reply, headers, payload, queues) -> None:
        self.forwarded.append((subject, reply, headers, payload, queues))

    def subjects(self) -> set[str]:
        return {s for s, q in self.peer if q is None}

    def __repr__(self) -> str:
        return f"FakeLink({self.name}, {self.kind.name})"


class Local:
    """A local client or service."""

    echo = True

    def __init__(self, name: str = "c") -> None:
        self.name = name
        self.got: list[tuple] = []

    def deliver(self, sub, subject, reply, headers, payload) -> None:
        self.got.append((sub.sid, subject, payload))

    def deliver_many(self, sub, msgs) -> None:
        for m in msgs:
            self.deliver(sub, *m)


def _sub(acc: Account, rec: Local, subject: str, queue: str | None = None, sid: str | None = None):
    sub = Subscription(rec, subject, queue, sid or f"{subject}/{queue}")
    acc.subscribe(sub)
    return sub


def _user_peer(link: FakeLink) -> dict:
    """The peer's view without loop-detection subjects."""
    return {k: v for k, v in link.peer.items() if not is_lds_subject(k[0])}


# ---------------------------------------------------------------------------------- the ledger


def test_ledger_reference_counts_plain_subjects():
    led = InterestLedger()
    assert led.apply("a.b", None, 1) == LeafInterestFrame("LS+", "a.b")
    assert led.apply("a.b", None, 1) is None, "a second holder sends nothing"
    assert led.apply("a.b", None, -1) is None, "one holder is left"
    assert led.apply("a.b", None, -1) == LeafInterestFrame("LS-", "a.b")
    assert len(led) == 0


def test_ledger_resends_queue_total_weight_on_every_change():
    led = InterestLedger()
    assert led.apply("a.b", "q", 1) == LeafInterestFrame("LS+", "a.b", "q", 1)
    assert led.apply("a.b", "q", 1) == LeafInterestFrame("LS+", "a.b", "q", 2)
    assert led.apply("a.b", "q", 5) == LeafInterestFrame("LS+", "a.b", "q", 7)
    assert led.apply("a.b", "q", -5) == LeafInterestFrame("LS+", "a.b", "q", 2)
    assert led.announced() == {("a.b", "q"): 2}
    assert led.apply("a.b", "q", 0) is None


def test_ledger_sends_ls_minus_when_a_queue_weight_reaches_zero():
    led = InterestLedger()
    led.apply("a.b", "q", 2)
    assert led.apply("a.b", "q", -2) == LeafInterestFrame("LS-", "a.b", "q")
    assert ("a.b", "q") not in led and len(led) == 0


def test_ledger_ignores_removes_of_unknown_keys():
    led = InterestLedger()
    assert led.apply("a.b", None, -1) is None
    assert led.apply("a.b", "q", -3) is None
    assert len(led) == 0 and led.announced() == {}
    led.apply("a.b", None, 1)
    assert led.apply("a.b", "q", -1) is None, "a plain key does not make the queue key known"
    assert led.announced() == {("a.b", None): 1}


def test_ledger_keys_are_named_as_the_reference_names_them():
    led = InterestLedger()
    led.apply("a.b", None, 1)
    led.apply("a.b", "q", 3)
    assert sorted(led.keys()) == ["a.b", "a.b q"]
    assert len(led) == 2 and ("a.b", None) in led and ("a.b", "q") in led and "a.b" not in led


def test_frames_render_the_wire_lines():
    assert LeafInterestFrame("LS+", "a.b").encode() == b"LS+ a.b\r\n"
    assert LeafInterestFrame("LS+", "a.b", "q", 3).encode() == b"LS+ a.b q 3\r\n"
    assert LeafInterestFrame("LS-", "a.b").encode() == b"LS- a.b\r\n"
    assert LeafInterestFrame("LS-", "a.b", "q").encode() == b"LS- a.b q\r\n"
    assert LeafInterestFrame("LS+", "a.\udcff").encode() == b"LS+ a.\xff\r\n"


# -------------------------------------------------------------------------- the propagation rule


@pytest.mark.parametrize(
    ("origin", "target", "expected"),
    [
        (None, LA, True),
        (None, LS, True),
        (None, ROUTE, True),
        (None, GW, True),
        (LA, LA, True),
        (LA, LS, True),
        (LA, ROUTE, True),
        (LA, GW, True),
        (LS, LA, True),
        (LS, LS, False),
        (LS, ROUTE, False),
        (LS, GW, False),
        (ROUTE, LA, True),
        (ROUTE, LS, False),
        (ROUTE, ROUTE, False),
        (ROUTE, GW, True),
        (GW, LA, True),
        (GW, LS, True),
        (GW, ROUTE, True),
        (GW, GW, False),
    ],
)
def test_propagation_table(origin, target, expected):
    assert propagates(origin, target) is expected


def test_a_spoke_does_not_tell_one_hub_about_another_hubs_interest():
    acc = Account("A")
    hub1, hub2 = FakeLink("hub1", LS), FakeLink("hub2", LS)
    acc.attach_link(hub1)
    acc.attach_link(hub2)
    acc.link_subscribe(hub1, "from.hub1")
    acc.link_subscribe(hub1, "work", "q", 4)
    assert _user_peer(hub2) == {}
    assert _user_peer(hub1) == {}, "never back to the link that holds it"
    _sub(acc, Local(), "mine")
    assert _user_peer(hub1) == _user_peer(hub2) == {("mine", None): 1}


def test_a_hub_tells_each_leaf_about_the_other_leafs_interest():
    acc = Account("A")
    leafs = [FakeLink(f"leaf{i}", LA) for i in range(3)]
    for leaf in leafs:
        acc.attach_link(leaf)
    acc.link_subscribe(leafs[0], "zero")
    acc.link_subscribe(leafs[1], "one", "q", 2)
    assert _user_peer(leafs[0]) == {("one", "q"): 2}
    assert _user_peer(leafs[1]) == {("zero", None): 1}
    assert _user_peer(leafs[2]) == {("zero", None): 1, ("one", "q"): 2}


def test_a_spoke_tells_its_hub_about_its_own_leafs_interest_and_its_leafs_about_the_hub():
    acc = Account("A")
    hub, leaf = FakeLink("hub", LS), FakeLink("leaf", LA)
    acc.attach_link(hub)
    acc.attach_link(leaf)
    acc.link_subscribe(leaf, "down.there")
    acc.link_subscribe(hub, "up.there")
    assert _user_peer(hub) == {("down.there", None): 1}
    assert _user_peer(leaf) == {("up.there", None): 1}


def _build(acc: Account, links: list[FakeLink], rec: Local) -> None:
    _sub(acc, rec, "local.a")
    _sub(acc, rec, "local.a", sid="second holder")
    _sub(acc, rec, "work", "q")
    _sub(acc, rec, "work", "q", sid="second member")
    for i, link in enumerate(links):
        acc.link_subscribe(link, "link.x")
        acc.link_subscribe(link, f"link.{i}")
        acc.link_subscribe(link, "work", "q", 3 + i)
        acc.link_subscribe(link, "$LDS.peer" + str(i))


def test_the_initial_burst_equals_the_incremental_result():
    kinds = [LA, LS, LA, LS]
    # incremental: every link attached before any interest exists
    inc = Account("A")
    inc_links = [FakeLink(f"l{i}", k) for i, k in enumerate(kinds)]
    for link in inc_links:
        inc.attach_link(link)
    _build(inc, inc_links[:-1], Local())
    # burst: the last link attaches after everything happened
    burst = Account("A")
    burst_links = [FakeLink(f"l{i}", k) for i, k in enumerate(kinds)]
    for link in burst_links[:-1]:
        burst.attach_link(link)
    _build(burst, burst_links[:-1], Local())
    burst.attach_link(burst_links[-1])
    late_inc, late_burst = inc_links[-1], burst_links[-1]
    assert _user_peer(late_burst) == _user_peer(late_inc)
    assert burst.ledger(late_burst).announced().keys() - {(burst.lds_subject, None)} == inc.ledger(
        late_inc
    ).announced().keys() - {(inc.lds_subject, None)}
    burst_frames = [f for f in late_burst.frames if not f.subject.startswith("$LDS.")]
    assert len(burst_frames) == len(_user_peer(late_burst)), "the burst sends each key once"


def test_a_links_loop_subject_reaches_every_other_link_even_from_hub_to_hub():
    acc = Account("A")
    hub1, hub2 = FakeLink("hub1", LS), FakeLink("hub2", LS)
    acc.attach_link(hub1)
    acc.attach_link(hub2)
    acc.link_subscribe(hub1, "$LDS.theirs")
    assert ("$LDS.theirs", None) in hub2.peer, "a cycle through two hubs must be detectable"
    acc.link_unsubscribe(hub1, "$LDS.theirs")
    assert ("$LDS.theirs", None) not in hub2.peer
    acc.link_subscribe(hub1, "$LDS.theirs")
    late = FakeLink("hub3", LS)
    acc.attach_link(late)
    assert ("$LDS.theirs", None) in late.peer, "and so does the burst"


def test_a_route_peers_lds_stays_one_hop_and_away_from_our_hub():
    """Full mesh, one hop: a peer's ``$LDS`` reaches our own leafs, never another route (each
    peer heard it directly) nor our hub (each server of the cluster dials the hub itself, and the
    hub would take a spoke's ``$LDS`` coming back through another spoke for a loop)."""
    acc = Account("A")
    peer1, peer2 = FakeLink("peer1", ROUTE), FakeLink("peer2", ROUTE)
    hub, leaf = FakeLink("hub", LS), FakeLink("leaf", LA)
    for link in (peer1, peer2, hub, leaf):
        acc.attach_link(link)
    acc.link_subscribe(peer1, "$LDS.peer1")
    assert ("$LDS.peer1", None) in leaf.peer
    assert ("$LDS.peer1", None) not in peer2.peer
    assert ("$LDS.peer1", None) not in hub.peer
    acc.link_subscribe(hub, "$LDS.hub")
    assert ("$LDS.hub", None) not in peer1.peer, "routes hear no spoke interest"
    assert ("$LDS.hub", None) in leaf.peer
    acc.link_subscribe(leaf, "$LDS.leaf")
    assert ("$LDS.leaf", None) in peer1.peer and ("$LDS.leaf", None) in hub.peer


def test_routes_carry_local_and_accepted_leaf_interest_but_not_the_hubs():
    acc = Account("A")
    peer = FakeLink("peer", ROUTE)
    hub, leaf = FakeLink("hub", LS), FakeLink("leaf", LA)
    for link in (peer, hub, leaf):
        acc.attach_link(link)
    _sub(acc, Local(), "local.x")
    acc.link_subscribe(leaf, "leaf.x")
    acc.link_subscribe(hub, "hub.x")
    acc.link_subscribe(peer, "peer.x")
    assert set(_user_peer(peer)) == {("local.x", None), ("leaf.x", None)}
    assert ("peer.x", None) in leaf.peer and ("peer.x", None) not in hub.peer


# ----------------------------------------------------------- property: ledger == from scratch

SUBJECTS = ["a.b", "a.*", "a.>", "c", "$LDS.peer"]
QUEUES = [None, "q1", "q2"]
KINDS = [LA, LS, ROUTE, GW]

op = st.one_of(
    st.tuples(st.just("sub"), st.sampled_from(SUBJECTS), st.sampled_from(QUEUES)),
    st.tuples(st.just("unsub"), st.integers(0, 50)),
    st.tuples(
        st.just("lsub"),
        st.integers(0, 2),
        st.sampled_from(SUBJECTS),
        st.sampled_from(QUEUES),
        st.integers(1, 4),
    ),
    st.tuples(st.just("lunsub"), st.integers(0, 2), st.sampled_from(SUBJECTS), st.sampled_from(QUEUES)),
    st.tuples(st.just("attach"), st.integers(0, 2)),
    st.tuples(st.just("detach"), st.integers(0, 2)),
)


def _expected(
    acc: Account,
    target: FakeLink,
    local: list[Subscription],
    held: dict[int, dict[tuple[str, str | None], int]],
    links: list[FakeLink],
) -> dict[tuple[str, str | None], int]:
    """What ``target`` should have been told, computed from the model alone."""
    exp: Counter = Counter()
    exp[acc.lds_subject, None] += 1
    for sub in local:
        exp[sub.subject, sub.queue] += 1
    for i, keys in held.items():
        holder = links[i]
        if holder is target:
            continue
        for (subject, queue), weight in keys.items():
            lds_anywhere = (
                queue is None and subject.startswith("$LDS.") and ROUTE not in (holder.kind, target.kind)
            )
            if propagates(holder.kind, target.kind) or lds_anywhere:
                exp[subject, queue] += weight
    return dict(exp)


def _check(acc, local, held, links) -> None:
    for i in held:
        link = links[i]
        exp = _expected(acc, link, local, held, links)
        assert acc.ledger(link).announced() == exp
        assert link.peer == {k: (w if k[1] else 1) for k, w in exp.items()}, "the frames agree"
    entries = list(acc.sublist.entries())
    assert len(entries) == len(set(map(id, entries))) == len(acc.sublist)
    assert len(acc.sublist) == 1 + len(local) + sum(len(k) for k in held.values())


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=3), ops=st.lists(op, max_size=40))
def test_each_ledger_equals_the_interest_computed_from_scratch(kinds, ops):
    acc = Account("A")
    rec = Local()
    links = [FakeLink(f"l{i}", k) for i, k in enumerate(kinds)]
    held: dict[int, dict[tuple[str, str | None], int]] = {0: {}}  # attached links -> their keys
    acc.attach_link(links[0])
    local: list[Subscription] = []
    for o in ops:
        if o[0] == "sub":
            local.append(_sub(acc, rec, o[1], o[2], sid=str(len(local))))
        elif o[0] == "unsub" and local:
            acc.unsubscribe(local.pop(o[1] % len(local)))
        elif o[0] == "attach" and o[1] < len(links) and o[1] not in held:
            links[o[1]] = FakeLink(f"l{o[1]}", kinds[o[1]])  # a reconnect is a new link object
            acc.attach_link(links[o[1]])
            held[o[1]] = {}
        elif o[0] == "detach" and o[1] in held:
            acc.detach_link(links[o[1]])
            del held[o[1]]
        elif o[0] == "lsub" and o[1] in held:
            _, i, subject, queue, weight = o
            changed = acc.link_subscribe(links[i], subject, queue, weight)
            before = held[i].get((subject, queue))
            assert changed == (before is None if queue is None else before != weight)
            held[i][subject, queue] = 1 if queue is None else weight
        elif o[0] == "lunsub" and o[1] in held:
            _, i, subject, queue = o
            assert acc.link_unsubscribe(links[i], subject, queue) == ((subject, queue) in held[i])
            held[i].pop((subject, queue), None)
        _check(acc, local, held, links)
    for i in list(held):
        acc.detach_link(links[i])
        del held[i]
        _check(acc, local, held, links)
    assert all(sub.link is None for sub in acc.sublist.entries()), "no interest outlives its link"
    assert acc.links == []


# ----------------------------------------------------------------------------------- routing


def _hub_with_leafs(n: int = 2) -> tuple[Account, list[FakeLink]]:
    acc = Account("A")
    leafs = [FakeLink(f"leaf{i}", LA) for i in range(n)]
    for leaf in leafs:
        acc.attach_link(leaf)
    return acc, leafs


def test_a_message_crosses_a_link_once_when_several_of_its_subscriptions_match():
    acc, (leaf, _other) = _hub_with_leafs()
    acc.link_subscribe(leaf, "a.*")
    acc.link_subscribe(leaf, "a.b")
    acc.link_subscribe(leaf, "a.>")
    assert acc.publish("a.b", "r", None, b"x") == 1
    assert leaf.forwarded == [("a.b", "r", None, b"x", ())]


def test_a_message_never_goes_back_to_the_link_it_came_from():
    acc, (leaf0, leaf1) = _hub_with_leafs()
    acc.link_subscribe(leaf0, "a.b")
    acc.link_subscribe(leaf0, "a.b", "q", 1)
    acc.link_subscribe(leaf1, "a.b")
    assert acc.publish("a.b", None, None, b"x", origin=leaf0, queues=("q",)) == 1
    assert leaf0.forwarded == []
    assert leaf1.forwarded == [("a.b", None, None, b"x", ())]


def test_a_message_from_one_leaf_reaches_the_others_and_local_subscribers():
    acc, (leaf0, leaf1) = _hub_with_leafs()
    rec = Local()
    _sub(acc, rec, "a.b")
    acc.link_subscribe(leaf1, "a.b")
    assert acc.publish("a.b", None, None, b"x", origin=leaf0) == 2
    assert rec.got == [("a.b/None", "a.b", b"x")]
    assert leaf1.forwarded == [("a.b", None, None, b"x", ())]


def test_a_queue_group_is_served_locally_first():
    acc, (leaf,) = _hub_with_leafs(1)
    rec = Local()
    _sub(acc, rec, "work", "q")
    acc.link_subscribe(leaf, "work", "q", 100)
    for _ in range(50):
        assert acc.publish("work", None, None, b"x") == 1
    assert len(rec.got) == 50
    assert leaf.forwarded == []


def test_a_queue_group_without_a_local_member_goes_to_exactly_one_link():
    acc, leafs = _hub_with_leafs(3)
    for leaf in leafs:
        acc.link_subscribe(leaf, "work", "q", 1)
    random.seed(7)
    for i in range(300):
        assert acc.publish("work", None, None, b"%d" % i) == 1
    got = [m for leaf in leafs for m in leaf.forwarded]
    assert sorted(m[3] for m in got) == sorted(b"%d" % i for i in range(300)), "each once"
    assert all(m[4] == ("q",) for m in got), "the chosen link is told which group to serve"
    assert all(leaf.forwarded for leaf in leafs), "the choice is spread"


def test_queue_members_on_links_are_chosen_by_weight():
    acc, (light, heavy) = _hub_with_leafs()
    acc.link_subscribe(light, "work", "q", 1)
    acc.link_subscribe(heavy, "work", "q", 9)
    random.seed(11)
    for _ in range(2000):
        acc.publish("work", None, None, b"x")
    assert len(light.forwarded) + len(heavy.forwarded) == 2000
    assert 0.82 < len(heavy.forwarded) / 2000 < 0.97


def test_a_link_with_plain_and_queue_interest_gets_one_frame_with_the_queue_list():
    acc, (leaf,) = _hub_with_leafs(1)
    acc.link_subscribe(leaf, "a.b")
    acc.link_subscribe(leaf, "a.*", "q1", 1)
    acc.link_subscribe(leaf, "a.>", "q2", 1)
    assert acc.publish("a.b", "r", b"h", b"x") == 1
    assert len(leaf.forwarded) == 1
    subject, reply, headers, payload, queues = leaf.forwarded[0]
    assert (subject, reply, headers, payload) == ("a.b", "r", b"h", b"x")
    assert sorted(queues) == ["q1", "q2"]


def test_a_message_from_a_link_with_queues_serves_only_those_groups():
    acc, (leaf,) = _hub_with_leafs(1)
    rec = Local()
    _sub(acc, rec, "a.b", sid="plain")
    _sub(acc, rec, "a.b", "q1", sid="q1")
    _sub(acc, rec, "a.b", "q2", sid="q2")
    assert acc.publish("a.b", None, None, b"x", origin=leaf, queues=("q1",)) == 2
    assert sorted(g[0] for g in rec.got) == ["plain", "q1"]


def test_a_message_from_a_link_without_queues_reaches_plain_subscribers_only():
    acc, (leaf, other) = _hub_with_leafs()
    rec = Local()
    _sub(acc, rec, "a.b", sid="plain")
    _sub(acc, rec, "a.b", "q1", sid="q1")
    acc.link_subscribe(other, "a.b", "q2", 1)
    assert acc.publish("a.b", None, None, b"x", origin=leaf) == 1
    assert [g[0] for g in rec.got] == ["plain"]
    assert other.forwarded == []


def test_a_named_queue_group_without_a_local_member_goes_on_along_an_edge():
    acc, (leaf, other) = _hub_with_leafs()
    acc.link_subscribe(other, "a.b", "q", 1)
    assert acc.publish("a.b", None, None, b"x", origin=leaf, queues=("q",)) == 1
    assert other.forwarded == [("a.b", None, None, b"x", ("q",))]


def test_no_forwarding_along_a_non_edge():
    """A spoke with two hubs: a message from hub A is not handed to hub B, whose interest was
    never announced to A."""
    acc = Account("A")
    hub_a, hub_b = FakeLink("A", LS), FakeLink("B", LS)
    acc.attach_link(hub_a)
    acc.attach_link(hub_b)
    acc.link_subscribe(hub_b, "a.b")
    acc.link_subscribe(hub_b, "a.b", "q", 1)
    rec = Local()
    _sub(acc, rec, "a.b")
    assert acc.publish("a.b", None, None, b"x", origin=hub_a, queues=("q",)) == 1
    assert hub_b.forwarded == []
    assert len(rec.got) == 1
    assert acc.publish("a.b", None, None, b"y") == 2, "a local publisher reaches hub B"
    assert hub_b.forwarded == [("a.b", None, None, b"y", ("q",))], "plain and the group, one frame"


def test_over_a_link_the_message_goes_on_the_matched_subject():
    acc, (leaf,) = _hub_with_leafs(1)
    acc.link_subscribe(leaf, "deliver.x")
    assert acc.publish("orders.1", None, None, b"x", route="deliver.x") == 1
    assert leaf.forwarded == [("deliver.x", None, None, b"x", ())]


def test_publish_many_with_links_is_one_publish_per_message():
    acc, (leaf,) = _hub_with_leafs(1)
    rec = Local()
    _sub(acc, rec, "inbox.x")
    acc.link_subscribe(leaf, "inbox.*")
    msgs = [(f"s.{i}", None, None, b"%d" % i) for i in range(3)]
    acc.publish_many("inbox.x", msgs)
    assert [g[2] for g in rec.got] == [b"0", b"1", b"2"]
    assert leaf.forwarded == [("inbox.x", None, None, b"%d" % i, ()) for i in range(3)]


def test_a_receiver_with_echo_off_is_still_skipped_with_links():
    acc, _ = _hub_with_leafs(1)
    rec = Local()
    rec.echo = False
    _sub(acc, rec, "a.b")
    _sub(acc, rec, "a.b", "q")
    assert acc.publish("a.b", None, None, b"x", origin=rec) == 0
    assert rec.got == []


def test_link_delivery_mixin_forwards_without_queues():
    link = FakeLink("l", LA)
    link.deliver(None, "a.b", "r", None, b"x")
    link.deliver_many(None, [("c", None, b"h", b"y")])
    assert link.forwarded == [("a.b", "r", None, b"x", ()), ("c", None, b"h", b"y", ())]


# -------------------------------------------------------------------------------- link interest


def test_a_repeated_plain_ls_plus_is_a_no_op():
    acc, (leaf, other) = _hub_with_leafs()
    assert acc.link_subscribe(leaf, "a.b") is True
    assert acc.link_subscribe(leaf, "a.b") is False
    assert len(acc.sublist) == 2  # and $LDS
    assert [f for f in other.frames if f.subject == "a.b"] == [LeafInterestFrame("LS+", "a.b")]


def test_a_repeated_queue_ls_plus_updates_the_weight_and_tells_the_others_the_total():
    acc, (leaf, other) = _hub_with_leafs()
    rec = Local()
    _sub(acc, rec, "w", "q")
    assert acc.link_subscribe(leaf, "w", "q", 2) is True
    assert acc.link_subscribe(leaf, "w", "q", 2) is False
    assert acc.link_subscribe(leaf, "w", "q", 5) is True
    assert [f for f in other.frames if f.subject == "w"] == [
        LeafInterestFrame("LS+", "w", "q", 1),
        LeafInterestFrame("LS+", "w", "q", 3),
        LeafInterestFrame("LS+", "w", "q", 6),
    ]
    assert acc.link_unsubscribe(leaf, "w", "q") is True
    assert other.frames[-1] == LeafInterestFrame("LS+", "w", "q", 1)


def test_an_ls_minus_for_an_unknown_key_is_ignored():
    acc, (leaf, other) = _hub_with_leafs()
    before = list(other.frames)
    assert acc.link_unsubscribe(leaf, "never", None) is False
    assert acc.link_unsubscribe(leaf, "never", "q") is False
    assert other.frames == before


def test_bad_link_interest_is_refused():
    acc, (leaf,) = _hub_with_leafs(1)
    with pytest.raises(ValueError):
        acc.link_subscribe(leaf, "a..b")
    with pytest.raises(ValueError):
        acc.link_subscribe(leaf, "a.b", "q", 0)
    with pytest.raises(LookupError):
        acc.link_subscribe(FakeLink("stranger", LA), "a.b")
    with pytest.raises(ValueError):
        acc.attach_link(leaf)
    assert acc.link_subscribe(leaf, "a.b") is True, "a refused LS+ left nothing behind"


# ------------------------------------------------------------------------------------- loops


def test_the_loop_subject_is_made_on_first_attach_announced_to_every_link_and_recognised():
    acc = Account("A")
    assert acc.lds_subject is None
    assert not acc.is_own_loop_subject("$LDS.x")
    first = FakeLink("first", LS)
    acc.attach_link(first)
    lds = acc.lds_subject
    assert lds is not None and lds.startswith("$LDS.") and len(lds) == len("$LDS.") + 22
    assert first.frames[0] == LeafInterestFrame("LS+", lds)
    second = FakeLink("second", LA)
    acc.attach_link(second)
    assert acc.lds_subject == lds, "one subject for the account's life"
    assert (lds, None) in second.peer
    assert acc.is_own_loop_subject(lds)
    assert not acc.is_own_loop_subject("$LDS.someone.else")
    assert Account("B").lds_subject is None
    acc.detach_link(first)
    acc.detach_link(second)
    again = FakeLink("again", LS)
    acc.attach_link(again)
    assert acc.lds_subject == lds and (lds, None) in again.peer


# ------------------------------------------------------------------------------------ detach


def test_detach_propagates_the_removals_to_the_other_links():
    acc, (leaf0, leaf1, leaf2) = _hub_with_leafs(3)
    acc.link_subscribe(leaf0, "a.b")
    acc.link_subscribe(leaf0, "w", "q", 3)
    acc.link_subscribe(leaf1, "w", "q", 1)
    assert _user_peer(leaf2) == {("a.b", None): 1, ("w", "q"): 4}
    acc.detach_link(leaf0)
    assert _user_peer(leaf2) == {("w", "q"): 1}
    assert _user_peer(leaf1) == {}
    assert acc.links == [leaf1, leaf2]
    with pytest.raises(LookupError):
        acc.ledger(leaf0)
    acc.publish("a.b", None, None, b"x")
    assert leaf0.forwarded == [], "nothing is routed to a detached link"
    acc.detach_link(leaf0)  # a second detach is harmless


def test_a_reattached_link_learns_the_whole_interest_again():
    acc, (leaf,) = _hub_with_leafs(1)
    _sub(acc, Local(), "a.b")
    acc.detach_link(leaf)
    again = FakeLink("leaf0", LA)
    acc.attach_link(again)
    assert _user_peer(again) == {("a.b", None): 1}


# ---------------------------------------------------------------- JetStream deliveries over a link


def test_an_ack_reply_carries_the_delivered_subject_and_splits_back():
    from core.server.interest import split_ack_subject, with_ack_subject

    reply = "$JS.ACK.S.C.1.5.5.1700000000000000000.0"
    carried = with_ack_subject(reply, "orders.eu@x")
    assert carried == reply + "@orders.eu@x"
    assert split_ack_subject(carried) == (reply, "orders.eu@x")
    assert with_ack_subject(carried, "other") == carried  # never twice
    assert with_ack_subject("_INBOX.a.b", "s") == "_INBOX.a.b"  # only ack replies carry it
    assert split_ack_subject("$JS.ACK.a@b.c") == ("$JS.ACK.a@b.c", None)  # "@" before the 8th dot
    assert split_ack_subject(None) == (None, None)
