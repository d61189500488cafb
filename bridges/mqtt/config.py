"""Typed MQTT bridge configuration: one ``[[bridges.mqtt]]`` TOML table per broker.

::

    [[bridges.mqtt]]
    name = "plant1"
    url = "mqtts://broker.example:8883"      # mqtt:// (or tcp://) plain, mqtts:// (or ssl://) TLS
    protocol = "5"                           # or "3.1.1"
    client_id = "leafjet-plant1"             # fixed: the broker keeps our session under it
    clean_session = false                    # persistent session (MQTT 5: clean_start=false + expiry)
    session_expiry = "24h"
    username = "bridge"                      # or a client certificate in [bridges.mqtt.tls]
    password = "secret"
    nats_url = "nats://127.0.0.1:4222"       # the agent or hub this bridge writes to
    max_payload = "1MB"
    dead_letter_subject = "mqtt.dead_letter"

    [bridges.mqtt.tls]
    ca_file = "ca.pem"
    cert_file = "client.pem"
    key_file = "client-key.pem"

    [[bridges.mqtt.inbound]]                 # MQTT -> JetStream
    filter = "sensors/#"
    qos = 1
    subject_prefix = "mqtt"                  # sensors/a/b -> mqtt.sensors.a.b
    stream = "SENSORS"                       # optional: the stream that must store it

    [[bridges.mqtt.outbound]]                # JetStream -> MQTT
    stream = "COMMANDS"
    subject_prefix = "cmd"                   # cmd.devices.7.set -> devices/7/set
    durable = "mqtt-plant1"
    qos = 1

An unknown key or a bad value raises ConfigError naming its dotted path
(``bridges.mqtt[0].inbound[1].qos: must be between 0 and 2, got 3``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.config import ConfigTable
from core.errors import ConfigError
from core.subjects import is_valid_literal_subject

from .topics import UnmappableTopic, validate_filter, validate_topic_name

MQTT_V311, MQTT_V5 = 4, 5
_PROTOCOLS = {"3.1.1": MQTT_V311, "311": MQTT_V311, "5": MQTT_V5, "5.0": MQTT_V5}
_SCHEMES = {"mqtt": False, "tcp": False, "mqtts": True, "ssl": True, "tls": True}


@dataclass(frozen=True, slots=True)
class MqttTLS:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure: bool = False  # skip hostname verification (tests, self-signed brokers)


@dataclass(frozen=True, slots=True)
class InboundRoute:
    """MQTT messages matching ``filter`` are stored under ``subject_prefix`` + the mapped topic."""

    filter: str
    qos: int = 1
    subject_prefix: str = "mqtt"
    stream: str | None = None  # sent as Nats-Expected-Stream when set


@dataclass(frozen=True, slots=True)
class OutboundRoute:
    """Messages of ``stream`` under ``subject_prefix`` go to MQTT via a durable pull consumer."""

    stream: str
    subject_prefix: str
    durable: str
    topic_prefix: str = ""
    qos: int = 1
    retain: bool = False
    batch: int = 64
    ack_wait: float = 30.0


@dataclass(frozen=True, slots=True)
class MqttBridgeConfig:
    host: str
    port: int
    client_id: str
    name: str = "mqtt"
    use_tls: bool = False
    protocol: int = MQTT_V5
    clean_session: bool = False
    session_expiry: float = 86400.0
    keepalive: int = 30
    username: str | None = None
    password: str | None = None
    tls: MqttTLS | None = None
    nats_url: str = "nats://127.0.0.1:4222"
    max_payload: int = 1 << 20
    max_inflight: int = 256
    dead_letter_subject: str = "mqtt.dead_letter"
    ack_timeout: float = 5.0
    reconnect_min: float = 0.5
    reconnect_max: float = 30.0
    inbound: tuple[InboundRoute, ...] = ()
    outbound: tuple[OutboundRoute, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.reconnect_min > self.reconnect_max:
            raise ConfigError("reconnect_min", "must not exceed reconnect_max")
        if not self.inbound and not self.outbound:
            raise ConfigError("inbound", "a bridge needs at least one inbound or outbound route")


class _Table(ConfigTable):
    """``ConfigTable`` with the bridge's subject fields."""

    def subject(self, key: str, default: str | None, *, allow_empty: bool = False) -> str:
        v = self.string(key, default)
        if v is None:
            raise ConfigError(self.at(key), "required")
        if not (allow_empty and v == "") and not is_valid_literal_subject(v):
            raise ConfigError(self.at(key), f"not a valid literal NATS subject: {v!r}")
        return v


def _resolve(path: str | None, base_dir: Path | None) -> str | None:
    if path is None or base_dir is None or Path(path).is_absolute():
        return path
    return str(base_dir / path)


def _read_tls(t: _Table, base_dir: Path | None) -> MqttTLS:
    files = {}
    for key in ("ca_file", "cert_file", "key_file"):
        p = _resolve(t.string(key), base_dir)
        if p is not None and not Path(p).is_file():
            raise ConfigError(t.at(key), f"file not found: {p}")
        files[key] = p
    tls = MqttTLS(**files, insecure=t.flag("insecure", False))
    t.done()
    if (tls.cert_file is None) != (tls.key_file is None):
        raise ConfigError(t.at("cert_file"), "cert_file and key_file go together")
    return tls


