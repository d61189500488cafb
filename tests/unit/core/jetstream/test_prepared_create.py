"""A stream made ready ahead of its create (core/jetstream/prepared.py): the create uses the open
store and the staged config file; a preparation of another incarnation is not used; an unused
one is discarded and leaves nothing; one a restart finds (no config file) is ignored and a later
create of that name works. Real files, real SQLite stores, an in-process JetStream."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from core.api_errors import ApiError
from core.config import JetStreamConfig, ServerConfig
from core.errors import StoreError
from core.jetstream.engine import AccountJetStream, JetStream
from core.jetstream.models import StreamConfig
from core.jetstream.opening_store import OpeningStore
from core.server.server import Server
from core.store.api import Append
from core.store.sqlite import SqliteStore

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


def _saved(ajs: AccountJetStream) -> dict[str, Any]:
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
        await js.config_written(ajs, "S")  # put in place behind the answer
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
        await js.config_written(ajs, "S")
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


async def test_the_store_name_is_durable_before_the_store_is_used_and_the_config_after_the_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's name (moved in by the preparation) is made durable by the open, before the
    store is handed to anyone; the config file's (the create's, behind its answer) by its own
    folder fsync."""
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
        # the open's fsync of the folder holds the store's name (the staged config file may
        # or may not be there yet: its pool job runs beside the open's)
        [at_open] = [names for path, names in synced if path == folder]
        assert "msgs.db" in at_open and "stream.json" not in at_open
        await js.create_stream(ajs, _cfg(), created=1234)
        await js.config_written(ajs, "S")
        assert js.prepared.used == 1
        at_create = [names for path, names in synced if path == folder][1:]
        assert len(at_create) == 1
        assert {"msgs.db", "stream.json"} <= at_create[0]


# ---------------------------------------------------------------------------------------------
# A create answered while its store is still opening (core/jetstream/opening_store.py)


def _held_open(js: JetStream) -> tuple[anyio.Event, anyio.Event]:
    """The preparation's store open held until the returned ``release`` is set (``started`` is
    set once the open has begun): the open is SQLite's, only later."""
    started, release = anyio.Event(), anyio.Event()
    real = js.prepared._open_store

    async def held(cfg: StreamConfig, d: Path) -> object:
        started.set()
        await release.wait()
        return await real(cfg, d)

    js.prepared._open_store = held
    return started, release


async def test_a_new_store_is_empty_as_the_opening_store_says(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "msgs.db")
    try:
        opening = OpeningStore("$G/S")
        for with_deleted in (False, True):
            assert await opening.state(with_deleted) == await store.state(with_deleted)
    finally:
        await store.close()


async def test_a_create_is_answered_before_its_store_is_open_and_a_publish_waits_for_it(
    tmp_path: Path,
) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        started, release = _held_open(js)
        async with anyio.create_task_group() as tg:
            tg.start_soon(js.prepare_stream, ajs, _cfg(), 21)
            with anyio.fail_after(30):
                await started.wait()
                stream = await js.create_stream(ajs, _cfg(), created=21)  # the open is held
            assert js.prepared.used == 1
            assert isinstance(stream.store, OpeningStore) and not stream.store.ended
            await js.config_written(ajs, "S")
            assert _saved(ajs)["created"] == 21
            assert (await stream.state()).msgs == 0  # answered without the store
            stored: list[Any] = []

            async def publish() -> None:
                stored.append(await stream.store.apply([Append("s.1", None, b"first", 1)]))

            tg.start_soon(publish)
            await anyio.sleep(0.05)
            assert stored == []  # waits for the open
            release.set()
            with anyio.fail_after(30):
                while not stored:
                    await anyio.sleep(0.01)
        assert stored[0] == [1]  # its sequence
        assert (await stream.store.state()).msgs == 1
    async with _jetstream(tmp_path) as (js, ajs):
        assert (await ajs.streams["S"].store.state()).msgs == 1


async def test_a_store_that_fails_to_open_after_the_create_holds_the_stream_as_damaged(
    tmp_path: Path,
) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        started = anyio.Event()

        async def failing(cfg: StreamConfig, d: Path) -> object:
            started.set()
            await anyio.sleep(0.1)  # after the create has taken the preparation
            raise StoreError(f"{d / 'msgs.db'}: disk on fire")

        js.prepared._open_store = failing
        async with anyio.create_task_group() as tg:
            tg.start_soon(js.prepare_stream, ajs, _cfg(), 31)
            with anyio.fail_after(30):
                await started.wait()
                stream = await js.create_stream(ajs, _cfg(), created=31)
                with pytest.raises(StoreError, match=r"could not be opened: .*disk on fire"):
                    await stream.store.apply([Append("s.1", None, b"lost", 1)])
                while "S" not in ajs.damaged:
                    await anyio.sleep(0.01)
        assert "S" not in ajs.streams
        assert "disk on fire" in ajs.damaged["S"].offline_reason
        with pytest.raises(ApiError) as refused:  # the name stays taken, and says why
            await js.create_stream(ajs, _cfg(), created=32)
        assert "disk on fire" in str(refused.value.to_json())


async def test_a_stream_deleted_while_its_store_opens_leaves_nothing(tmp_path: Path) -> None:
    async with _jetstream(tmp_path) as (js, ajs):
        started, release = _held_open(js)
        async with anyio.create_task_group() as tg:
            tg.start_soon(js.prepare_stream, ajs, _cfg(), 51)
            with anyio.fail_after(30):
                await started.wait()
                stream = await js.create_stream(ajs, _cfg(), created=51)
            tg.start_soon(js.delete_stream, ajs, stream)
            await anyio.sleep(0.05)
            release.set()
        assert "S" not in ajs.streams and "S" not in ajs.damaged
        assert not (ajs.root / "S").exists()
        await js.create_stream(ajs, _cfg(), created=52)  # the name is free, its file closed


