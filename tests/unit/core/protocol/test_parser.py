"""ServerParser and ClientParser, case by case.

Every case runs three ways: fed whole, fed byte by byte, and followed by ``PING\\r\\n`` (which
must come out as one more event, or not change the error). The expected results are what the
reference nats-server 2.15.1 was measured to do on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.errors import ProtocolError
from core.protocol import (
    MAX_CONTROL_LINE,
    MAX_PAYLOAD,
    OK,
    PING,
    PONG,
    UNKNOWN_OP,
    ClientParser,
    Connect,
    Err,
    Info,
    Msg,
    Pub,
    ServerParser,
    Sub,
    Unsub,
)

TRAILER = b"PING\r\n"


def _three_ways(data: bytes) -> list[tuple[str, list[bytes]]]:
    return [
        ("whole", [data]),
        ("byte by byte", [data[i : i + 1] for i in range(len(data))]),
        ("with trailing data", [data + TRAILER]),
    ]


def parse_three_ways(data: bytes, make: Callable[[], Any] = ServerParser) -> list[Any]:
    """The events of ``data``, after checking all three ways of feeding it agree."""
    results = {}
    for name, chunks in _three_ways(data):
        parser = make()
        results[name] = [event for chunk in chunks for event in parser.feed(chunk)]
    whole = results["whole"]
    assert results["byte by byte"] == whole
    assert results["with trailing data"] == [*whole, PING]
    return whole


def error_three_ways(data: bytes, make: Callable[[], Any] = ServerParser) -> ProtocolError:
    """The ProtocolError ``data`` raises, after checking all three ways raise the same one."""
    errors = []
    for name, chunks in _three_ways(data):
        parser = make()
        with pytest.raises(ProtocolError) as info:
            for chunk in chunks:
                parser.feed(chunk)
        errors.append((name, info.value))
    first = errors[0][1]
    for name, error in errors:
        assert (error.message, error.close) == (first.message, first.close), name
    return first


def assert_error(data: bytes, message: str | None, make: Callable[[], Any] = ServerParser) -> None:
    error = error_three_ways(data, make)
    assert error.message == message
    assert error.close is True


# ====================================================================== ServerParser: good input


def test_connect_gives_its_json_object():
    assert parse_three_ways(b'CONNECT {"verbose":false,"name":"x"}\r\n') == [
        Connect({"verbose": False, "name": "x"})
    ]


def test_connect_tolerates_tab_and_surrounding_whitespace():
    assert parse_three_ways(b'CONNECT\t  {"protocol":1}  \r\n') == [Connect({"protocol": 1})]


def test_connect_null_counts_as_empty_options():
    assert parse_three_ways(b"CONNECT null\r\n") == [Connect({})]


def test_connect_with_invalid_utf8_in_json_is_accepted_with_replacement():
    assert parse_three_ways(b'CONNECT {"name":"\xff"}\r\n') == [Connect({"name": "\ufffd"})]


def test_pub_gives_subject_and_payload():
    assert parse_three_ways(b"PUB foo.bar 5\r\nhello\r\n") == [Pub("foo.bar", None, b"hello", None)]


def test_pub_with_reply():
    assert parse_three_ways(b"PUB foo _INBOX.1 2\r\nhi\r\n") == [Pub("foo", "_INBOX.1", b"hi", None)]


def test_pub_with_empty_payload():
    assert parse_three_ways(b"PUB foo 0\r\n\r\n") == [Pub("foo", None, b"", None)]


def test_pub_payload_may_contain_crlf_and_protocol_text():
    payload = b"\r\nPING\r\nPUB x 1\r\n"
    data = b"PUB foo %d\r\n%s\r\n" % (len(payload), payload)
    assert parse_three_ways(data) == [Pub("foo", None, payload, None)]


def test_pub_args_separated_by_runs_of_spaces_and_tabs():
    assert parse_three_ways(b"PUB\tfoo \t  r\t 2  \r\nhi\r\n") == [Pub("foo", "r", b"hi", None)]


def test_pub_op_name_is_case_insensitive():
    assert parse_three_ways(b"pub foo 2\r\nhi\r\nPuB bar 1\r\nx\r\n") == [
        Pub("foo", None, b"hi", None),
        Pub("bar", None, b"x", None),
    ]


def test_pub_control_line_may_end_with_bare_lf():
    assert parse_three_ways(b"PUB foo 2\nhi\r\n") == [Pub("foo", None, b"hi", None)]


def test_pub_size_with_leading_zeros_is_accepted():
    assert parse_three_ways(b"PUB foo 002\r\nhi\r\n") == [Pub("foo", None, b"hi", None)]


def test_pub_payload_longer_than_control_line_limit_is_fine():
    payload = bytes(range(256)) * 40  # 10 KiB
    parser = lambda: ServerParser(max_control_line=64)  # noqa: E731
    data = b"PUB foo %d\r\n%s\r\n" % (len(payload), payload)
    assert parse_three_ways(data, parser) == [Pub("foo", None, payload, None)]


def test_pub_payload_exactly_max_payload_is_accepted():
    parser = lambda: ServerParser(max_payload=4)  # noqa: E731
    assert parse_three_ways(b"PUB foo 4\r\nabcd\r\n", parser) == [Pub("foo", None, b"abcd", None)]


def test_pub_subject_with_non_utf8_bytes_is_kept_with_surrogateescape():
    [event] = parse_three_ways(b"PUB f\xffo 1\r\nx\r\n")
    assert event.subject == "f\udcffo"
    assert event.subject.encode("utf-8", "surrogateescape") == b"f\xffo"


def test_pub_subject_in_utf8_decodes_to_text():
    assert parse_three_ways("PUB héllo 1\r\nx\r\n".encode()) == [Pub("héllo", None, b"x", None)]


def test_vertical_tab_and_form_feed_stay_inside_an_argument():
    assert parse_three_ways(b"PUB a\x0bb\x0c 1\r\nx\r\n") == [Pub("a\x0bb\x0c", None, b"x", None)]


def test_stray_cr_separates_arguments():
    assert parse_three_ways(b"SUB foo\r1\r\r\n") == [Sub("foo", None, "1")]


def test_hpub_splits_header_block_from_payload():
    block = b"NATS/1.0\r\nA: 1\r\n\r\n"
    data = b"HPUB foo %d %d\r\n%shi\r\n" % (len(block), len(block) + 2, block)
    assert parse_three_ways(data) == [Pub("foo", None, b"hi", block)]


def test_hpub_with_reply_and_empty_payload():
    block = b"NATS/1.0\r\n\r\n"
    data = b"HPUB foo bar 12 12\r\n%s\r\n" % block
    assert parse_three_ways(data) == [Pub("foo", "bar", b"", block)]


def test_hpub_with_zero_header_size_is_a_plain_pub():
    assert parse_three_ways(b"HPUB foo 0 2\r\nhi\r\n") == [Pub("foo", None, b"hi", None)]


def test_hpub_header_block_is_forwarded_even_when_not_nats_1_0():
    # The reference does not look inside the block: it delivers it as sent.
    assert parse_three_ways(b"HPUB foo 4 6\r\nNATShi\r\n") == [Pub("foo", None, b"hi", b"NATS")]


def test_sub_without_queue():
    assert parse_three_ways(b"SUB foo.* 1\r\n") == [Sub("foo.*", None, "1")]


def test_sub_with_queue():
    assert parse_three_ways(b"SUB foo.> workers 22\r\n") == [Sub("foo.>", "workers", "22")]


def test_sub_does_not_validate_the_subject():
    assert parse_three_ways(b"SUB foo..bar 1\r\n") == [Sub("foo..bar", None, "1")]


def test_unsub_without_max():
    assert parse_three_ways(b"UNSUB 1\r\n") == [Unsub("1", None)]


def test_unsub_with_max():
    assert parse_three_ways(b"UNSUB 1 5\r\n") == [Unsub("1", 5)]


@pytest.mark.parametrize("max_msgs", [b"0", b"x", b"-1", b"1_0", b"9999999999"])
def test_unsub_with_unusable_max_removes_at_once(max_msgs: bytes):
    assert parse_three_ways(b"UNSUB 1 %s\r\n" % max_msgs) == [Unsub("1", None)]


@pytest.mark.parametrize(
    "line", [b"PING\r\n", b"ping\r\n", b"PING\n", b"PING \t \r\n", b"PINGXYZ\r\n", b"PING\r\r\n"]
)
def test_ping_variants_give_ping(line: bytes):
    assert parse_three_ways(line) == [PING]


@pytest.mark.parametrize("line", [b"PONG\r\n", b"pong\n", b"PONG x\r\n"])
def test_pong_variants_give_pong(line: bytes):
    assert parse_three_ways(line) == [PONG]


def test_ping_event_is_the_singleton():
    assert ServerParser().feed(b"PING\r\n")[0] is PING


@pytest.mark.parametrize("line", [b"+OK\r\n", b"+ok\r\n", b"+OKX\r\n"])
def test_client_ok_is_ignored(line: bytes):
    assert parse_three_ways(line) == []


@pytest.mark.parametrize("line", [b"INFO {}\r\n", b'INFO {"server_id":"x"}\r\n', b"INFO null\r\n"])
def test_client_info_is_ignored(line: bytes):
    assert parse_three_ways(line) == []


def test_many_ops_in_one_feed_come_out_in_order():
    data = (
        b'CONNECT {"verbose":true}\r\n'
        b"SUB foo 1\r\n"
        b"PUB foo 2\r\nhi\r\n"
        b"HPUB foo 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
        b"UNSUB 1 1\r\n"
        b"PONG\r\n"
    )
    assert parse_three_ways(data) == [
        Connect({"verbose": True}),
        Sub("foo", None, "1"),
        Pub("foo", None, b"hi", None),
        Pub("foo", None, b"x", b"NATS/1.0\r\n\r\n"),
        Unsub("1", 1),
        PONG,
    ]


def test_incomplete_pub_is_buffered_until_payload_arrives():
    parser = ServerParser()
    assert parser.feed(b"PUB foo 5\r\nhel") == []
    assert parser.feed(b"lo") == []
    assert parser.feed(b"\r") == []
    assert parser.feed(b"\nPI") == [Pub("foo", None, b"hello", None)]
    assert parser.feed(b"NG\r\n") == [PING]


def test_max_payload_can_be_lowered_after_construction():
    parser = ServerParser()
    assert parser.feed(b"PUB foo 3\r\nabc\r\n") == [Pub("foo", None, b"abc", None)]
    parser.max_payload = 2
    with pytest.raises(ProtocolError) as info:
        parser.feed(b"PUB foo 3\r\n")
    assert info.value.message == MAX_PAYLOAD


def test_parser_accepts_bytearray_and_memoryview_and_returns_bytes_payloads():
    parser = ServerParser()
    [a] = parser.feed(bytearray(b"PUB foo 2\r\nhi\r\n"))
    [b] = parser.feed(memoryview(b"PUB foo 2\r\nho\r\n"))
    assert type(a.payload) is bytes and type(b.payload) is bytes
    assert (a.payload, b.payload) == (b"hi", b"ho")


def test_control_line_of_exactly_the_limit_is_accepted():
    line = b"SUB " + b"a" * 10 + b" 1"  # 16 bytes
    parser = lambda: ServerParser(max_control_line=16)  # noqa: E731
    assert parse_three_ways(line + b"\r\n", parser) == [Sub("a" * 10, None, "1")]


# ====================================================================== ServerParser: violations


@pytest.mark.parametrize(
    "data",
    [
        b"FOO\r\n",
        b"\r\n",
        b"\n",
        b"  PING\r\n",
        b"\x00\xff\r\n",
        b"MSG foo 1 2\r\nhi\r\n",
        b"msg foo\r\n",
        b"PUBX foo 2\r\nhi\r\n",
        b"PUB\r\n",
        b"PUB\rfoo 2\r\n",
        b"HPUB\r\n",
        b"SUB\r\n",
        b"SUBX foo 1\r\n",
        b"UNSUB\r\n",
        b"PI\r\n",
        b"-ERR\r\n",
        b"-ERRX\r\n",
        b"-XYZ\r\n",
        b"+XYZ\r\n",
    ],
)
def test_unknown_or_forbidden_op_is_unknown_protocol_operation(data: bytes):
    assert_error(data, UNKNOWN_OP)


@pytest.mark.parametrize(
    "data",
    [
        b"PUB \r\n",
        b"PUB foo\r\n",
        b"PUB foo bar\r\n",
        b"PUB foo a b 2\r\n",
        b"PUB foo -2\r\n",
        b"PUB foo +2\r\n",
        b"PUB foo 1_0\r\n",
        b"PUB foo 2x\r\n",
        b"PUB foo 9999999999\r\n",
        b"PUB foo 00000000002\r\n",
        b"HPUB foo 6\r\n",
        b"HPUB foo x 6\r\n",
        b"HPUB foo 12 x\r\n",
        b"HPUB foo 6 4\r\n",
        b"HPUB foo a b 1 2\r\n",
        b"SUB \r\n",
        b"SUB foo\r\n",
        b"SUB a b c d\r\n",
        b"UNSUB \r\n",
        b"UNSUB 1 2 3\r\n",
        b"CONNECT\r\n",
        b"CONNECT {\r\n",
        b"CONNECT []\r\n",
        b"CONNECT 1\r\n",
        b"CONNECT {} x\r\n",
        b"CONNECTX {}\r\n",
        b"CONNECT " + b"[" * 3000 + b"\r\n",
        b"INFO\r\n",
        b"INFO junk\r\n",
        b"INFO []\r\n",
        b"INFOX\r\n",
        b"-ERR 'x'\r\n",
        b"-err 'x'\r\n",
    ],
)
def test_malformed_arguments_close_silently(data: bytes):
    assert_error(data, None)


@pytest.mark.parametrize(
    "data", [b"PUB foo 1048577\r\n", b"PUB foo r 999999999\r\n", b"HPUB foo 12 1048577\r\n"]
)
def test_size_above_max_payload_is_rejected_on_the_control_line(data: bytes):
    assert_error(data, MAX_PAYLOAD)


def test_max_payload_is_checked_before_the_payload_arrives():
    with pytest.raises(ProtocolError) as info:
        ServerParser(max_payload=10).feed(b"PUB foo 11\r\n")
    assert info.value.message == MAX_PAYLOAD


@pytest.mark.parametrize(
    "data",
    [
        b"PUB foo 2\r\nhiXX",
        b"PUB foo 2\r\nhi\nPING\r\n",
        b"PUB foo 2\r\nhi\r\r\n",
        b"PUB foo 2\r\nhello\r\n",
        b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi!\r\n",
    ],
)
def test_payload_not_followed_by_crlf_is_unknown_protocol_operation(data: bytes):
    assert_error(data, UNKNOWN_OP)


@pytest.mark.parametrize(
    "data",
    [
        b"SUB " + b"a" * 5000 + b" 1\r\n",
        b"PUB " + b"a" * 5000 + b" 2\r\nhi\r\n",
        b"PUB " + b"a" * 5000,
        b'CONNECT {"name":"' + b"a" * 5000 + b'"}\r\n',
        b"UNSUB " + b"1" * 5000,
        b"ping " + b" " * 5000,
    ],
)
def test_overlong_control_line_is_maximum_control_line_exceeded(data: bytes):
    assert_error(data, MAX_CONTROL_LINE)


def test_line_one_byte_over_the_limit_is_rejected():
    line = b"SUB " + b"a" * 11 + b" 1"  # 17 bytes
    assert_error(line + b"\r\n", MAX_CONTROL_LINE, lambda: ServerParser(max_control_line=16))


def test_overlong_line_is_detected_before_its_newline_arrives():
    parser = ServerParser()
    assert parser.feed(b"PUB " + b"a" * 4092) == []  # 4096 bytes buffered: still allowed
    with pytest.raises(ProtocolError) as info:
        parser.feed(b"a")
    assert info.value.message == MAX_CONTROL_LINE


def test_trailing_cr_does_not_count_towards_the_limit_while_waiting():
    parser = ServerParser(max_control_line=16)
    assert parser.feed(b"SUB " + b"a" * 10 + b" 1\r") == []
    assert parser.feed(b"\n") == [Sub("a" * 10, None, "1")]


@pytest.mark.parametrize("data", [b"A" * 5000, b"P" + b"A" * 5000, b"X" * 10])
def test_garbage_without_newline_is_unknown_protocol_operation(data: bytes):
    assert_error(data, UNKNOWN_OP)


def test_unknown_op_is_detected_before_its_newline_arrives():
    parser = ServerParser()
    with pytest.raises(ProtocolError) as info:
        parser.feed(b"XYZ")
    assert info.value.message == UNKNOWN_OP


def test_error_carries_the_events_parsed_before_it():
    with pytest.raises(ProtocolError) as info:
        ServerParser().feed(b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nFOO\r\nPING\r\n")
    assert info.value.message == UNKNOWN_OP
    assert info.value.events == [Sub("foo", None, "1"), Pub("foo", None, b"hi", None)]


# ====================================================================== ClientParser


def test_client_parses_info():
    data = b'INFO {"server_id":"S","max_payload":1048576,"headers":true}\r\n'
    assert parse_three_ways(data, ClientParser) == [
        Info({"server_id": "S", "max_payload": 1048576, "headers": True})
    ]


def test_client_parses_msg():
    assert parse_three_ways(b"MSG foo.bar 7 5\r\nhello\r\n", ClientParser) == [
        Msg("foo.bar", "7", None, b"hello", None)
    ]


def test_client_parses_msg_with_reply_and_tabs():
    assert parse_three_ways(b"msg\tfoo 7\t_INBOX.x  2\r\nhi\r\n", ClientParser) == [
        Msg("foo", "7", "_INBOX.x", b"hi", None)
    ]


def test_client_parses_hmsg():
    block = b"NATS/1.0 503\r\n\r\n"
    data = b"HMSG foo 1 %d %d\r\n%s\r\n" % (len(block), len(block), block)
    assert parse_three_ways(data, ClientParser) == [Msg("foo", "1", None, b"", block)]


def test_client_parses_hmsg_with_reply():
    block = b"NATS/1.0\r\nX: y\r\n\r\n"
    data = b"HMSG foo 1 r %d %d\r\n%sab\r\n" % (len(block), len(block) + 2, block)
    assert parse_three_ways(data, ClientParser) == [Msg("foo", "1", "r", b"ab", block)]


def test_client_parses_ping_pong_ok():
    assert parse_three_ways(b"PING\r\nPONG\r\n+OK\r\n", ClientParser) == [PING, PONG, OK]


def test_client_parses_err_without_quotes():
    assert parse_three_ways(b"-ERR 'Unknown Protocol Operation'\r\n", ClientParser) == [
        Err("Unknown Protocol Operation")
    ]


def test_client_parses_err_with_unquoted_text():
    assert parse_three_ways(b"-ERR Stale Connection\r\n", ClientParser) == [Err("Stale Connection")]


@pytest.mark.parametrize("data", [b"PUB foo 2\r\nhi\r\n", b"SUB foo 1\r\n", b"XYZ\r\n", b"\r\n", b"MSG\r\n"])
def test_client_rejects_ops_a_server_does_not_send(data: bytes):
    assert_error(data, UNKNOWN_OP, ClientParser)


@pytest.mark.parametrize(
    "data",
    [
        b"MSG foo 2\r\n",
        b"MSG foo 1 a b 2\r\n",
        b"MSG foo 1 x\r\n",
        b"HMSG foo 1 2\r\n",
        b"HMSG foo 1 4 2\r\n",
        b"INFO junk\r\n",
        b"INFO []\r\n",
    ],
)
def test_client_rejects_malformed_arguments(data: bytes):
    assert_error(data, None, ClientParser)


def test_client_rejects_msg_payload_without_crlf():
    assert_error(b"MSG foo 1 2\r\nhiX\r\n", UNKNOWN_OP, ClientParser)


def test_client_rejects_overlong_line():
    assert_error(b"MSG " + b"a" * 5000, MAX_CONTROL_LINE, ClientParser)


@pytest.mark.parametrize(
    "line",
    [
        b"HPUB foo 12 14",
        b"HPUB foo bar 12 14\r",
        b"HPUB  foo   bar  0  0",
        b"HPUB foo.\xff _INBOX.a.b 30 158",
        b"HPUB foo 6",
        b"HPUB foo x 6",
        b"HPUB foo 12 x",
        b"HPUB foo 6 4",
        b"HPUB foo a b 1 2",
        b"HPUB foo -1 2",
        b"HPUB foo 1 +2",
        b"HPUB foo 1 0000000002",
        b"HPUB foo 12 1048577",
        b"HPUB foo r 12 999999999",
    ],
)
def test_the_hpub_fast_path_reads_what_the_generic_one_reads(line: bytes):
    """``_on_line`` takes the usual HPUB forms itself: the same head, or the same error, as the
    generic ``_any_line`` gives."""

    def outcome(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except ProtocolError as e:
            return ("error", e.args)

    p = ServerParser()
    args = line.split()
    assert outcome(lambda: p._on_line(line)) == outcome(lambda: p._any_line(line, args, len(args)))
