"""MQTT 3.1.1 / 5 client packets, encoded and decoded without sockets (sans-IO).

Only what the bridge sends and receives: CONNECT/CONNACK, SUBSCRIBE/SUBACK, PUBLISH and PUBACK both
ways, PINGREQ/PINGRESP, DISCONNECT. QoS 2 is never subscribed (see DESIGN.md); an outbound QoS 2
route is published as QoS 1. The inbound PUBLISH path is the hot one: :class:`PacketReader` splits a
byte stream into packets and :func:`decode_publish` reads one with a few slices, no objects beyond
the message itself (paho built a ``Properties`` object per message even with none).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .messages import InboundMessage

CONNECT, CONNACK, PUBLISH, PUBACK = 1, 2, 3, 4
PUBREC, PUBREL, PUBCOMP = 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK = 8, 9, 10, 11
PINGREQ, PINGRESP, DISCONNECT, AUTH = 12, 13, 14, 15

PINGREQ_PACKET = b"\xc0\x00"
DISCONNECT_PACKET = b"\xe0\x00"  # MQTT 5: no reason code = 0x00 normal disconnection

# Property identifiers (MQTT 5 §2.2.2.2) the bridge reads or writes.
P_CONTENT_TYPE = 0x03
P_RESPONSE_TOPIC = 0x08
P_CORRELATION_DATA = 0x09
P_SESSION_EXPIRY = 0x11
P_SERVER_KEEP_ALIVE = 0x13
P_REASON_STRING = 0x1F
P_RECEIVE_MAXIMUM = 0x21
P_USER_PROPERTY = 0x26

# How each property's value is encoded, to read (or skip) any of them.
_BYTE, _TWO, _FOUR, _VARINT, _STRING, _BINARY, _PAIR = range(7)
_PROPERTY_TYPES: dict[int, int] = {
    0x01: _BYTE, 0x02: _FOUR, 0x03: _STRING, 0x08: _STRING, 0x09: _BINARY, 0x0B: _VARINT,
    0x11: _FOUR, 0x12: _STRING, 0x13: _TWO, 0x15: _STRING, 0x16: _BINARY, 0x17: _BYTE,
    0x18: _FOUR, 0x19: _BYTE, 0x1A: _STRING, 0x1C: _STRING, 0x1F: _STRING, 0x21: _TWO,
    0x22: _TWO, 0x23: _TWO, 0x24: _BYTE, 0x25: _BYTE, 0x26: _PAIR, 0x27: _FOUR, 0x28: _BYTE,
    0x29: _BYTE, 0x2A: _BYTE,
}  # fmt: skip

# Reason codes a log line names (MQTT 5 §2.4; MQTT 3.1.1 CONNACK return codes are mapped onto them).
REASONS: dict[int, str] = {
    0x00: "Success",
    0x80: "Unspecified error",
    0x81: "Malformed Packet",
    0x82: "Protocol Error",
    0x83: "Implementation specific error",
    0x84: "Unsupported Protocol Version",
    0x85: "Client Identifier not valid",
    0x86: "Bad user name or password",
    0x87: "Not authorized",
    0x88: "Server unavailable",
    0x89: "Server busy",
    0x8A: "Banned",
    0x8B: "Server shutting down",
    0x8D: "Keep Alive timeout",
    0x8E: "Session taken over",
    0x90: "Topic Name invalid",
    0x93: "Receive Maximum exceeded",
    0x95: "Packet too large",
    0x97: "Quota exceeded",
    0x99: "Payload format invalid",
    0x9C: "Use another server",
    0x9D: "Server moved",
}
_V311_CONNACK = {1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}


def reason_text(code: int) -> str:
    return f"{REASONS.get(code, 'reason')} (0x{code:02x})"


class ProtocolError(Exception):
    """The broker sent bytes that are not a valid MQTT packet: the connection is closed."""


# ------------------------------------------------------------------ primitives


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        d, n = n & 0x7F, n >> 7
        out.append(d | 0x80 if n else d)
        if not n:
            return bytes(out)


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def _bin(b: bytes) -> bytes:
    return struct.pack("!H", len(b)) + b


def _packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + _varint(len(body)) + body


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 21:
            raise ProtocolError("malformed variable byte integer")
        d = buf[pos]
        pos += 1
        value |= (d & 0x7F) << shift
        if d < 0x80:
            return value, pos
        shift += 7


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _read_bin(buf, pos)
    try:
        return raw.decode(), pos
    except UnicodeDecodeError:
        raise ProtocolError("a string is not valid UTF-8") from None


def _read_bin(buf: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 2 > len(buf):
        raise ProtocolError("truncated packet")
    n = (buf[pos] << 8) | buf[pos + 1]
    end = pos + 2 + n
    if end > len(buf):
        raise ProtocolError("truncated packet")
    return buf[pos + 2 : end], end


def read_properties(buf: bytes, pos: int) -> tuple[list[tuple[int, object]], int]:
    """A property block at ``pos``: [(identifier, value)] in order, and the position after it."""
    length, pos = _read_varint(buf, pos)
    end = pos + length
    if end > len(buf):
        raise ProtocolError("truncated properties")
    out: list[tuple[int, object]] = []
    while pos < end:
        ident, pos = _read_varint(buf, pos)
        kind = _PROPERTY_TYPES.get(ident)
        value: object
        if kind == _BYTE:
            if pos >= end:
                raise ProtocolError("truncated properties")
            value, pos = buf[pos], pos + 1
        elif kind == _TWO:
            value, pos = int.from_bytes(buf[pos : pos + 2], "big"), pos + 2
        elif kind == _FOUR:
            value, pos = int.from_bytes(buf[pos : pos + 4], "big"), pos + 4
        elif kind == _VARINT:
            value, pos = _read_varint(buf, pos)
        elif kind == _STRING:
            value, pos = _read_str(buf, pos)
        elif kind == _BINARY:
            value, pos = _read_bin(buf, pos)
        elif kind == _PAIR:
            name, pos = _read_str(buf, pos)
            text, pos = _read_str(buf, pos)
            value = (name, text)
        else:
            raise ProtocolError(f"unknown property 0x{ident:02x}")
        if pos > end:
            raise ProtocolError("truncated properties")
        out.append((ident, value))
    return out, end


def _properties(props: Iterable[tuple[int, object]]) -> bytes:
    body = bytearray()
    for ident, value in props:
        body += _varint(ident)
        kind = _PROPERTY_TYPES[ident]
        if kind == _TWO:
            assert isinstance(value, int)
            body += struct.pack("!H", value)
        elif kind == _FOUR:
            assert isinstance(value, int)
            body += struct.pack("!I", value)
        elif kind == _STRING:
            assert isinstance(value, str)
            body += _str(value)
        elif kind == _PAIR:
            assert isinstance(value, tuple)
            body += _str(value[0]) + _str(value[1])
        else:  # pragma: no cover - the bridge writes no other kinds
            raise ValueError(f"cannot encode property 0x{ident:02x}")
    return _varint(len(body)) + bytes(body)


# ------------------------------------------------------------------ reading


MAX_PACKET = 268_435_455  # the largest remaining length MQTT can express
# Room in a PUBLISH besides its payload: topic (length + up to 65535 bytes), packet id, and up to
# 64 KiB of MQTT 5 properties. A reader holding max_payload + this holds any message we could store.
PUBLISH_HEAD_ROOM = 2 + 65535 + 2 + 65536


class PacketReader:
    """Splits a byte stream into (first byte, body) packets; keeps an incomplete tail for later.

    At most ``max_size`` bytes of a packet are held. A longer PUBLISH is yielded cut to its first
    ``max_size`` bytes, with :attr:`oversized` set to its real length while the caller handles it,
    and the rest is discarded as it arrives (its topic and packet id are in the head, so it can
    still be rejected and acknowledged); any other packet that long is a protocol error. The chunks
    of an incomplete packet are joined once, when it is complete, not on every read."""

    __slots__ = ("_have", "_need", "_parts", "_skip", "max_size", "oversized")

    def __init__(self, max_size: int = MAX_PACKET) -> None:
        self._parts: list[bytes] = []  # the incomplete tail, as it arrived
        self._have = 0  # bytes in _parts
        self._need = 0  # bytes the tail must reach before it is worth splitting (0: unknown yet)
        self._skip = 0  # bytes of a cut-off PUBLISH still to discard
        self.max_size = max_size
        self.oversized = 0  # the real length of the PUBLISH just yielded cut off, else 0

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return
            data = data[self._skip :]
            self._skip = 0
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            buf = b"".join(self._parts)
        else:
            buf = data
        n = len(buf)
        pos = need = 0
        try:
            while pos + 2 <= n:
                length = 0
                shift = 0
                i = pos + 1
                while True:
                    if i >= n:
                        return
                    d = buf[i]
                    i += 1
                    length |= (d & 0x7F) << shift
                    if d < 0x80:
                        break
                    shift += 7
                    if shift > 21:
                        raise ProtocolError("malformed remaining length")
                first = buf[pos]
                if length > self.max_size:
                    if first >> 4 != PUBLISH:
                        raise ProtocolError(f"a packet of {length} bytes")
                    end = i + self.max_size
                    if end > n:
                        need = end - pos
                        return
                    self._skip = max(0, i + length - n)
                    pos = min(i + length, n)
                    self.oversized = length
                    yield first, buf[i:end]
                    self.oversized = 0
                    continue
                end = i + length
                if end > n:
                    need = end - pos
                    return
                pos = end
                yield first, buf[i:end]
        finally:
            tail = buf[pos:]
            self._parts = [tail] if tail else []
            self._have = len(tail)
            self._need = need
            self.oversized = 0


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool
    reason: int  # 0 = accepted (MQTT 3.1.1 return codes mapped onto MQTT 5 reason codes)
    receive_maximum: int = 65535
    server_keepalive: int | None = None


def decode_connack(body: bytes, v5: bool) -> ConnAck:
    if len(body) < 2:
        raise ProtocolError("short CONNACK")
    present = bool(body[0] & 1)
    if not v5:
        return ConnAck(present, _V311_CONNACK.get(body[1], body[1]) if body[1] else 0)
    props = dict(read_properties(body, 2)[0]) if len(body) > 2 else {}
    recv_max = props.get(P_RECEIVE_MAXIMUM, 65535)
    keep = props.get(P_SERVER_KEEP_ALIVE)
    if recv_max == 0:  # MQTT 5 §3.2.2.3.3: a Protocol Error (we could never publish at QoS 1)
        raise ProtocolError("CONNACK with a Receive Maximum of 0")
    return ConnAck(
        present,
        body[1],
        recv_max if isinstance(recv_max, int) else 65535,
        keep if isinstance(keep, int) else None,
    )


def decode_suback(body: bytes, v5: bool) -> tuple[int, list[int]]:
    if len(body) < 3:
        raise ProtocolError("short SUBACK")
    pos = read_properties(body, 2)[1] if v5 else 2
    return (body[0] << 8) | body[1], list(body[pos:])


def decode_puback(body: bytes) -> tuple[int, int]:
    """(packet id, reason code); MQTT 3.1.1 and a short MQTT 5 PUBACK mean success."""
    if len(body) < 2:
        raise ProtocolError("short PUBACK")
    return (body[0] << 8) | body[1], body[2] if len(body) > 2 else 0


def decode_disconnect(body: bytes) -> int:
    return body[0] if body else 0


def decode_publish(first: int, body: bytes, v5: bool, generation: int) -> InboundMessage:
    """An inbound PUBLISH; the topic stays bytes (invalid UTF-8 goes to the dead-letter subject)."""
    qos = (first >> 1) & 3
    if qos == 3:
        raise ProtocolError("PUBLISH with QoS 3")
    n = len(body)
    if n < 2:
        raise ProtocolError("short PUBLISH")
    end = 2 + ((body[0] << 8) | body[1])
    topic = body[2:end]
    mid = 0
    if qos:
        if end + 2 > n:
            raise ProtocolError("short PUBLISH")
        mid = (body[end] << 8) | body[end + 1]
        end += 2
    if end > n:
        raise ProtocolError("short PUBLISH")
    msg = InboundMessage(generation, mid, qos, bool(first & 8), bool(first & 1), topic, b"")
    if v5:
        if end < n and body[end] == 0:  # the common case: no properties
            end += 1
        else:
            props, end = read_properties(body, end)
            users: list[tuple[str, str]] = []
            for ident, value in props:
                if ident == P_CONTENT_TYPE:
                    msg.content_type = value  # type: ignore[assignment]
                elif ident == P_RESPONSE_TOPIC:
                    msg.response_topic = value  # type: ignore[assignment]
                elif ident == P_CORRELATION_DATA:
                    msg.correlation_data = value  # type: ignore[assignment]
                elif ident == P_USER_PROPERTY:
                    users.append(value)  # type: ignore[arg-type]
            if users:
                msg.user_properties = tuple(users)
    msg.payload = body[end:]
    return msg


# ------------------------------------------------------------------ writing


def encode_connect(
    client_id: str,
    keepalive: int,
    clean: bool,
    v5: bool,
    *,
    session_expiry: int = 0,
    receive_maximum: int = 65535,
    username: str | None = None,
    password: str | None = None,
) -> bytes:
    flags = 0x02 if clean else 0
    if username is not None:
        flags |= 0x80
        if password is not None:
            flags |= 0x40
    body = _str("MQTT") + bytes((5 if v5 else 4, flags)) + struct.pack("!H", keepalive)
    if v5:
        props: list[tuple[int, object]] = [(P_RECEIVE_MAXIMUM, max(1, min(receive_maximum, 65535)))]
        if session_expiry:
            props.append((P_SESSION_EXPIRY, session_expiry))
        body += _properties(props)
    body += _str(client_id)
    if username is not None:
        body += _str(username)
        if password is not None:
            body += _bin(password.encode())
    return _packet(CONNECT << 4, body)


def encode_subscribe(packet_id: int, filters: Iterable[tuple[str, int]], v5: bool) -> bytes:
    body = struct.pack("!H", packet_id) + (b"\x00" if v5 else b"")
    for topic_filter, qos in filters:
        body += _str(topic_filter) + bytes((qos,))
    return _packet((SUBSCRIBE << 4) | 0x02, body)


def encode_puback(packet_id: int) -> bytes:
    """PUBACK, success (MQTT 5 §3.4.2.1: the reason code may be omitted when it is 0)."""
    return b"\x40\x02" + packet_id.to_bytes(2, "big")


def encode_publish(
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    packet_id: int,
    v5: bool,
    content_type: str | None = None,
    user_properties: Iterable[tuple[str, str]] = (),
) -> bytes:
    body = _str(topic)
    if qos:
        body += struct.pack("!H", packet_id)
    if v5:
        props: list[tuple[int, object]] = []
        if content_type:
            props.append((P_CONTENT_TYPE, content_type))
        props.extend((P_USER_PROPERTY, pair) for pair in user_properties)
        body += _properties(props)
    return _packet((PUBLISH << 4) | (qos << 1) | int(retain), body + payload)
