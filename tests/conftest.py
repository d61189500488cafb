from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import RunningServer, start_server

# LEAFJET_TEST_SERVERS=reference (or leafjet) runs the differential tests against one kind only.
SERVER_KINDS = os.environ.get("LEAFJET_TEST_SERVERS", "leafjet,reference").split(",")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # nats-py is an asyncio client


@pytest.fixture(params=SERVER_KINDS)
def server_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_server(server_kind: str, tmp_path: Path) -> Iterator[Any]:
    """A factory: ``make_server(config_dict)`` starts the parametrized server kind with that config."""
    started: list[RunningServer] = []

    def factory(config: dict[str, Any] | None = None, **kw: Any) -> RunningServer:
        srv = start_server(server_kind, tmp_path / f"{server_kind}-{len(started)}", config, **kw)
        started.append(srv)
        return srv

    yield factory
    for srv in started:
        srv.stop()


@pytest.fixture
def server(make_server: Any) -> RunningServer:
    """The parametrized server kind with the default (open) configuration."""
    return make_server()
