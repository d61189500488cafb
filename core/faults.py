"""Test-only fault injection: make a named task fail on purpose, to prove its owner contains it.

``LEAFJET_FAULTS`` is a comma-separated list of ``kind:name`` entries (``name`` ``*``: any). A
call site ``fault_point(kind, name)`` raises ``InjectedFault`` when the variable names it, each
time it is reached. The variable is read once, at import; without it (production) ``ARMED`` is
False, hot call sites skip the call (one global load), and the others test an empty set.

Kinds in use (each names what the call site passes as ``name``):
- ``client_reader``, ``client_writer``, ``client_pinger``: a client connection's three tasks
  (the client's CONNECT ``name``);
- ``mqtt_bridge``: an in-process MQTT bridge, once connected to NATS (the bridge's ``name``);
- ``stream_pipeline``: a stream's publish worker, per batch (the stream);
- ``consumer``: a consumer's worker, per delivery round (the consumer);
- ``api``: the JetStream API dispatcher, per request (the request's first subject token after
  ``$JS.API.``, e.g. ``STREAM``);
- ``crash`` (``crash_point``): the whole process ends at once, as a SIGKILL or a power cut
  would end it, at a named step: ``restore_ask`` (a cluster restore's store whole, its create
  not yet asked of the meta group), ``restore_move`` (that create committed, the store about to
  move into place).

Integration tests set it in the server process's environment (tests/integration/
test_failure_isolation.py, test_jetstream_bounds.py).
"""

from __future__ import annotations

import os

ENV = "LEAFJET_FAULTS"


class InjectedFault(RuntimeError):
    """Raised by an armed fault point; never caught specifically, so it travels as a bug would."""


def _parse(raw: str) -> frozenset[tuple[str, str]]:
    entries = set()
    for item in raw.split(","):
        kind, sep, name = item.strip().partition(":")
        if kind and sep and name:
            entries.add((kind, name))
    return frozenset(entries)


_FAULTS = _parse(os.environ.get(ENV, ""))
ARMED = bool(_FAULTS)


def crash_point(name: str) -> None:
    """End the process at once (no cleanup, no flush) if ``LEAFJET_FAULTS`` names ``crash:name``."""
    if _FAULTS and (("crash", name) in _FAULTS or ("crash", "*") in _FAULTS):
        os._exit(137)


def fault_point(kind: str, name: str) -> None:
    """Raise ``InjectedFault`` if ``LEAFJET_FAULTS`` names ``kind:name`` (or ``kind:*``)."""
    if _FAULTS and ((kind, name) in _FAULTS or (kind, "*") in _FAULTS):
        raise InjectedFault(f"injected fault at {kind}:{name}")
