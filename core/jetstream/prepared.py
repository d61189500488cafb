"""Streams made ready ahead of their create: the config file staged and the store opened.

A clustered server learns that a stream will be placed on it when the meta entry assigning it
reaches its log (hub/meta/group.py): the rest of a RAFT round (and, for a client of another
server, a hop or two) before that entry is committed and the create may happen. ``PreparedStreams.prepare``
uses that time: it writes the new stream's config file under a temporary name, fsynced (its pool
job queued first: it is tiny), and opens the stream's store (a spare moved into place and its
folder fsynced: core/store/spare.py). The create takes the preparation at once: it starts the
stream on the store, or on an ``OpeningStore`` (opening_store.py) while the open goes on (the
stream's first store calls wait for it), and is answered; the config file is renamed into place
(and its folder fsynced) behind the answer (engine.py ``_write_config_behind``).

Why answering before the config file is durable is safe: the create is the committed meta entry
that assigned the stream, durable on a quorum and in this server's own log before this server
applies it. After a crash before the file is in place, no stream is recovered from the folder
(recovery loads only ``stream.json``), and the meta group, once current, creates the stream
again from its assignment with the same config and creation time, on the store left in the
folder (messages and all). The reference's stream leader does the same: its stream's metadata
file is written without a sync (unless ``sync_always``), the meta layer is what is durable.
The store's name, by contrast, is durable before anything is stored in it (the open fsyncs the
folder before the store is handed over), so no acknowledged message is in a file a crash could
lose.

What a preparation may leave, and why that is safe:
- only a folder that did not exist is prepared, and nothing in it is ``stream.json``: recovery
  loads a stream only from ``stream.json``, so a preparation never brings back a stream that was
  not created (a crash before the create leaves an empty store and a temporary file that a
  later create of that name reuses or replaces);
- a preparation is used only by a create of the same config and creation time; any other create
  of that name closes it first (its store is then an existing, empty file, opened normally);
- one that is not used (its entry was never committed) is discarded by its owner (the hub's
  meta group, once it has applied past the entry): store closed, folder removed, unless a
  stream of that name exists here by then;
- an open that fails after the create took the preparation fails the stream's store calls
  (``OpeningStore``); the engine then holds the stream as damaged (engine.py ``_hold_unopened``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from core import trace
from core.errors import StoreError
from core.fsync import fsync_dir
from core.jetstream.models import StreamConfig
from core.jetstream.opening_store import OpeningStore
from core.server.failures import describe_failure
from core.store.pool import POOL
from core.threads import run_job

log = logging.getLogger("leafjet.jetstream")

CONFIG_FILE = "stream.json"


def stage_atomic(path: Path, text: str) -> Path:
    """``text`` written and fsynced under a temporary name beside ``path`` (its own: two
    writers never share one); ``commit_staged`` puts it in place. A temporary file a crash left
    behind is removed when the stream is recovered (engine.TMP_GLOB)."""
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def commit_staged(tmp: Path, path: Path) -> None:
    """The staged file renamed to ``path``, durably (its folder fsynced)."""
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclass
class Prepared:
    """One stream made ready for its create: its config file staged, its store opening."""

    config: dict[str, Any]
    created: int
    store: OpeningStore  # the store, once its open has ended (``store.ended``)
    staging_ended: anyio.Event = field(default_factory=anyio.Event)
    staged: Path | None = None  # the config file, written and fsynced under a temporary name
    # the create's commit_behind, waiting for the staging to end
    _commit: tuple[Path, str, Callable[[Exception | None], None]] | None = None

    async def staged_file(self) -> Path | None:
        """The staged config file once its staging has ended (None: it failed)."""
        await self.staging_ended.wait()
        return self.staged

    def commit_behind(self, path: Path, text: str, done: Callable[[Exception | None], None]) -> None:
        """Once the staging has ended, the config file put in place as ``path`` on a store pool
        thread: the staged file renamed (or, if the staging failed, ``text`` written whole),
        the folder fsynced; ``done(error or None)`` is then called on the event loop. No task:
        the create that calls this is answered without a task's start on its way."""
        if self.staging_ended.is_set():
            self._submit_commit(path, text, done)
        else:
            self._commit = (path, text, done)

    def _staging_done(self) -> None:
        self.staging_ended.set()
        if self._commit is not None:
            commit, self._commit = self._commit, None
            self._submit_commit(*commit)

    def _submit_commit(self, path: Path, text: str, done: Callable[[Exception | None], None]) -> None:
        loop = asyncio.get_running_loop()
        staged = self.staged

        def job() -> None:
            error: Exception | None = None
            try:
                commit_staged(staged if staged is not None else stage_atomic(path, text), path)
            except Exception as e:  # any failure still reaches done: config_written waits on it
                error = e
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(done, error)

        POOL.submit(job)


