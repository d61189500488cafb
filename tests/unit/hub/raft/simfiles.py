"""A simulated disk behind the ``Files`` protocol: it forgets what was not fsynced.

Each file keeps the bytes that are durable and the bytes a reader sees now. A crash keeps, for each
file, what was durable plus (optionally) a random prefix of what was appended since - a torn write -
and can flip a bit in that unsynced part. Creations and removals are durable only after
``sync_dir``. ``crash_after_ops`` makes the disk raise ``SimCrash`` part-way through the store's own
sequence of operations, so a crash can land between a write and its fsync.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


class SimCrash(Exception):
    """The simulated machine lost power in the middle of an operation."""


@dataclass
class _File:
    durable: bytes = b""
    current: bytearray = field(default_factory=bytearray)
    exists_durably: bool = False


class SimFiles:
    def __init__(self) -> None:
        self._files: dict[str, _File] = {}
        self._removed: dict[str, _File] = {}  # removed, but the directory is not synced yet
        self.crash_after_ops: int | None = None
        self.fsyncs = 0

    def _op(self) -> None:
        if self.crash_after_ops is not None:
            if self.crash_after_ops <= 0:
                self.crash_after_ops = None
                raise SimCrash
            self.crash_after_ops -= 1

    def list(self) -> list[str]:
        return sorted(self._files)

    def read(self, name: str) -> bytes:
        return bytes(self._files[name].current)

    def append(self, name: str, data: bytes) -> None:
        self._op()
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = _File()
            self._removed.pop(name, None)
        f.current += data

    def truncate(self, name: str, size: int) -> None:
        self._op()
        del self._files[name].current[size:]

    def fsync(self, name: str) -> None:
        self._op()
        f = self._files[name]
        f.durable = bytes(f.current)
        self.fsyncs += 1

    def remove(self, name: str) -> None:
        self._op()
        f = self._files.pop(name, None)
        if f is not None and f.exists_durably:
            self._removed[name] = f

    def sync_dir(self) -> None:
        self._op()
        self._removed.clear()
        for f in self._files.values():
            f.exists_durably = True

    def write_atomic(self, name: str, data: bytes) -> None:
        self._op()
        self._files[name] = _File(data, bytearray(data), True)
        self._removed.pop(name, None)

    def crash(self, rng: random.Random, torn: bool = True, flip: bool = False) -> None:
        """Power loss: keep what was durable, maybe a torn piece of what was not."""
        self.crash_after_ops = None
        survivors: dict[str, _File] = {}
        for name, f in {**self._removed, **self._files}.items():
            if not f.exists_durably:
                continue  # created after the last directory sync: gone
            kept = bytearray(f.durable)
            extra = bytes(f.current[len(f.durable) :]) if f.current.startswith(f.durable) else b""
            if torn and extra:
                piece = bytearray(extra[: rng.randrange(len(extra) + 1)])
                if flip and piece:
                    bit = rng.randrange(len(piece) * 8)
                    piece[bit // 8] ^= 1 << (bit % 8)
                kept += piece
            survivors[name] = _File(bytes(kept), kept, True)
        self._files = survivors
        self._removed = {}
