"""Message headers (ADR-4): parse, look up, encode, refuse injection."""

from __future__ import annotations

import pytest

from core.protocol import HeaderError, Headers, encode_headers, parse_headers, status_headers


def test_plain_block_parses_to_items_in_order():
    headers = parse_headers(b"NATS/1.0\r\nNats-Msg-Id: abc\r\nX-Thing: 1\r\n\r\n")
    assert headers == Headers(None, "", (("Nats-Msg-Id", "abc"), ("X-Thing", "1")))


def test_status_only_block():
    assert parse_headers(b"NATS/1.0 503\r\n\r\n") == Headers(503, "", ())


def test_status_with_description():
    assert parse_headers(b"NATS/1.0 404 No Messages\r\n\r\n") == Headers(404, "No Messages", ())


def test_status_with_description_and_items():
    block = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\n\r\n"
    headers = parse_headers(block)
    assert (headers.status, headers.description) == (100, "Idle Heartbeat")
    assert headers.get("Nats-Last-Consumer") == "5"


def test_repeated_name_keeps_every_value_in_order():
    headers = parse_headers(b"NATS/1.0\r\nA: 1\r\nB: x\r\nA: 2\r\n\r\n")
    assert headers.get("A") == "1"
    assert headers.get_all("A") == ["1", "2"]


def test_names_keep_their_case_and_lookup_prefers_exact_match():
    headers = parse_headers(b"NATS/1.0\r\nnats-msg-id: lower\r\nNats-Msg-Id: exact\r\n\r\n")
    assert headers.items == (("nats-msg-id", "lower"), ("Nats-Msg-Id", "exact"))
    assert headers.get("Nats-Msg-Id") == "exact"
    assert headers.get("NATS-MSG-ID") == "lower"
    assert headers.get_all("Nats-Msg-Id") == ["exact"]
    assert headers.get_all("NATS-MSG-ID") == ["lower", "exact"]


def test_missing_name_gives_none_and_empty_list():
    headers = parse_headers(b"NATS/1.0\r\n\r\n")
    assert headers.get("X") is None
    assert headers.get_all("X") == []


def test_values_are_stripped_and_may_contain_colons():
    headers = parse_headers(b"NATS/1.0\r\nUrl:   http://x:1/y  \r\nEmpty:\r\n\r\n")
    assert headers.items == (("Url", "http://x:1/y"), ("Empty", ""))


def test_bare_lf_and_missing_final_blank_line_are_tolerated():
    assert parse_headers(b"NATS/1.0\nA: 1\n").items == (("A", "1"),)
    assert parse_headers(b"NATS/1.0\r\nA: 1\r\n").items == (("A", "1"),)


def test_non_utf8_value_survives_with_surrogateescape():
    headers = parse_headers(b"NATS/1.0\r\nA: \xff\r\n\r\n")
    assert headers.get("A") == "\udcff"
    assert encode_headers(headers.items) == b"NATS/1.0\r\nA: \xff\r\n\r\n"


@pytest.mark.parametrize(
    "block",
    [
        b"",
        b"HTTP/1.1 200\r\n\r\n",
        b"NATS/1.1\r\n\r\n",
        b"NATS/1.0X\r\n\r\n",
        b"NATS/1.0 abc\r\n\r\n",
        b"NATS/1.0\r\nno colon here\r\n\r\n",
        b"NATS/1.0\r\n: empty name\r\n\r\n",
        b"NATS/1.0\r\nA: 1\r\n\r\nB: 2\r\n",
    ],
)
def test_malformed_block_raises_header_error(block: bytes):
    with pytest.raises(HeaderError):
        parse_headers(block)


def test_header_error_is_a_value_error():
    assert issubclass(HeaderError, ValueError)


def test_encode_items():
    assert encode_headers([("A", "1"), ("A", "2"), ("Nats-Msg-Id", "x")]) == (
        b"NATS/1.0\r\nA: 1\r\nA: 2\r\nNats-Msg-Id: x\r\n\r\n"
    )


def test_encode_empty_block():
    assert encode_headers([]) == b"NATS/1.0\r\n\r\n"


def test_status_headers_forms():
    assert status_headers(503, "") == b"NATS/1.0 503\r\n\r\n"
    assert status_headers(404, "No Messages") == b"NATS/1.0 404 No Messages\r\n\r\n"
    assert status_headers(100, "Idle Heartbeat", [("Nats-Last-Consumer", "1")]) == (
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n\r\n"
    )


def test_encode_then_parse_round_trips():
    items = (("A", "1"), ("b-c", "x y z"), ("A", "2"), ("U", "h\u00e9"))
    assert parse_headers(encode_headers(items, 409, "Conflict")) == Headers(409, "Conflict", items)


@pytest.mark.parametrize(
    "items",
    [
        [("A", "1\r\nPUB x 1")],
        [("A", "1\n")],
        [("A", "\r")],
        [("A\r\nB", "1")],
        [("A:B", "1")],
        [("A B", "1")],
        [("", "1")],
    ],
)
def test_encode_rejects_names_and_values_that_would_inject(items: list[tuple[str, str]]):
    with pytest.raises(ValueError):
        encode_headers(items)


def test_encode_rejects_crlf_in_description():
    with pytest.raises(ValueError):
        status_headers(503, "No\r\nResponders")


def test_encode_rejects_description_without_status():
    with pytest.raises(ValueError):
        encode_headers([], None, "orphan")