OpenStore = Callable[[StreamConfig, Path], Awaitable[Any]]


class PreparedStreams:
    """The preparations of one JetStream, by (account, stream name)."""

    def __init__(self, open_store: OpenStore) -> None:
        self._open_store = open_store
        self._by_key: dict[tuple[str, str], Prepared] = {}
        self.used = 0
        self.discarded = 0

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._by_key

    async def prepare(self, key: tuple[str, str], root: Path, cfg: StreamConfig, created: int) -> None:
        """Stage the config file of the stream ``cfg`` (to be created at ``created``) and open
        its store in ``root / name``; nothing when its folder exists already, or when the stream
        starts at ``first_seq`` (its store must hold that start before its config is written),
        or is a memory stream. Returns once both have ended. A failure only logs (the create
        does the work itself, or, when it has taken the preparation, holds the stream as
        damaged)."""
        d = root / cfg.name
        if key in self._by_key or cfg.storage == "memory" or cfg.first_seq > 0 or d.exists():
            return
        p = self._by_key[key] = Prepared(cfg.to_json(), created, OpeningStore(f"{key[0]}/{cfg.name}"))
        body = json.dumps({"config": p.config, "created": created})
        try:
            d.mkdir(parents=True)
        except OSError as e:
            log.info("stream %s: preparing it ahead of its create failed: %s", cfg.name, e)
            p._staging_done()
            p.store.fail(str(e))
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._stage, p, d, body)
            # the staging's pool job is queued before the open's: the tiny file is ready long
            # before the open, for the create's commit behind its answer
            await anyio.lowlevel.checkpoint()
            await self._open(p, cfg, d)

    async def _stage(self, p: Prepared, d: Path, body: str) -> None:
        try:
            p.staged = await run_job(POOL.submit, functools.partial(stage_atomic, d / CONFIG_FILE, body))
        except OSError as e:
            log.info("stream %s: staging its config file ahead of its create failed: %s", d.name, e)
        finally:
            p._staging_done()

    async def _open(self, p: Prepared, cfg: StreamConfig, d: Path) -> None:
        trace.point("prepare.open_store", cfg.name)
        try:
            store = await self._open_store(cfg, d)
        except (OSError, StoreError) as e:
            log.info("stream %s: opening its store ahead of its create failed: %s", cfg.name, e)
            p.store.fail(str(e))
            return
        except BaseException as e:  # cancelled (a shutdown): nothing waits for ever
            p.store.fail(describe_failure(e))
            raise
        trace.point("prepare.store_open", cfg.name)
        p.store.settle(store)

    async def take(self, key: tuple[str, str], cfg: StreamConfig, created: int) -> Prepared | None:
        """The preparation of this very create (same config, same creation time), at once: its
        store may still be opening (``Prepared.store``), its config file still being staged
        (``staged_file``). None when there is none, or its open failed already. One of another
        create is closed first, so the create opens the store itself."""
        p = self._by_key.pop(key, None)
        if p is None:
            return None
        if p.store.error is None and p.config == cfg.to_json() and p.created == created:
            self.used += 1
            return p
        await self._release(p)
        return None

    async def discard(self, key: tuple[str, str], root: Path, live: bool) -> None:
        """Drop the preparation of ``key`` if it is still unused: its store closed, its folder
        removed (``live``: a stream of that name runs here now, its folder is kept)."""
        p = self._by_key.pop(key, None)
        if p is None:
            return
        await self._release(p)
        self.discarded += 1
        d = root / key[1]
        if not live and not (d / CONFIG_FILE).exists():
            await anyio.to_thread.run_sync(_remove_folder, d)

    async def close_all(self) -> None:
        """At shutdown: every preparation's store closed (its files stay: no config file among
        them, so a restart ignores them and a later create of that name reuses them)."""
        while self._by_key:
            p = self._by_key.pop(next(iter(self._by_key)))
            await self._release(p)

    async def _release(self, p: Prepared) -> None:
        """An unused preparation's staged file removed and its store closed (once its open
        has ended)."""
        await p.staging_ended.wait()
        if p.staged is not None:
            p.staged.unlink(missing_ok=True)
        await p.store.wait_ended()  # bounded: SqliteStore.open has a timeout of its own
        store = p.store.store
        if store is not None:
            await _close_quietly(store)


async def _close_quietly(store: Any) -> None:
    try:
        with anyio.move_on_after(10):
            await store.close()
    except StoreError as e:
        log.error("closing a prepared stream store failed: %s", e)


def _remove_folder(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
