"""Test-only fault injection: make a named task fail on purpose, to check that its owner contains it.

``LEAFJET_FAULTS`` is a comma-separated list of ``kind:name`` entries (``name`` ``*``: any). A
call site ``fault_point(kind, name)`` raises ``InjectedFault`` when the variable names it, each
time it is reached. The variable is read once, at import; without it (production) a fault point
tests an empty set and does nothing.

Kinds in use: ``stream_pipeline`` (a stream's publish worker, per batch; name: the stream),
``consumer`` (a consumer's worker, per delivery round; name: the consumer), ``api`` (the
JetStream API dispatcher, per request; name: the request's first subject token after ``$JS.API.``,
e.g. ``STREAM``). Integration tests set it in the server process's environment
(tests/abuse/test_jetstream_bounds.py).
"""

from __future__ import annotations

import os

ENV = "LEAFJET_FAULTS"


class InjectedFault(RuntimeError):
    """Raised by ``fault_point`` where ``LEAFJET_FAULTS`` asks for it."""


def _parse(raw: str) -> frozenset[tuple[str, str]]:
    entries = set()
    for item in raw.split(","):
        kind, sep, name = item.strip().partition(":")
        if kind and sep and name:
            entries.add((kind, name))
    return frozenset(entries)


_FAULTS = _parse(os.environ.get(ENV, ""))


def fault_point(kind: str, name: str) -> None:
    """Raise ``InjectedFault`` if ``LEAFJET_FAULTS`` names ``kind:name`` (or ``kind:*``)."""
    if _FAULTS and ((kind, name) in _FAULTS or (kind, "*") in _FAULTS):
        raise InjectedFault(f"injected fault at {kind}:{name}")
