"""Encoders: exact bytes, and round trips through the parsers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.protocol import (
    ClientParser,
    Connect,
    Info,
    Msg,
    Pub,
    ServerParser,
    Sub,
    Unsub,
    encode_connect,
    encode_err,
    encode_info,
    encode_msg,
    encode_pub,
    encode_sub,
    encode_unsub,
    encoder,
    msg_head,
)


def parse_whole_and_bytewise(parser_class: Any, data: bytes) -> list[Any]:
    whole = parser_class().feed(data)
    parser = parser_class()
    bytewise = [event for i in range(len(data)) for event in parser.feed(data[i : i + 1])]
    assert bytewise == whole
    return whole


def test_constants_are_the_wire_forms():
    assert (encoder.PING, encoder.PONG, encoder.OK) == (b"PING\r\n", b"PONG\r\n", b"+OK\r\n")


def test_info_uses_compact_json():
    data = encode_info({"server_id": "S", "headers": True, "max_payload": 1048576})
    assert data == b'INFO {"server_id":"S","headers":true,"max_payload":1048576}\r\n'


def test_info_round_trips_through_client_parser():
    options = {"server_id": "S", "nested": {"a": [1, 2]}, "text": "h\u00e9"}
    assert parse_whole_and_bytewise(ClientParser, encode_info(options)) == [Info(options)]


def test_err_quotes_the_message():
    assert encode_err("Unknown Protocol Operation") == b"-ERR 'Unknown Protocol Operation'\r\n"


def test_err_cannot_inject_a_line():
    assert encode_err("bad\r\nPING") == b"-ERR 'bad  PING'\r\n"


def test_msg_without_reply():
    assert encode_msg("foo.bar", "1", None, b"hello") == b"MSG foo.bar 1 5\r\nhello\r\n"


def test_msg_with_reply():
    assert encode_msg("foo", "9", "_INBOX.x", b"hi") == b"MSG foo 9 _INBOX.x 2\r\nhi\r\n"


def test_hmsg_sizes_are_header_length_and_total():
    block = b"NATS/1.0\r\n\r\n"
    assert encode_msg("foo", "1", None, b"hi", block) == b"HMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    assert encode_msg("foo", "1", "r", b"", block) == b"HMSG foo 1 r 12 12\r\nNATS/1.0\r\n\r\n\r\n"


@pytest.mark.parametrize(
    ("reply", "payload", "headers"),
    [
        (None, b"hi", None),
        ("r", b"", None),
        (None, b"xyz", b"NATS/1.0\r\n\r\n"),
        ("r", b"", b"NATS/1.0 503\r\n\r\n"),
    ],
)
def test_msg_head_is_the_control_line_of_encode_msg(reply: str | None, payload: bytes, headers: bytes | None):
    hdr_size = None if headers is None else len(headers)
    head = msg_head("foo", "1", reply, len(payload), hdr_size)
    assert head + (headers or b"") + payload + b"\r\n" == encode_msg("foo", "1", reply, payload, headers)


def test_encode_msgs_is_encode_msg_of_each_joined():
    msgs = [
        ("a.b", None, None, b"one"),
        ("a.c", "$JS.ACK.S.C.1.2.2.0.0", b"NATS/1.0\r\nK: v\r\n\r\n", b"two"),
        ("f\udcffo", "r\u00e9", None, b""),
    ]
    assert encoder.encode_msgs("9", msgs) == b"".join(encode_msg(s, "9", r, p, h) for s, r, h, p in msgs)
    # a client that did not ask for headers gets the payloads only
    assert encoder.encode_msgs("9", msgs, headers=False) == b"".join(
        encode_msg(s, "9", r, p) for s, r, _h, p in msgs
    )


def test_msg_round_trips_through_client_parser():
    cases = [
        Msg("foo.bar", "1", None, b"hello", None),
        Msg("foo", "22", "_INBOX.abc", b"\r\nPING\r\n", None),
        Msg("foo", "3", None, b"", b"NATS/1.0 404 No Messages\r\n\r\n"),
        Msg("f\udcffo", "s\udcfe", "r\u00e9", bytes(range(256)), b"NATS/1.0\r\nK: v\r\n\r\n"),
    ]
    data = b"".join(encode_msg(m.subject, m.sid, m.reply, m.payload, m.headers) for m in cases)
    assert parse_whole_and_bytewise(ClientParser, data) == cases


def test_connect_uses_compact_json_and_round_trips():
    options = {"verbose": False, "pedantic": False, "name": "leaf"}
    data = encode_connect(options)
    assert data == b'CONNECT {"verbose":false,"pedantic":false,"name":"leaf"}\r\n'
    assert json.loads(data[8:]) == options
    assert parse_whole_and_bytewise(ServerParser, data) == [Connect(options)]


def test_pub_and_hpub_wire_forms():
    assert encode_pub("foo", None, b"hi") == b"PUB foo 2\r\nhi\r\n"
    assert encode_pub("foo", "r", b"hi") == b"PUB foo r 2\r\nhi\r\n"
    assert encode_pub("foo", None, b"hi", b"NATS/1.0\r\n\r\n") == b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    assert encode_pub("foo", "r", b"", b"NATS/1.0\r\n\r\n") == b"HPUB foo r 12 12\r\nNATS/1.0\r\n\r\n\r\n"


def test_pub_round_trips_through_server_parser():
    cases = [
        Pub("foo.bar", None, b"hello", None),
        Pub("foo", "_INBOX.1", b"", None),
        Pub("foo", None, b"x\r\ny", b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n"),
        Pub("f\udcffo", "r\u00e9", bytes(range(256)), b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"),
    ]
    data = b"".join(encode_pub(p.subject, p.reply, p.payload, p.headers) for p in cases)
    assert parse_whole_and_bytewise(ServerParser, data) == cases


def test_sub_and_unsub_wire_forms_round_trip():
    data = encode_sub("foo.*", "1") + encode_sub("foo.>", "2", "q") + encode_unsub("1") + encode_unsub("2", 5)
    assert data == b"SUB foo.* 1\r\nSUB foo.> q 2\r\nUNSUB 1\r\nUNSUB 2 5\r\n"
    assert parse_whole_and_bytewise(ServerParser, data) == [
        Sub("foo.*", None, "1"),
        Sub("foo.>", "q", "2"),
        Unsub("1", None),
        Unsub("2", 5),
    ]


@pytest.mark.parametrize(
    "payloads",
    [[b"a", b"b"], [b"xyz"] * 5, [b"a", b"bc", b""], [b""], [b"", b""], [b"\r\nMSG a 1 1\r\n"] * 3],
)
def test_a_run_encodes_as_each_message_would(payloads: list[bytes]) -> None:
    """``encode_msg_run``: what ``encode_msg`` of each payload gives, joined (one size comes back
    as a view of one join: compared by its bytes)."""
    from core.protocol.encoder import encode_msg_run

    got = encode_msg_run("a.b", "7", payloads)
    assert bytes(got) == b"".join(encode_msg("a.b", "7", None, p) for p in payloads)
    assert len(got) == len(bytes(got))
    assert ClientParser().feed(bytes(got)) == [Msg("a.b", "7", None, p, None) for p in payloads]
