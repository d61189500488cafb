"""The inbound pipeline's parts on their own: in-order release, reply classification, message ids,
header encoding (no broker)."""

from __future__ import annotations

import json

import pytest

from bridges.mqtt.messages import InboundMessage
from bridges.mqtt.pipeline import (
    NO_STREAM,
    AckWindow,
    Failed,
    MessageIds,
    Pending,
    Stored,
    classify_reply,
)


def _item(mid: int) -> InboundMessage:
    return InboundMessage(generation=0, mid=mid, qos=1, dup=False, retain=False, topic=b"t", payload=b"")


def test_acks_are_released_only_in_arrival_order():
    window = AckWindow(3)
    a, b, c = (Pending(_item(i)) for i in (1, 2, 3))
    for p in (a, b, c):
        window.add(p)
    assert not window.has_room()
    c.done = b.done = True
    assert window.releasable() == []  # the first message holds back the two stored after it
    a.done = True
    assert [p.item.mid for p in window.releasable()] == [1, 2, 3]
    assert window.has_room() and len(window) == 0


def test_a_stuck_message_holds_the_window_until_it_is_done():
    window = AckWindow(2)
    stuck, later = Pending(_item(1)), Pending(_item(2))
    window.add(stuck)
    window.add(later)
    later.done = True
    assert window.releasable() == [] and not window.has_room()
    stuck.done = True
    assert window.releasable() == [stuck, later]


@pytest.mark.parametrize(
    ("headers", "data", "expected"),
    [
        (None, b'{"stream":"S","seq":7}', Stored(False)),
        (None, b'{"stream":"S","seq":7,"duplicate":true}', Stored(True)),
        ({"Status": "503"}, b"", NO_STREAM),
    ],
)
def test_replies_are_classified(headers, data, expected):
    assert classify_reply(headers, data) == expected


@pytest.mark.parametrize(
    "data",
    [
        json.dumps({"error": {"code": 400, "err_code": 10060, "description": "stream mismatch"}}),
        "not json",
        "[1, 2]",
        "{}",
    ],
)
def test_error_and_garbage_replies_are_failures_not_crashes(data):
    outcome = classify_reply(None, data.encode())
    assert isinstance(outcome, Failed) and outcome.problem


def test_a_redelivery_of_a_message_held_unacked_keeps_its_id():
    ids = MessageIds()
    first = ids.choose(7, False, "mqtt-c-7-abc")
    assert first == "mqtt-c-7-abc"
    assert ids.choose(7, True, "mqtt-c-7-abc") == first  # the connection dropped before our ack


def test_a_redelivery_of_an_acked_message_keeps_its_id_while_devices_do_not_repeat_bytes():
    ids = MessageIds()
    first = ids.choose(7, False, "mqtt-c-7-abc")
    ids.acked(7, first)
    assert ids.choose(7, True, "mqtt-c-7-abc") == first  # our ack died with the connection


def test_once_bytes_repeat_under_a_packet_id_no_message_gets_the_id_of_an_acked_one():
    ids = MessageIds()
    first = ids.choose(7, False, "mqtt-c-7-abc")
    ids.acked(7, first)
    second = ids.choose(7, False, "mqtt-c-7-abc")  # the broker reused packet id 7, same bytes
    assert second != first and ids.repeats
    ids.acked(7, second)
    # after a reconnect the broker resends packet id 7 with DUP: our ack of `second` may have been
    # lost, or a third message with the same bytes was in flight. Storing again risks a duplicate;
    # reusing an id would risk dropping a message.
    third = ids.choose(7, True, "mqtt-c-7-abc")
    assert third not in (first, second)
    assert ids.choose(7, True, "mqtt-c-7-abc") == third  # still unacked: a plain redelivery


def test_unknown_packet_ids_get_the_deterministic_id_so_copies_from_before_a_restart_are_recognised():
    ids = MessageIds()
    assert ids.choose(9, True, "mqtt-c-9-abc") == "mqtt-c-9-abc"
    assert ids.choose(10, False, "mqtt-c-10-def") == "mqtt-c-10-def"
    ids.acked(10, "mqtt-c-10-def")
    assert ids.choose(10, False, "mqtt-c-10-fff") == "mqtt-c-10-fff"  # other bytes: no clash possible


def test_headers_are_encoded_as_nats_py_would():
    from bridges.mqtt.pipeline import encode_headers

    headers = {"Mqtt-Topic": "sensors/a b%25", "Nats-Msg-Id": "mqtt-c-1-ab", "site": "x"}
    assert encode_headers(headers) == (
        b"NATS/1.0\r\nMqtt-Topic: sensors/a b%25\r\nNats-Msg-Id: mqtt-c-1-ab\r\nsite: x\r\n\r\n"
    )
