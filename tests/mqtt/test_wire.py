"""The bridge's MQTT codec against paho-mqtt's, an independent implementation of the same packets."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paho.mqtt import _packet as paho_packet
from paho.mqtt.client import MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bridges.mqtt import wire


def _split(packet: bytes) -> tuple[int, bytes]:
    (got,) = list(wire.PacketReader().feed(packet))
    return got


def _paho_publish(topic: bytes, payload: bytes, qos: int, mid: int, props: Properties | None) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic
    if qos:
        body += mid.to_bytes(2, "big")
    if props is not None:
        body += props.pack()
    first = 0x30 | (qos << 1) | 0x08 | 0x01  # DUP and RETAIN set, to see them read
    body += payload
    return bytes((first,)) + wire._varint(len(body)) + body


def test_a_publish_with_mqtt5_properties_is_read_as_paho_writes_it():
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = "application/json"
    props.ResponseTopic = "replies/7"
    props.CorrelationData = b"\x00\x01"
    props.UserProperty = [("site", "plant-1"), ("site", "plant-2")]
    props.MessageExpiryInterval = 60  # one we skip
    first, body = _split(_paho_publish(b"sensors/a", b"x" * 300, 1, 513, props))
    msg = wire.decode_publish(first, body, True, generation=4)
    assert (msg.generation, msg.mid, msg.qos, msg.dup, msg.retain) == (4, 513, 1, True, True)
    assert (msg.topic, msg.payload) == (b"sensors/a", b"x" * 300)
    assert msg.content_type == "application/json" and msg.response_topic == "replies/7"
    assert msg.correlation_data == b"\x00\x01"
    assert msg.user_properties == (("site", "plant-1"), ("site", "plant-2"))


def test_an_mqtt311_publish_and_one_with_no_properties():
    first, body = _split(_paho_publish(b"a/b", b"hi", 1, 9, None))
    msg = wire.decode_publish(first, body, False, 0)
    assert (msg.topic, msg.payload, msg.mid, msg.content_type) == (b"a/b", b"hi", 9, None)
    first, body = _split(_paho_publish(b"a/b", b"", 0, 0, Properties(PacketTypes.PUBLISH)))
    msg = wire.decode_publish(first, body, True, 0)
    assert (msg.qos, msg.mid, msg.payload, msg.user_properties) == (0, 0, b"", ())


def test_the_reader_splits_packets_across_any_chunking():
    packets = [_paho_publish(b"t/%d" % i, b"p" * (i * 50), 1, i + 1, None) for i in range(6)]
    stream = b"".join(packets) + wire.PINGREQ_PACKET
    for step in (1, 2, 7, 128, len(stream)):
        reader = wire.PacketReader()
        got = [p for i in range(0, len(stream), step) for p in reader.feed(stream[i : i + step])]
        assert [first for first, _ in got] == [0x3B] * 6 + [0xC0]
        assert [wire.decode_publish(f, b, False, 0).mid for f, b in got[:6]] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "bad",
    [
        b"\x30\xff\xff\xff\xff\x01",  # a remaining length of five bytes
        b"\x36\x05\x00\x01a\x00\x01",  # QoS 3
        b"\x32\x03\x00\x05a",  # a topic longer than the packet
    ],
)
def test_malformed_packets_are_protocol_errors_not_crashes(bad):
    with pytest.raises(wire.ProtocolError):
        for first, body in wire.PacketReader().feed(bad):
            wire.decode_publish(first, body, True, 0)


@pytest.mark.parametrize("v5", [True, False])
def test_an_outbound_publish_is_read_back_by_paho(v5):
    packet = wire.encode_publish(
        "devices/7/set", b"on", 1, True, 77, v5, "text/plain", (("req", "42"), ("req", "43"))
    )
    first, body = _split(packet)
    version = MQTTProtocolVersion.MQTTv5 if v5 else MQTTProtocolVersion.MQTTv311
    got = paho_packet.decode_publish(first, body, version)
    assert (got.topic, got.payload, got.mid, got.qos, got.retain) == (b"devices/7/set", b"on", 77, 1, True)
    if v5:
        assert got.properties is not None
        assert got.properties.ContentType == "text/plain"  # type: ignore[attr-defined]
        assert got.properties.UserProperty == [("req", "42"), ("req", "43")]  # type: ignore[attr-defined]


def test_connect_carries_the_session_settings():
    packet = wire.encode_connect(
        "bridge-1", 30, False, True, session_expiry=3600, receive_maximum=256, username="u", password="p"
    )
    first, body = _split(packet)
    assert first == 0x10 and body[:7] == b"\x00\x04MQTT\x05"
    assert body[7] == 0xC0  # user name + password, no clean start
    props, pos = wire.read_properties(body, 10)
    assert dict(props) == {wire.P_RECEIVE_MAXIMUM: 256, wire.P_SESSION_EXPIRY: 3600}
    assert body[pos:] == b"\x00\x08bridge-1\x00\x01u\x00\x01p"


def test_connack_and_suback_and_puback():
    props = Properties(PacketTypes.CONNACK)
    props.ReceiveMaximum = 20
    props.ServerKeepAlive = 10
    ack = wire.decode_connack(b"\x01\x00" + props.pack(), True)
    assert ack == wire.ConnAck(True, 0, 20, 10)
    with pytest.raises(wire.ProtocolError, match="Receive Maximum of 0"):
        wire.decode_connack(b"\x00\x00\x03\x21\x00\x00", True)  # no QoS 1 publish could ever go out
    assert wire.decode_connack(b"\x00\x04", False).reason == 0x86  # 3.1.1 "bad user name or password"
    assert "Bad user name or password" in wire.reason_text(0x86)
    assert wire.decode_suback(b"\x00\x05\x00\x01\x80", True) == (5, [1, 0x80])
    assert wire.decode_puback(b"\x01\x02") == (258, 0)
    assert wire.decode_puback(b"\x01\x02\x10\x00") == (258, 0x10)
    assert wire.encode_puback(258) == b"\x40\x02\x01\x02"


@pytest.mark.parametrize(
    "bad",
    [
        b"\x30\x05\x00\x01a\x01\x01",  # MQTT 5: a one-byte property whose byte is missing
        b"\x30\x04\x00\x01a\x01",  # MQTT 5: a property block longer than the packet
    ],
)
def test_truncated_mqtt5_properties_are_protocol_errors(bad):
    with pytest.raises(wire.ProtocolError):
        for first, body in wire.PacketReader().feed(bad):
            wire.decode_publish(first, body, True, 0)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(  # random bytes, and bytes of lengths and property identifiers (short, tightly packed)
        st.binary(max_size=24),
        st.lists(st.sampled_from([0, 1, 2, 3, 0x13, 0x21, 0x26, 0x80, 0xFF]), max_size=12).map(bytes),
    ),
    st.integers(0, 15),
    st.booleans(),
)
def test_any_body_decodes_or_is_a_protocol_error(body, flags, v5):
    """Whatever a broker sends decodes to a packet or raises ProtocolError, never another error."""
    decoders = [
        lambda: wire.decode_publish((wire.PUBLISH << 4) | flags, body, v5, 0),
        lambda: wire.decode_connack(body, v5),
        lambda: wire.decode_suback(body, v5),
        lambda: wire.decode_puback(body),
        lambda: wire.decode_disconnect(body),
        lambda: wire.read_properties(body, 0),
    ]
    for decode in decoders:
        with contextlib.suppress(wire.ProtocolError):
            decode()


@pytest.mark.parametrize("step", [1, 7, 1000, 1 << 20])
def test_a_publish_larger_than_the_reader_holds_is_cut_to_its_head_and_the_rest_skipped(step):
    """A broker may send a PUBLISH of any length up to 256 MiB: the reader holds at most max_size
    bytes of it and yields that head (topic and packet id intact, so the bridge can reject and
    acknowledge it), discards the rest as it arrives, and goes on with the next packet."""
    big = _paho_publish(b"sensors/big", b"x" * 50_000, 1, 77, None)
    stream = big + _paho_publish(b"sensors/small", b"ok", 1, 78, None) + wire.PINGREQ_PACKET
    reader = wire.PacketReader(max_size=1000)
    got = []
    held = 0
    for i in range(0, len(stream), step):
        for first, body in reader.feed(stream[i : i + step]):
            got.append((first, body, reader.oversized))
        held = max(held, reader._have)
    assert held <= 1000 + 5  # never more than the head (and a fixed header) of the big one
    (f1, head, size), (f2, small, size2), (f3, _, _) = got
    assert (len(head), size, size2, f3) == (1000, len(big) - 4, 0, 0xC0)
    msg = wire.decode_publish(f1, head, False, 0)
    assert (msg.topic, msg.mid) == (b"sensors/big", 77) and len(msg.payload) == 1000 - 15
    assert wire.decode_publish(f2, small, False, 0).payload == b"ok"


def test_a_non_publish_larger_than_the_reader_holds_is_a_protocol_error():
    with pytest.raises(wire.ProtocolError, match="a packet of 2000 bytes"):
        list(wire.PacketReader(max_size=1000).feed(b"\x90" + wire._varint(2000) + b"\0" * 10))
