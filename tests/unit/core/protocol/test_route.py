"""RouteParser and the route encoders: each op whole, byte by byte and with trailing data; what
is refused and how; and, over generated input, events-or-ProtocolError and round trips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ProtocolError
from core.protocol.events import PING, PONG, Connect, Err, Info
from core.protocol.parser import MAX_PAYLOAD, UNKNOWN_OP
from core.protocol.route import (
    RouteMsg,
    RouteParser,
    RouteSub,
    RouteUnsub,
    encode_rmsg,
    encode_rs_minus,
    encode_rs_plus,
)
from tests.unit.core.protocol.test_parser_properties import chunked, outcome

CASES: list[tuple[bytes, Any]] = [
    (b"RS+ $G foo.bar\r\n", RouteSub("$G", "foo.bar", None, 1)),
    (b"RS+ ACC foo.* workers 3\r\n", RouteSub("ACC", "foo.*", "workers", 3)),
    (b"rs+\tACC  foo\r\n", RouteSub("ACC", "foo", None, 1)),
    (b"RS- $G foo.bar\r\n", RouteUnsub("$G", "foo.bar", None)),
    (b"RS- ACC foo workers\r\n", RouteUnsub("ACC", "foo", "workers")),
    (b"RMSG $G foo 5\r\nhello\r\n", RouteMsg("$G", "foo", None, (), None, b"hello")),
    (b"RMSG $G foo _INBOX.x 2\r\nhi\r\n", RouteMsg("$G", "foo", "_INBOX.x", (), None, b"hi")),
    (b"RMSG A foo + _INBOX.x q1 q2 0\r\n\r\n", RouteMsg("A", "foo", "_INBOX.x", ("q1", "q2"), None, b"")),
    (b"RMSG A foo | q1 3\r\nabc\r\n", RouteMsg("A", "foo", None, ("q1",), None, b"abc")),
    (
        b"HMSG A foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        RouteMsg("A", "foo", None, (), b"NATS/1.0\r\n\r\n", b"hi"),
    ),
    (
        b"HMSG A foo + r q 12 12\r\nNATS/1.0\r\n\r\n\r\n",
        RouteMsg("A", "foo", "r", ("q",), b"NATS/1.0\r\n\r\n", b""),
    ),
    (b"HMSG A foo 0 2\r\nhi\r\n", RouteMsg("A", "foo", None, (), None, b"hi")),
    (b"PING\r\n", PING),
    (b"PONG\r\n", PONG),
    (b'INFO {"cluster":"C"}\r\n', Info({"cluster": "C"})),
    (b'CONNECT {"cluster":"C","leafjet_route":1}\r\n', Connect({"cluster": "C", "leafjet_route": 1})),
    (b"-ERR 'Authorization Violation'\r\n", Err("Authorization Violation")),
]


@pytest.mark.parametrize("data, event", CASES)
def test_each_op_parses_whole_byte_by_byte_and_with_trailing_data(data: bytes, event: Any):
    assert RouteParser().feed(data) == [event]
    parser = RouteParser()
    events: list[Any] = []
    for i in range(len(data)):
        events += parser.feed(data[i : i + 1])
    assert events == [event]
    parser = RouteParser()
    assert parser.feed(data + b"RS+ $G tail") == [event]
    assert parser.feed(b"\r\n") == [RouteSub("$G", "tail", None, 1)]


def test_plus_ok_is_ignored():
    assert RouteParser().feed(b"+OK\r\nPING\r\n") == [PING]


@pytest.mark.parametrize(
    "data, message",
    [
        (b"HELLO\r\n", UNKNOWN_OP),
        (b"\x00\xff", UNKNOWN_OP),
        (b" RS+ $G foo\r\n", UNKNOWN_OP),
        (b"RS+\r\n", UNKNOWN_OP),
        (b"LS+ foo\r\n", UNKNOWN_OP),  # a leaf op on a route
        (b"MSG foo 1 2\r\nhi\r\n", UNKNOWN_OP),
        (b"RS+ $G\r\n", None),  # no subject
        (b"RS+ $G foo q\r\n", None),  # a queue without its weight
        (b"RS+ $G foo q 0\r\n", None),  # weight 0
        (b"RS+ $G foo q -1\r\n", None),
        (b"RS+ $G foo q 1 extra\r\n", None),
        (b"RS- $G\r\n", None),
        (b"RS- $G foo q extra\r\n", None),
        (b"RMSG $G 5\r\nhello\r\n", None),  # no subject
        (b"RMSG $G foo r x\r\n", None),  # not a size
        (b"RMSG $G foo 9999999999\r\n", None),  # ten digits
        (b"RMSG $G foo * q 5\r\nhello\r\n", None),  # a bad reply indicator
        (b"RMSG $G foo + r 5\r\nhello\r\n", None),  # an indicator without queues
        (b"HMSG $G foo 5 2\r\nhi\r\n", None),  # header size past the total
        (b"RMSG $G foo 2\r\nhiXX", UNKNOWN_OP),  # no CRLF after the payload
        (b"RMSG $G foo 2000000\r\n", MAX_PAYLOAD),
        (b"INFO [1]\r\n", None),
        (b"CONNECT {\r\n", None),
    ],
)
def test_bad_input_is_a_protocol_error(data: bytes, message: str | None):
    with pytest.raises(ProtocolError) as e:
        RouteParser().feed(data)
    assert e.value.message == message


def test_the_ops_before_a_bad_one_ride_on_the_error():
    with pytest.raises(ProtocolError) as e:
        RouteParser().feed(b"PING\r\nRS+ $G a\r\nBAD\r\n")
    assert e.value.events == [PING, RouteSub("$G", "a", None, 1)]


def test_an_overlong_control_line_is_refused_while_it_arrives():
    parser = RouteParser(max_control_line=32)
    with pytest.raises(ProtocolError) as e:
        parser.feed(b"RS+ $G " + b"a" * 64)
    assert e.value.message == "maximum control line exceeded"


def test_encoders_write_the_grammar():
    assert encode_rs_plus("$G", "foo") == b"RS+ $G foo\r\n"
    assert encode_rs_plus("A", "foo", "q", 7) == b"RS+ A foo q 7\r\n"
    assert encode_rs_minus("A", "foo") == b"RS- A foo\r\n"
    assert encode_rs_minus("A", "foo", "q") == b"RS- A foo q\r\n"
    assert encode_rmsg("A", "foo", None, (), None, b"hi") == b"RMSG A foo 2\r\nhi\r\n"
    assert encode_rmsg("A", "foo", "r", (), None, b"hi") == b"RMSG A foo r 2\r\nhi\r\n"
    assert encode_rmsg("A", "foo", "r", ("q1", "q2"), None, b"") == b"RMSG A foo + r q1 q2 0\r\n\r\n"
    assert encode_rmsg("A", "foo", None, ("q",), b"NATS/1.0\r\n\r\n", b"x") == (
        b"HMSG A foo | q 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
    )


# ---------------------------------------------------------------- properties

PROPERTY = settings(max_examples=200, deadline=None, database=None)

TOKENS = [
    b"RS+ ",
    b"RS- ",
    b"RMSG ",
    b"HMSG ",
    b"PING",
    b"PONG",
    b"CONNECT ",
    b"INFO ",
    b"+OK",
    b"-ERR ",
    b"rs+\t",
    b"LS+ ",
    b"$G ",
    b"+ ",
    b"| ",
    b"foo",
    b"q",
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b"\r\n",
    b"0",
    b"1",
    b"12",
    b"-1",
    b"9999999999",
    b"NATS/1.0",
    b"{}",
    b"'",
    b"\xff",
    b"\x00",
    b"A" * 40,
]


def small_parser() -> RouteParser:
    return RouteParser(max_control_line=64, max_payload=32)


_SEPARATORS = b" \t\r\n\x0b\x0c"
token = st.binary(min_size=1, max_size=10).filter(lambda b: not any(c in _SEPARATORS for c in b))
tricky = st.sampled_from(["+", "|", "0", "12", "RMSG"])
text = token.map(lambda b: b.decode("utf-8", "surrogateescape")) | tricky
header_block = st.binary(max_size=30).map(lambda b: b"NATS/1.0\r\n" + b + b"\r\n\r\n")

route_msgs = st.builds(
    RouteMsg,
    account=text,
    subject=text,
    reply=st.none() | text,
    queues=st.lists(text, max_size=4).map(tuple),
    headers=st.none() | header_block,
    payload=st.binary(max_size=100),
)
route_subs = st.one_of(
    st.builds(RouteSub, text, text, st.none(), st.just(1)),
    st.builds(RouteSub, text, text, text, st.integers(min_value=1, max_value=999_999_999)),
)
route_unsubs = st.builds(RouteUnsub, text, text, st.none() | text)
json_value = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_options = st.dictionaries(st.text(max_size=5), json_value)
route_ops = st.one_of(
    route_msgs,
    route_subs,
    route_unsubs,
    st.just(PING),
    st.just(PONG),
    st.builds(Info, json_options),
    st.builds(Connect, json_options),
)


def encode(op: Any) -> bytes:
    from core.protocol.encoder import encode_connect, encode_info

    if type(op) is RouteMsg:
        return encode_rmsg(op.account, op.subject, op.reply, op.queues, op.headers, op.payload)
    if type(op) is RouteSub:
        return encode_rs_plus(op.account, op.subject, op.queue, op.weight)
    if type(op) is RouteUnsub:
        return encode_rs_minus(op.account, op.subject, op.queue)
    if type(op) is Info:
        return encode_info(op.options)
    if type(op) is Connect:
        return encode_connect(op.options)
    return b"PING\r\n" if op is PING else b"PONG\r\n"


soup = st.lists(st.sampled_from(TOKENS), max_size=12).map(b"".join)
valid_op = route_ops.map(encode)
any_input = st.one_of(
    st.binary(max_size=300),
    soup,
    st.lists(st.one_of(valid_op, valid_op, valid_op, soup), max_size=8).map(b"".join),
)
cut_points = st.lists(st.integers(min_value=0), max_size=8)


@PROPERTY
@given(data=any_input, cuts=cut_points)
def test_any_bytes_under_any_chunking_give_events_or_protocol_error(data: bytes, cuts: list[int]):
    for make in (RouteParser, small_parser):
        assert outcome(make, chunked(data, cuts)) == outcome(make, [data])


@PROPERTY
@given(data=any_input)
def test_byte_by_byte_feeding_gives_the_same_outcome(data: bytes):
    for make in (RouteParser, small_parser):
        assert outcome(make, [data[i : i + 1] for i in range(len(data))]) == outcome(make, [data])


@PROPERTY
@given(ops=st.lists(route_ops, min_size=1, max_size=6), cuts=cut_points)
def test_encoded_route_ops_parse_back_identically_under_any_chunking(ops: list[Any], cuts: list[int]):
    data = b"".join(map(encode, ops))
    assert outcome(RouteParser, chunked(data, cuts)) == (ops, None)
