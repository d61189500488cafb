"""Per-message decisions of the bridge (pure: no broker, no server)."""

from __future__ import annotations

import pytest

from bridges.mqtt.config import bridges_from_dict
from bridges.mqtt.messages import (
    DeadLetter,
    InboundMessage,
    MqttPublish,
    Reject,
    Store,
    plan_inbound,
    plan_outbound,
)

pytestmark = pytest.mark.mqtt

CFG = bridges_from_dict(
    {
        "bridges": {
            "mqtt": [
                {
                    "url": "mqtt://b",
                    "client_id": "br",
                    "max_payload": 10,
                    "inbound": [{"filter": "s/#", "stream": "S"}],
                    "outbound": [{"stream": "C", "subject_prefix": "cmd", "topic_prefix": "dev"}],
                }
            ]
        }
    }
)[0]


def msg(topic: bytes = b"s/a.b", payload: bytes = b"x", **kw) -> InboundMessage:
    return InboundMessage(
        generation=0,
        mid=kw.pop("mid", 7),
        qos=kw.pop("qos", 1),
        dup=False,
        retain=False,
        topic=topic,
        payload=payload,
        **kw,
    )


def test_a_stored_message_carries_topic_qos_stream_and_a_stable_id():
    a, b = plan_inbound(msg(), CFG), plan_inbound(msg(), CFG)
    assert isinstance(a, Store) and a == b  # a redelivery gets the same Nats-Msg-Id
    assert a.subject == "mqtt.s.a//b"
    assert a.headers["Mqtt-Topic"] == "s/a.b" and a.headers["Mqtt-Qos"] == "1"
    assert a.headers["Nats-Expected-Stream"] == "S"
    assert plan_inbound(msg(payload=b"y"), CFG).headers["Nats-Msg-Id"] != a.headers["Nats-Msg-Id"]
    assert plan_inbound(msg(mid=8), CFG).headers["Nats-Msg-Id"] != a.headers["Nats-Msg-Id"]


def test_qos0_has_no_dedup_id():
    assert "Nats-Msg-Id" not in plan_inbound(msg(qos=0), CFG).headers


def test_properties_become_headers_and_reserved_names_are_dropped():
    p = plan_inbound(
        msg(
            content_type="text/plain",
            user_properties=(
                ("k", "1"),
                ("k", "2"),
                ("Nats-Msg-Id", "x"),
                ("bad name", "v"),
                ("nl", "a\r\nb"),
            ),
        ),
        CFG,
    )
    assert isinstance(p, Store)
    assert p.headers["k"] == "1,2" and p.headers["Content-Type"] == "text/plain"
    assert p.headers["nl"] == "a%0D%0Ab"
    assert set(p.dropped_properties) == {"Nats-Msg-Id", "bad name"}


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        (b"s/a b", "unmappable"),
        (b"s/\xff", "UTF-8"),
        (b"other/x", "no configured filter"),
        (b"s/>", "unmappable"),
    ],
)
def test_unmappable_messages_become_dead_letters(topic, reason):
    p = plan_inbound(msg(topic=topic), CFG)
    assert isinstance(p, DeadLetter) and reason in p.reason
    assert p.subject == "mqtt.dead_letter" and p.headers["Mqtt-Reason"] == p.reason


def test_oversized_payloads_are_rejected():
    assert isinstance(plan_inbound(msg(payload=b"x" * 11), CFG), Reject)


def test_outbound_maps_subject_to_topic_and_headers_to_properties():
    route = CFG.outbound[0]
    p = plan_outbound("cmd.7.set", b"on", {"Content-Type": "t", "Nats-Msg-Id": "i", "a": "b"}, route, CFG)
    assert p == MqttPublish("dev/7/set", b"on", 1, False, "t", (("a", "b"),))
    assert isinstance(plan_outbound("cmd.a/b", b"", None, route, CFG), DeadLetter)
    assert isinstance(plan_outbound("cmd.x.y", b"x" * 11, None, route, CFG), DeadLetter)
