"""A real mosquitto broker per test (persistence on, a temp dir, a free loopback port), and helpers."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridges.mqtt.bridge import MqttBridge
from bridges.mqtt.config import MqttBridgeConfig, bridges_from_dict
from tests.support.mosquitto import MOSQUITTO, MOSQUITTO_PASSWD, Mosquitto
from tests.support.servers import RunningServer, free_port, start_leafjet


def _require_mosquitto() -> None:
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed (apt-get install -y mosquitto mosquitto-clients)")


@pytest.fixture
def make_mosquitto(tmp_path: Path) -> Iterator[Any]:
    """``make_mosquitto(start=True, users={"bridge": "pw"})`` -> a Mosquitto on a free port."""
    _require_mosquitto()
    made: list[Mosquitto] = []

    def factory(*, start: bool = True, users: dict[str, str] | None = None) -> Mosquitto:
        workdir = tmp_path / f"mosquitto-{len(made)}"
        workdir.mkdir(parents=True)
        password_file = None
        if users:
            if MOSQUITTO_PASSWD is None:
                pytest.skip("mosquitto_passwd is not installed")
            password_file = workdir / "passwd"
            for i, (user, pw) in enumerate(users.items()):
                flags = ["-b", "-c"] if i == 0 else ["-b"]
                subprocess.run([MOSQUITTO_PASSWD, *flags, str(password_file), user, pw], check=True)
        broker = Mosquitto(workdir, free_port(), password_file)
        made.append(broker)
        return broker.start() if start else broker

    yield factory
    for broker in made:
        broker.stop()


@pytest.fixture
def mosquitto(make_mosquitto: Any) -> Mosquitto:
    return make_mosquitto()


@pytest.fixture
def leafjet(tmp_path: Path) -> Iterator[RunningServer]:
    srv = start_leafjet(tmp_path / "leafjet")
    yield srv
    srv.stop()


def bridge_config(broker: Mosquitto | str, nats_url: str, **fields: Any) -> MqttBridgeConfig:
    table: dict[str, Any] = {
        "url": broker if isinstance(broker, str) else broker.url,
        "client_id": "leafjet-test-bridge",
        "nats_url": nats_url,
        "reconnect_min": "100ms",
        "reconnect_max": "1s",
        "ack_timeout": "2s",
        "inbound": [{"filter": "sensors/#", "qos": 1, "subject_prefix": "mqtt"}],
        **fields,
    }
    return bridges_from_dict({"bridges": {"mqtt": [table]}})[0]


@asynccontextmanager
async def running_bridge(config: MqttBridgeConfig) -> AsyncIterator[MqttBridge]:
    bridge = MqttBridge(config)
    async with anyio.create_task_group() as tg:
        await tg.start(bridge.run)
        try:
            yield bridge
        finally:
            tg.cancel_scope.cancel()


async def eventually(predicate: Any, timeout: float = 10.0, what: Any = "condition") -> Any:
    """Poll an (async or plain) predicate until it is truthy."""
    with anyio.move_on_after(timeout):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return value
            await anyio.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