async def test_a_config_file_that_cannot_be_put_in_place_is_logged_and_the_stream_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind the answer, a failed rename of the config file is logged; the stream goes on (the
    meta group's assignment is its durable record: a restart creates it again)."""
    from core.jetstream import prepared as prepared_module

    def failing(tmp: Path, path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepared_module, "commit_staged", failing)
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 61)
        stream = await js.create_stream(ajs, _cfg(), created=61)
        await js.config_written(ajs, "S")
        assert "its config file could not be written (" in caplog.text and "No space left" in caplog.text
        assert ajs.streams["S"] is stream
        assert await stream.store.apply([Append("s.1", None, b"x", 1)]) == [1]


async def test_a_config_commit_that_fails_otherwise_still_ends_the_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit behind the answer that fails with other than an OSError (a bug) is logged too,
    and the wait for the file (an update's, a delete's) ends: it does not wait for ever."""
    from core.jetstream import prepared as prepared_module

    def failing(tmp: Path, path: Path) -> None:
        raise RuntimeError("a bug in the commit")

    monkeypatch.setattr(prepared_module, "commit_staged", failing)
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 62)
        await js.create_stream(ajs, _cfg(), created=62)
        with anyio.fail_after(5):
            await js.config_written(ajs, "S")
        assert "its config file could not be written (a bug in the commit)" in caplog.text


def _held_staging(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The preparation's config file staging (a pool job) held until the event is set."""
    from core.jetstream import prepared as prepared_module

    release = threading.Event()
    real = prepared_module.stage_atomic

    def held(path: Path, text: str) -> Path:
        release.wait(30)
        return real(path, text)

    monkeypatch.setattr(prepared_module, "stage_atomic", held)
    return release


async def test_a_create_is_answered_before_its_config_file_and_an_update_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committed meta entry is the create's durable record: the config file follows the
    answer, and an update of the stream never has its file overwritten by the create's."""
    release = _held_staging(monkeypatch)
    try:
        async with _jetstream(tmp_path) as (js, ajs):
            async with anyio.create_task_group() as tg:
                tg.start_soon(js.prepare_stream, ajs, _cfg(), 71)
                await anyio.sleep(0.05)
                with anyio.fail_after(30):
                    stream = await js.create_stream(ajs, _cfg(), created=71)
                assert not (ajs.root / "S" / "stream.json").exists()
                updated = anyio.Event()

                async def update() -> None:
                    await js.update_stream(ajs, stream, _cfg(["s.>", "t.>"]))
                    updated.set()

                tg.start_soon(update)
                await anyio.sleep(0.05)
                assert not updated.is_set()  # waits for the create's file
                release.set()
                with anyio.fail_after(30):
                    await updated.wait()
            assert _saved(ajs)["config"]["subjects"] == ["s.>", "t.>"]
            assert _temporaries(ajs) == []
    finally:
        release.set()


async def test_an_update_waits_for_the_create_s_config_file_only_so_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config file that is not put in place (a hung disk) fails an update waiting for it with
    an API error after CONFIG_WRITE_WAIT; once the file is in place, the update works."""
    from core.jetstream import engine as engine_module

    monkeypatch.setattr(engine_module, "CONFIG_WRITE_WAIT", 0.2)
    release = _held_staging(monkeypatch)
    try:
        async with _jetstream(tmp_path) as (js, ajs):
            async with anyio.create_task_group() as tg:
                tg.start_soon(js.prepare_stream, ajs, _cfg(), 72)
                await anyio.sleep(0.05)
                with anyio.fail_after(30):
                    stream = await js.create_stream(ajs, _cfg(), created=72)
                with (
                    anyio.fail_after(10),
                    pytest.raises(ApiError, match="config file is still being written"),
                ):
                    await js.update_stream(ajs, stream, _cfg(["s.>", "t.>"]))
                release.set()
                with anyio.fail_after(30):
                    await js.config_written(ajs, "S")
                    await js.update_stream(ajs, stream, _cfg(["s.>", "t.>"]))
            assert _saved(ajs)["config"]["subjects"] == ["s.>", "t.>"]
    finally:
        release.set()


async def test_a_stream_whose_config_file_a_crash_lost_is_created_again_on_its_store(
    tmp_path: Path,
) -> None:
    """A crash after the answer, before the config file was in place: no stream is recovered
    from the folder, and the create the meta group makes again from the assignment (same
    config, same creation time) opens the store left there, messages and all."""
    async with _jetstream(tmp_path) as (js, ajs):
        await js.prepare_stream(ajs, _cfg(), 81)
        stream = await js.create_stream(ajs, _cfg(), created=81)
        await stream.store.apply([Append("s.1", None, b"acknowledged", 1)])
        await js.config_written(ajs, "S")
    (tmp_path / "jetstream" / "$G" / "streams" / "S" / "stream.json").unlink()  # as if never written
    async with _jetstream(tmp_path) as (js, ajs):
        assert "S" not in ajs.streams
        stream = await js.create_stream(ajs, _cfg(), created=81)
        assert (await stream.store.state()).msgs == 1
        assert _saved(ajs)["created"] == 81
