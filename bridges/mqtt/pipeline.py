"""Many inbound messages on their way into JetStream at once, acknowledged to the broker in order.

Two parts, both free of MQTT sockets and threads:

* :class:`AckWindow` keeps the messages in the order the broker delivered them and hands back the
  ones whose turn it is to be acknowledged: a message is released only when it *and every message
  received before it* are done (MQTT 3.1.1 §4.6 / MQTT 5 §4.6: PUBACKs go out in the order the
  PUBLISHes arrived). Its size bounds how many messages the bridge holds unacknowledged.
* :class:`JetStreamPipeline` publishes with a reply subject of its own (one wildcard subscription,
  a counter per publish) instead of one request/future/timer per message, so a window of publishes
  is in flight on one connection and the server can group-commit them. Outcomes come back through a
  callback; publishes without a reply by ``deadline`` are reported as timed out by :meth:`expire`.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.aio.client
import nats.errors

from .messages import InboundMessage


@dataclass(slots=True, eq=False)
class Pending:
    """One inbound message between the broker's PUBLISH and our PUBACK."""

    item: InboundMessage
    subject: str = ""
    payload: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    dead_letter: bool = False
    attempt: int = 0  # publishes so far (a retry or a fresh-id republish adds one)
    retry_delay: float = 0.0  # the next backoff sleep after a failure
    deadline: float = 0.0  # monotonic: no reply by then -> timed out
    done: bool = False


