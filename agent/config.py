"""The agent's configuration: the server's fields plus the bridges it runs in-process."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bridges.mqtt.config import MqttBridgeConfig, bridges_from_dict
from core.config import ServerConfig, config_from_dict, read_toml


@dataclass(frozen=True, slots=True)
class AgentConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
    mqtt: tuple[MqttBridgeConfig, ...] = ()


def load_agent_config(path: str | Path) -> AgentConfig:
    """One TOML file: the reference's server fields, and ``[[bridges.mqtt]]`` tables."""
    data = read_toml(path)
    base = Path(path).parent
    server = config_from_dict({k: v for k, v in data.items() if k != "bridges"}, base_dir=base)
    return AgentConfig(server=server, mqtt=bridges_from_dict(data, base_dir=base))
