"""Where a stream's transforms apply: the ingest subject, the republish subject and message,
and a source's first matching transform."""

from __future__ import annotations

from dataclasses import replace

from core.jetstream.transforms import (
    Republish,
    StreamTransforms,
    first_match,
    republish_message,
    source_transforms,
)

TS = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456789Z


def test_the_ingest_transform_rewrites_what_its_source_takes_and_keeps_the_rest():
    tf = StreamTransforms.of({"src": "in.*", "dest": "out.$1"}, None)
    assert tf.ingest_subject("in.a") == "out.a"
    assert tf.ingest_subject("in.a.b") == "in.a.b"
    assert tf.republish_subject("in.a") is None


def test_no_republish_destination_is_no_republish_and_no_source_is_every_subject():
    assert StreamTransforms.of(None, {"src": ">", "dest": ""}).republish is None
    tf = StreamTransforms.of(None, {"dest": "r.>"})
    assert tf.republish_subject("a.b") == "r.a.b"


def test_a_republish_to_no_publish_subject_is_suppressed():
    tf = StreamTransforms.of(None, {"src": "a.*", "dest": "r.{{wildcard(1)}}"})
    assert tf.republish_subject("a.x") == "r.x"
    # a destination token the subject does not have leaves an empty token: not sent
    assert tf.republish is not None and tf.republish.transform_tokens(["a"]) == "r."
    assert tf.republish_subject("b.x") is None


def test_the_republished_message_is_the_references_bytes():
    plain = Republish(0, "r.a", "s.a", None, b"hello", TS, 3)
    headers, payload = republish_message("S", plain, 7, headers_only=False)
    assert headers == (
        b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.a\r\nNats-Sequence: 7\r\n"
        b"Nats-Time-Stamp: 2023-11-14T22:13:20.123456789Z\r\nNats-Last-Sequence: 3\r\n\r\n"
    )
    assert payload == b"hello"
    with_headers = replace(plain, headers=b"NATS/1.0\r\nX-A: 1\r\n\r\n", last_seq=0)
    headers, payload = republish_message("S", with_headers, 1, headers_only=True)
    assert headers.startswith(b"NATS/1.0\r\nX-A: 1\r\nNats-Stream: S\r\n")
    assert headers.endswith(b"Nats-Last-Sequence: 0\r\nNats-Msg-Size: 5\r\n\r\n")
    assert payload == b""


def test_a_source_takes_the_first_transform_that_matches():
    trs = source_transforms(
        {
            "subject_transforms": [
                {"src": "a.*", "dest": "x.$1"},
                {"src": "b", "dest": ""},
                {"src": "c.>", "dest": "y.>"},
            ]
        }
    )
    assert trs[1] is None
    assert first_match(trs, "a.1") == "x.1"
    assert first_match(trs, "b") == "b"
    assert first_match(trs, "c.1.2") == "y.1.2"
    assert first_match(trs, "d") == "d"
    assert source_transforms({"name": "UP"}) == ()
