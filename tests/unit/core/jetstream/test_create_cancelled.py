"""A stream create cancelled while its store is built (stream.json is written meanwhile) leaves
neither its config file, which a restart would recover as a stream never announced, nor an open
store, which would hold its file against the same create later."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from core.config import JetStreamConfig, ServerConfig
from core.jetstream import engine
from core.jetstream.engine import JetStream
from core.jetstream.models import StreamConfig
from core.server.server import Server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _cfg() -> StreamConfig:
    return StreamConfig.from_json({"name": "S", "subjects": ["s.>"]})


async def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_opens: bool) -> None:
    server = Server(ServerConfig(port=0, http_port=0))
    js = JetStream(server, JetStreamConfig(store_dir=str(tmp_path)), tmp_path)
    real_open, real_write = js._open_store, engine._write_atomic_noting
    written, opened = anyio.Event(), anyio.Event()
    outer = anyio.CancelScope()

    async def write(*args: Any) -> None:
        if store_opens:
            await opened.wait()
            outer.cancel()  # the store is open, its config file not yet written
        await real_write(*args)
        written.set()

    async def open_store(cfg: StreamConfig, d: Path) -> Any:
        if store_opens:
            store = await real_open(cfg, d)
            opened.set()
            return store
        await written.wait()
        outer.cancel()  # the config file is written, the store still being built
        await anyio.sleep_forever()

    monkeypatch.setattr(engine, "_write_atomic_noting", write)
    monkeypatch.setattr(js, "_open_store", open_store)
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        try:
            ajs = js.accounts["$G"]
            with outer:
                await js.create_stream(ajs, _cfg())
            assert outer.cancelled_caught
            assert not (ajs.root / "S" / "stream.json").exists()
            assert "S" not in ajs.streams
            monkeypatch.setattr(js, "_open_store", real_open)
            monkeypatch.setattr(engine, "_write_atomic_noting", real_write)
            # the same create works: no store of the cancelled one holds the file
            stream = await js.create_stream(ajs, _cfg())
            assert (ajs.root / "S" / "stream.json").exists()
            assert ajs.streams["S"] is stream
        finally:
            tg.cancel_scope.cancel()


async def test_a_create_cancelled_while_its_store_opens_leaves_no_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _run(tmp_path, monkeypatch, store_opens=False)


async def test_a_create_cancelled_after_its_store_opened_closes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _run(tmp_path, monkeypatch, store_opens=True)


async def test_a_create_whose_sources_fail_to_start_leaves_no_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is registered in its account before its sourcing starts: a failure there must
    take it out again (its entry, its subscription), not leave a stream on a closed store."""
    server = Server(ServerConfig(port=0, http_port=0))
    js = JetStream(server, JetStreamConfig(store_dir=str(tmp_path)), tmp_path)

    async def failing_sourcing(*_args: Any) -> None:
        raise OSError("sourcing could not start")

    monkeypatch.setattr(js, "_start_sourcing", failing_sourcing)
    cfg = StreamConfig.from_json({"name": "S", "subjects": ["s.>"], "sources": [{"name": "UP"}]})
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        try:
            ajs = js.accounts["$G"]
            subs_before = len(ajs.account.sublist)
            with pytest.raises(Exception, match="sourcing could not start"):
                await js.create_stream(ajs, cfg)
            assert "S" not in ajs.streams
            assert not (ajs.root / "S").exists()
            assert len(ajs.account.sublist) == subs_before, "its subject subscription stays"
        finally:
            tg.cancel_scope.cancel()
