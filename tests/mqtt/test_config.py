"""[[bridges.mqtt]] tables: typed, and every bad value names its dotted path (no broker)."""

from __future__ import annotations

import pytest

from bridges.mqtt.config import MQTT_V5, MQTT_V311, bridges_from_dict, load_file
from core.errors import ConfigError

pytestmark = pytest.mark.mqtt

BASE = {"url": "mqtt://broker:1884", "inbound": [{"filter": "sensors/#"}]}


def one(**fields):
    return bridges_from_dict({"bridges": {"mqtt": [{**BASE, **fields}]}})[0]


def test_defaults_are_a_persistent_mqtt5_session_with_a_fixed_client_id():
    cfg = one()
    assert (cfg.host, cfg.port, cfg.use_tls, cfg.protocol) == ("broker", 1884, False, MQTT_V5)
    assert cfg.client_id == "leafjet-mqtt" and cfg.clean_session is False
    assert cfg.inbound[0].qos == 1 and cfg.inbound[0].subject_prefix == "mqtt"


def test_a_full_file_loads(tmp_path):
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "b.toml").write_text(
        """
port = 4222  # the agent's own keys are not the bridge's business

[[bridges.mqtt]]
name = "plant1"
url = "mqtts://broker.example"
protocol = "3.1.1"
client_id = "leafjet-plant1"
username = "bridge"
password = "pw"
max_payload = "64KB"
session_expiry = "2h"
tls = { ca_file = "ca.pem" }

[[bridges.mqtt.inbound]]
filter = "sensors/+/temp"
qos = 2
subject_prefix = "plant1"
stream = "SENSORS"

[[bridges.mqtt.outbound]]
stream = "COMMANDS"
subject_prefix = "cmd"
topic_prefix = "devices"
"""
    )
    (cfg,) = load_file(tmp_path / "b.toml")
    assert (cfg.port, cfg.use_tls, cfg.protocol, cfg.max_payload) == (8883, True, MQTT_V311, 64 * 1024)
    assert cfg.tls is not None and cfg.tls.ca_file == str(tmp_path / "ca.pem")
    assert cfg.session_expiry == 7200
    assert cfg.outbound[0].durable == "leafjet-plant1-0" and cfg.outbound[0].topic_prefix == "devices"


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"url": "http://x"}, "bridges.mqtt[0].url"),
        ({"url": None}, "bridges.mqtt[0].url"),
        ({"protocol": "4"}, "bridges.mqtt[0].protocol"),
        ({"bogus": 1}, "bridges.mqtt[0].bogus"),
        ({"keepalive": 0}, "bridges.mqtt[0].keepalive"),
        ({"client_id": ""}, "bridges.mqtt[0].client_id"),
        ({"max_payload": "lots"}, "bridges.mqtt[0].max_payload"),
        ({"dead_letter_subject": "a.*"}, "bridges.mqtt[0].dead_letter_subject"),
        ({"inbound": [{"filter": "a/#/b"}]}, "bridges.mqtt[0].inbound[0].filter"),
        ({"inbound": [{"filter": "a", "qos": 3}]}, "bridges.mqtt[0].inbound[0].qos"),
        ({"inbound": [{"filter": "a", "extra": 1}]}, "bridges.mqtt[0].inbound[0].extra"),
        ({"inbound": [], "outbound": [{"subject_prefix": "c"}]}, "bridges.mqtt[0].outbound[0].stream"),
        ({"inbound": []}, "bridges.mqtt[0].inbound"),
        ({"tls": {"ca_file": "/nonexistent.pem"}}, "bridges.mqtt[0].tls.ca_file"),
        ({"reconnect_min": "10s", "reconnect_max": "1s"}, "bridges.mqtt[0].reconnect_min"),
    ],
)
def test_bad_values_name_their_dotted_path(fields, path):
    table = {**BASE, **fields}
    table = {k: v for k, v in table.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        bridges_from_dict({"bridges": {"mqtt": [table]}})
    assert e.value.path == path


def test_duplicate_client_ids_are_refused():
    with pytest.raises(ConfigError, match="duplicate client_id"):
        bridges_from_dict({"bridges": {"mqtt": [BASE, BASE]}})


def test_a_file_without_bridges_is_an_error(tmp_path):
    (tmp_path / "empty.toml").write_text("port = 1\n")
    with pytest.raises(ConfigError, match=r"has no \[\[bridges\.mqtt\]\] table"):
        load_file(tmp_path / "empty.toml")
