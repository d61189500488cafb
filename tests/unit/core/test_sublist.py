from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import subjects
from core.sublist import Sublist, SublistResult


class S:
    """An identity-hashed stand-in for a server subscription."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"S({self.name})"


def plain_set(r: SublistResult[S]) -> set[S]:
    return set(r.plain)


def queue_map(r: SublistResult[S]) -> dict[str, set[S]]:
    return {q: set(m) for q, m in r.queues}


def test_literal_subject_matches_only_itself() -> None:
    sl: Sublist[S] = Sublist()
    a, b = S("a"), S("b")
    sl.insert("foo.bar", None, a)
    sl.insert("foo.baz", None, b)
    assert sl.match("foo.bar").plain == (a,)
    assert sl.match("foo.baz").plain == (b,)
    assert not sl.match("foo")
    assert not sl.match("foo.bar.baz")
    assert sl.count() == 2


def test_star_matches_exactly_one_token() -> None:
    sl: Sublist[S] = Sublist()
    a = S("a")
    sl.insert("foo.*.baz", None, a)
    assert sl.match("foo.bar.baz").plain == (a,)
    assert sl.match("foo.x.baz").plain == (a,)
    assert not sl.match("foo.baz")
    assert not sl.match("foo.bar.x.baz")


def test_gt_matches_one_or_more_trailing_tokens() -> None:
    sl: Sublist[S] = Sublist()
    a, b = S("a"), S("b")
    sl.insert("foo.>", None, a)
    sl.insert(">", None, b)
    assert plain_set(sl.match("foo.bar")) == {a, b}
    assert plain_set(sl.match("foo.bar.baz")) == {a, b}
    assert plain_set(sl.match("foo")) == {b}
    assert plain_set(sl.match("bar")) == {b}


def test_literal_and_wildcards_on_overlapping_paths_each_match_once() -> None:
    sl: Sublist[S] = Sublist()
    subs = {s: S(s) for s in ("a.b.c", "a.*.c", "a.b.*", "*.*.*", "a.>", "a.b.>", "*.>", "a.*.>")}
    for subject, sub in subs.items():
        sl.insert(subject, None, sub)
    r = sl.match("a.b.c")
    assert len(r.plain) == len(subs)
    assert plain_set(r) == set(subs.values())
    r = sl.match("a.x.c")
    assert {s.name for s in r.plain} == {"a.*.c", "*.*.*", "a.>", "*.>", "a.*.>"}


def test_queue_groups_are_reported_per_group_with_all_members() -> None:
    sl: Sublist[S] = Sublist()
    p, q1, q2, q3, w = S("p"), S("q1"), S("q2"), S("q3"), S("w")
    sl.insert("orders.new", None, p)
    sl.insert("orders.new", "workers", q1)
    sl.insert("orders.new", "workers", q2)
    sl.insert("orders.*", "workers", w)  # same group name on another subject: same group
    sl.insert("orders.new", "audit", q3)
    r = sl.match("orders.new")
    assert r.plain == (p,)
    assert queue_map(r) == {"workers": {q1, q2, w}, "audit": {q3}}
    assert queue_map(sl.match("orders.old")) == {"workers": {w}}


def test_remove_returns_whether_the_entry_existed() -> None:
    sl: Sublist[S] = Sublist()
    a, b = S("a"), S("b")
    sl.insert("foo.*", None, a)
    sl.insert("foo.*", "q", b)
    assert not sl.remove("foo.*", None, b)  # wrong queue
    assert not sl.remove("foo.bar", None, a)  # wrong subject
    assert not sl.remove("foo.*", "other", b)
    assert sl.remove("foo.*", None, a)
    assert not sl.remove("foo.*", None, a)
    assert sl.count() == 1
    assert sl.match("foo.x").plain == ()
    assert sl.remove("foo.*", "q", b)
    assert sl.count() == 0
    assert not sl.match("foo.x")


def test_removal_prunes_empty_nodes() -> None:
    sl: Sublist[S] = Sublist()
    for i in range(100):
        s = S(str(i))
        sl.insert(f"_INBOX.{i}.*", None, s)
        sl.remove(f"_INBOX.{i}.*", None, s)
    assert sl.count() == 0
    assert sl._root.is_empty()


def test_inserting_the_same_entry_twice_stores_it_once() -> None:
    sl: Sublist[S] = Sublist()
    a = S("a")
    sl.insert("foo", None, a)
    sl.insert("foo", None, a)
    assert sl.match("foo").plain == (a,)
    assert sl.count() == 1


def test_many_subscriptions_on_one_subject() -> None:
    sl: Sublist[S] = Sublist()
    subs = [S(str(i)) for i in range(1000)]
    for s in subs:
        sl.insert("telemetry.site1", None, s)
    r = sl.match("telemetry.site1")
    assert r.plain == tuple(subs)  # insertion order is kept
    for s in subs[::2]:
        assert sl.remove("telemetry.site1", None, s)
    assert sl.match("telemetry.site1").plain == tuple(subs[1::2])


def test_match_is_cached_and_insert_of_literal_invalidates_it() -> None:
    sl: Sublist[S] = Sublist()
    a, b = S("a"), S("b")
    sl.insert("foo.bar", None, a)
    first = sl.match("foo.bar")
    assert sl.match("foo.bar") is first
    assert sl.cache_count() == 1
    sl.insert("foo.bar", None, b)
    assert plain_set(sl.match("foo.bar")) == {a, b}
    sl.remove("foo.bar", None, a)
    assert sl.match("foo.bar").plain == (b,)


def test_cache_invalidation_after_wildcard_insert_and_remove() -> None:
    sl: Sublist[S] = Sublist()
    w = S("w")
    assert not sl.match("foo.bar")
    assert not sl.match("other.bar")
    sl.insert("foo.*", None, w)
    assert sl.match("foo.bar").plain == (w,)
    assert not sl.match("other.bar")
    sl.remove("foo.*", None, w)
    assert not sl.match("foo.bar")
    # leading wildcards clear the whole cache
    sl.insert("*.bar", "q", w)
    assert queue_map(sl.match("foo.bar")) == {"q": {w}}
    assert queue_map(sl.match("other.bar")) == {"q": {w}}
    sl.remove("*.bar", "q", w)
    assert not sl.match("foo.bar")
    sl.insert(">", None, w)
    assert sl.match("x.y.z").plain == (w,)


def test_wildcard_insert_keeps_unrelated_cache_entries() -> None:
    sl: Sublist[S] = Sublist()
    a = S("a")
    sl.insert("x.y", None, a)
    kept = sl.match("x.y")
    sl.match("foo.bar")
    sl.insert("foo.*", None, S("w"))
    assert sl.match("x.y") is kept
    assert sl.stats().cache_hits >= 1


def test_cache_is_bounded() -> None:
    sl: Sublist[S] = Sublist(cache_size=64)
    a = S("a")
    sl.insert("n.*", None, a)
    for i in range(1000):
        assert sl.match(f"n.{i}").plain == (a,)
        assert sl.cache_count() <= 64


def test_ack_subjects_are_cached_once_per_consumer() -> None:
    sl: Sublist[S] = Sublist(cache_size=8)
    acks, other = S("acks"), S("other")
    sl.insert("$JS.ACK.S.C.>", None, acks)
    sl.insert("orders.new", None, other)
    assert plain_set(sl.match("orders.new")) == {other}
    for i in range(20):
        assert plain_set(sl.match(f"$JS.ACK.S.C.1.{i}.{i}.1700000000000000000.0")) == {acks}
    assert sl.cache_count() == 2, "orders.new and one entry for every ack of S/C"
    assert sl.stats().cache_hits == 19
    sl.remove("$JS.ACK.S.C.>", None, acks)
    assert not sl.match("$JS.ACK.S.C.1.1.1.1700000000000000000.0")


def test_ack_subjects_of_both_forms_are_cached_once_per_consumer() -> None:
    # a consumer's two ack subscriptions: 9 tokens, and 11 or more after a domain and account hash
    sl: Sublist[S] = Sublist(cache_size=8)
    v1, v2, other = S("v1"), S("v2"), S("other consumer")
    sl.insert("$JS.ACK.S.C.*.*.*.*.*", None, v1)
    sl.insert("$JS.ACK._.HASH.S.C.*.*.*.*.>", None, v2)
    sl.insert("$JS.ACK._.HASH.S.D.*.*.*.*.>", None, other)
    for i in range(10):
        assert plain_set(sl.match(f"$JS.ACK.S.C.1.{i}.{i}.0.0")) == {v1}
        assert plain_set(sl.match(f"$JS.ACK._.HASH.S.C.1.{i}.{i}.0.0")) == {v2}
        assert plain_set(sl.match(f"$JS.ACK._.HASH.S.D.1.{i}.{i}.0.0.x")) == {other}
    assert not sl.match("$JS.ACK.S.C.1.1.1.0.0.7"), "10 tokens: neither form"
    assert sl.cache_count() == 4, "one entry per consumer and form, and the 10-token miss"
    assert sl.stats().cache_hits == 27


def test_reply_inboxes_are_cached_once_per_client() -> None:
    sl: Sublist[S] = Sublist(cache_size=8)
    mux = S("mux")
    sl.insert("_INBOX.abc.*", None, mux)
    for i in range(20):
        assert plain_set(sl.match(f"_INBOX.abc.{i}")) == {mux}
    assert not sl.match("_INBOX.abc.1.2"), "one token more is another key"
    assert sl.cache_count() == 2
    one = S("one request")
    sl.insert("_INBOX.abc.7", None, one)  # deep: the old style, a subscription per request
    assert plain_set(sl.match("_INBOX.abc.7")) == {mux, one}
    assert plain_set(sl.match("_INBOX.abc.8")) == {mux}


def test_a_deep_ack_pattern_turns_the_per_consumer_ack_cache_off() -> None:
    sl: Sublist[S] = Sublist()
    acks, one = S("acks"), S("one delivery")
    sl.insert("$JS.ACK.S.C.>", None, acks)
    assert plain_set(sl.match("$JS.ACK.S.C.1.5.5.1.0")) == {acks}
    sl.insert("$JS.ACK.S.C.1.7.*.*.*", None, one)  # tells deliveries 5 and 7 apart
    assert plain_set(sl.match("$JS.ACK.S.C.1.5.5.1.0")) == {acks}
    assert plain_set(sl.match("$JS.ACK.S.C.1.7.7.1.0")) == {acks, one}
    sl.remove("$JS.ACK.S.C.1.7.*.*.*", None, one)
    assert plain_set(sl.match("$JS.ACK.S.C.1.7.7.1.0")) == {acks}


def test_invalid_subjects_are_rejected_on_insert() -> None:
    sl: Sublist[S] = Sublist()
    for bad in ("", "foo..bar", "foo.>.bar", "foo bar", ".foo", "foo."):
        with pytest.raises(ValueError):
            sl.insert(bad, None, S("x"))
    with pytest.raises(ValueError):
        sl.insert("foo", "", S("x"))


def test_stats_count_operations() -> None:
    sl: Sublist[S] = Sublist()
    a = S("a")
    sl.insert("a", None, a)
    sl.match("a")
    sl.match("a")
    sl.remove("a", None, a)
    st_ = sl.stats()
    assert (st_.subscriptions, st_.matches, st_.cache_hits, st_.inserts, st_.removes) == (0, 2, 1, 1, 1)


# ---------------------------------------------------------------------- property test

_TOKENS = st.sampled_from(["a", "b", "c"])
_literal = st.lists(_TOKENS, min_size=1, max_size=4).map(".".join)
_pattern_tok = st.sampled_from(["a", "b", "c", "*"])


@st.composite
def _pattern(draw: st.DrawFn) -> str:
    toks = draw(st.lists(_pattern_tok, min_size=1, max_size=4))
    if draw(st.booleans()) and draw(st.booleans()):
        toks[-1] = ">"
    return ".".join(toks)


_op = st.tuples(
    st.sampled_from(["insert", "insert", "remove", "match"]),
    _pattern(),
    st.sampled_from([None, None, "q1", "q2"]),
    st.integers(0, 5),
    _literal,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=60), st.lists(_literal, min_size=1, max_size=10))
def test_match_agrees_with_a_brute_force_scan(ops: list, probes: list[str]) -> None:
    sl: Sublist[S] = Sublist(cache_size=8)
    objs = [S(str(i)) for i in range(6)]
    model: set[tuple[str, str | None, S]] = set()

    def check(subject: str) -> None:
        r = sl.match(subject)
        want = [(s, q, o) for (s, q, o) in model if subjects.match(s, subject)]
        assert sorted(map(id, r.plain)) == sorted(id(o) for (_, q, o) in want if q is None)
        groups: dict[str, list[int]] = {}
        for _, q, o in want:
            if q is not None:
                groups.setdefault(q, []).append(id(o))
        assert {q: sorted(map(id, m)) for q, m in r.queues} == {q: sorted(v) for q, v in groups.items()}

    for kind, pattern, queue, idx, literal in ops:
        obj = objs[idx]
        if kind == "insert":
            sl.insert(pattern, queue, obj)
            model.add((pattern, queue, obj))
        elif kind == "remove":
            assert sl.remove(pattern, queue, obj) == ((pattern, queue, obj) in model)
            model.discard((pattern, queue, obj))
        else:
            check(literal)
        assert sl.count() == len(model)
    for p in probes:
        check(p)
        check(p)  # the cached answer too


_FAMILY_TOKENS = st.sampled_from(["$JS", "ACK", "_INBOX", "a", "b"])
_family_literal = st.one_of(
    st.builds(  # an ack subject: $JS.ACK.<stream>.<consumer>.<tokens...>
        lambda stream, consumer, rest: ".".join(["$JS", "ACK", stream, consumer, *rest]),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["a", "b"]),
        st.lists(st.sampled_from(["a", "b", "1"]), min_size=0, max_size=4),
    ),
    st.builds(  # a reply inbox: _INBOX.<client>.<tokens...>
        lambda client, rest: ".".join(["_INBOX", client, *rest]),
        st.sampled_from(["a", "b"]),
        st.lists(st.sampled_from(["a", "b", "1"]), min_size=0, max_size=3),
    ),
)


@st.composite
def _family_pattern(draw: st.DrawFn) -> str:
    toks = draw(st.lists(st.one_of(_FAMILY_TOKENS, st.just("*")), min_size=1, max_size=7))
    if draw(st.booleans()):
        toks[-1] = ">"
    return ".".join(toks)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "remove", "match"]),
            _family_pattern(),
            st.integers(0, 3),
            _family_literal,
        ),
        max_size=40,
    ),
    st.lists(_family_literal, min_size=1, max_size=10),
)
def test_ack_and_inbox_matches_agree_with_a_brute_force_scan(ops: list, probes: list[str]) -> None:
    """The per-key caches of ack subjects and reply inboxes against every kind of pattern that
    can reach them."""
    sl: Sublist[S] = Sublist(cache_size=8)
    objs = [S(str(i)) for i in range(4)]
    model: set[tuple[str, S]] = set()

    def check(subject: str) -> None:
        want = sorted(id(o) for (p, o) in model if subjects.match(p, subject))
        assert sorted(map(id, sl.match(subject).plain)) == want, subject

    for kind, pattern, idx, literal in ops:
        if kind == "insert":
            sl.insert(pattern, None, objs[idx])
            model.add((pattern, objs[idx]))
        elif kind == "remove":
            sl.remove(pattern, None, objs[idx])
            model.discard((pattern, objs[idx]))
        else:
            check(literal)
    for p in probes:
        check(p)
        check(p)


@pytest.mark.parametrize(
    ("a", "b", "collide"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.b", "a.*", True),
        ("a.b", "a.>", True),
        ("a", "a.>", False),
        ("a.b.c", "a.*", False),
        ("a..x", "a.>", True),  # not validated: the empty token is past the ">"
        ("a..x", "a.*.x", False),  # an empty token matches no "*"
        ("a.*", "*.b", True),
        ("a.*", "a.>", True),
        ("a.*.c", "a.*", False),  # patterns of partials only: lengths must agree
        ("a.>", "a.b.*", True),
        ("a.*x", "a.b.*", False),  # "*x" is a literal token, so "a.*x" is literal
        ("a.*", "a.*x", True),  # literal "a.*x" against the pattern "a.*"
        ("a.*x.c", "a.*.*", True),
        ("a.b.*", "a.*x.>", True),  # between patterns a token starting with "*" matches any
    ],
)
def test_subjects_collide_as_the_reference_decides_for_a_stream_filter(a: str, b: str, collide: bool) -> None:
    assert subjects.subjects_collide(a, b) is collide
    assert subjects.subjects_collide(b, a) is collide


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "a.b", "a.*", "a.>", "*.b", ">", "c.d.e"]), st.sampled_from([None, "q"])
        ),
        max_size=30,
    )
)
def test_entries_lists_every_indexed_subscription_once(items) -> None:
    sl: Sublist[S] = Sublist()
    subs = [S(str(i)) for i in range(len(items))]
    for s, (subject, queue) in zip(subs, items, strict=True):
        sl.insert(subject, queue, s)
    for s, (subject, queue) in list(zip(subs, items, strict=True))[::3]:
        sl.remove(subject, queue, s)
        subs.remove(s)
    assert sorted(sl.entries(), key=id) == sorted(subs, key=id)
