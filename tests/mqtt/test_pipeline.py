"""The inbound pipeline's parts on their own: in-order release, reply classification, the handoff
from paho's thread, and the buffered socket under paho (real socket pairs, no broker)."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from bridges.mqtt.buffered import BufferedSocket
from bridges.mqtt.messages import InboundMessage
from bridges.mqtt.pipeline import (
    NO_STREAM,
    AckWindow,
    Failed,
    Handoff,
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


def test_handoff_is_fifo_and_bounded():
    h = Handoff(2)
    assert h.put(_item(1), timeout=1) and h.put_nowait(_item(2))
    assert not h.put_nowait(_item(3))  # QoS 0 when full: dropped by the caller
    assert not h.put(_item(3), timeout=0.01)  # QoS 1 when full past the deadline: the caller reconnects
    got = h.get()
    assert got is not None and got.mid == 1


def test_a_full_handoff_wakes_the_waiting_producer_when_the_loop_takes_one():
    h = Handoff(1)
    h.put(_item(1), timeout=1)
    result: list[bool] = []
    producer = threading.Thread(target=lambda: result.append(h.put(_item(2), timeout=30)))
    producer.start()
    # wait until the producer is inside its bounded wait, then make room
    while not h._waiters and producer.is_alive():
        threading.Event().wait(0.001)
    assert h.get() is not None
    producer.join(30)
    assert result == [True]
    got = h.get()
    assert got is not None and got.mid == 2 and h.get() is None


def test_buffered_socket_serves_small_reads_from_one_large_read_and_reports_pending():
    a, b = socket.socketpair()
    try:
        b.setblocking(False)
        sock = BufferedSocket(b)
        a.sendall(b"\x30\x05hello\x40\x02\x00\x01")
        assert sock.recv(1) == b"\x30"  # the whole chunk was read; the rest waits in the buffer
        assert sock.pending() == 10
        assert sock.recv(1) == b"\x05"
        assert sock.recv(5) == b"hello"
        assert sock.recv(100) == b"\x40\x02\x00\x01"  # a read past the buffer returns what it holds
        assert sock.pending() == 0
        with pytest.raises(BlockingIOError):
            sock.recv(1)  # empty buffer, empty socket: exactly what paho expects from the socket
        assert sock.fileno() == b.fileno()  # everything else passes through
        a.close()
        assert sock.recv(1) == b""  # EOF is still EOF
    finally:
        a.close()
        b.close()


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
