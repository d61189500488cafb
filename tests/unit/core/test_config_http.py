"""The monitoring port's config: the reference's http_port and http (host:port); off by default."""

from __future__ import annotations

import pytest

from core.config import config_from_dict
from core.errors import ConfigError


def test_monitoring_is_off_unless_a_port_is_given():
    cfg = config_from_dict({})
    assert cfg.http_port is None


def test_http_port_and_http_host_port():
    assert config_from_dict({"http_port": 8222}).http_port == 8222
    cfg = config_from_dict({"http": "127.0.0.1:8223"})
    assert (cfg.http_host, cfg.http_port) == ("127.0.0.1", 8223)
    cfg = config_from_dict({"http": "[::1]:8224"})
    assert (cfg.http_host, cfg.http_port) == ("::1", 8224)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"http_port": 70000}, "http_port"),
        ({"http_port": "8222"}, "http_port"),
        ({"http": "8222"}, "http"),
        ({"http": "host:port"}, "http"),
        ({"http": "h:1", "http_port": 2}, "http"),
    ],
)
def test_a_bad_monitoring_address_names_its_key(data, path):
    with pytest.raises(ConfigError) as e:
        config_from_dict(data)
    assert str(e.value).startswith(path)
