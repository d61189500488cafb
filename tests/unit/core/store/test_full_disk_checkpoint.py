"""A store on a full disk: the room freed later goes to the next write, not to a checkpoint.

On a full disk a checkpoint cannot finish (the database file must take the WAL's pages while the
WAL still holds them), and the part it copies grows the database file into whatever room was
freed: a stream whose housekeeping checkpoint ran between the room coming back and its next
publish stayed refused (seen as a flaky `tests/abuse/test_disk.py`). Real files on a real tmpfs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.store import Append, SqliteStore, StoreFull

pytestmark = pytest.mark.anyio


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "fs"
    d.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(d)], capture_output=True
    ).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True)


async def test_a_checkpoint_on_a_full_disk_leaves_the_freed_room_to_the_next_write(tiny_tmpfs: Path) -> None:
    store = await SqliteStore.open(tiny_tmpfs / "s.db", sync="interval")
    try:
        filler = tiny_tmpfs / "filler"
        filler.write_bytes(b"\0" * (512 * 1024))  # room that comes back later
        payload = os.urandom(16 * 1024)
        with pytest.raises(StoreFull):
            for i in range(1000):
                await store.apply([Append(f"fill.{i}", None, payload, i + 1)])
        stored = (await store.state()).msgs
        assert stored > 0
        filler.unlink()
        store._checkpoint()  # the housekeeping timer, at the worst moment
        # larger than what the failed write left allocated in the WAL (a small one reuses that)
        again = Append("fill.again", None, os.urandom(64 * 1024), 10_000)
        assert await store.apply([again]) == [stored + 1]
        assert (await store.state()).msgs == stored + 1
    finally:
        await store.close()
