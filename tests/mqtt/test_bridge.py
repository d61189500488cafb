"""The bridge against a real mosquitto and a real leafjet agent."""

from __future__ import annotations

import logging

import anyio
import pytest

from bridges.mqtt.messages import H_MSG_ID, H_QOS, H_REASON, H_SUBJECT, H_TOPIC
from tests.mqtt import devices
from tests.mqtt.conftest import bridge_config, eventually, running_bridge
from tests.support.jsapi import connect, jetstream
from tests.support.servers import free_port

pytestmark = [pytest.mark.mqtt, pytest.mark.anyio, pytest.mark.timeout(60)]


async def stored(js, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


async def test_qos1_messages_are_stored_with_topic_and_msg_id_headers(mosquitto, leafjet):
    async with jetstream(leafjet) as (_, js):
        await js.add_stream(name="SENSORS", subjects=["mqtt.>"])
        async with running_bridge(bridge_config(mosquitto, leafjet.url)) as bridge:
            await eventually(lambda: bridge.stats.mqtt_connects, what="bridge connected")
            topics = ["sensors/a/b", "sensors/x.y", "sensors//empty", "sensors/trail/"]
            msgs = [(t, f"{t}#{i}".encode()) for i in range(5) for t in topics]
            await anyio.to_thread.run_sync(lambda: devices.publish(mosquitto.port, msgs))
            await eventually(lambda: stored(js, "SENSORS"), what="messages stored")
            await eventually(lambda: bridge.stats.stored == len(msgs), what=f"{len(msgs)} stored")
        got = [await js.get_msg("SENSORS", seq) for seq in range(1, len(msgs) + 1)]
        subjects = {m.subject for m in got}
        assert subjects == {
            "mqtt.sensors.a.b",
            "mqtt.sensors.x//y",
            "mqtt.sensors./.empty",
            "mqtt.sensors.trail./",
        }
        assert sorted(m.data for m in got) == sorted(p for _, p in msgs)
        for m in got:
            assert m.data.decode().startswith(m.headers[H_TOPIC] + "#")
            assert m.headers[H_QOS] == "1"
            assert m.headers[H_MSG_ID].startswith("mqtt-leafjet-test-bridge-")
        assert len({m.headers[H_MSG_ID] for m in got}) == len(msgs)


async def test_mqtt5_user_properties_and_content_type_become_headers(mosquitto, leafjet):
    async with jetstream(leafjet) as (_, js):
        await js.add_stream(name="SENSORS", subjects=["mqtt.>"])
        async with running_bridge(bridge_config(mosquitto, leafjet.url)) as bridge:
            await eventually(lambda: bridge.stats.mqtt_connects, what="bridge connected")
            props = [("site", "plant-1"), ("unit", "celsius"), ("Nats-Msg-Id", "forged")]
            await anyio.to_thread.run_sync(
                lambda: devices.publish(
                    mosquitto.port,
                    [("sensors/t1", b'{"t": 21.5}')],
                    user_properties=props,
                    content_type="application/json",
                )
            )
            await eventually(lambda: bridge.stats.stored == 1, what="stored")
            assert bridge.stats.dropped_properties == 1  # a device may not set JetStream's headers
        m = await js.get_msg("SENSORS", 1)
        assert m.headers["site"] == "plant-1" and m.headers["unit"] == "celsius"
        assert m.headers["Content-Type"] == "application/json"
        assert m.headers[H_MSG_ID] != "forged"


async def test_outbound_command_is_delivered_at_qos1_and_acked_after_puback(mosquitto, leafjet):
    nc, js = await connect(leafjet)
    device = await anyio.to_thread.run_sync(lambda: devices.Subscriber(mosquitto.port, "devices/#"))
    try:
        await js.add_stream(name="COMMANDS", subjects=["cmd.>"])
        await js.publish("cmd.devices.7.set", b"on", headers={"Content-Type": "text/plain", "req": "42"})
        cfg = bridge_config(
            mosquitto,
            leafjet.url,
            inbound=[],
            outbound=[{"stream": "COMMANDS", "subject_prefix": "cmd", "durable": "to-devices"}],
        )
        async with running_bridge(cfg) as bridge:
            await eventually(lambda: device.messages(), what="command delivered")
            await js.publish("cmd.devices.8.reset", b"now")
            await eventually(lambda: len(device.messages()) == 2, what="second command delivered")
            await eventually(lambda: bridge.stats.commands_sent == 2, what="commands acked")
        (topic, payload, props), second = device.messages()
        assert (topic, payload) == ("devices/7/set", b"on")
        assert props.ContentType == "text/plain" and ("req", "42") in props.UserProperty
        assert second[:2] == ("devices/8/reset", b"now")

        async def acked():
            info = await js.consumer_info("COMMANDS", "to-devices")
            return info.ack_floor.stream_seq == 2 and info.num_ack_pending == 0

        await eventually(acked, what="stream messages acked")
    finally:
        await anyio.to_thread.run_sync(device.close)
        await nc.close()


async def test_an_oversized_command_is_dead_lettered_and_terminated_not_delivered(mosquitto, leafjet):
    nc, js = await connect(leafjet)
    device = await anyio.to_thread.run_sync(lambda: devices.Subscriber(mosquitto.port, "devices/#"))
    try:
        await js.add_stream(name="COMMANDS", subjects=["cmd.>"])
        await js.add_stream(name="DEAD", subjects=["mqtt.dead_letter"])
        await js.publish("cmd.devices.7.set", b"x" * 2000)
        await js.publish("cmd.devices.7.get", b"ok")
        cfg = bridge_config(
            mosquitto,
            leafjet.url,
            max_payload=1000,
            inbound=[],
            outbound=[{"stream": "COMMANDS", "subject_prefix": "cmd", "durable": "to-devices"}],
        )
        async with running_bridge(cfg) as bridge:
            await eventually(lambda: bridge.stats.commands_sent == 1, what=lambda: f"sent: {bridge.stats}")
            assert bridge.stats.commands_dead_lettered == 1
        letter = await js.get_msg("DEAD", 1)
        assert not letter.data and letter.headers[H_SUBJECT] == "cmd.devices.7.set"
        assert "exceeds max_payload 1000" in letter.headers[H_REASON]
        # the broker's PUBACK to the bridge can come before the device (another client) has it
        await eventually(lambda: device.messages(), what="the small command delivered")
        assert [m[:2] for m in device.messages()] == [("devices/7/get", b"ok")]

        async def settled():
            info = await js.consumer_info("COMMANDS", "to-devices")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(settled, what="both commands settled")
    finally:
        await anyio.to_thread.run_sync(device.close)
        await nc.close()


async def test_unmappable_topics_go_to_the_dead_letter_subject(mosquitto, leafjet, caplog):
    async with jetstream(leafjet) as (_, js):
        await js.add_stream(name="SENSORS", subjects=["mqtt.sensors.>"])
        await js.add_stream(name="DEAD", subjects=["mqtt.dead_letter"])
        async with running_bridge(bridge_config(mosquitto, leafjet.url)) as bridge:
            await eventually(lambda: bridge.stats.mqtt_connects, what="bridge connected")
            msgs = [("sensors/has space", b"1"), ("sensors/*", b"2"), ("sensors/fine", b"3")]
            await anyio.to_thread.run_sync(lambda: devices.publish(mosquitto.port, msgs))
            await eventually(
                lambda: bridge.stats.dead_lettered == 2 and bridge.stats.stored == 1,
                what=lambda: f"routed: {bridge.stats}",
            )
        dead = [await js.get_msg("DEAD", seq) for seq in (1, 2)]
        assert {m.headers[H_TOPIC] for m in dead} == {"sensors/has space", "sensors/*"}
        assert all("unmappable topic" in m.headers[H_REASON] for m in dead)
        assert sorted(m.data for m in dead) == [b"1", b"2"]
        assert (await js.get_msg("SENSORS", 1)).data == b"3"
        assert "sensors/has space" in caplog.text and "dead-letter" in caplog.text


# 2000 bytes are read whole; 400 kB are more than the session's reader holds for max_payload 1000
# (max_payload + room for topic and properties): read only as far as their head, then skipped.
@pytest.mark.parametrize("big", [2000, 400_000])
async def test_oversized_payload_is_rejected_counted_and_acknowledged(mosquitto, leafjet, caplog, big):
    async with jetstream(leafjet) as (_, js):
        await js.add_stream(name="SENSORS", subjects=["mqtt.>"])
        async with running_bridge(bridge_config(mosquitto, leafjet.url, max_payload=1000)) as bridge:
            await eventually(lambda: bridge.stats.mqtt_connects, what="bridge connected")
            msgs = [("sensors/big", b"x" * big), ("sensors/small", b"ok")]
            await anyio.to_thread.run_sync(lambda: devices.publish(mosquitto.port, msgs))
            await eventually(lambda: bridge.stats.stored == 1, what="small one stored")
            assert bridge.stats.oversized == 1
            assert bridge.stats.mqtt_connects == 1  # the big one did not cost the connection
        assert await stored(js, "SENSORS") == 1
        assert "exceeds max_payload 1000" in caplog.text


async def test_broker_unreachable_then_started_later(make_mosquitto, leafjet, caplog):
    broker = make_mosquitto(start=False)
    async with jetstream(leafjet) as (_, js):
        await js.add_stream(name="SENSORS", subjects=["mqtt.>"])
        async with running_bridge(bridge_config(broker, leafjet.url)) as bridge:
            await eventually(lambda: bridge.stats.mqtt_connect_failures >= 2, what="retries")
            await anyio.to_thread.run_sync(broker.start)
            await eventually(lambda: bridge.stats.mqtt_connects, timeout=10, what="bridge connected")
            await anyio.to_thread.run_sync(lambda: devices.publish(broker.port, [("sensors/late", b"hi")]))
            await eventually(lambda: bridge.stats.stored == 1, what="stored")
        assert "cannot reach the broker" in caplog.text


async def test_wrong_credentials_are_reported_and_retried(make_mosquitto, leafjet, caplog):
    broker = make_mosquitto(users={"bridge": "right"})
    async with jetstream(leafjet) as (_, js):
        await js.add_stream(name="SENSORS", subjects=["mqtt.>"])
        cfg = bridge_config(broker, leafjet.url, username="bridge", password="wrong")
        with caplog.at_level(logging.WARNING, logger="leafjet.bridge.mqtt"):
            async with running_bridge(cfg) as bridge:
                await eventually(lambda: bridge.stats.mqtt_refusals >= 2, what="refused twice (retried)")
                assert bridge.stats.mqtt_connects == 0
        assert "broker refused the connection" in caplog.text
        assert "Bad user name or password" in caplog.text or "Not authorized" in caplog.text
        cfg = bridge_config(broker, leafjet.url, username="bridge", password="right")
        async with running_bridge(cfg) as bridge:
            await eventually(lambda: bridge.stats.mqtt_connects, what="connected with the right password")


async def test_nats_unreachable_is_retried(mosquitto, tmp_path):
    cfg = bridge_config(mosquitto, f"nats://127.0.0.1:{free_port()}")
    async with running_bridge(cfg) as bridge:
        await eventually(lambda: bridge.stats.nats_connect_failures >= 2, what="NATS retries")
        assert not bridge.mqtt_connected  # nothing is taken from the broker before there is a store


async def test_dead_letters_heard_by_a_core_subscriber_but_not_stored_do_not_stall_the_bridge(
    mosquitto, leafjet, caplog
):
    """Someone listens on the dead-letter subject, no stream stores it: the store attempt gets no
    PubAck (no "no responders" either), so the bridge publishes the letter for the listener, logs,
    and goes on - the messages behind it are stored and acknowledged, not held for ever."""
    nc, js = await connect(leafjet)
    letters = []

    async def heard(msg):
        if not msg.reply:  # the store attempt (with a reply subject) is not the letter we hand over
            letters.append(msg)

    try:
        await js.add_stream(name="SENSORS", subjects=["mqtt.sensors.>"])
        await nc.subscribe("mqtt.dead_letter", cb=heard)
        await js.add_stream(name="COMMANDS", subjects=["cmd.>"])
        await js.publish("cmd.devices.7.set", b"x" * 2000)  # over max_payload: a dead letter
        await js.publish("cmd.devices.7.get", b"ok")
        device = await anyio.to_thread.run_sync(lambda: devices.Subscriber(mosquitto.port, "devices/#"))
        cfg = bridge_config(
            mosquitto,
            leafjet.url,
            ack_timeout="1s",
            max_payload=1000,
            outbound=[{"stream": "COMMANDS", "subject_prefix": "cmd", "durable": "to-devices"}],
        )
        try:
            async with running_bridge(cfg) as bridge:
                await eventually(lambda: bridge.stats.mqtt_connects, what="bridge connected")
                msgs = [("sensors/has space", b"1"), ("sensors/fine", b"2"), ("sensors/also", b"3")]
                await anyio.to_thread.run_sync(lambda: devices.publish(mosquitto.port, msgs))
                await eventually(
                    lambda: bridge.stats.dead_lettered == 1 and bridge.stats.stored == 2,
                    timeout=30,
                    what=lambda: f"routed: {bridge.stats}",
                )
                await eventually(lambda: bridge.stats.commands_sent == 1, timeout=30, what="command sent")
                assert bridge.stats.commands_dead_lettered == 1
                await eventually(lambda: len(letters) == 2, what="both letters heard")
        finally:
            await anyio.to_thread.run_sync(device.close)
        assert await stored(js, "SENSORS") == 2
        assert sorted(m.headers.get(H_TOPIC, m.headers.get(H_SUBJECT)) for m in letters) == [
            "cmd.devices.7.set",
            "sensors/has space",
        ]
        assert [m[:2] for m in device.messages()] == [("devices/7/get", b"ok")]
        assert caplog.text.count("not stored") == 2 and "publishing it without a stream" in caplog.text
    finally:
        await nc.close()
