"""Gossip is a peer's bytes: each URL it lists becomes a task dialling it until it joins, so the
URLs learned by gossip are bounded in total (``MAX_GOSSIPED``), not only per INFO."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from core.config import ClusterConfig, ServerConfig
from core.server.server import Server
from hub.routes import manager
from hub.routes.manager import Routes


def _gossip(first_port: int, n: int) -> dict[str, object]:
    peers = [
        {"id": f"NPEER{first_port + k}", "url": f"nats-route://127.0.0.1:{first_port + k}"} for k in range(n)
    ]
    return {"leafjet_peers": peers}


def test_urls_learned_by_gossip_are_bounded_in_total(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(manager, "MAX_GOSSIPED", 8)
    server = Server(
        ServerConfig(
            port=0, http_port=0, cluster=ClusterConfig(name="C", port=0, routes=("nats-route://127.0.0.1:1",))
        )
    )
    routes = Routes(server)  # not running: its diallers wait for the task group, nothing is dialled
    peer = SimpleNamespace(name="rid:1 - fake")
    with caplog.at_level(logging.WARNING, logger="leafjet.route"):
        for first in range(10000, 10050, 5):  # ten INFOs of five new URLs each
            routes.learn(peer, _gossip(first, 5))  # type: ignore[arg-type]
    learned = [d for d in routes.diallers.values() if not d.configured]
    assert len(learned) == 8 and any(d.configured for d in routes.diallers.values())
    assert routes.gossip_refused == 42
    assert "not dialling" in caplog.text and caplog.text.count("not dialling") <= 6  # powers of two
