"""Streams made ready ahead of their create: the store opened and the config file staged.

A clustered server learns that a stream will be placed on it when the meta entry assigning it
is durable in its own log: the rest of a RAFT round (and, for a client of another server, a hop
or two) before that entry is committed and the create may happen. ``PreparedStreams.prepare``
uses that time: it opens the new stream's store (a spare moved into place: core/store/spare.py)
and writes its config file under a temporary name, fsynced. The create then finds both ready and
only has to rename the config file into place (and fsync the folder).

What a preparation may leave, and why that is safe:
- only a folder that did not exist is prepared, and nothing in it is ``stream.json``: recovery
  loads a stream only from ``stream.json``, so a preparation never brings back a stream that was
  not created (a crash before the create leaves an empty store and a temporary file that a
  later create of that name reuses or replaces);
- the store file is whole (fsynced) when its preparation is done, but the folder holding its
  name is not fsynced then: the create's ``commit_staged`` fsyncs that folder once, for the
  config file and the store alike, before the stream exists (one directory fsync per create
  fewer). A crash before it may lose the store's name in a folder without ``stream.json``,
  which nothing loads (a later create builds or takes a store again);
- a preparation is used only by a create of the same config and creation time; any other create
  of that name closes it first (its store is then an existing, empty file, opened normally);
- one that is not used (its entry was never committed) is discarded by its owner (the hub's
  meta group, once it has applied past the entry): store closed, folder removed, unless a
  stream of that name exists here by then.
"""

from __future__ import annotations

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
class _Prepared:
    config: dict[str, Any]
    created: int
    done: anyio.Event = field(default_factory=anyio.Event)
    store: Any = None  # the open store once done (None: the preparation failed)
    staged: Path | None = None  # the config file, written and fsynced under a temporary name


OpenStore = Callable[[StreamConfig, Path], Awaitable[Any]]


class PreparedStreams:
    """The preparations of one JetStream, by (account, stream name)."""

    def __init__(self, open_store: OpenStore) -> None:
        self._open_store = open_store
        self._by_key: dict[tuple[str, str], _Prepared] = {}
        self.used = 0
        self.discarded = 0

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._by_key

    async def prepare(self, key: tuple[str, str], root: Path, cfg: StreamConfig, created: int) -> None:
        """Open the store of the stream ``cfg`` (to be created at ``created``) in ``root / name``
        and stage its config file; nothing when its folder exists already, or when the stream
        starts at ``first_seq`` (its store must hold that start before its config is written),
        or is a memory stream. A failure only logs (the create does the work itself)."""
        d = root / cfg.name
        if key in self._by_key or cfg.storage == "memory" or cfg.first_seq > 0 or d.exists():
            return
        p = self._by_key[key] = _Prepared(cfg.to_json(), created)
        body = json.dumps({"config": p.config, "created": created})
        try:
            d.mkdir(parents=True)
            async with anyio.create_task_group() as tg:

                async def stage() -> None:
                    staging = functools.partial(stage_atomic, d / CONFIG_FILE, body)
                    p.staged = await run_job(POOL.submit, staging)

                tg.start_soon(stage)
                trace.point("prepare.open_store", cfg.name)
                p.store = await self._open_store(cfg, d)
                trace.point("prepare.store_open", cfg.name)
        except (OSError, StoreError) as e:
            log.info("stream %s: preparing it ahead of its create failed: %s", cfg.name, e)
        finally:
            p.done.set()

    async def take(self, key: tuple[str, str], cfg: StreamConfig, created: int) -> _Prepared | None:
        """The preparation of this very create (same config, same creation time), waited for if
        it is still running; None when there is none. One of another create is closed first, so
        the create opens the store itself."""
        p = self._by_key.pop(key, None)
        if p is None:
            return None
        await p.done.wait()
        if (
            p.store is not None
            and p.staged is not None
            and p.config == cfg.to_json()
            and p.created == created
        ):
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
        await p.done.wait()
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
            await p.done.wait()
            await self._release(p)

    async def _release(self, p: _Prepared) -> None:
        if p.staged is not None:
            p.staged.unlink(missing_ok=True)
        if p.store is not None:
            try:
                with anyio.move_on_after(10):
                    await p.store.close()
            except StoreError as e:
                log.error("closing a prepared stream store failed: %s", e)


def _remove_folder(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
