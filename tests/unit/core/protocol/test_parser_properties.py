"""Properties of the parsers over generated input.

- Any bytes, under any chunking, give a list of events or a ProtocolError: nothing else escapes.
- Chunking never changes the outcome (same events, same error).
- Encoded Pubs (and Msgs) parse back identically, under any chunking.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ProtocolError
from core.protocol import (
    ClientParser,
    Msg,
    Pub,
    ServerParser,
    encode_msg,
    encode_pub,
    encode_sub,
    encode_unsub,
)

PROPERTY = settings(max_examples=200, deadline=None, database=None)

# Pieces that steer generated input into the parser's deeper paths (sizes, payloads, limits).
TOKENS = [
    b"PUB ",
    b"HPUB ",
    b"SUB ",
    b"UNSUB ",
    b"PING",
    b"PONG",
    b"CONNECT ",
    b"INFO ",
    b"+OK",
    b"-ERR ",
    b"MSG ",
    b"pub ",
    b"foo",
    b"_INBOX.x",
    b"q",
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b"\r\n",
    b"0",
    b"1",
    b"2",
    b"5",
    b"12",
    b"-1",
    b"9999999999",
    b"NATS/1.0",
    b"{}",
    b'{"a":1}',
    b"[",
    b"\xff",
    b"\x00",
    b"\x0b",
    b"A" * 40,
]


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


def outcome(make: Any, chunks: list[bytes]) -> tuple[list[Any], tuple[str | None, bool] | None]:
    """All events produced, and the (message, close) of the error that ended the feeding, if any."""
    parser = make()
    events: list[Any] = []
    for chunk in chunks:
        try:
            result = parser.feed(chunk)
        except ProtocolError as e:
            events.extend(e.events)
            return events, (e.message, e.close)
        assert type(result) is list
        events.extend(result)
    return events, None


def small_server_parser() -> ServerParser:
    return ServerParser(max_control_line=64, max_payload=32)


# Subjects as the reference sees them: any bytes but the argument separators.
_SEPARATORS = b" \t\r\n\x0b\x0c"
token = st.binary(min_size=1, max_size=12).filter(lambda b: not any(c in _SEPARATORS for c in b))
text = token.map(lambda b: b.decode("utf-8", "surrogateescape"))
header_block = st.binary(max_size=40).map(lambda b: b"NATS/1.0\r\n" + b + b"\r\n\r\n")

pubs = st.builds(
    Pub,
    subject=text,
    reply=st.none() | text,
    payload=st.binary(max_size=200),
    headers=st.none() | header_block,
)
msgs = st.builds(
    Msg,
    subject=text,
    sid=text,
    reply=st.none() | text,
    payload=st.binary(max_size=200),
    headers=st.none() | header_block,
)


# Input for the "never anything but events or ProtocolError" properties: raw bytes, token soup, and
# streams of valid ops with token soup spliced in (so errors also happen deep into a stream).
soup = st.lists(st.sampled_from(TOKENS), max_size=12).map(b"".join)
valid_op = st.one_of(
    pubs.map(lambda p: encode_pub(p.subject, p.reply, p.payload, p.headers)),
    msgs.map(lambda m: encode_msg(m.subject, m.sid, m.reply, m.payload, m.headers)),
    st.builds(encode_sub, text, text, st.none() | text),
    st.builds(encode_unsub, text, st.none() | st.integers(min_value=0, max_value=10**10)),
    st.sampled_from([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b'CONNECT {"verbose":true}\r\n', b"INFO {}\r\n"]),
)
any_input = st.one_of(
    st.binary(max_size=300),
    soup,
    st.lists(st.one_of(valid_op, valid_op, valid_op, soup), max_size=8).map(b"".join),
)


@PROPERTY
@given(data=any_input, cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_any_bytes_under_any_chunking_give_events_or_protocol_error(data: bytes, cuts: list[int]):
    for make in (ServerParser, small_server_parser, ClientParser):
        whole = outcome(make, [data])
        assert outcome(make, chunked(data, cuts)) == whole


@PROPERTY
@given(data=any_input)
def test_byte_by_byte_feeding_gives_the_same_outcome(data: bytes):
    for make in (ServerParser, small_server_parser, ClientParser):
        assert outcome(make, [data[i : i + 1] for i in range(len(data))]) == outcome(make, [data])


@PROPERTY
@given(events=st.lists(pubs, min_size=1, max_size=5), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_encoded_pubs_parse_back_identically_under_any_chunking(events: list[Pub], cuts: list[int]):
    data = b"".join(encode_pub(p.subject, p.reply, p.payload, p.headers) for p in events)
    assert outcome(ServerParser, chunked(data, cuts)) == (events, None)


@PROPERTY
@given(events=st.lists(msgs, min_size=1, max_size=5), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_encoded_msgs_parse_back_identically_under_any_chunking(events: list[Msg], cuts: list[int]):
    data = b"".join(encode_msg(m.subject, m.sid, m.reply, m.payload, m.headers) for m in events)
    assert outcome(ClientParser, chunked(data, cuts)) == (events, None)
