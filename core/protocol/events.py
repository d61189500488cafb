"""The operations of the NATS client protocol, as typed values.

A parser turns bytes into these; the connection dispatches on ``type(event) is X``. Subjects,
reply subjects and sids are ``str`` decoded from UTF-8 with ``surrogateescape`` (see DESIGN.md),
so any byte string the wire carries survives a parse and an encode unchanged.

The argument-less operations have module-level singletons (``PING``, ``PONG``, ``OK``) that the
parsers return, so a keep-alive allocates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# ---------------------------------------------------------------- client -> server


@dataclass(frozen=True, slots=True)
class Connect:
    """``CONNECT {json}``: the client's options, as the JSON object it sent."""

    options: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Pub:
    """``PUB`` (``headers`` is None) or ``HPUB`` (``headers`` is the raw header block).

    For HPUB the block is the first ``hdr_size`` bytes exactly as sent, normally
    ``NATS/1.0...\\r\\n`` through the terminating blank line; ``payload`` is the rest.
    """

    subject: str
    reply: str | None
    payload: bytes
    headers: bytes | None


class OneSize(list[bytes]):
    """Payloads that are all ``size`` bytes long: a parsed run's (its frames share one control
    line, so one size). Whoever encodes or counts them takes ``size`` instead of measuring each
    one (``payload_bytes``; ``encoder.encode_run``). Never changed after the parse."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size


def payload_bytes(payloads: Sequence[bytes]) -> int:
    """The payload bytes of a run, without measuring each payload when they are ``OneSize``."""
    if type(payloads) is OneSize:
        return len(payloads) * payloads.size
    return sum(map(len, payloads))


@dataclass(frozen=True, slots=True)
class PubRun:
    """Consecutive plain ``PUB``s (no reply, no headers) to one subject from one read, with the
    same control line: ``Pub(subject, None, p, None)`` for each ``p`` of ``payloads``, in order.
    Only a parser with ``runs`` on gives it (the connection then routes the run in one go)."""

    subject: str
    payloads: list[bytes]


@dataclass(frozen=True, slots=True)
class Sub:
    """``SUB <subject> [queue] <sid>``."""

    subject: str
    queue: str | None
    sid: str


@dataclass(frozen=True, slots=True)
class Unsub:
    """``UNSUB <sid> [max]``; ``max_msgs`` is None (remove now) or a positive count."""

    sid: str
    max_msgs: int | None


@dataclass(frozen=True, slots=True)
class Ping:
    """``PING`` (either direction)."""


@dataclass(frozen=True, slots=True)
class Pong:
    """``PONG`` (either direction)."""


# ---------------------------------------------------------------- server -> client


@dataclass(frozen=True, slots=True)
class Info:
    """``INFO {json}``: the server's description of itself."""

    options: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Msg:
    """``MSG`` (``headers`` is None) or ``HMSG`` (``headers`` is the raw header block)."""

    subject: str
    sid: str
    reply: str | None
    payload: bytes
    headers: bytes | None


@dataclass(frozen=True, slots=True)
class Ok:
    """``+OK``: a verbose-mode acknowledgement."""


@dataclass(frozen=True, slots=True)
class Err:
    """``-ERR '<message>'``; ``message`` is the text without the quotes."""

    message: str


PING = Ping()
PONG = Pong()
OK = Ok()

ClientOp = Connect | Pub | PubRun | Sub | Unsub | Ping | Pong
ServerOp = Info | Msg | Ping | Pong | Ok | Err
