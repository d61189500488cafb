"""Spare stores (core/store/spare.py): an empty store file built ahead, moved into place by an
open, with a new one built after; never trusted across a restart; only for its own cipher and
page size. Real files and real SQLite."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.store.api import Append
from core.store.crypto import CipherSpec
from core.store.pool import POOL
from core.store.spare import PREFIX, SpareStores
from core.store.sqlite import DEFAULT_PAGE_SIZE, SqliteStore


def _inline(job: Callable[[], None]) -> None:
    job()  # the pool's job run at once: each step of a test is then done when it returns


def _spare_file(folder: Path, page_size: int = DEFAULT_PAGE_SIZE) -> Path:
    return folder / f"{PREFIX}{page_size}.db"


def test_a_take_moves_the_spare_into_place_and_a_new_one_is_built(tmp_path: Path) -> None:
    spares = SpareStores(tmp_path, None, _inline)
    dest = tmp_path / "S" / "msgs.db"
    dest.parent.mkdir()
    assert not spares.take(dest, DEFAULT_PAGE_SIZE, None)  # none built yet
    assert _spare_file(tmp_path).exists()  # ... but a failed take has one built
    assert spares.take(dest, DEFAULT_PAGE_SIZE, None)
    assert dest.exists() and spares.taken == 1
    assert _spare_file(tmp_path).exists()  # the next one


def test_a_take_moves_sqlites_empty_companion_files_with_the_spare(tmp_path: Path) -> None:
    """The -wal and -shm files SQLite creates at a first open are made with the spare and moved
    with it (a file create is slow on some disks; a rename is not)."""
    spares = SpareStores(tmp_path, None, _inline)
    spares.prepare(DEFAULT_PAGE_SIZE)
    spare = _spare_file(tmp_path)
    assert all(Path(f"{spare}{s}").stat().st_size == 0 for s in ("-wal", "-shm"))
    dest = tmp_path / "S" / "msgs.db"
    dest.parent.mkdir()
    Path(f"{dest}-wal").write_bytes(b"a stale WAL of a store that is gone")
    assert spares.take(dest, DEFAULT_PAGE_SIZE, None)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["msgs.db", "msgs.db-shm", "msgs.db-wal"]
    assert Path(f"{dest}-wal").stat().st_size == 0  # the stale one replaced, never replayed
    assert all(Path(f"{spare}{s}").exists() for s in ("", "-wal", "-shm"))  # the next spare's own


def test_a_spare_is_only_for_its_own_cipher_and_page_size(tmp_path: Path) -> None:
    spec = CipherSpec(b"k" * 32, kdf="hkdf")
    spares = SpareStores(tmp_path, spec, _inline)
    spares.prepare(DEFAULT_PAGE_SIZE)
    dest = tmp_path / "msgs.db"
    assert not spares.take(dest, DEFAULT_PAGE_SIZE, CipherSpec(b"k" * 32, kdf="hkdf"))  # another object
    assert not spares.take(dest, 16384, spec)  # no spare of that size
    assert not dest.exists()
    assert spares.take(dest, DEFAULT_PAGE_SIZE, spec)


def test_leftovers_of_an_earlier_run_are_deleted_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / f"{PREFIX}4096.db").write_bytes(b"old spare")
    (tmp_path / f".{PREFIX}4096.db.creating").write_bytes(b"half built")
    (tmp_path / f"{PREFIX}4096.db-wal").write_bytes(b"")
    (tmp_path / f"{PREFIX}4096.db-shm").write_bytes(b"")
    (tmp_path / "$G").mkdir()  # an account's folder
    (tmp_path / "other.db").write_bytes(b"keep")
    SpareStores(tmp_path, None, _inline)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["$G", "other.db"]


def test_a_build_that_fails_leaves_no_spare_and_the_open_builds_its_own(tmp_path: Path) -> None:
    spares = SpareStores(tmp_path / "missing" / "deeper", None, _inline)
    (tmp_path / "missing").write_bytes(b"a file where the folder should be")
    spares.prepare(DEFAULT_PAGE_SIZE)
    assert spares.failures == 1
    assert not spares.take(tmp_path / "msgs.db", DEFAULT_PAGE_SIZE, None)


@pytest.mark.parametrize("cipher", [None, CipherSpec(b"k" * 32, kdf="hkdf")])
def test_a_store_opened_on_a_spare_works_and_reopens(tmp_path: Path, cipher: CipherSpec | None) -> None:
    async def main() -> None:
        spares = SpareStores(tmp_path, cipher, POOL.submit)
        spares.prepare(DEFAULT_PAGE_SIZE)
        deadline = time.monotonic() + 30
        while not spares.is_ready(DEFAULT_PAGE_SIZE):  # built by a pool thread
            assert time.monotonic() < deadline, "no spare built"
            await asyncio.sleep(0.01)
        d = tmp_path / "S"
        d.mkdir()
        store = await SqliteStore.open(d / "msgs.db", cipher=cipher, spare=spares)
        assert spares.taken == 1
        await store.apply([Append("s.1", None, b"hello", 1)])
        await store.close()
        again = await SqliteStore.open(d / "msgs.db", cipher=cipher)  # the open-time checks pass
        try:
            assert (await again.state()).msgs == 1
            assert (await again.get(1)).data == b"hello"
        finally:
            await again.close()

    asyncio.run(main())


def test_two_takes_at_once_never_get_one_file(tmp_path: Path) -> None:
    spares = SpareStores(tmp_path, None, _inline)
    spares.prepare(DEFAULT_PAGE_SIZE)
    results: list[bool] = []
    dests = [tmp_path / f"d{i}.db" for i in range(2)]
    start = threading.Barrier(2)

    def take(dest: Path) -> None:
        start.wait()
        results.append(spares.take(dest, DEFAULT_PAGE_SIZE, None))

    threads = [threading.Thread(target=take, args=(d,)) for d in dests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # each take either moved a spare of its own or none; never the same file twice
    assert sum(results) >= 1
    assert sum(d.exists() for d in dests) == sum(results)


def test_unencrypted_spares_after_the_first_are_copies_that_open_and_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.store import spare as spare_module

    builds: list[Path] = []
    real_build = spare_module.build_store_file

    def counted(path: Path, page_size: int, spec: CipherSpec | None, **kw: bool) -> None:
        builds.append(path)
        real_build(path, page_size, spec, **kw)

    monkeypatch.setattr(spare_module, "build_store_file", counted)
    spares = SpareStores(tmp_path, None, _inline)
    spares.prepare(DEFAULT_PAGE_SIZE)
    dests = [tmp_path / f"S{i}" / "msgs.db" for i in range(3)]
    for dest in dests:
        dest.parent.mkdir()
        assert spares.take(dest, DEFAULT_PAGE_SIZE, None)
    assert len(builds) == 1  # one build through SQLite; the next spares are copies of its bytes
    assert not list(tmp_path.glob(".*.creating"))

    async def main() -> None:
        for k, dest in enumerate(dests):
            store = await SqliteStore.open(dest)
            await store.apply([Append(f"s.{k}", None, b"m%d" % k, 1)])
            await store.close()
            again = await SqliteStore.open(dest)  # the open-time checks pass on a copy
            try:
                assert (await again.state()).msgs == 1
                assert (await again.get(1)).data == b"m%d" % k
            finally:
                await again.close()

    asyncio.run(main())


def test_encrypted_spares_are_each_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.store import spare as spare_module

    builds: list[Path] = []
    real_build = spare_module.build_store_file
    monkeypatch.setattr(
        spare_module,
        "build_store_file",
        lambda p, size, spec, **kw: (builds.append(p), real_build(p, size, spec, **kw)),
    )
    spec = CipherSpec(b"k" * 32, kdf="hkdf")
    spares = SpareStores(tmp_path, spec, _inline)
    spares.prepare(DEFAULT_PAGE_SIZE)
    for i in range(2):
        assert spares.take(tmp_path / f"d{i}.db", DEFAULT_PAGE_SIZE, spec)
    assert len(builds) == 3  # a salt and key check of its own each: never copied
    assert (tmp_path / "d0.db").read_bytes() != (tmp_path / "d1.db").read_bytes()
