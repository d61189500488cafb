"""A real mosquitto broker per test (persistence on, a temp dir, a free loopback port), and helpers."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridges.mqtt.bridge import MqttBridge
from bridges.mqtt.config import MqttBridgeConfig, bridges_from_dict
from tests.support.servers import RunningServer, free_port, start_leafjet, wait_until

MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")


@dataclass
class Mosquitto:
    workdir: Path
    port: int
    password_file: Path | None = None
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> Mosquitto:
        assert MOSQUITTO is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = [
            f"listener {self.port} 127.0.0.1",
            "user root",  # started as root, mosquitto would otherwise drop to a user that cannot write here
            "persistence true",
            f"persistence_location {self.workdir}/",
            "autosave_interval 1",
            "max_queued_messages 0",  # queue everything for an offline persistent session
            "max_inflight_messages 100",
            "persistent_client_expiration 1h",
            f"log_dest file {self.workdir}/mosquitto.log",
        ]
        if self.password_file is not None:
            conf += [f"password_file {self.password_file}", "allow_anonymous false"]
        else:
            conf.append("allow_anonymous true")
        (self.workdir / "mosquitto.conf").write_text("\n".join(conf) + "\n")
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.workdir / "mosquitto.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_until(ready, timeout, what="mosquitto to listen")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        try:
            return (self.workdir / "mosquitto.log").read_text(errors="replace")
        except OSError:
            return ""


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
