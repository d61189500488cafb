"""Protocol edge cases on raw sockets: the same bytes against leafjet and the reference.

Each expectation was first observed on the reference (nats-server 2.15); running the cases
against both servers keeps them honest.
"""

from __future__ import annotations

import pytest

from tests.support.raw import exchange

pytestmark = pytest.mark.integration

UNKNOWN = b"-ERR 'Unknown Protocol Operation'\r\n"

CASES = [
    # (id, bytes sent after CONNECT, expected reply, server closes)
    ("ping", b"PING\r\n", b"PONG\r\n", False),
    ("lowercase_ping", b"ping\r\n", b"PONG\r\n", False),
    ("ping_with_bare_lf", b"PING\n", b"PONG\r\n", False),
    ("unknown_operation", b"FOO bar\r\n", UNKNOWN, True),
    ("binary_garbage", b"\x00\x01\x02\r\n", UNKNOWN, True),
    ("client_sends_msg", b"MSG foo 1 1\r\nx\r\n", UNKNOWN, True),
    ("payload_longer_than_declared", b"PUB foo 5\r\nhelloX\r\n", UNKNOWN, True),
    (
        "payload_over_max_checked_on_pub_line",
        b"PUB foo 2000000\r\n",
        b"-ERR 'Maximum Payload Violation'\r\n",
        True,
    ),
    ("pub_missing_size_closes_silently", b"PUB foo\r\nPING\r\n", b"", True),
    ("pub_non_numeric_size", b"PUB foo abc\r\n", b"", True),
    ("pub_negative_size", b"PUB foo -1\r\n", b"", True),
    ("pub_too_many_args", b"PUB foo bar baz qux\r\n", b"", True),
    ("hpub_header_larger_than_total", b"HPUB foo 3 2\r\nabc\r\n", b"", True),
    ("sub_without_args", b"SUB\r\n", UNKNOWN, True),
    ("sub_too_many_args", b"SUB foo bar baz qux\r\n", b"", True),
    ("unsub_without_sid", b"UNSUB\r\n", UNKNOWN, True),
    ("unsub_unknown_sid_is_ignored", b"UNSUB 99\r\nPING\r\n", b"PONG\r\n", False),
    (
        "sub_invalid_subject_stays_open",
        b"SUB foo..bar 1\r\nPING\r\n",
        b"-ERR 'Invalid Subject'\r\nPONG\r\n",
        False,
    ),
    ("sub_duplicate_sid_is_ignored", b"SUB foo 1\r\nSUB foo 1\r\nPING\r\n", b"PONG\r\n", False),
    ("pub_to_wildcard_without_pedantic", b"PUB foo.*.bar 1\r\nx\r\nPING\r\n", b"PONG\r\n", False),
    (
        "control_line_too_long",
        b"PUB " + b"a" * 5000 + b" 1\r\n",
        b"-ERR 'maximum control line exceeded'\r\n",
        True,
    ),
    ("unknown_connect_field_is_ignored", b'CONNECT {"foo":1}\r\nPING\r\n', b"PONG\r\n", False),
    ("client_ok_is_ignored", b"+OK\r\nPING\r\n", b"PONG\r\n", False),
    ("pong_is_accepted", b"PONG\r\nPING\r\n", b"PONG\r\n", False),
]


@pytest.mark.parametrize(("sent", "expected", "closes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_protocol_edge_case_matches_reference(server, sent, expected, closes):
    out, closed = exchange(server.port, sent)
    assert (out, closed) == (expected, closes)


@pytest.mark.parametrize(
    ("connect", "sent", "expected", "closes"),
    [
        (
            b'CONNECT {"verbose":true}\r\n',
            b"SUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n",
            b"+OK\r\n+OK\r\n+OK\r\nMSG foo 1 1\r\nx\r\nPONG\r\n",
            False,
        ),
        # verbose defaults to true when CONNECT leaves it out; echo off hides our own message
        (
            b'CONNECT {"echo":false}\r\n',
            b"SUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n",
            b"+OK\r\n+OK\r\n+OK\r\nPONG\r\n",
            False,
        ),
        (
            b'CONNECT {"verbose":false,"pedantic":true}\r\n',
            b"PUB foo.* 1\r\nx\r\nPING\r\n",
            b"-ERR 'Invalid Publish Subject'\r\nPONG\r\n",
            False,
        ),
        (
            b'CONNECT {"verbose":false,"headers":true}\r\n',
            b"SUB foo 1\r\nHPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n",
            b"HMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPONG\r\n",
            False,
        ),
        # HPUB from a client that did not negotiate headers closes it
        (b'CONNECT {"verbose":false}\r\n', b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", b"", True),
        (
            b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n',
            b"SUB r 1\r\nPUB nobody r 0\r\n\r\nPING\r\n",
            b"HMSG r 1 38 38\r\nNATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n\r\nPONG\r\n",
            False,
        ),
        (
            b'CONNECT {"no_responders":true}\r\n',
            b"PING\r\n",
            b"-ERR 'no responders requires headers support'\r\n",
            True,
        ),
        (b"CONNECT {bad json}\r\n", b"PING\r\n", b"", True),
        # an open server lets a client skip CONNECT
        (None, b"PING\r\n", b"PONG\r\n", False),
    ],
    ids=[
        "verbose",
        "verbose_default_and_echo_off",
        "pedantic_wildcard_publish",
        "headers_roundtrip",
        "hpub_without_headers_closes",
        "no_responders_503",
        "no_responders_needs_headers",
        "bad_connect_json",
        "no_connect_on_open_server",
    ],
)
def test_connect_options_match_reference(server, connect, sent, expected, closes):
    out, closed = exchange(server.port, sent, connect=connect)
    assert (out, closed) == (expected, closes)


def test_unsub_with_max_delivers_exactly_max(server):
    out, closed = exchange(server.port, b"SUB a 7\r\nUNSUB 7 2\r\n" + b"PUB a 1\r\nx\r\n" * 4 + b"PING\r\n")
    assert out == b"MSG a 7 1\r\nx\r\n" * 2 + b"PONG\r\n"
    assert not closed


def test_queue_group_gets_each_message_once(server):
    out, _ = exchange(
        server.port,
        b"SUB q.* g 1\r\nSUB q.* g 2\r\nSUB q.> 3\r\n"
        + b"".join(b"PUB q.%d 1\r\nx\r\n" % i for i in range(20))
        + b"PING\r\n",
    )
    lines = [ln for ln in out.split(b"\r\n") if ln.startswith(b"MSG")]
    group = [ln for ln in lines if ln.split()[2] in (b"1", b"2")]
    plain = [ln for ln in lines if ln.split()[2] == b"3"]
    assert len(group) == 20 and len(plain) == 20


def test_ops_before_a_bad_one_in_the_same_read_still_take_effect(server):
    out, closed = exchange(server.port, b"SUB a 1\r\nPUB a 2\r\nhi\r\nFOO\r\n")
    assert (out, closed) == (b"MSG a 1 2\r\nhi\r\n" + UNKNOWN, True)
