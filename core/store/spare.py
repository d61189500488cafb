"""Empty stream databases built ahead of need: a new stream's store is a rename, not a build.

Building a new SQLite store file (connect, lay out the schema, switch to WAL, fsync, rename,
fsync the folder) costs about 2 ms of CPU and two fsyncs, the largest single step of a stream
create. ``SpareStores`` keeps one finished, fsynced empty file per page size in a folder of the
JetStream store; a create *takes* it (one rename and one folder fsync, on the store's pool
thread that opens the store anyway) and a pool job builds the next one after the create.

Why this is safe:
- a spare is a whole file: it is built under a temporary name, fsynced, then renamed, so a
  spare that exists is finished; ``take`` moves it into the stream's folder and fsyncs that
  folder before the open goes on, as a build in place would;
- a spare is never trusted across a restart: ``SpareStores`` deletes every file of its own
  names when made (a crash between a take's rename and its folder fsync must not leave one
  file at two names), and builds afresh;
- a spare is made for one cipher and its key (the server's); a store opened with another
  cipher object, or another page size, builds its own file;
- without a cipher every empty store is the same bytes, so after the first build (through
  SQLite) a spare is a copy of those bytes, written under a temporary name, fsynced and renamed
  as a build is (~0.3 ms of CPU instead of ~1.5 ms on a create's server); an encrypted store
  has a salt and key check of its own, so each is built.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from core.errors import StoreError
from core.fsync import fsync_dir
from core.lograte import worth_logging
from core.store import schema
from core.store.crypto import CipherSpec, make_key_check

log = logging.getLogger("leafjet.store")

COMPANIONS = ("-wal", "-shm")  # SQLite's files beside a WAL database, named after it
PREFIX = ".spare-store-"
"""A spare's file name: ``.spare-store-<page size>.db``. It starts with a dot: no stream or
account folder of JetStream's store has such a name; only files with it are ever deleted."""


def build_store_file(
    path: Path, page_size: int, spec: CipherSpec | None, *, sync_folder: bool = True
) -> None:
    """Create the empty store file ``path`` atomically: built under a temporary name, fsynced,
    renamed, its folder fsynced; so an existing file is always a finished store (an empty or
    short one is corruption, never "new"). ``sync_folder=False``: the caller fsyncs the folder
    later, before anything depends on the name (a spare's name never survives a restart)."""
    tmp = path.with_name(f".{path.name}.creating")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
        p.unlink(missing_ok=True)
    info: dict[str, bytes] = {"cipher": b"none"}
    if spec is not None:
        params = spec.new_params()
        cipher = spec.derive(params)
        info = {
            "cipher": spec.algorithm.encode(),
            "kdf": params.encode(),
            "salt": params.salt,
            "keycheck": make_key_check(cipher),
        }
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        # The file is nobody's until the rename below, and the fsync before it makes it whole: so
        # it is built without a journal and without syncs (a WAL commit here cost ~30 ms of a
        # ~40 ms stream create), and switched to WAL (kept in the file's header) at the end.
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute(f"PRAGMA page_size = {page_size}")  # before the first table
        conn.execute("BEGIN IMMEDIATE")
        schema.create(conn, info)
        conn.execute("COMMIT")
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise StoreError(f"{tmp}: SQLite refused the WAL journal mode")
    finally:
        conn.close()
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _drop_stale_wal(path)
    os.replace(tmp, path)
    if sync_folder:
        fsync_dir(path.parent)


def write_store_copy(path: Path, image: bytes) -> None:
    """Create the spare store file ``path`` as a copy of ``image`` (an empty store's bytes), as
    atomically as ``build_store_file``: temporary name, fsync, rename. Its folder is not fsynced:
    a spare's name never survives a restart (``SpareStores._clear``); the folder a take moves it
    to is."""
    tmp = path.with_name(f".{path.name}.creating")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    _drop_stale_wal(path)
    os.replace(tmp, path)


def _empty_store_image(path: Path, page_size: int) -> bytes | None:
    """The bytes of the empty store just built at ``path``, to copy for the next spares; None
    when they are not what a closed, empty WAL store of ``page_size`` is (then each is built)."""
    if Path(f"{path}-wal").exists():
        return None  # not all in the main file
    image = path.read_bytes()
    if not image.startswith(schema.SQLITE_MAGIC) or len(image) % page_size or len(image) > 64 * page_size:
        return None
    return image


