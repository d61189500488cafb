"""Logging an event that may repeat without end (a peer's bad bytes, a disk that keeps failing):
at its 1st, 2nd, 4th, 8th... occurrence, so the log shows it at once and keeps a count, but a
flood of them cannot flood the log."""

from __future__ import annotations


def worth_logging(count: int) -> bool:
    """Whether the ``count``-th occurrence (1-based) is logged: a power of two."""
    return count > 0 and count & (count - 1) == 0