class AckWindow:
    """At most ``size`` messages held; released for acknowledgement strictly in arrival order."""

    __slots__ = ("_order", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._order: deque[Pending] = deque()

    def __len__(self) -> int:
        return len(self._order)

    def has_room(self) -> bool:
        return len(self._order) < self.size

    def add(self, p: Pending) -> None:
        self._order.append(p)

    def releasable(self) -> list[Pending]:
        """Pop the done messages at the head; a message not yet done holds back all behind it."""
        out: list[Pending] = []
        order = self._order
        while order and order[0].done:
            out.append(order.popleft())
        return out

    def oldest(self) -> Pending | None:
        return self._order[0] if self._order else None


# Outcomes of one publish attempt.
@dataclass(frozen=True, slots=True)
class Stored:
    duplicate: bool


@dataclass(frozen=True, slots=True)
class NoStream:
    """Nobody answers on the subject (no stream captures it)."""


@dataclass(frozen=True, slots=True)
class TooLarge:
    """The NATS server's max_payload refuses the message: no retry can store it."""


@dataclass(frozen=True, slots=True)
class Failed:
    problem: str


Outcome = Stored | NoStream | TooLarge | Failed
NO_STREAM = NoStream()
TOO_LARGE = TooLarge()


STORED = Stored(False)


def classify_reply(headers: dict[str, str] | None, data: bytes) -> Outcome:
    """What a JetStream publish reply says (a PubAck, an API error, or a no-responders status)."""
    if headers and headers.get("Status") == "503":
        return NO_STREAM
    if (
        data.startswith(b'{"stream":')
        and b'"seq":' in data
        and b'"duplicate"' not in data
        and b'"error"' not in data
    ):
        # The common answer, a plain PubAck ({"stream":..,"seq":..}), read without a JSON parse.
        # Errors ({"error":...}) and duplicates ({... "duplicate":true}) take the full path.
        return STORED
    try:
        resp = json.loads(data)
    except ValueError:
        return Failed(f"unreadable reply {data[:80]!r}")
    if not isinstance(resp, dict):
        return Failed(f"unexpected reply {data[:80]!r}")
    err = resp.get("error")
    if err is not None:
        if isinstance(err, dict):
            return Failed(f"JetStream error {err.get('err_code')}: {err.get('description')}")
        return Failed(f"JetStream error: {err}")
    if "seq" not in resp:
        return Failed(f"unexpected reply {data[:80]!r}")
    return Stored(bool(resp.get("duplicate", False)))


# nats-py's publish encodes headers with a regex match and a str.translate per header (a seventh of
# the bridge's CPU, three headers a message); ours are valid by construction (names checked, values
# percent-encoded in messages.py), so the HPUB is built here and queued the way nats-py's own
# publish queues it - through two private methods, used only if this nats-py has them.
_RAW_PUBLISH = all(hasattr(nats.aio.client.Client, a) for a in ("_send_command", "_flush_pending"))


def encode_headers(headers: dict[str, str]) -> bytes:
    """A NATS header block; names and values must already be valid (no ':' or CR/LF)."""
    return ("NATS/1.0\r\n" + "".join([f"{k}: {v}\r\n" for k, v in headers.items()]) + "\r\n").encode()


async def publish_with_headers(
    nc: Any, subject: str, reply: str, payload: bytes, headers: dict[str, str]
) -> None:
    """``nc.publish(subject, payload, reply=reply, headers=headers)``, with the same errors."""
    if not _RAW_PUBLISH or not isinstance(nc, nats.aio.client.Client):
        await nc.publish(subject, payload, reply=reply, headers=headers)
        return
    if nc.is_closed:
        raise nats.errors.ConnectionClosedError
    if nc.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    size = len(payload)
    if not nc.is_connected and (
        nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size
    ):
        raise nats.errors.OutboundBufferLimitError  # nothing can be buffered while reconnecting
    if size > nc.max_payload:
        raise nats.errors.MaxPayloadError
    hdr = encode_headers(headers)
    cmd = b"".join(
        (f"HPUB {subject} {reply} {len(hdr)} {len(hdr) + size}\r\n".encode(), hdr, payload, b"\r\n")
    )
    nc.stats["out_msgs"] += 1
    nc.stats["out_bytes"] += size
    await nc._send_command(cmd)
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()


class JetStreamPipeline:
    """Publishes on ``nc`` with replies to one subscription; reports each outcome to ``on_outcome``."""

    def __init__(self, nc: Any, timeout: float, on_outcome: Callable[[Pending, Outcome], None]) -> None:
        self._nc = nc
        self._timeout = timeout
        self._on_outcome = on_outcome
        self._waiting: dict[str, Pending] = {}  # token -> message, in send order (so deadlines ascend)
        self._next = 0
        self._prefix = ""
        self._sub: Any = None

    async def start(self) -> None:
        self._prefix = self._nc.new_inbox() + "."
        # No per-subscription limits: the window bounds how many replies can be outstanding.
        self._sub = await self._nc.subscribe(
            self._prefix + "*", cb=self._on_reply, pending_msgs_limit=0, pending_bytes_limit=0
        )

    def in_flight(self) -> int:
        return len(self._waiting)

    async def send(self, p: Pending) -> None:
        self._next += 1
        token = f"{self._next:x}"
        p.attempt += 1
        p.deadline = time.monotonic() + self._timeout
        self._waiting[token] = p
        try:
            await publish_with_headers(self._nc, p.subject, self._prefix + token, p.payload, p.headers)
        except nats.errors.MaxPayloadError:
            self._waiting.pop(token, None)
            self._on_outcome(p, TOO_LARGE)
        except Exception as e:  # closed, draining, outbound buffer full while reconnecting, ...
            self._waiting.pop(token, None)
            self._on_outcome(p, Failed(f"{type(e).__name__}: {e}"))

    async def _on_reply(self, msg: Any) -> None:
        p = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if p is None:
            return  # a reply after we gave up on it: its retry runs under another token
        self._on_outcome(p, classify_reply(msg.headers, msg.data))

    def next_deadline(self) -> float | None:
        for p in self._waiting.values():
            return p.deadline
        return None

    def expire(self, now: float) -> None:
        """Report every publish whose reply is overdue as failed (it is retried under a new token)."""
        waiting = self._waiting
        while waiting:
            token, p = next(iter(waiting.items()))
            if p.deadline > now:
                return
            del waiting[token]
            self._on_outcome(p, Failed(f"no PubAck within {self._timeout:g}s"))


class MessageIds:
    """Chooses each inbound message's ``Nats-Msg-Id`` so dedup drops redeliveries, not new messages.

    The deterministic id is the packet id + a digest of topic and payload. The broker reuses a packet
    id once we acknowledged it, so when devices send identical bytes a new message can get the id of
    one stored a moment ago. What this process saw decides:

    * a packet id not seen (a new message, or a redelivery after a bridge restart): the deterministic
      id, so a copy stored before the restart is recognised;
    * a redelivery (DUP) of the message we hold unacknowledged under that packet id, or of the one we
      acknowledged last (our ack may have died with the connection): the same id as before, so the
      stored copy is recognised - unless devices have been seen to repeat bytes (below);
    * once a packet id came back with the same bytes as the message acknowledged under it (devices
      repeat themselves; ``repeats``), a new message gets a fresh id, and so does a redelivery of an
      acknowledged one: after a reconnect the broker may resend the old message (our ack was lost) or
      a new identical one sent on the dropped connection. Storing again risks a duplicate; reusing the
      id would risk a loss.
    """

    __slots__ = ("_last", "_nonce", "_seq", "repeats")

    def __init__(self) -> None:
        self._last: dict[int, list[Any]] = {}  # packet id -> [deterministic id, id used, acked]
        self._nonce = os.urandom(4).hex()
        self._seq = 0
        self.repeats = False  # devices have sent identical bytes under a reused packet id

    def fresh(self, base: str) -> str:
        self._seq += 1
        return f"{base}-{self._nonce}{self._seq:x}"

    def choose(self, mid: int, dup: bool, base: str) -> str:
        rec = self._last.get(mid)
        if rec is None or rec[0] != base:
            chosen = base
        elif dup and (not rec[2] or not self.repeats):
            return str(rec[1])  # the broker redelivers what we stored: keep its id (and its record)
        else:
            if not dup:
                self.repeats = True  # a new message with the bytes of the last one under this id
            chosen = self.fresh(base)
        self._last[mid] = [base, chosen, False]
        return chosen

    def renamed(self, mid: int, old: str, new: str) -> None:
        """The message stored under ``old`` was stored again as ``new``: the stream held the
        deterministic id already (identical bytes from before this process)."""
        self.repeats = True
        rec = self._last.get(mid)
        if rec is not None and rec[1] == old:
            rec[1] = new

    def acked(self, mid: int, used: str) -> None:
        rec = self._last.get(mid)
        if rec is not None and rec[1] == used:
            rec[2] = True
