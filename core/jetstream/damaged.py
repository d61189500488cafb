"""Streams that could not be recovered at start: held by name, never reused, until deleted.

A stream whose ``stream.json`` cannot be read or whose store cannot be opened (a corrupt
``msgs.db``) ends only itself: the server starts with every other stream. Its name stays taken,
as the reference keeps an unsupported stream in its account as *offline* (jetstream.go,
``offlineReason``): the API answers about it with the reference's "stream is offline" error
(10194), a create of the name is refused with it, and its folder is never written to. A delete
moves the folder aside (``<name>.damaged-<UTC time>``), keeping the data for whoever wants to
look at it, and frees the name.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from core.fsync import fsync_dir
from core.jetstream.models import StreamConfig

# A stream name never holds a '.' (the reference forbids it), so a folder named with one is no
# stream's: one moved aside by a delete, never recovered again.
ASIDE_MARK = ".damaged-"


@dataclass(frozen=True, slots=True)
class DamagedStream:
    """A stream held as damaged: its folder, why, and its config when that could be read."""

    name: str
    folder: Path
    reason: str
    config: StreamConfig | None = None

    @property
    def offline_reason(self) -> str:
        """The ``{err}`` of the reference's 10194 "stream is offline: {err}"."""
        return f"damaged at recovery ({self.reason}); delete the stream to move its data aside"


def is_set_aside(folder_name: str) -> bool:
    """A folder that holds no stream of its own (moved aside, or a name no stream can have)."""
    return "." in folder_name


def move_aside(folder: Path, now_ns: int | None = None) -> Path:
    """Rename ``folder`` to ``<name>.damaged-<UTC time>`` beside it, durably (its parent
    fsynced: a crash right after must not bring the stream back). Returns the new path."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ns // 1_000_000_000))
    target = folder.with_name(f"{folder.name}{ASIDE_MARK}{stamp}")
    n = 1
    while target.exists():  # deleted twice within a second
        n += 1
        target = folder.with_name(f"{folder.name}{ASIDE_MARK}{stamp}-{n}")
    os.rename(folder, target)
    fsync_dir(folder.parent)
    return target
