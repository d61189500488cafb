"""The checker the sourcing fault tests end with: it must catch each kind of wrong hub stream."""

from __future__ import annotations

import pytest

from tests.support.sourced import Stored, check_acks, check_sourced, upstream_of

NAMES = {"ORDERS:aaaa": "E1", "ORDERS:bbbb": "E2"}


def header(key: str, seq: int) -> str:
    return f"{key} {seq} > > e.orders.x IDENT"


def hub(*pairs: tuple[str, int]) -> list[str | None]:
    return [header(key, seq) for key, seq in pairs]


def test_a_header_names_its_upstream_and_sequence() -> None:
    assert upstream_of("ORDERS:aaaa 42 > > e.orders.x IDENT") == ("ORDERS:aaaa", 42)
    with pytest.raises(ValueError):
        upstream_of("ORDERS:aaaa")
    with pytest.raises(ValueError):
        upstream_of("ORDERS:aaaa x > >")


def test_interleaved_upstreams_each_complete_and_in_order_pass() -> None:
    got = hub(("ORDERS:aaaa", 1), ("ORDERS:bbbb", 1), ("ORDERS:aaaa", 2), ("ORDERS:bbbb", 2))
    report = check_sourced(got, {"E1": [1, 2], "E2": [1, 2]}, NAMES)
    assert report.ok, report.summary()


def test_an_unacknowledged_message_on_the_hub_is_fine() -> None:
    # stored upstream, its ack lost and never retried (the publisher's last message): no loss
    report = check_sourced(hub(("ORDERS:aaaa", 1), ("ORDERS:aaaa", 2)), {"E1": [1]}, NAMES)
    assert report.ok, report.summary()


def test_a_missing_acked_message_is_a_loss() -> None:
    report = check_sourced(hub(("ORDERS:aaaa", 1), ("ORDERS:aaaa", 3)), {"E1": [1, 2, 3]}, NAMES)
    assert not report.ok and report.upstreams["E1"].missing == [2]


def test_a_message_twice_is_a_duplicate() -> None:
    got = hub(("ORDERS:aaaa", 1), ("ORDERS:aaaa", 2), ("ORDERS:aaaa", 2), ("ORDERS:aaaa", 3))
    report = check_sourced(got, {"E1": [1, 2, 3]}, NAMES)
    assert not report.ok and report.upstreams["E1"].duplicates == [2]


def test_a_resend_from_a_stale_position_is_caught() -> None:
    # a source that restarts two messages back: duplicates and a step back
    got = hub(*[("ORDERS:aaaa", s) for s in (1, 2, 3, 2, 3, 4)])
    e1 = check_sourced(got, {"E1": [1, 2, 3, 4]}, NAMES).upstreams["E1"]
    assert e1.duplicates == [2, 3] and e1.out_of_order == [(3, 2)]


def test_a_swap_is_out_of_order() -> None:
    got = hub(("ORDERS:aaaa", 2), ("ORDERS:aaaa", 1))
    e1 = check_sourced(got, {"E1": [1, 2]}, NAMES).upstreams["E1"]
    assert e1.out_of_order == [(2, 1)] and not e1.missing and not e1.duplicates


def test_a_message_of_no_known_upstream_is_reported() -> None:
    report = check_sourced([*hub(("ORDERS:cccc", 1)), None], {"E1": []}, NAMES)
    assert not report.ok and len(report.unknown) == 2


def test_the_upstream_side_stored_once_at_the_acked_sequence() -> None:
    stored = [Stored(1, b"E1-0", None), Stored(2, b"E1-1", None)]
    assert check_acks(stored, [("E1-0", 1), ("E1-1", 2)]) == []
    assert check_acks(stored, [("E1-0", 1), ("E1-1", 1)]) == ["E1-1 acked as seq 1, which holds 'E1-0'"]
    twice = [*stored, Stored(3, b"E1-1", None)]
    assert check_acks(twice, [("E1-0", 1), ("E1-1", 2)]) == ["E1-1 stored 2 times"]
