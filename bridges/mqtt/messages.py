"""What to do with one message crossing the bridge (pure: no sockets, no threads, no clock).

The MQTT session (``session.py``, ``wire.py``) decodes a PUBLISH into an :class:`InboundMessage`;
``bridge.py`` asks :func:`plan_inbound` what to do, and does it; likewise a JetStream message goes through
:func:`plan_outbound`. Everything a test wants to pin (headers, dead-letter reasons, message ids) is
decided here.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from dataclasses import dataclass

from .config import InboundRoute, MqttBridgeConfig, OutboundRoute
from .topics import (
    UnmappableTopic,
    strip_prefix,
    subject_to_topic_strict,
    topic_to_subject,
    validate_topic_name,
    with_prefix,
)

# Headers the bridge writes. The topic is kept verbatim except that '%', control characters and DEL
# are percent-encoded (urllib.parse.unquote gives the topic back).
H_TOPIC = "Mqtt-Topic"
H_QOS = "Mqtt-Qos"
H_RETAIN = "Mqtt-Retain"
H_REASON = "Mqtt-Reason"
H_RESPONSE_TOPIC = "Mqtt-Response-Topic"
H_CORRELATION = "Mqtt-Correlation-Data"  # base64
H_SUBJECT = "Nats-Subject"  # on outbound dead letters: the subject that could not be mapped
H_CONTENT_TYPE = "Content-Type"
H_MSG_ID = "Nats-Msg-Id"
H_EXPECTED_STREAM = "Nats-Expected-Stream"

_HEADER_NAME = re.compile(r"^[!-9;-~]+$")  # printable ASCII without ':' and space
_RESERVED = ("nats-", "mqtt-")


def encode_header_value(value: str) -> str:
    """A header-safe rendering: '%', control characters and DEL become %XX (UTF-8 bytes)."""
    if not any(c == "%" or c < " " or c == "\x7f" for c in value):
        return value
    return "".join(f"%{ord(c):02X}" if c == "%" or c < " " or c == "\x7f" else c for c in value)


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field, per message
class InboundMessage:
    """A PUBLISH as the broker delivered it (``wire.decode_publish``). Treat it as immutable."""

    generation: int  # which MQTT connection delivered it: acks only go back on the same one
    mid: int
    qos: int
    dup: bool
    retain: bool
    topic: bytes
    payload: bytes
    content_type: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    response_topic: str | None = None
    correlation_data: bytes | None = None


@dataclass(frozen=True, slots=True)
class Store:
    subject: str
    payload: bytes
    headers: dict[str, str]
    dropped_properties: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    subject: str
    payload: bytes
    headers: dict[str, str]
    reason: str


@dataclass(frozen=True, slots=True)
class Reject:
    reason: str


def msg_id(client_id: str, msg: InboundMessage) -> str:
    """A dedup id stable across the broker's redeliveries of one message to one session.

    The broker redelivers an unacknowledged QoS 1/2 PUBLISH with the same packet id and the DUP flag
    set; topic and payload are the same bytes. Packet ids are reused once acknowledged, so the digest
    guards against most reuse and the bridge handles the rest (a "duplicate" PubAck for a message
    without DUP is a reused id, and the bridge republishes it under a fresh id).
    """
    h = hashlib.blake2b(msg.topic + b"\x00" + msg.payload, digest_size=8).hexdigest()
    return f"mqtt-{client_id}-{msg.mid}-{h}"


def _matching_route(topic: str, routes: tuple[InboundRoute, ...]) -> InboundRoute | None:
    for route in routes:
        if topic_matches(route.filter, topic):
            return route
    return None


def topic_matches(topic_filter: str, topic: str) -> bool:
    """MQTT filter matching; a leading '$' topic is not matched by a leading wildcard."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    f, t = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return True
        if i >= len(t) or (level != "+" and level != t[i]):
            return False
    return len(f) == len(t)