def _make_companions(path: Path) -> None:
    """The empty ``-wal`` and ``-shm`` files SQLite creates at a WAL store's first open, made
    ahead beside the spare and moved into place with it (``take``): one file create took 0.15-1 ms
    of kernel CPU in some folders of this project's test machine (ext4), and a create's store
    open made two of them on the create's path; a rename takes ~20 us. Empty, they are what SQLite
    itself starts from: a WAL of no frames, a shared-memory index it initialises (it holds the
    first connection's lock). Optional: one that is missing is created by SQLite as before."""
    for suffix in COMPANIONS:
        fd = os.open(f"{path}{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)


def _drop_stale_wal(path: Path) -> None:
    """A -wal/-shm left behind by a database that is gone must not be replayed onto a new one."""
    for stale in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)


class SpareStores:
    """One spare empty store file per page size, in ``folder``, for stores of cipher ``spec``.

    ``take`` and the builds run on store pool threads (``submit`` runs a job there); a lock
    guards which spares are ready, so two takes never get one file."""

    def __init__(
        self, folder: Path, spec: CipherSpec | None, submit: Callable[[Callable[[], None]], None]
    ) -> None:
        self.folder = folder
        self.spec = spec
        self._submit = submit
        self._lock = threading.Lock()
        self._ready: set[int] = set()  # page sizes whose spare is built
        self._building: set[int] = set()
        # an empty unencrypted store's bytes per page size (written by one build, then copied)
        self._images: dict[int, bytes] = {}
        self.taken = 0
        self.failures = 0
        self._clear()

    def _path(self, page_size: int) -> Path:
        return self.folder / f"{PREFIX}{page_size}.db"

    def _clear(self) -> None:
        """Delete what an earlier run left: a spare is never trusted across a restart."""
        try:
            names = [
                p
                for p in self.folder.iterdir()
                if p.name.startswith(PREFIX) or p.name.startswith("." + PREFIX)
            ]
        except OSError:
            return  # no folder yet: nothing to clear
        for p in names:
            try:
                if p.is_file() or p.is_symlink():
                    p.unlink()
            except OSError as e:
                log.warning("cannot remove the leftover spare store %s: %s", p, e)

    def is_ready(self, page_size: int) -> bool:
        """Whether a spare of ``page_size`` is built (a take would find it)."""
        with self._lock:
            return page_size in self._ready

    def prepare(self, page_size: int) -> None:
        """Have a spare of ``page_size`` built (in a pool job) unless one is ready or building."""
        with self._lock:
            if page_size in self._ready or page_size in self._building:
                return
            self._building.add(page_size)
        self._submit(lambda: self._build(page_size))

    def _build(self, page_size: int) -> None:
        ok = False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self._path(page_size)
            image = self._images.get(page_size)
            if image is not None:
                write_store_copy(path, image)
            else:
                # no folder fsync: a spare's name is never trusted across a restart
                build_store_file(path, page_size, self.spec, sync_folder=False)
                if self.spec is None:
                    image = _empty_store_image(path, page_size)
                    if image is not None:
                        self._images[page_size] = image
            _make_companions(path)
            ok = True
        except (OSError, sqlite3.Error, StoreError) as e:  # no spare: creates build their own
            self.failures += 1
            if worth_logging(self.failures):
                log.warning("cannot build a spare stream store (failure %d): %s", self.failures, e)
        with self._lock:
            self._building.discard(page_size)
            if ok:
                self._ready.add(page_size)

    def take(self, dest: Path, page_size: int, spec: CipherSpec | None, *, sync_folder: bool = True) -> bool:
        """Move a spare into place as the new store file ``dest`` (durably: ``dest``'s folder is
        fsynced, unless ``sync_folder`` is False: the caller fsyncs it before anything depends on
        the file); False when none fits (the caller builds the file itself). A new spare is
        built afterwards either way."""
        if spec is not self.spec:
            return False
        with self._lock:
            ready = page_size in self._ready
            self._ready.discard(page_size)
        try:
            if not ready:
                return False
            try:
                _drop_stale_wal(dest)
                spare = self._path(page_size)
                os.replace(spare, dest)
                for suffix in COMPANIONS:  # made with the spare (``_make_companions``), if at all
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(f"{spare}{suffix}", f"{dest}{suffix}")
            except OSError as e:  # another filesystem, or the spare is gone: build in place
                self.failures += 1
                if worth_logging(self.failures):
                    log.warning("cannot move a spare stream store to %s: %s", dest, e)
                return False
            if sync_folder:
                fsync_dir(dest.parent)
            self.taken += 1
            return True
        finally:
            self.prepare(page_size)
