"""Properties of LeafParser and the leaf encoders over generated input.

- Any bytes, under any chunking, give a list of events or a ProtocolError: nothing else escapes.
- Chunking never changes the outcome (same events, same error), nor does stopping after an event
  and resuming with ``feed(b"")``, nor handing the rest to a new parser through ``take_buffer``.
- Encoded leaf ops parse back identically, under any chunking.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ProtocolError
from core.protocol import (
    PING,
    PONG,
    Connect,
    Info,
    LeafMsg,
    LeafParser,
    LeafSub,
    LeafUnsub,
    encode_lmsg,
    encode_ls_minus,
    encode_ls_plus,
)
from core.protocol.encoder import encode_connect, encode_info
from tests.unit.core.protocol.test_parser_properties import chunked, outcome

PROPERTY = settings(max_examples=200, deadline=None, database=None)

TOKENS = [
    b"LS+ ",
    b"LS- ",
    b"LMSG ",
    b"HMSG ",
    b"PING",
    b"PONG",
    b"CONNECT ",
    b"INFO ",
    b"+OK",
    b"-ERR ",
    b"ls+\t",
    b"SUB ",
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
    b"2",
    b"12",
    b"-1",
    b"9999999999",
    b"NATS/1.0",
    b"{}",
    b'{"a":1}',
    b"'",
    b"\xff",
    b"\x00",
    b"\x0b",
    b"A" * 40,
]


def small_parser() -> LeafParser:
    return LeafParser(max_control_line=64, max_payload=32)


_SEPARATORS = b" \t\r\n\x0b\x0c"
token = st.binary(min_size=1, max_size=10).filter(lambda b: not any(c in _SEPARATORS for c in b))
# tokens that look like the grammar's own (indicators, sizes) are valid names too
tricky = st.sampled_from(["+", "|", "0", "12", "LMSG"])
text = token.map(lambda b: b.decode("utf-8", "surrogateescape")) | tricky
header_block = st.binary(max_size=30).map(lambda b: b"NATS/1.0\r\n" + b + b"\r\n\r\n")
queues = st.lists(text, max_size=4).map(tuple)

leaf_msgs = st.builds(
    LeafMsg,
    subject=text,
    reply=st.none() | text,
    queues=queues,
    headers=st.none() | header_block,
    payload=st.binary(max_size=100),
)
leaf_subs = st.one_of(
    st.builds(LeafSub, text, st.none(), st.just(1)),
    st.builds(LeafSub, text, text, st.integers(min_value=1, max_value=999_999_999)),
)
leaf_unsubs = st.builds(LeafUnsub, text, st.none() | text)
json_value = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_options = st.dictionaries(st.text(max_size=5), json_value)
leaf_ops = st.one_of(
    leaf_msgs,
    leaf_subs,
    leaf_unsubs,
    st.just(PING),
    st.just(PONG),
    st.builds(Info, json_options),
    st.builds(Connect, json_options),
)


def encode(op: Any) -> bytes:
    if type(op) is LeafMsg:
        return encode_lmsg(op.subject, op.reply, op.queues, op.headers, op.payload)
    if type(op) is LeafSub:
        return encode_ls_plus(op.subject, op.queue, op.weight)
    if type(op) is LeafUnsub:
        return encode_ls_minus(op.subject, op.queue)
    if type(op) is Info:
        return encode_info(op.options)
    if type(op) is Connect:
        return encode_connect(op.options)
    return b"PING\r\n" if op is PING else b"PONG\r\n"


soup = st.lists(st.sampled_from(TOKENS), max_size=12).map(b"".join)
valid_op = leaf_ops.map(encode)
any_input = st.one_of(
    st.binary(max_size=300),
    soup,
    st.lists(st.one_of(valid_op, valid_op, valid_op, soup), max_size=8).map(b"".join),
)
cut_points = st.lists(st.integers(min_value=0), max_size=8)


@PROPERTY
@given(data=any_input, cuts=cut_points)
def test_any_bytes_under_any_chunking_give_events_or_protocol_error(data: bytes, cuts: list[int]):
    for make in (LeafParser, small_parser):
        assert outcome(make, chunked(data, cuts)) == outcome(make, [data])


@PROPERTY
@given(data=any_input)
def test_byte_by_byte_feeding_gives_the_same_outcome(data: bytes):
    for make in (LeafParser, small_parser):
        assert outcome(make, [data[i : i + 1] for i in range(len(data))]) == outcome(make, [data])


@PROPERTY
@given(ops=st.lists(leaf_ops, min_size=1, max_size=6), cuts=cut_points)
def test_encoded_leaf_ops_parse_back_identically_under_any_chunking(ops: list[Any], cuts: list[int]):
    data = b"".join(map(encode, ops))
    assert outcome(LeafParser, chunked(data, cuts)) == (ops, None)


def stopping_outcome(
    chunks: list[bytes], stop: Any, handover: bool
) -> tuple[list[Any], tuple[str | None, bool] | None]:
    """Like ``outcome``, but every feed stops after a ``stop`` event; then either resume with
    ``feed(b"")`` or (``handover``) move the held bytes to a new parser with ``take_buffer``."""
    parser = LeafParser()
    events: list[Any] = []
    pending = list(chunks)
    data = b""
    while True:
        try:
            got = parser.feed(data, stop_after=stop)
        except ProtocolError as e:
            return [*events, *e.events], (e.message, e.close)
        events.extend(got)
        if got and isinstance(got[-1], stop):
            if handover:
                held = parser.take_buffer()
                parser = LeafParser()
                data = held
            else:
                data = b""
            continue
        if not pending:
            return events, None
        data = pending.pop(0)


@PROPERTY
@given(data=any_input, cuts=cut_points, handover=st.booleans())
def test_stopping_and_resuming_gives_the_same_outcome(data: bytes, cuts: list[int], handover: bool):
    chunks = chunked(data, cuts)
    whole = outcome(LeafParser, [data])
    for stop in (Info, (Connect, LeafSub), LeafMsg):
        assert stopping_outcome(chunks, stop, handover) == whole
