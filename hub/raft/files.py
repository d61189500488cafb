"""The few file operations the durable log needs, over one directory.

Two implementations of one protocol: ``OsFiles`` on a real directory, and (in the tests) a simulated
disk that forgets what was not fsynced. The log store is written against the protocol so the
deterministic simulation exercises the same recovery code that runs in production.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class Files(Protocol):
    def list(self) -> list[str]: ...

    def read(self, name: str) -> bytes: ...

    def append(self, name: str, data: bytes) -> None:
        """Append to ``name``, creating it (a new file is durable only after ``sync_dir``)."""

    def truncate(self, name: str, size: int) -> None: ...

    def fsync(self, name: str) -> None: ...

    def remove(self, name: str) -> None:
        """Remove ``name`` (durable only after ``sync_dir``)."""

    def sync_dir(self) -> None: ...

    def write_atomic(self, name: str, data: bytes) -> None:
        """Replace ``name`` with ``data`` all at once, durably: after a crash either the old
        content or the new one is there, never a mix."""


# Append handles kept open at once. The log appends to its newest segment only (and fsyncs a
# segment before it starts the next), so older handles are closed: a log of many small segments
# (``cluster.meta_segment_bytes``) must not hold one file descriptor per segment.
MAX_APPEND_HANDLES = 4


class OsFiles:
    """A real directory. The last few append handles stay open; everything else opens per call."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fds: dict[str, int] = {}

    def list(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir() if p.is_file())

    def read(self, name: str) -> bytes:
        return (self.dir / name).read_bytes()

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            if len(self._fds) >= MAX_APPEND_HANDLES:  # the least recently opened goes
                os.close(self._fds.pop(next(iter(self._fds))))
            fd = os.open(self.dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fds[name] = fd
        return fd

    def append(self, name: str, data: bytes) -> None:
        fd = self._fd(name)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def truncate(self, name: str, size: int) -> None:
        os.truncate(self.dir / name, size)

    def fsync(self, name: str) -> None:
        os.fsync(self._fd(name))

    def remove(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        (self.dir / name).unlink(missing_ok=True)

    def sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = self.dir / f"{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / name)
        self.sync_dir()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
