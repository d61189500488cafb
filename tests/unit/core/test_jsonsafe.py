"""The safe decoder for untrusted JSON, and the callers that read client bodies through it."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import jsonsafe
from core.api_errors import ApiError
from core.errors import ProtocolError
from core.jetstream.consumer import parse_nak_delay
from core.jetstream.consumer_models import PullRequestError, parse_pull_request
from core.jetstream.models import decode_api_body, decode_request, parse_json_value
from core.protocol.parser import ServerParser

DEEP_OBJECT = b'{"a":' * 5000 + b"1" + b"}" * 5000
DEEP_ARRAY = b"[" * 5000 + b"]" * 5000
HUGE = b"9" * 5000


@pytest.mark.parametrize("data", [DEEP_OBJECT, DEEP_ARRAY, DEEP_OBJECT.decode()])
def test_nesting_past_the_bound_is_a_json_error_not_a_recursion_error(data):
    with pytest.raises(jsonsafe.JSONError):
        jsonsafe.loads(data)


def test_nesting_up_to_the_bound_is_read():
    at_limit = "[" * jsonsafe.MAX_DEPTH + "]" * jsonsafe.MAX_DEPTH
    assert jsonsafe.loads(at_limit) is not None
    with pytest.raises(jsonsafe.JSONError):
        jsonsafe.loads("[" + at_limit + "]")


def test_brackets_inside_strings_do_not_count_as_depth():
    data = json.dumps({"k": "[" * 10_000, "e": '\\"{{{' * 1000}).encode()
    assert jsonsafe.loads(data) == json.loads(data)


def test_depth_scan_of_a_megabyte_takes_less_than_decoding_it():
    data = b'{"a":"' + b"x[" * 500_000 + b'"}'  # brackets in a string: cut out by one regex
    t0 = time.perf_counter()
    assert not jsonsafe.too_deep(data)
    assert time.perf_counter() - t0 < 0.5  # a few ms
    deep = b'{"a":[' + (b"[" * 127 + b"]" * 127 + b",") * 4000 + b"1]}"  # 1 MB, 129 deep
    t0 = time.perf_counter()
    assert jsonsafe.too_deep(deep)
    scan = time.perf_counter() - t0
    t0 = time.perf_counter()
    json.loads(deep)
    assert scan < 2 * (time.perf_counter() - t0) + 0.05  # about a third of json's own time


def test_huge_integers_are_kept_as_their_text():
    value = jsonsafe.loads(b'{"n":' + HUGE + b',"m":-' + HUGE + b',"small":12345678901234567890}')
    assert isinstance(value["n"], jsonsafe.BigNumber) and value["n"].literal == HUGE.decode()
    assert value["m"] == float("-inf") and value["m"].literal == "-" + HUGE.decode()
    assert value["small"] == 12345678901234567890 and type(value["small"]) is int


def test_lone_surrogates_become_replacement_characters_as_in_go():
    value = jsonsafe.loads(rb'{"\udcff":["\ud800","ok \ud83d\ude00", "\uDFFFx"]}')
    assert value == {"\ufffd": ["\ufffd", "ok \U0001f600", "\ufffdx"]}
    for s in ("\ufffd", "\ufffdx"):
        s.encode()  # encodable


def test_invalid_utf8_becomes_replacement_characters():
    assert jsonsafe.loads(b'"a\xffb"') == "a\ufffdb"


@pytest.mark.parametrize("data", [b"NaN", b"[Infinity]", b"-Infinity", b"{}x", b"", b'{"a":"\\x"}'])
def test_what_go_refuses_is_a_value_error(data):
    with pytest.raises(ValueError):
        jsonsafe.loads(data)


# ---------------------------------------------------------------------- callers


@pytest.mark.parametrize("body", [DEEP_OBJECT, DEEP_ARRAY, b'{"name":"S","x":' + DEEP_ARRAY + b"}"])
def test_api_request_too_deep_is_invalid_json(body):
    with pytest.raises(ApiError) as info:
        decode_request(body)
    assert info.value.err_code == 10025


def test_api_request_huge_number_is_go_type_error():
    with pytest.raises(ApiError) as info:
        decode_api_body("stream_names", decode_request(b'{"offset":' + HUGE + b"}"))
    assert info.value.err_code == 10025
    assert info.value.description.startswith("invalid JSON: json: cannot unmarshal number 9999")


def test_api_request_lone_surrogate_is_replaced():
    assert decode_request(rb'{"description":"\ud800"}') == {"description": "\ufffd"}


def test_direct_get_body_too_deep_is_a_value_error():
    with pytest.raises(ValueError):
        parse_json_value(DEEP_OBJECT)


@pytest.mark.parametrize("body", [DEEP_OBJECT, b'{"batch":1,"x":' + DEEP_ARRAY + b"}"])
def test_pull_request_too_deep_is_a_bad_request(body):
    with pytest.raises(PullRequestError) as info:
        parse_pull_request(body)
    assert info.value.status == 400


def test_pull_request_huge_numbers():
    with pytest.raises(PullRequestError) as info:
        parse_pull_request(b'{"batch":' + HUGE + b"}")
    assert "cannot unmarshal number 9999" in info.value.description
    assert parse_pull_request(b'{"x":' + HUGE + b"}").batch == 0  # an unknown field: ignored
    assert parse_pull_request(HUGE).batch == 1  # not an int64: one message, as the reference
    assert parse_pull_request(b"0" * 30 + b"7").batch == 7


def test_nak_delay_deep_or_huge_is_a_plain_nak():
    assert parse_nak_delay(DEEP_OBJECT) is None
    assert parse_nak_delay(b'{"delay":' + HUGE + b"}") is None
    assert parse_nak_delay(b'{"delay":5}') == 5


@pytest.mark.parametrize(
    "line",
    [
        b"CONNECT " + DEEP_OBJECT + b"\r\n",
        b'CONNECT {"protocol":' + HUGE + b"}\r\n",
        b'CONNECT {"user":1}\r\n',
        b'CONNECT {"echo":"x"}\r\n',
    ],
)
def test_connect_that_go_cannot_decode_is_a_silent_protocol_error(line):
    with pytest.raises(ProtocolError) as info:
        ServerParser(max_control_line=1 << 20).feed(line)
    assert info.value.message is None and info.value.close


def test_connect_options_are_canonical_typed_and_surrogate_free():
    parser = ServerParser(max_control_line=1 << 20)
    (ev,) = parser.feed(rb'CONNECT {"USER":"\ud800","Pass":"p","verbose":null,"x":' + HUGE + b"}\r\n")
    assert ev.options == {"user": "\ufffd", "pass": "p"}


def _scan(text: str) -> tuple[int, bool, str | None]:
    """A character-by-character reference: the deepest nesting, whether a closer ever underflows,
    and the innermost bracket left open (strings skipped, escapes honoured)."""
    depth = deepest = 0
    underflow = in_str = esc = False
    stack: list[str] = []
    for c in text:
        if in_str:
            esc, in_str = (False, True) if esc else (c == "\\", c != '"')
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
            deepest = max(deepest, depth)
            stack.append(c)
        elif c in "}]":
            depth -= 1
            underflow |= depth < 0
            if stack:
                stack.pop()
    return deepest, underflow, (stack[-1] if stack else None)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='[]{}"\\aé', max_size=60), st.integers(0, 4))
def test_depth_scan_agrees_with_a_character_scan(text, limit):
    deepest, underflow, inner = _scan(text)
    assert jsonsafe.too_deep(text, limit) == (deepest > limit)
    assert jsonsafe.too_deep(text.encode(), limit) == (deepest > limit)
    if not underflow:  # (only asked about prefixes a decoder accepted)
        assert jsonsafe.innermost_open(text) == inner
