"""The cluster config: the reference's names, each bad value named by its dotted path."""

from __future__ import annotations

import pytest

from core.config import config_from_dict
from core.errors import ConfigError


def test_no_cluster_table_means_no_routes():
    assert not config_from_dict({}).cluster.enabled


def test_the_references_names():
    cfg = config_from_dict(
        {
            "server_name": "n1",
            "cluster": {
                "name": "hub",
                "listen": "10.0.0.1:6300",
                "routes": ["nats-route://10.0.0.2:6222", "nats-route://u:p@10.0.0.3:6222"],
                "authorization": {"user": "route", "password": "pw", "timeout": 3},
                "advertise": "n1.example.com:6300",
            },
        }
    ).cluster
    assert (cfg.name, cfg.host, cfg.port) == ("hub", "10.0.0.1", 6300)
    assert cfg.routes == ("nats-route://10.0.0.2:6222", "nats-route://u:p@10.0.0.3:6222")
    assert (cfg.user, cfg.password, cfg.auth_timeout) == ("route", "pw", 3.0)
    assert cfg.advertise == "n1.example.com:6300"
    assert "pw" not in repr(cfg)


def test_the_port_defaults_to_6222():
    cfg = config_from_dict({"cluster": {"name": "hub", "host": "0.0.0.0"}}).cluster
    assert cfg.enabled and cfg.port == 6222


@pytest.mark.parametrize(
    "cluster, path",
    [
        ({"routes": []}, "cluster.name"),
        ({"name": "has space"}, "cluster.name"),
        ({"name": "c", "routes": ["http://h:6222"]}, "cluster.routes[0]"),
        ({"name": "c", "routes": ["nats-route://h"]}, "cluster.routes[0]"),
        ({"name": "c", "listen": "nohost"}, "cluster.listen"),
        ({"name": "c", "authorization": {"user": "u"}}, "cluster.authorization"),
        ({"name": "c", "authorization": {"token": "t"}}, "cluster.authorization.token"),
        ({"name": "c", "pool_size": 3}, "cluster.pool_size"),
    ],
)
def test_bad_values_name_their_path(cluster, path):
    with pytest.raises(ConfigError) as e:
        config_from_dict({"cluster": cluster})
    assert e.value.path == path, str(e.value)


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://h:6222", "unsupported scheme 'http'"),
        ("nats-route://h", "no port in URL"),
        ("nats-route://:6222", "no host in URL"),
        ("nats-route://u:secret@h:99999", "invalid URL"),
        ("nats-route://h:port", "invalid URL"),
    ],
)
def test_a_bad_route_url_says_what_is_wrong_without_its_password(url, says):
    with pytest.raises(ConfigError) as e:
        config_from_dict({"cluster": {"name": "c", "routes": ["nats-route://ok:6222", url]}})
    assert e.value.path == "cluster.routes[1]"
    assert says in str(e.value)
    assert "secret" not in str(e.value)
