"""A stream made ready ahead of its create (core/jetstream/prepared.py): the create uses the open
store and the staged config file; a preparation of another incarnation is not used; an unused
one is discarded and leaves nothing; one a restart finds (no config file) is ignored and a later
create of that name works. Real files, real SQLite stores, an in-process JetStream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from core.config import JetStreamConfig, ServerConfig
from core.jetstream.engine import AccountJetStream, JetStream
from core.jetstream.models import StreamConfig
from core.server.server import Server
from core.store.api import Append

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _cfg(subjects: list[str] | None = None) -> StreamConfig:
    return StreamConfig.from_json({"name": "S", "subjects": subjects or ["s.>"]})


@asynccontextmanager
async def _jetstream(tmp_path: Path) -> AsyncIterator[tuple[JetStream, AccountJetStream]]:
    server = Server(ServerConfig(port=0, http_port=0))
    js = JetStream(server, JetStreamConfig(store_dir=str(tmp_path)), tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        try:
            yield js, js.accounts["$G"]
        finally:
            tg.cancel_scope.cancel()


def _saved(ajs: AccountJetStream) -> dict[str, object]:
    body = json.loads((ajs.root / "S" / "stream.json").read_text())
    assert isinstance(body, dict)
    return body


def _temporaries(ajs: AccountJetStream) -> list[str]:
    return [p.name for p in (ajs.root / "S").iterdir() if p.name.endswith(".tmp")]


async def test_a_prepared_create_uses_the_open_store_and_survives_a_restart(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 1234)
        folder = ajs.root / "S"
        assert (folder / "msgs.db").exists()
        assert not (folder / "stream.json").exists()  # a restart now would find no stream
        assert len(_temporaries(ajs)) == 1  # the config file, staged
        stream = await js.create_stream(ajs, _cfg(), created=1234)
        assert js.prepared.used == 1
        assert _saved(ajs)["created"] == 1234
        assert _temporaries(ajs) == []
        await stream.store.apply([Append("s.1", None, b"kept", 1)])
    async with _jetstream(tmp_path) as (js, ajs):
        assert ajs.streams["S"].created_ns == 1234
        assert (await ajs.streams["S"].store.state()).msgs == 1


async def test_a_preparation_of_another_incarnation_is_not_used(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 1)
        await js.create_stream(ajs, _cfg(), created=2)  # the name assigned again meanwhile
        assert js.prepared.used == 0
        assert _saved(ajs)["created"] == 2
        assert _temporaries(ajs) == []
        await js.prepare_stream(ajs, _cfg(["t.>"]), 3)  # the stream exists: nothing to prepare
        assert ("$G", "S") not in js.prepared


async def test_a_preparation_of_another_config_is_not_used(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(["a.>"]), 5)
        stream = await js.create_stream(ajs, _cfg(["b.>"]), created=5)
        assert js.prepared.used == 0
        assert list(stream.config.subjects) == ["b.>"]


async def test_an_unused_preparation_is_discarded_and_leaves_nothing(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 7)
        await js.discard_prepared(ajs, "S")
        assert not (ajs.root / "S").exists()
        assert js.prepared.discarded == 1
        # the name is free for a create (no store of the preparation holds its file)
        await js.create_stream(ajs, _cfg(), created=8)
        assert _saved(ajs)["created"] == 8


async def test_discarding_after_the_create_used_it_keeps_the_stream(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 9)
        await js.create_stream(ajs, _cfg(), created=9)
        await js.discard_prepared(ajs, "S")
        assert (ajs.root / "S" / "stream.json").exists()
        assert "S" in ajs.streams


async def test_a_restart_ignores_a_preparation_and_a_create_of_that_name_works(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 11)  # its entry never committed: the server stops
    async with _jetstream(tmp_path) as (js, ajs):
        assert "S" not in ajs.streams  # no config file: no stream
        await js.create_stream(ajs, _cfg(), created=12)
        assert _saved(ajs)["created"] == 12
    async with _jetstream(tmp_path) as (js, ajs):
        assert ajs.streams["S"].created_ns == 12
        assert _temporaries(ajs) == []  # the staged file of the old preparation is gone


async def test_a_prepared_create_fsyncs_its_folder_once_with_both_names_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's name (moved in by the preparation) and the config file's (the create) are
    made durable by one folder fsync, at the create, before the stream exists."""
    from core.jetstream import prepared as prepared_module
    from core.store import spare as spare_module

    real = spare_module.fsync_dir
    synced: list[tuple[Path, set[str]]] = []

    def recording(path: Path) -> None:
        synced.append((Path(path), {p.name for p in Path(path).iterdir()}))
        real(path)

    monkeypatch.setattr(prepared_module, "fsync_dir", recording)
    monkeypatch.setattr(spare_module, "fsync_dir", recording)
    async with _jetstream(tmp_path) as (js, ajs):
        folder = ajs.root / "S"
        await js.prepare_stream(ajs, _cfg(), 1234)
        assert [names for path, names in synced if path == folder] == []
        await js.create_stream(ajs, _cfg(), created=1234)
        assert js.prepared.used == 1
        at_create = [names for path, names in synced if path == folder]
        assert len(at_create) == 1
        assert {"msgs.db", "stream.json"} <= at_create[0]
