"""Where a new stream goes (pure): the reference's filters, least loaded first.

A server qualifies when it is in the requested ``placement.cluster`` (when one is asked for),
has every ``placement.tags`` tag (a ``!tag`` is one it must not have) and is online. Among those,
the one with the fewest assigned streams wins (then the name, so every run decides alike).
None qualifying is the reference's 10005 with its reasons ("no suitable peers for placement,
peer offline, tags not matched ['x']").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hub.meta.state import ServerEntry


@dataclass(frozen=True, slots=True)
class NoPeers(Exception):
    reason: str

    def __str__(self) -> str:
        return self.reason


def _tag_misfits(s: ServerEntry, tags: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``tags`` ``s`` lacks, and the ``!tag`` ones it has (without the ``!``)."""
    missing = [t for t in tags if not t.startswith("!") and t not in s.tags]
    forbidden = [t[1:] for t in tags if t.startswith("!") and t[1:] in s.tags]
    return missing, forbidden


def fits(s: ServerEntry, cluster: str | None, tags: Sequence[str]) -> bool:
    """Whether ``s`` fits a placement (online or not): ``place``'s filters."""
    missing, forbidden = _tag_misfits(s, tags)
    return not (cluster and s.cluster != cluster) and not missing and not forbidden


def place(
    servers: Sequence[ServerEntry],
    online: Collection[str],
    load: Mapping[str, int],
    replicas: int,
    cluster: str | None,
    tags: Sequence[str],
) -> list[str]:
    """The ``replicas`` servers a new stream is placed on, or ``NoPeers``."""
    offline = False
    unmatched: list[str] = []
    excluded: list[str] = []
    fits: list[ServerEntry] = []
    for s in servers:
        if cluster and s.cluster != cluster:
            continue
        missing, forbidden = _tag_misfits(s, tags)
        if missing:
            unmatched.extend(t for t in missing if t not in unmatched)
            continue
        if forbidden:
            excluded.extend(t for t in forbidden if t not in excluded)
            continue
        if s.name not in online:
            offline = True
            continue
        fits.append(s)
    if len(fits) < replicas:
        reason = "no suitable peers for placement"
        if offline:
            reason += ", peer offline"
        if excluded and not fits:
            reason += ", exclude tag set"
        if unmatched and not fits:
            reason += ", tags not matched [" + ", ".join(f"'{t}'" for t in unmatched) + "]"
        if excluded and not fits:
            reason += ", tags excluded [" + ", ".join(f"'{t}'" for t in excluded) + "]"
        raise NoPeers(reason)
    fits.sort(key=lambda s: (load.get(s.name, 0), s.name))
    return [s.name for s in fits[:replicas]]
