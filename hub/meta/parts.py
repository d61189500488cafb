"""RAFT messages larger than a route takes, sent in parts and put back together.

A route closes on a message over its ``max_payload`` (1 MiB by default). A meta snapshot of
~60,000 streams, or an append carrying a large stream config, would cut the route it was sent
on, and again at every retry: the follower that needed it never caught up, and every other
message between the two servers went with the route. So the bus sends an encoded RAFT message
larger than ``cluster.meta_part_bytes`` in parts (``split``), each its own ``$NRG.meta.<peer>``
message with a ``Nrg-Part: <id> <k> <n>`` header, and the receiver joins them (``Assembler``).

Invariants:
- a message is handed on only once all ``n`` of its parts are in, joined in part order; it is
  then decoded and checked like any whole one (a part is trusted no more than a message);
- what waits is bounded: at most MAX_PENDING messages in assembly (a new one drops the oldest),
  each at most MAX_PARTS parts and MAX_MESSAGE_BYTES, all together at most MAX_PENDING_BYTES
  (the oldest others go first), and one not complete PART_TIMEOUT seconds after its first part
  is dropped. A lost part loses its message, as a lost message: RAFT
  resends (a snapshot after ``snapshot_retry_heartbeats``);
- an id is 64 random bits, so parts of two messages (of two senders, or of one sender before
  and after a restart) never join.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

PART_HEADER = "Nrg-Part"
MAX_PARTS = 16384
# A route's max_pending (64 MiB) already stops a sender from sending more at once.
MAX_MESSAGE_BYTES = 64 << 20
MAX_PENDING_BYTES = 2 * MAX_MESSAGE_BYTES
MAX_PENDING = 8
PART_TIMEOUT = 30.0


class PartError(ValueError):
    """A part that cannot belong to any message: its header is malformed or inconsistent."""


def split(data: bytes, part_bytes: int) -> Iterator[tuple[str, bytes]]:
    """``data`` as (header value, part) pairs of at most ``part_bytes`` each."""
    n = -(-len(data) // part_bytes)
    ident = secrets.token_hex(8)
    view = memoryview(data)
    for k in range(n):
        yield f"{ident} {k} {n}", bytes(view[k * part_bytes : (k + 1) * part_bytes])


@dataclass
class _Assembly:
    started: float
    parts: list[bytes | None]
    missing: int
    size: int = 0


class Assembler:
    """The parts received so far, by message id (sans-IO: the caller gives the time)."""

    def __init__(self) -> None:
        self._pending: dict[str, _Assembly] = {}
        self._bytes = 0  # of every part waiting
        self.dropped = 0  # incomplete messages given up (timed out or pushed out)
        self.joined = 0  # messages put back together

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, header: str, part: bytes, now: float) -> bytes | None:
        """Take one part (``header``: its ``Nrg-Part`` value); the whole message once this part
        completes it, else None. ``PartError`` for a part that fits no message."""
        ident, k, n = _parse(header)
        self._expire(now)
        a = self._pending.get(ident)
        if a is None:
            if len(self._pending) >= MAX_PENDING:
                self._drop(next(iter(self._pending)))  # the oldest: a newer one supersedes it
            a = self._pending[ident] = _Assembly(now, [None] * n, n)
        elif len(a.parts) != n:
            raise PartError(f"part {k} of {ident} says {n} parts, earlier ones {len(a.parts)}")
        if a.parts[k] is not None:
            return None  # a duplicate (the bus never sends one; a replayed frame would)
        if a.size + len(part) > MAX_MESSAGE_BYTES:
            self._drop(ident)
            raise PartError(f"message {ident} passes {MAX_MESSAGE_BYTES} bytes")
        while self._bytes + len(part) > MAX_PENDING_BYTES and len(self._pending) > 1:
            self._drop(next(i for i in self._pending if i != ident))  # the oldest other one
        a.size += len(part)
        self._bytes += len(part)
        a.parts[k] = part
        a.missing -= 1
        if a.missing:
            return None
        del self._pending[ident]
        self._bytes -= a.size
        self.joined += 1
        return b"".join(a.parts)  # type: ignore[arg-type]  # none is None any more

    def _expire(self, now: float) -> None:
        for ident in [i for i, a in self._pending.items() if now - a.started > PART_TIMEOUT]:
            self._drop(ident)

    def _drop(self, ident: str) -> None:
        """Give up an incomplete message."""
        self._bytes -= self._pending.pop(ident).size
        self.dropped += 1


def _parse(header: str) -> tuple[str, int, int]:
    fields = header.split(" ")
    if len(fields) != 3:
        raise PartError(f"{PART_HEADER} {header[:60]!r}: not '<id> <part> <parts>'")
    ident, k_text, n_text = fields
    digits = k_text + n_text
    if not (ident and len(ident) <= 32 and k_text and n_text and digits.isascii() and digits.isdigit()):
        raise PartError(f"{PART_HEADER} {header[:60]!r}: not '<id> <part> <parts>'")
    if len(k_text) > 6 or len(n_text) > 6:
        raise PartError(f"{PART_HEADER} {header[:60]!r}: too many parts")
    k, n = int(k_text), int(n_text)
    if not 2 <= n <= MAX_PARTS or k >= n:
        raise PartError(f"{PART_HEADER} {header[:60]!r}: part {k} of {n} (at most {MAX_PARTS})")
    return ident, k, n
