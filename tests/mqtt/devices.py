"""MQTT devices for tests and benchmarks: paho clients that publish and subscribe, closed cleanly."""

from __future__ import annotations

import threading
from typing import Any

from paho.mqtt.client import CallbackAPIVersion, Client, MQTTMessage, MQTTv5, MQTTv311
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def _client(client_id: str, protocol: int, **kw: Any) -> Client:
    return Client(
        CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTv5 if protocol == 5 else MQTTv311, **kw
    )


def publish(
    port: int,
    messages: list[tuple[str, bytes]],
    *,
    qos: int = 1,
    protocol: int = 5,
    user_properties: list[tuple[str, str]] | None = None,
    content_type: str | None = None,
    client_id: str = "test-device",
    timeout: float = 10.0,
) -> None:
    """Publish and wait for every PUBACK (QoS 1) from the broker."""
    c = _client(client_id, protocol)
    props = None
    if protocol == 5 and (user_properties or content_type):
        props = Properties(PacketTypes.PUBLISH)
        if user_properties:
            props.UserProperty = user_properties
        if content_type:
            props.ContentType = content_type
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        infos = [c.publish(topic, payload, qos, properties=props) for topic, payload in messages]
        for info in infos:
            info.wait_for_publish(timeout)
            assert info.is_published(), "the broker did not acknowledge a publish"
    finally:
        c.disconnect()
        c.loop_stop()


class Subscriber:
    """A device that subscribes and collects what it receives (topic, payload, properties)."""

    def __init__(self, port: int, topic_filter: str, *, qos: int = 1, client_id: str = "test-subscriber"):
        self.received: list[tuple[str, bytes, Any]] = []
        self._subscribed = threading.Event()
        self._lock = threading.Lock()
        self.client = _client(client_id, 5)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.on_connect = lambda c, *a: c.subscribe(topic_filter, qos)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        if not self._subscribed.wait(10):
            self.close()
            raise TimeoutError("subscription not acknowledged")

    def _on_message(self, _c: Client, _u: Any, m: MQTTMessage) -> None:
        with self._lock:
            self.received.append((m.topic, bytes(m.payload), m.properties))

    def messages(self) -> list[tuple[str, bytes, Any]]:
        with self._lock:
            return list(self.received)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Flood:
    """A device publishing ``n`` numbered QoS 1 messages from a thread, riding out broker restarts.

    The device has a persistent session and paho keeps unacknowledged messages in memory and resends
    them after a reconnect, so every message eventually gets its PUBACK.
    """

    def __init__(
        self,
        port: int,
        topic: str,
        n: int,
        *,
        client_id: str = "flood-device",
        rate_pause: int = 0,
        same_bytes: bool = False,
    ):
        self.n = n
        self.client = _client(client_id, 5)
        self.client.reconnect_delay_set(0.05, 0.5)  # type: ignore[arg-type]
        self.client.max_inflight_messages_set(50)
        self.client.max_queued_messages_set(0)
        self._acks = 0
        self._ack_lock = threading.Lock()
        self.client.on_publish = self._on_publish
        self.client.connect("127.0.0.1", port, clean_start=False)
        self.client.loop_start()
        self.infos: list[Any] = []
        self._topic = topic
        self._pause = rate_pause
        self._same_bytes = same_bytes  # every payload b"same"; the number goes in a user property
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for i in range(self.n):
            if self._same_bytes:
                props = Properties(PacketTypes.PUBLISH)
                props.UserProperty = [("n", str(i))]
                self.infos.append(self.client.publish(self._topic, b"same", 1, properties=props))
            else:
                self.infos.append(self.client.publish(self._topic, str(i).encode(), 1))
            if self._pause and i % self._pause == 0:
                threading.Event().wait(0.002)

    def _on_publish(self, *_a: Any) -> None:
        with self._ack_lock:
            self._acks += 1

    def acked(self) -> int:
        with self._ack_lock:
            return self._acks

    def close(self) -> None:
        self.thread.join(10)
        self.client.disconnect()
        self.client.loop_stop()
