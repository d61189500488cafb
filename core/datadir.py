"""One owner per data directory: an exclusive lock held for the life of the process.

Two servers started on the same directory would both "recover" its streams and then write the
same SQLite files. The first one takes ``flock(LOCK_EX)`` on ``<dir>/LOCK`` and writes its pid
there; a second one finds the lock taken and stops at start-up with the holder's pid. ``flock``
locks belong to the open file, so the kernel releases them when the process dies however it
dies (SIGKILL included): a stale LOCK file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from core.errors import StartupError

LOCK_NAME = "LOCK"


class DataDirLock:
    """The held lock; ``release()`` (or process exit) gives it up."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_data_dir(directory: Path) -> DataDirLock:
    """Take the directory's lock or raise ``StartupError`` naming the process that holds it."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StartupError(f"cannot open lock file {path}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        who = f"pid {holder}" if holder else "another process"
        raise StartupError(f"data directory {directory} is in use by {who} (lock {path})") from None
    except OSError as e:
        os.close(fd)
        raise StartupError(f"cannot lock {path}: {e.strerror or e}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return DataDirLock(path, fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def holder_pid(directory: Path) -> int | None:
    """The pid of the process that holds ``directory``'s lock now, or None when nobody does (no
    LOCK file, or a stale one whose process died: its flock went with it)."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd)  # held: the pid it wrote is the holder's
        return None  # we could lock it: nobody holds it
    finally:
        os.close(fd)
