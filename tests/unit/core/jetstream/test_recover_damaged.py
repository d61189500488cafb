"""A stream whose start fails part way through recovery (here a bug in its load) is held as
damaged, and nothing of it keeps running: no task, no open store holding its file. The others
start. Real SQLite stores in a temporary folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from core.config import JetStreamConfig, ServerConfig
from core.jetstream import damaged as damaged_mod
from core.jetstream.engine import JetStream
from core.jetstream.models import StreamConfig
from core.jetstream.stream import Stream
from core.server.health import Health, HealthOptions
from core.server.server import Server
from core.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _jetstream(tmp_path: Path) -> JetStream:
    server = Server(ServerConfig(port=0, http_port=0))
    return JetStream(server, JetStreamConfig(store_dir=str(tmp_path)), tmp_path)


async def test_a_stream_whose_start_fails_is_held_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    js = _jetstream(tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        ajs = js.accounts["$G"]
        for name in ("S", "T"):
            await js.create_stream(ajs, StreamConfig.from_json({"name": name, "subjects": [f"{name}.>"]}))
        tg.cancel_scope.cancel()

    real_load = Stream.load

    async def load(self: Stream, **kw: Any) -> list[tuple[str, bytes]]:
        if self.name == "S":
            raise RuntimeError("a bug in the load")
        return await real_load(self, **kw)

    monkeypatch.setattr(Stream, "load", load)
    js = _jetstream(tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        try:
            ajs = js.accounts["$G"]
            assert set(ajs.streams) == {"T"}
            held = ajs.damaged["S"]
            assert held.folder == ajs.root / "S" and held.config is not None
            assert "RuntimeError: a bug in the load (at test_recover_damaged.py" in held.reason
            assert ("$G", "S") not in js._stream_scopes
            # its store was closed: the file can be opened again in this process
            store = await SqliteStore.open(ajs.root / "S" / "msgs.db")
            await store.close()
            health = await _health(js)
            assert [(p.type, p.stream) for p in health.problems] == [("STREAM", "S")], health
            assert health.problems[0].error.startswith("JetStream stream '$G > S' could not be recovered")
            aside = await js.delete_damaged(ajs, held)
            assert aside.name.startswith("S.damaged-") and (aside / "msgs.db").is_file()
            assert "S" not in ajs.damaged
            assert (await _health(js)).problems == []
        finally:
            tg.cancel_scope.cancel()


def test_moving_aside_twice_in_a_second_keeps_both(tmp_path: Path) -> None:
    now = 1_800_000_000 * 10**9
    first = tmp_path / "S"
    first.mkdir()
    a = damaged_mod.move_aside(first, now)
    first.mkdir()
    b = damaged_mod.move_aside(first, now)
    assert a != b and a.is_dir() and b.is_dir() and not first.exists()
    assert all(damaged_mod.is_set_aside(p.name) for p in (a, b))
    assert not damaged_mod.is_set_aside("S")


async def _health(js: JetStream) -> Health:
    """What /healthz?details=true finds in the streams."""
    health = Health()
    monitor = js.server.jetstream_monitor
    assert monitor is not None
    await monitor.health(HealthOptions(details=True), health)
    return health
