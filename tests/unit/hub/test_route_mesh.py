"""The pure rules of the route mesh (hub/routes/mesh.py)."""

from __future__ import annotations

import random

import pytest

from hub.routes.mesh import RouteEnds, backoff, keeps_new, parse_route_url, redact, stays_local


def test_route_urls_parse_with_and_without_credentials():
    url = parse_route_url("nats-route://ruser:p%40ss@10.0.0.2:6222")
    assert (url.host, url.port, url.user, url.password) == ("10.0.0.2", 6222, "ruser", "p@ss")
    assert url.key == "nats-route://10.0.0.2:6222"
    assert parse_route_url("10.0.0.3:7000").key == "nats-route://10.0.0.3:7000"
    assert parse_route_url("nats-route://[::1]:6222").address == "[::1]:6222"
    with pytest.raises(ValueError):
        parse_route_url("nats-route://host-without-port")


def test_redact_drops_the_userinfo():
    assert redact("nats-route://u:secret@h:6222") == "nats-route://h:6222"
    assert redact("h:6222") == "h:6222"


def test_both_ends_keep_the_same_one_of_two_routes_whatever_order_they_saw_them_in():
    a, b = RouteEnds("n1", "NAAA"), RouteEnds("n2", "NBBB")
    # the route dialled by n1 (the smaller name) stays, seen first or second
    assert keeps_new(existing=b, new=a) is True
    assert keeps_new(existing=a, new=b) is False
    assert keeps_new(existing=a, new=a) is False, "the same dialler twice: the older stays"


def test_backoff_doubles_up_to_the_ceiling_with_jitter():
    rng = random.Random(7)
    for failures, low in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 30.0), (100, 30.0)]:
        d = backoff(failures, 30.0, rng=rng)
        assert low <= d <= low * 1.5


@pytest.mark.parametrize(
    "subject, domain, local",
    [
        ("$JS.API.STREAM.INFO.S", None, True),
        ("$JS.API.>", None, True),
        ("$JS.HUB.API.STREAM.INFO.S", "HUB", True),
        ("$JS.EDGE.API.STREAM.INFO.S", "HUB", False),  # a leaf's domain crosses
        ("$JS.ACK.S.C.1.1.1.1.0", None, False),
        ("orders.new", None, False),
        (">", None, False),  # wildcard interest crosses; each message is checked
    ],
)
def test_only_this_servers_jetstream_api_stays_local(subject, domain, local):
    assert stays_local(subject, domain) is local
