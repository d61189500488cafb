"""Upstream gap detection of sources and mirrors (core/jetstream/source_health.py)."""

from __future__ import annotations

from core.jetstream.source_health import UpstreamGaps, detects_gaps, gap_advisory, leafjet_extras


def test_a_jump_past_the_next_sequence_is_a_gap_reported_once() -> None:
    g = UpstreamGaps(enabled=True)
    assert g.check(10, 11) is None  # the next one: no gap
    assert g.check(10, 15) == (11, 14)
    assert g.check(10, 15) is None  # the same range again (a failed attempt seen twice)
    assert g.check(10, 17) == (15, 16)  # only what was not reported
    assert (g.lost, g.last_first, g.last_last) == (6, 15, 16)


def test_nothing_is_expected_before_the_first_message_taken() -> None:
    g = UpstreamGaps(enabled=True)
    assert g.check(0, 50) is None  # a new source, or an upstream recreated: history is not a gap
    assert g.lost == 0


def test_a_filtered_source_reports_nothing() -> None:
    assert not detects_gaps({"name": "U", "filter_subject": "a.>"})
    assert not detects_gaps({"name": "U", "subject_transforms": [{"src": "a.>", "dest": "b.>"}]})
    assert detects_gaps({"name": "U", "external": {"api": "$JS.EDGE.API"}})
    g = UpstreamGaps(enabled=False)
    assert g.check(10, 20) is None


def test_the_advisory_names_the_upstream_and_the_range() -> None:
    spec = {"name": "ORDERS", "external": {"api": "$JS.EDGE.API", "deliver": ""}}
    assert gap_advisory("AGG", spec, "source", 3, 7, "consumer_started_past") == {
        "stream": "AGG",
        "kind": "source",
        "source": {"name": "ORDERS", "external": {"api": "$JS.EDGE.API", "deliver": ""}},
        "first_seq": 3,
        "last_seq": 7,
        "missing": 5,
        "reason": "consumer_started_past",
    }


def test_the_extras_show_state_retries_and_losses() -> None:
    g = UpstreamGaps(enabled=True)
    assert leafjet_extras(state="waiting", creates=0, failures=0, gaps=g) == {
        "state": "waiting",
        "consumer_creates": 0,
        "failures": 0,
        "upstream_lost": 0,
    }
    g.check(4, 9)
    extras = leafjet_extras(state="active", creates=3, failures=1, gaps=g)
    assert extras["upstream_lost"] == 4 and extras["last_gap"] == {"first_seq": 5, "last_seq": 8}
