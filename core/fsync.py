"""Durable names: after a file is created, renamed or removed, its folder's fsync makes that
change survive a crash (the file's own fsync covers only its bytes)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(folder: Path) -> None:
    """fsync ``folder``: the names in it as they are now are durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