def _read_inbound(t: _Table) -> InboundRoute:
    flt = t.string("filter")
    if flt is None:
        raise ConfigError(t.at("filter"), "required")
    try:
        validate_filter(flt)
    except UnmappableTopic as e:
        raise ConfigError(t.at("filter"), f"invalid MQTT topic filter {flt!r}: {e}") from None
    route = InboundRoute(
        filter=flt,
        qos=t.integer("qos", 1, minimum=0, maximum=2),
        subject_prefix=t.subject("subject_prefix", "mqtt", allow_empty=True),
        stream=t.string("stream"),
    )
    t.done()
    return route


def _read_outbound(t: _Table, default_durable: str) -> OutboundRoute:
    stream = t.string("stream")
    if not stream:
        raise ConfigError(t.at("stream"), "required")
    topic_prefix = t.string("topic_prefix", "") or ""
    if topic_prefix:
        try:
            validate_topic_name(topic_prefix)
        except UnmappableTopic as e:
            raise ConfigError(t.at("topic_prefix"), str(e)) from None
    route = OutboundRoute(
        stream=stream,
        subject_prefix=t.subject("subject_prefix", None),
        durable=t.string("durable", default_durable) or default_durable,
        topic_prefix=topic_prefix,
        qos=t.integer("qos", 1, minimum=0, maximum=2),
        retain=t.flag("retain", False),
        batch=t.integer("batch", 64, minimum=1, maximum=10_000),
        ack_wait=t.duration("ack_wait", 30.0),
    )
    t.done()
    return route


def bridge_from_table(t: _Table, base_dir: Path | None = None) -> MqttBridgeConfig:
    name = t.string("name", "mqtt") or "mqtt"
    url = t.string("url")
    if not url:
        raise ConfigError(t.at("url"), "required")
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES or not parts.hostname:
        raise ConfigError(t.at("url"), f"expected mqtt://host:port or mqtts://host:port, got {url!r}")
    use_tls = _SCHEMES[parts.scheme]
    try:
        port = parts.port or (8883 if use_tls else 1883)
    except ValueError:
        raise ConfigError(t.at("url"), f"bad port in {url!r}") from None
    proto = t.data.pop("protocol", "5")
    if str(proto) not in _PROTOCOLS:
        raise ConfigError(t.at("protocol"), f'expected "3.1.1" or "5", got {proto!r}')
    client_id = t.string("client_id", f"leafjet-{name}") or ""
    if not client_id:
        raise ConfigError(t.at("client_id"), "must not be empty (a persistent session needs a fixed id)")
    tls = _read_tls(_Table(t.data.pop("tls"), t.at("tls")), base_dir) if "tls" in t.data else None
    if tls is not None:
        use_tls = True
    inbound = tuple(_read_inbound(x) for x in t.tables("inbound"))
    outbound_tables = t.tables("outbound")
    outbound = tuple(
        _read_outbound(x, f"{client_id}-{i}".replace(".", "_")) for i, x in enumerate(outbound_tables)
    )
    fields: dict[str, Any] = dict(
        name=name,
        host=parts.hostname,
        port=port,
        use_tls=use_tls,
        protocol=_PROTOCOLS[str(proto)],
        client_id=client_id,
        clean_session=t.flag("clean_session", False),
        session_expiry=t.duration("session_expiry", 86400.0),
        keepalive=t.integer("keepalive", 30, minimum=1, maximum=65535),
        username=t.string("username", parts.username),
        password=t.string("password", parts.password),
        tls=tls,
        nats_url=t.string("nats_url", "nats://127.0.0.1:4222") or "",
        max_payload=t.size("max_payload", 1 << 20),
        max_inflight=t.integer("max_inflight", 256, minimum=1, maximum=65535),
        dead_letter_subject=t.subject("dead_letter_subject", "mqtt.dead_letter"),
        ack_timeout=t.duration("ack_timeout", 5.0),
        reconnect_min=t.duration("reconnect_min", 0.5),
        reconnect_max=t.duration("reconnect_max", 30.0),
        inbound=inbound,
        outbound=outbound,
    )
    try:
        cfg = MqttBridgeConfig(**fields)
    except ConfigError as e:
        raise ConfigError(t.at(e.path), e.reason) from None
    t.done()
    return cfg


def bridges_from_dict(data: dict[str, Any], *, base_dir: Path | None = None) -> tuple[MqttBridgeConfig, ...]:
    """Every ``[[bridges.mqtt]]`` table of a config document; other top-level keys are not ours."""
    bridges = data.get("bridges", {})
    if not isinstance(bridges, dict):
        raise ConfigError("bridges", f"expected a table, got {type(bridges).__name__}")
    tables = _Table({"mqtt": bridges.get("mqtt", [])}, "bridges").tables("mqtt")
    configs = tuple(bridge_from_table(t, base_dir) for t in tables)
    ids = [c.client_id for c in configs]
    for i, cid in enumerate(ids):
        if cid in ids[:i]:
            raise ConfigError(f"bridges.mqtt[{i}].client_id", f"duplicate client_id {cid!r}")
    return configs


def load_file(path: str | Path) -> tuple[MqttBridgeConfig, ...]:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_bytes().decode("utf-8"))
    except OSError as e:
        raise ConfigError("", f"cannot read config file {p}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("", f"{p}: invalid TOML: {e}") from None
    configs = bridges_from_dict(data, base_dir=p.parent)
    if not configs:
        raise ConfigError("bridges.mqtt", f"{p} has no [[bridges.mqtt]] table")
    return configs
