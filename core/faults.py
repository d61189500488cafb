"""Test-only fault injection: make a named task fail on purpose, to prove its failure is contained.

``LEAFJET_FAULTS`` (read once, at import) lists ``kind:name`` entries separated by commas; a name
of ``*`` matches any. ``fault_point(kind, name)`` raises ``InjectedFault`` where an entry matches.
Unset (production), ``ARMED`` is False and call sites skip the call: the check costs one global
load on the paths that have one.

Kinds in use (each names what the call site passes as ``name``):
- ``client_reader``, ``client_writer``, ``client_pinger``: a client connection's three tasks
  (the client's CONNECT ``name``);
- ``mqtt_bridge``: an in-process MQTT bridge, once connected to NATS (the bridge's ``name``);
"""

from __future__ import annotations

import os


class InjectedFault(RuntimeError):
    """Raised by an armed fault point; never caught specifically, so it travels as a bug would."""


def _parse(spec: str) -> frozenset[tuple[str, str]]:
    entries = set()
    for part in spec.split(","):
        kind, sep, name = part.strip().partition(":")
        if kind and sep:
            entries.add((kind, name))
    return frozenset(entries)


_ENTRIES = _parse(os.environ.get("LEAFJET_FAULTS", ""))
ARMED = bool(_ENTRIES)


def fault_point(kind: str, name: str) -> None:
    if (kind, name) in _ENTRIES or (kind, "*") in _ENTRIES:
        raise InjectedFault(f"injected fault at {kind}:{name}")
