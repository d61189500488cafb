"""The MQTT bridge configured in the agent's own TOML runs inside the agent process."""

from __future__ import annotations

import anyio
import pytest

from tests.mqtt import devices
from tests.support.jsapi import jetstream
from tests.support.servers import start_leafjet

pytestmark = [pytest.mark.mqtt, pytest.mark.anyio]


async def test_bridge_in_the_agent_config_stores_device_messages(mosquitto, tmp_path):
    config = {
        "bridges": {
            "mqtt": [
                {
                    "name": "inproc",
                    "url": f"mqtt://127.0.0.1:{mosquitto.port}",
                    "client_id": "leafjet-inproc",
                    "inbound": [{"filter": "plant/#", "qos": 1, "subject_prefix": "mqtt"}],
                }
            ]
        }
    }
    agent = start_leafjet(tmp_path / "agent", config)
    try:
        async with jetstream(agent) as (_, js):
            await js.add_stream(name="PLANT", subjects=["mqtt.>"])
            msgs = [(f"plant/line{i % 3}/temp", b"%d" % i) for i in range(30)]
            # the bridge connects in the background: probe until its subscription is live
            with anyio.fail_after(30):
                while True:
                    await anyio.to_thread.run_sync(
                        lambda: devices.publish(mosquitto.port, [("plant/probe", b"p")])
                    )
                    if (await js.stream_info("PLANT")).state.messages:
                        break
                    await anyio.sleep(0.2)
            before = (await js.stream_info("PLANT")).state.messages
            await anyio.to_thread.run_sync(lambda: devices.publish(mosquitto.port, msgs))
            with anyio.fail_after(20):
                while (await js.stream_info("PLANT")).state.messages < before + len(msgs):
                    await anyio.sleep(0.05)
            last = await js.get_last_msg("PLANT", "mqtt.plant.line2.temp")
            assert last.data == b"29"
    finally:
        assert agent.stop() == 0, "the agent with its bridge shuts down cleanly"


async def test_a_failing_bridge_is_restarted_and_never_ends_the_agent(mosquitto, tmp_path, monkeypatch):
    monkeypatch.setenv("LEAFJET_FAULTS", "mqtt_bridge:inproc")
    config = {
        "bridges": {
            "mqtt": [
                {
                    "name": "inproc",
                    "url": f"mqtt://127.0.0.1:{mosquitto.port}",
                    "client_id": "leafjet-inproc-fault",
                    "inbound": [{"filter": "plant/#", "qos": 1, "subject_prefix": "mqtt"}],
                }
            ]
        }
    }
    agent = start_leafjet(tmp_path / "agent", config)
    try:
        with anyio.fail_after(20):
            while agent.log().count("mqtt bridge 'inproc' failed") < 2:
                await anyio.sleep(0.1)
        assert "InjectedFault" in agent.log()
        async with jetstream(agent) as (_, js):
            await js.add_stream(name="STILL", subjects=["still"])
            assert (await js.publish("still", b"up")).seq == 1
    finally:
        assert agent.stop() == 0, "the agent shuts down cleanly with its bridge in a restart pause"


async def test_a_reload_starts_a_new_bridge_and_keeps_the_agent_serving(mosquitto, tmp_path):
    def bridge(name: str, prefix: str) -> dict:
        return {
            "name": name,
            "url": f"mqtt://127.0.0.1:{mosquitto.port}",
            "client_id": f"leafjet-{name}",
            "inbound": [{"filter": "plant/#", "qos": 1, "subject_prefix": prefix}],
        }

    agent = start_leafjet(tmp_path / "agent", {"bridges": {"mqtt": [bridge("one", "mqtt")]}})
    try:
        async with jetstream(agent) as (_, js):
            await js.add_stream(name="TWO", subjects=["two.>"])
            agent.rewrite_config({"bridges": {"mqtt": [bridge("one", "mqtt"), bridge("two", "two")]}})
            agent.reload()
            with anyio.fail_after(30):
                while "started MQTT bridge 'two'" not in agent.log():
                    await anyio.sleep(0.05)
            # the new bridge subscribes in the background: probe until its messages arrive
            with anyio.fail_after(30):
                while not (await js.stream_info("TWO")).state.messages:
                    await anyio.to_thread.run_sync(
                        lambda: devices.publish(mosquitto.port, [("plant/x", b"1")])
                    )
                    await anyio.sleep(0.2)
        assert "stopped MQTT bridge 'one'" not in agent.log(), "an unchanged bridge keeps running"
    finally:
        assert agent.stop() == 0