@functools.lru_cache(maxsize=4096)
def _map_topic(topic: str, routes: tuple[InboundRoute, ...]) -> tuple[str, str, str | None] | str:
    """(subject, Mqtt-Topic header value, expected stream) for a topic, or why it has none.

    Cached: devices publish to the same few topics over and over, and this is pure.
    """
    route = _matching_route(topic, routes)
    if route is None:
        return "no configured filter matches the topic"
    try:
        subject = with_prefix(route.subject_prefix, topic_to_subject(topic))
    except UnmappableTopic as e:
        return f"unmappable topic: {e}"
    return subject, encode_header_value(topic), route.stream


def plan_inbound(msg: InboundMessage, config: MqttBridgeConfig) -> Store | DeadLetter | Reject:
    if len(msg.payload) > config.max_payload:
        return Reject(f"payload of {len(msg.payload)} bytes exceeds max_payload {config.max_payload}")
    base = {H_QOS: str(msg.qos)}
    if msg.qos > 0:
        base[H_MSG_ID] = msg_id(config.client_id, msg)
    try:
        topic = msg.topic.decode("utf-8")
    except UnicodeDecodeError:
        topic_text = msg.topic.decode("utf-8", errors="backslashreplace")
        return _dead_letter(msg, config, base, topic_text, "topic is not valid UTF-8")
    mapped = _map_topic(topic, config.inbound)
    if isinstance(mapped, str):
        return _dead_letter(msg, config, base, topic, mapped)
    subject, topic_header, stream = mapped
    headers = {H_TOPIC: topic_header, **base}
    if msg.retain:
        headers[H_RETAIN] = "true"
    if stream:
        headers[H_EXPECTED_STREAM] = stream
    if msg.content_type is not None:
        headers[H_CONTENT_TYPE] = encode_header_value(msg.content_type)
    if msg.response_topic is not None:
        headers[H_RESPONSE_TOPIC] = encode_header_value(msg.response_topic)
    if msg.correlation_data is not None:
        headers[H_CORRELATION] = base64.b64encode(msg.correlation_data).decode()
    dropped: list[str] = []
    props: dict[str, str] = {}
    for name, value in msg.user_properties:
        if (
            not _HEADER_NAME.match(name)
            or name.lower().startswith(_RESERVED)
            or name.lower() == "content-type"
        ):
            dropped.append(name)
            continue
        value = encode_header_value(value)
        props[name] = f"{props[name]},{value}" if name in props else value
    return Store(subject, msg.payload, {**props, **headers}, tuple(dropped))


def _dead_letter(
    msg: InboundMessage, config: MqttBridgeConfig, base: dict[str, str], topic: str, reason: str
) -> DeadLetter:
    headers = {H_TOPIC: encode_header_value(topic), H_REASON: reason, **base}
    return DeadLetter(config.dead_letter_subject, msg.payload, headers, reason)


@dataclass(frozen=True, slots=True)
class MqttPublish:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    content_type: str | None
    user_properties: tuple[tuple[str, str], ...]


def plan_outbound(
    subject: str,
    payload: bytes,
    headers: dict[str, str] | None,
    route: OutboundRoute,
    config: MqttBridgeConfig,
) -> MqttPublish | DeadLetter:
    headers = headers or {}
    try:
        topic = subject_to_topic_strict(strip_prefix(route.subject_prefix, subject))
        if route.topic_prefix:
            topic = f"{route.topic_prefix}/{topic}"
        validate_topic_name(topic)
    except UnmappableTopic as e:
        dl_headers = {H_SUBJECT: subject, H_REASON: f"no MQTT topic for subject: {e}"}
        return DeadLetter(config.dead_letter_subject, payload, dl_headers, dl_headers[H_REASON])
    if len(payload) > config.max_payload:
        reason = f"payload of {len(payload)} bytes exceeds max_payload {config.max_payload}"
        return DeadLetter(config.dead_letter_subject, b"", {H_SUBJECT: subject, H_REASON: reason}, reason)
    content_type = None
    props = []
    for name, value in headers.items():
        if name.lower() == "content-type":
            content_type = value
        elif not name.lower().startswith(_RESERVED):
            props.append((name, value))
    return MqttPublish(topic, payload, route.qos, route.retain, content_type, tuple(props))
