"""LeafParser and the leaf encoders, case by case.

Every parser case runs three ways: fed whole, fed byte by byte, and followed by ``PING\\r\\n``
(which must come out as one more event, or not change the error). The expected results follow
nats-server's leaf parsing (server/parser.go, server/leafnode.go ``processLeaf*``), except where
DESIGN.md says leafjet is stricter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.errors import ProtocolError
from core.protocol import (
    MAX_CONTROL_LINE,
    MAX_PAYLOAD,
    PING,
    PONG,
    UNKNOWN_OP,
    Connect,
    Err,
    Info,
    LeafMsg,
    LeafParser,
    LeafSub,
    LeafUnsub,
    encode_lmsg,
    encode_lmsgs,
    encode_ls_minus,
    encode_ls_plus,
    lmsg_head,
)

TRAILER = b"PING\r\n"


def _three_ways(data: bytes) -> list[tuple[str, list[bytes]]]:
    return [
        ("whole", [data]),
        ("byte by byte", [data[i : i + 1] for i in range(len(data))]),
        ("with trailing data", [data + TRAILER]),
    ]


def parse_three_ways(data: bytes, make: Callable[[], Any] = LeafParser) -> list[Any]:
    """The events of ``data``, after checking all three ways of feeding it agree."""
    results = {}
    for name, chunks in _three_ways(data):
        parser = make()
        results[name] = [event for chunk in chunks for event in parser.feed(chunk)]
    whole = results["whole"]
    assert results["byte by byte"] == whole
    assert results["with trailing data"] == [*whole, PING]
    return whole


def assert_error(data: bytes, message: str | None, make: Callable[[], Any] = LeafParser) -> None:
    """``data`` raises a closing ProtocolError(message), the same all three ways."""
    for name, chunks in _three_ways(data):
        parser = make()
        with pytest.raises(ProtocolError) as info:
            for chunk in chunks:
                parser.feed(chunk)
        assert (info.value.message, info.value.close) == (message, True), name


def small() -> LeafParser:
    return LeafParser(max_control_line=64, max_payload=32)


# ====================================================================== good input: handshake


def test_info_keeps_every_field():
    data = b'INFO {"server_id":"N1","leafnode_urls":["10.0.0.1:7422"],"x_unknown":{"a":[1]},"nonce":"n"}\r\n'
    assert parse_three_ways(data) == [
        Info({"server_id": "N1", "leafnode_urls": ["10.0.0.1:7422"], "x_unknown": {"a": [1]}, "nonce": "n"})
    ]


def test_connect_keeps_every_key_as_sent():
    # unlike the client parser, no ClientOpts filtering: names keep their case, types are not checked
    data = b'CONNECT {"Headers":true,"remote_account":"APP","protocol":"1","deny_pub":["a.>"],"x":null}\r\n'
    assert parse_three_ways(data) == [
        Connect({"Headers": True, "remote_account": "APP", "protocol": "1", "deny_pub": ["a.>"], "x": None})
    ]


@pytest.mark.parametrize("line", [b"INFO null\r\n", b"info\t{}\r\n", b"CONNECT null\r\n"])
def test_null_or_empty_json_is_empty_options(line: bytes):
    [event] = parse_three_ways(line)
    assert event.options == {}


@pytest.mark.parametrize("line", [b"PING\r\n", b"ping\n", b"PINGXYZ\r\n", b"PING \t\r\n"])
def test_ping_variants(line: bytes):
    assert parse_three_ways(line) == [PING]


def test_pong_and_ok():
    assert parse_three_ways(b"PONG\r\n+OK\r\n+okX\r\npong x\r\n") == [PONG, PONG]


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (b"-ERR 'Loop detected for leafnode account=\"A\"'\r\n", 'Loop detected for leafnode account="A"'),
        (b"-ERR Stale Connection\r\n", "Stale Connection"),
        (b"-err\t'x'\r\n", "x"),
        (b"-ERR ''\r\n", ""),
        (b"-ERR \r\n", ""),
        (b"-ERR 'x\r\n", "'x"),
    ],
)
def test_err_text_without_quotes(line: bytes, text: str):
    assert parse_three_ways(line) == [Err(text)]


# ====================================================================== good input: interest


@pytest.mark.parametrize(
    ("line", "event"),
    [
        (b"LS+ foo.bar\r\n", LeafSub("foo.bar", None, 1)),
        (b"LS+ foo.* workers 3\r\n", LeafSub("foo.*", "workers", 3)),
        (b"ls+\tfoo  \t q\t 12\n", LeafSub("foo", "q", 12)),
        (b"LS+ foo q 007\r\n", LeafSub("foo", "q", 7)),
        (b"LS+ foo q 999999999\r\n", LeafSub("foo", "q", 999999999)),
        (b"LS+ f\xffo q\xfe 1\r\n", LeafSub("f\udcffo", "q\udcfe", 1)),
        (b"LS+ $LDS.abc\r\n", LeafSub("$LDS.abc", None, 1)),
    ],
)
def test_ls_plus(line: bytes, event: LeafSub):
    assert parse_three_ways(line) == [event]


@pytest.mark.parametrize(
    ("line", "event"),
    [
        (b"LS- foo.bar\r\n", LeafUnsub("foo.bar", None)),
        (b"LS- foo.* workers\r\n", LeafUnsub("foo.*", "workers")),
        (b"ls-\t foo \tq \r\n", LeafUnsub("foo", "q")),
    ],
)
def test_ls_minus(line: bytes, event: LeafUnsub):
    assert parse_three_ways(line) == [event]


@pytest.mark.parametrize("line", [b"LS- \r\n", b"LS- a b c\r\n", b"LS- a b c d e\r\n"])
def test_ls_minus_that_names_no_key_is_ignored(line: bytes):
    # the reference looks the whole argument up as a "subject[ queue]" key and finds nothing
    assert parse_three_ways(line) == []


# ====================================================================== good input: messages


@pytest.mark.parametrize(
    ("line", "subject", "reply", "queues"),
    [
        (b"LMSG foo 2", "foo", None, ()),
        (b"LMSG foo _INBOX.r 2", "foo", "_INBOX.r", ()),
        (b"LMSG foo + _INBOX.r q1 q2 2", "foo", "_INBOX.r", ("q1", "q2")),
        (b"LMSG foo + _INBOX.r 2", "foo", "_INBOX.r", ()),  # '+' with a reply and no queue
        (b"LMSG foo | q1 2", "foo", None, ("q1",)),
        (b"LMSG foo | q1 q2 q3 2", "foo", None, ("q1", "q2", "q3")),
        (b"LMSG foo | 2", "foo", "|", ()),  # 3 arguments: the '|' is a reply subject
        (b"LMSG foo + 2", "foo", "+", ()),
        (b"lmsg\tfoo \t+\tr\t q 2", "foo", "r", ("q",)),
        (b"LMSG f\xffo + r\xfe q\xfd 2", "f\udcffo", "r\udcfe", ("q\udcfd",)),
    ],
)
def test_lmsg_forms(line: bytes, subject: str, reply: str | None, queues: tuple[str, ...]):
    assert parse_three_ways(line + b"\r\nhi\r\n") == [LeafMsg(subject, reply, queues, None, b"hi")]


@pytest.mark.parametrize(
    ("args", "reply", "queues"),
    [
        (b"", None, ()),
        (b"r ", "r", ()),
        (b"+ r q1 q2 ", "r", ("q1", "q2")),
        (b"+ r ", "r", ()),
        (b"| q1 ", None, ("q1",)),
        (b"| ", "|", ()),
    ],
)
def test_hmsg_forms(args: bytes, reply: str | None, queues: tuple[str, ...]):
    block = b"NATS/1.0\r\nA: 1\r\n\r\n"
    data = b"HMSG foo %s%d %d\r\n%shi\r\n" % (args, len(block), len(block) + 2, block)
    assert parse_three_ways(data) == [LeafMsg("foo", reply, queues, block, b"hi")]


def test_hmsg_with_zero_header_length_has_no_headers():
    assert parse_three_ways(b"HMSG foo | q 0 2\r\nhi\r\n") == [LeafMsg("foo", None, ("q",), None, b"hi")]


def test_hmsg_whose_header_block_is_everything():
    block = b"NATS/1.0 503\r\n\r\n"
    data = b"HMSG foo %d %d\r\n%s\r\n" % (len(block), len(block), block)
    assert parse_three_ways(data) == [LeafMsg("foo", None, (), block, b"")]


def test_lmsg_payload_may_hold_crlf_and_protocol_text():
    payload = b"\r\nLS+ x\r\nLMSG y 1\r\n"
    data = b"LMSG foo %d\r\n%s\r\n" % (len(payload), payload)
    assert parse_three_ways(data) == [LeafMsg("foo", None, (), None, payload)]


def test_lmsg_with_empty_payload_and_bare_lf():
    assert parse_three_ways(b"LMSG foo 0\n\r\n") == [LeafMsg("foo", None, (), None, b"")]


def test_payload_of_exactly_max_payload():
    assert parse_three_ways(b"LMSG foo 32\r\n" + b"x" * 32 + b"\r\n", small) == [
        LeafMsg("foo", None, (), None, b"x" * 32)
    ]


def test_control_line_up_to_64_kib_by_default():
    queues = [b"q%05d" % i for i in range(9000)]  # a 63 KiB line
    line = b"LMSG foo | " + b" ".join(queues) + b" 1"
    assert 60_000 < len(line) <= 65536
    [event] = LeafParser().feed(line + b"\r\nx\r\n")
    assert event.queues == tuple(q.decode() for q in queues)


def test_many_ops_in_one_feed_come_out_in_order():
    data = (
        b'INFO {"connect_info":true}\r\n'
        b"LS+ foo\r\n"
        b"LS+ bar q 2\r\n"
        b"LMSG foo 2\r\nhi\r\n"
        b"HMSG bar | q 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
        b"LS- bar q\r\n"
        b"PONG\r\n"
    )
    assert parse_three_ways(data) == [
        Info({"connect_info": True}),
        LeafSub("foo", None, 1),
        LeafSub("bar", "q", 2),
        LeafMsg("foo", None, (), None, b"hi"),
        LeafMsg("bar", None, ("q",), b"NATS/1.0\r\n\r\n", b"x"),
        LeafUnsub("bar", "q"),
        PONG,
    ]


def test_max_payload_can_be_lowered_after_construction():
    parser = LeafParser()
    parser.max_payload = 2
    with pytest.raises(ProtocolError) as info:
        parser.feed(b"LMSG foo 3\r\n")
    assert info.value.message == MAX_PAYLOAD


# ====================================================================== violations


@pytest.mark.parametrize(
    "data",
    [
        b"FOO\r\n",
        b"\r\n",
        b" LS+ foo\r\n",
        b"LS foo\r\n",
        b"LS+\r\n",
        b"LS+foo\r\n",
        b"LS-\r\n",
        b"LS*\r\n",
        b"LMSG\r\n",
        b"LMSGX foo 1\r\n",
        b"LMSG\rfoo 1\r\n",
        b"HMSG\r\n",
        b"HMSGfoo 1 2\r\n",
        b"-ERR\r\n",
        b"-ERRX\r\n",
        # verbs of other connection kinds; nats-server's parser maps some of them onto the leaf
        # handlers (SUB and RS+ are LS+ there, RMSG is LMSG); leafjet refuses them all
        b"SUB foo 1\r\n",
        b"UNSUB 1\r\n",
        b"PUB foo 2\r\nhi\r\n",
        b"HPUB foo 0 2\r\nhi\r\n",
        b"MSG foo 1 2\r\nhi\r\n",
        b"RS+ ACC foo\r\n",
        b"RMSG ACC foo 2\r\nhi\r\n",
        b"A+ foo\r\n",
    ],
)
def test_unknown_op_is_unknown_protocol_operation(data: bytes):
    assert_error(data, UNKNOWN_OP)


@pytest.mark.parametrize(
    "data",
    [
        b"LS+ \r\n",
        b"LS+ foo q\r\n",  # two arguments: the reference's "processLeafSub Parse Error"
        b"LS+ foo q 1 x\r\n",
        b"LS+ foo q 0\r\n",
        b"LS+ foo q 000\r\n",
        b"LS+ foo q x\r\n",
        b"LS+ foo q -1\r\n",
        b"LS+ foo q +1\r\n",
        b"LS+ foo q 1000000000\r\n",
        b"LMSG \r\n",
        b"LMSG foo\r\n",
        b"LMSG foo x\r\n",
        b"LMSG foo r -1\r\n",
        b"LMSG foo 9999999999\r\n",
        b"LMSG foo ++ r q 2\r\n",
        b"LMSG foo x r q 2\r\n",
        b"LMSG foo || q 2\r\n",
        b"LMSG foo + r q x\r\n",
        b"HMSG foo 2\r\n",
        b"HMSG foo r 2\r\n",
        b"HMSG foo 4 2\r\n",
        b"HMSG foo x 2\r\n",
        b"HMSG foo 2 x\r\n",
        b"HMSG foo * r q 0 2\r\n",
        b"HMSG foo | q 3 2\r\n",
        b"INFO\r\n",
        b"INFO junk\r\n",
        b"INFO []\r\n",
        b"INFOX\r\n",
        b"CONNECT\r\n",
        b"CONNECT {\r\n",
        b"CONNECT 1\r\n",
        b"CONNECT {} x\r\n",
        b"CONNECT " + b"[" * 3000 + b"\r\n",
    ],
)
def test_malformed_arguments_close_silently(data: bytes):
    assert_error(data, None)


@pytest.mark.parametrize(
    "data",
    [
        b"LMSG foo 33\r\n",
        b"LMSG foo + r q1 q2 33\r\n",
        b"HMSG foo 0 33\r\n",
        b"HMSG foo | q 12 999999999\r\n",
    ],
)
def test_size_above_max_payload_is_rejected_on_the_control_line(data: bytes):
    assert_error(data, MAX_PAYLOAD, small)


@pytest.mark.parametrize(
    "data",
    [
        b"LMSG foo 2\r\nhiXX",
        b"LMSG foo 2\r\nhi\nPING\r\n",
        b"LMSG foo | q 2\r\nhello\r\n",
        b"HMSG foo 12 14\r\nNATS/1.0\r\n\r\nhi!\r\n",
    ],
)
def test_payload_not_followed_by_crlf_is_unknown_protocol_operation(data: bytes):
    assert_error(data, UNKNOWN_OP)


@pytest.mark.parametrize(
    "data",
    [b"LS+ " + b"a" * 61 + b"\r\n", b"LMSG " + b"a" * 70, b"CONNECT " + b" " * 70, b"-ERR " + b"x" * 70],
)
def test_overlong_control_line_is_maximum_control_line_exceeded(data: bytes):
    assert_error(data, MAX_CONTROL_LINE, small)


def test_default_limit_is_64_kib():
    parser = LeafParser()
    assert parser.feed(b"LS+ " + b"a" * 65532) == []
    with pytest.raises(ProtocolError) as info:
        parser.feed(b"a")
    assert info.value.message == MAX_CONTROL_LINE


def test_unknown_op_is_detected_before_its_newline_arrives():
    with pytest.raises(ProtocolError) as info:
        LeafParser().feed(b"SUB")
    assert info.value.message == UNKNOWN_OP


def test_error_carries_the_events_parsed_before_it():
    with pytest.raises(ProtocolError) as info:
        LeafParser().feed(b"LS+ foo\r\nLMSG foo 2\r\nhi\r\nSUB foo 1\r\nPING\r\n")
    assert info.value.message == UNKNOWN_OP
    assert info.value.events == [LeafSub("foo", None, 1), LeafMsg("foo", None, (), None, b"hi")]


# ====================================================================== stop_after, take_buffer


def test_stop_after_returns_right_after_the_event_and_keeps_the_rest():
    parser = LeafParser()
    data = b"PING\r\nINFO {}\r\nLS+ foo\r\nLMSG"
    assert parser.feed(data, stop_after=Info) == [PING, Info({})]
    assert parser.take_buffer() == b"LS+ foo\r\nLMSG"
    assert parser.take_buffer() == b""
    assert parser.feed(b"PONG\r\n") == [PONG]


def test_feeding_nothing_resumes_after_a_stop():
    parser = LeafParser()
    assert parser.feed(b"INFO {}\r\nCONNECT {}\r\nLS+ a\r\nLS+ b\r\nLMS", stop_after=Connect) == [
        Info({}),
        Connect({}),
    ]
    assert parser.feed(b"", stop_after=LeafSub) == [LeafSub("a", None, 1)]
    assert parser.feed(b"G x 1\r\ny\r\n") == [LeafSub("b", None, 1), LeafMsg("x", None, (), None, b"y")]


def test_stop_after_a_tuple_of_types_and_at_the_end_of_the_data():
    parser = LeafParser()
    assert parser.feed(b"PING\r\nCONNECT {}\r\n", stop_after=(Info, Connect)) == [PING, Connect({})]
    assert parser.take_buffer() == b""


def test_stop_after_a_message_also_when_its_payload_completes_later():
    parser = LeafParser()
    assert parser.feed(b"LMSG a 2\r\nh", stop_after=LeafMsg) == []
    assert parser.feed(b"i\r\nPING\r\n", stop_after=LeafMsg) == [LeafMsg("a", None, (), None, b"hi")]
    assert parser.take_buffer() == b"PING\r\n"
    after = parser.feed(b"LMSG b 1\r\nx\r\nPONG\r\n", stop_after=LeafMsg)
    assert after == [LeafMsg("b", None, (), None, b"x")]
    assert parser.feed(b"") == [PONG]


def test_without_the_event_stop_after_changes_nothing():
    parser = LeafParser()
    assert parser.feed(b"PING\r\nLS+ a\r\nPO", stop_after=Info) == [PING, LeafSub("a", None, 1)]
    assert parser.take_buffer() == b"PO"  # a partial line is handed back too


def test_take_buffer_inside_a_payload_is_refused():
    parser = LeafParser()
    parser.feed(b"LMSG a 5\r\nhe")
    with pytest.raises(RuntimeError):
        parser.take_buffer()


def test_bytes_left_by_a_stop_are_checked_when_parsed():
    parser = LeafParser()
    assert parser.feed(b"INFO {}\r\nXYZ\r\n", stop_after=Info) == [Info({})]
    with pytest.raises(ProtocolError) as info:
        parser.feed(b"")
    assert info.value.message == UNKNOWN_OP


def test_switch_to_compression_mid_chunk():
    # how a link uses it: the bytes after the INFO that agrees on zstd are compressed
    from core.protocol.compress import ZstdReader, ZstdWriter

    writer = ZstdWriter()
    chunk = b'INFO {"compression":"zstd"}\r\n' + writer.compress(b"LS+ foo\r\nLMSG foo 2\r\nhi\r\n")
    parser = LeafParser()
    assert parser.feed(chunk, stop_after=Info) == [Info({"compression": "zstd"})]
    reader = ZstdReader(1 << 20)
    assert parser.feed(reader.decompress(parser.take_buffer())) == [
        LeafSub("foo", None, 1),
        LeafMsg("foo", None, (), None, b"hi"),
    ]


# ====================================================================== encoders


def test_ls_encoders_exact_bytes():
    assert encode_ls_plus("foo.>") == b"LS+ foo.>\r\n"
    assert encode_ls_plus("foo", "q", 12) == b"LS+ foo q 12\r\n"
    assert encode_ls_minus("foo") == b"LS- foo\r\n"
    assert encode_ls_minus("foo", "q") == b"LS- foo q\r\n"
    assert encode_ls_plus("f\udcffo") == b"LS+ f\xffo\r\n"


@pytest.mark.parametrize(
    ("reply", "queues", "head"),
    [
        (None, (), b"LMSG foo 2\r\n"),
        ("r", (), b"LMSG foo r 2\r\n"),
        ("r", ("q1", "q2"), b"LMSG foo + r q1 q2 2\r\n"),
        (None, ("q1",), b"LMSG foo | q1 2\r\n"),
    ],
)
def test_lmsg_exact_bytes(reply: str | None, queues: tuple[str, ...], head: bytes):
    assert encode_lmsg("foo", reply, queues, None, b"hi") == head + b"hi\r\n"
    hmsg = head.replace(b"LMSG", b"HMSG").replace(b" 2\r\n", b" 4 6\r\n")
    assert encode_lmsg("foo", reply, queues, b"NATS", b"hi") == hmsg + b"NATShi\r\n"
    assert lmsg_head("foo", reply, queues, 2) == head


def test_lmsg_text_with_surrogateescape():
    data = encode_lmsg("f\udcffo", "r\udcfe", ("q\udcfd",), None, b"")
    assert data == b"LMSG f\xffo + r\xfe q\xfd 0\r\n\r\n"


def test_lmsgs_batch_and_stripping_headers():
    msgs = [("a", None, (), None, b"1"), ("b", "r", ("q",), b"NATS/1.0\r\n\r\n", b"22")]
    assert encode_lmsgs(msgs) == b"".join(encode_lmsg(*m) for m in msgs)
    # for a peer without headers: LMSG with the payload alone (the reference's size - hdr)
    assert encode_lmsgs(msgs, headers=False) == b"LMSG a 1\r\n1\r\nLMSG b + r q 2\r\n22\r\n"


def test_encode_deliveries_is_the_frames_of_encode_lmsg_joined():
    from core.protocol.leaf import encode_deliveries

    msgs = [
        ("$JS.ACK.S.C.1.1.1.1.0@orders.1", None, b"one"),
        (None, b"NATS/1.0\r\nA: b\r\n\r\n", b"two"),
        ("r.x", b"NATS/1.0\r\n\r\n", b""),
        ("$JS.ACK.S.C.1.4.4.1.0@\u00e9.x", None, b""),
    ]
    for with_headers in (True, False):
        want = b"".join(encode_lmsg("$JS.S.abc", r, (), h if with_headers else None, p) for r, h, p in msgs)
        assert encode_deliveries("$JS.S.abc", msgs, with_headers) == want
        # and the leaf parser reads them back as those messages
        parser = LeafParser()
        got = [(m.subject, m.reply, m.headers, m.payload) for m in parser.feed(want)]
        assert got == [("$JS.S.abc", r, h if with_headers else None, p) for r, h, p in msgs]
