"""Sans-IO route protocol: what two leafjet servers of one cluster say to each other.

Our own protocol, modelled on nats-server's routes (route.go; federation-wire.md §2.1): text
frames, CRLF-terminated, op names case-insensitive. Unlike a leaf link, a route carries every
account, so interest and message frames name theirs:

- ``INFO <json>``, ``CONNECT <json>``, ``PING``, ``PONG``, ``-ERR '<text>'``, ``+OK`` (ignored);
- ``RS+ <account> <subject>`` or ``RS+ <account> <subject> <queue> <weight>`` (the group's total
  weight on the sender: re-sent on every change);
- ``RS- <account> <subject>`` or ``RS- <account> <subject> <queue>``;
- ``RMSG <account> <subject> [<reply> | + <reply> <queue...> | | <queue...>] <size>``;
- ``HMSG <account> <subject> [...as RMSG...] <header size> <total size>``.

Which op is acceptable *when* (CONNECT first on the accepting side) is the route shell's business
(``hub/routes/route.py``), not the grammar's. Everything the client parsers promise holds here
too (core/protocol/DESIGN.md): events or ``ProtocolError``, chunking-independent, bounded
buffering, lossless text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import ProtocolError
from core.protocol.events import Connect, Err, Info, Ping, Pong
from core.protocol.parser import (
    MAX_PAYLOAD,
    UNKNOWN_OP,
    _link_control,
    _Parser,
    _separated,
    _size,
    _split_exact,
    _text,
)

# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class RouteSub:
    """``RS+``: interest of the peer in ``account``; ``weight`` is 1 for a plain subject, the
    group's total weight on the peer for a queue."""

    account: str
    subject: str
    queue: str | None
    weight: int


@dataclass(frozen=True, slots=True)
class RouteUnsub:
    """``RS-``: the peer's last holder of the key is gone."""

    account: str
    subject: str
    queue: str | None


@dataclass(frozen=True, slots=True)
class RouteMsg:
    """``RMSG`` (``headers`` None) or ``HMSG``. ``queues`` are the queue groups the sender chose
    this server for (empty: plain subscribers only). An HMSG whose header size is 0 gives
    ``headers=None``, as on a leaf link."""

    account: str
    subject: str
    reply: str | None
    queues: tuple[str, ...]
    headers: bytes | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class RouteMsgRun:
    """Consecutive plain ``RMSG``s (no reply, no queues, no headers) of one account and subject
    from one read, with the same control line: ``RouteMsg(account, subject, None, (), None, p)``
    for each ``p`` of ``payloads``, in order. Only with the parser's ``runs`` on."""

    account: str
    subject: str
    payloads: list[bytes]


RouteOp = Info | Connect | Ping | Pong | Err | RouteSub | RouteUnsub | RouteMsg | RouteMsgRun

_NO_QUEUES: tuple[str, ...] = ()

# Built through the slot descriptors, as the other parsers build their message events.
_new = object.__new__
_rm_account, _rm_subject, _rm_reply, _rm_queues, _rm_headers, _rm_payload = (
    RouteMsg.__dict__[name].__set__
    for name in ("account", "subject", "reply", "queues", "headers", "payload")
)
_run_account, _run_subject, _run_payloads = (
    RouteMsgRun.__dict__[name].__set__ for name in ("account", "subject", "payloads")
)


# ---------------------------------------------------------------- parser


class RouteParser(_Parser):
    """Parses what a route peer sends (either side). ``max_payload`` is checked on the RMSG/HMSG
    line, before any payload byte is buffered. ``max_control_line`` defaults to nats-server's limit
    for server-to-server connections (16 x 4096)."""

    __slots__ = ("max_payload",)

    _PREFIXES = (
        b"RMSG ",
        b"HMSG ",
        b"RS+ ",
        b"RS- ",
        b"PING",
        b"PONG",
        b"INFO",
        b"CONNECT",
        b"+OK",
        b"-ERR ",
    )

    def __init__(self, max_control_line: int = 4096 * 16, max_payload: int = 1 << 20) -> None:
        super().__init__(max_control_line)
        self.max_payload = max_payload

    def _on_line(self, line: bytes) -> Any:
        args = line.split()
        if 11 in line or 12 in line:
            args = _split_exact(line)
        elif len(args) == 4 and line[:5] == b"RMSG ":
            # the hot path, ``RMSG <acc> <subject> <size>``: the same checks as below, in short
            size = _size(args[3])
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD)
            return (size, _text(args[1]), _text(args[2]), None, _NO_QUEUES, 0)
        if not args or line[0] <= 32:
            raise ProtocolError(UNKNOWN_OP)
        n = len(args)
        op = args[0].upper()
        if op == b"RMSG" or op == b"HMSG":
            if not _separated(line, 4):
                raise ProtocolError(UNKNOWN_OP)
            plain = op == b"RMSG"
            sizes_at = n - 1 if plain else n - 2  # the size field(s) follow subject, reply, queues
            if sizes_at == 3:
                reply, queues = None, _NO_QUEUES
            elif sizes_at == 4:
                reply, queues = _text(args[3]), _NO_QUEUES
            elif sizes_at > 4:
                reply, queues = _reply_and_queues(args, sizes_at)
            else:
                raise ProtocolError(None)
            size = _size(args[-1])
            hdr = 0 if plain else _size(args[-2])
            if hdr > size:
                raise ProtocolError(None)
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD)
            return (size, _text(args[1]), _text(args[2]), reply, queues, hdr)
        if op == b"RS+":
            if not _separated(line, 3):
                raise ProtocolError(UNKNOWN_OP)
            if n == 3:
                return RouteSub(_text(args[1]), _text(args[2]), None, 1)
            if n == 5:
                weight = _size(args[4])
                if not weight:
                    raise ProtocolError(None)
                return RouteSub(_text(args[1]), _text(args[2]), _text(args[3]), weight)
            raise ProtocolError(None)
        if op == b"RS-":
            if not _separated(line, 3):
                raise ProtocolError(UNKNOWN_OP)
            if n == 3:
                return RouteUnsub(_text(args[1]), _text(args[2]), None)
            if n == 4:
                return RouteUnsub(_text(args[1]), _text(args[2]), _text(args[3]))
            raise ProtocolError(None)
        return _link_control(op, line)

    def _runnable(self, head: Any) -> bool:
        return head[3] is None and not head[4] and not head[5]  # no reply, no queues, no headers

    def _run(self, head: Any, payloads: list[bytes]) -> RouteMsgRun:
        run = _new(RouteMsgRun)
        _run_account(run, head[1])
        _run_subject(run, head[2])
        _run_payloads(run, payloads)
        return run

    def _finish(self, head: Any, data: bytes, start: int, end: int) -> RouteMsg:
        _, account, subject, reply, queues, hdr = head
        msg = _new(RouteMsg)
        _rm_account(msg, account)
        _rm_subject(msg, subject)
        _rm_reply(msg, reply)
        _rm_queues(msg, queues)
        if hdr:
            split = start + hdr
            _rm_headers(msg, data[start:split])
            _rm_payload(msg, data[split:end])
        else:
            _rm_headers(msg, None)
            _rm_payload(msg, data[start:end])
        return msg


def _reply_and_queues(args: list[bytes], sizes_at: int) -> tuple[str | None, tuple[str, ...]]:
    """``+ <reply> <q...>`` or ``| <q...>`` between the subject and the size field(s), which start
    at ``sizes_at``. Anything but a one-byte ``+`` or ``|`` indicator is a parse error; so is an
    indicator with no queue after it."""
    indicator = args[3]
    if indicator == b"+" and sizes_at > 5:
        return _text(args[4]), tuple(_text(a) for a in args[5:sizes_at])
    if indicator == b"|" and sizes_at > 4:
        return None, tuple(_text(a) for a in args[4:sizes_at])
    raise ProtocolError(None)


# ---------------------------------------------------------------- encoders
#
# Like encoder.py: text as UTF-8 with surrogateescape, no validation (the caller has checked the
# subjects and names; a space or CR/LF in one would corrupt the stream).


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def encode_rs_plus(account: str, subject: str, queue: str | None = None, weight: int = 1) -> bytes:
    """``RS+ <account> <subject>\\r\\n``, or with ``<queue> <weight>`` for a queue group."""
    if queue:
        return _bytes(f"RS+ {account} {subject} {queue} {weight}\r\n")
    return _bytes(f"RS+ {account} {subject}\r\n")


def encode_rs_minus(account: str, subject: str, queue: str | None = None) -> bytes:
    """``RS- <account> <subject>\\r\\n`` or ``RS- <account> <subject> <queue>\\r\\n``."""
    if queue:
        return _bytes(f"RS- {account} {subject} {queue}\r\n")
    return _bytes(f"RS- {account} {subject}\r\n")


def rmsg_head(account: str, subject: str) -> bytes:
    """``RMSG <account> <subject> ``: what precedes the size of a plain RMSG (no reply, no queues,
    no headers), so that a sender can encode it once per subject."""
    return _bytes(f"RMSG {account} {subject} ")


def encode_rmsg(
    account: str,
    subject: str,
    reply: str | None,
    queues: tuple[str, ...],
    headers: bytes | None,
    payload: bytes,
) -> bytes:
    """A whole RMSG (``headers`` None) or HMSG, ready to write. With ``queues`` the reply goes
    after a ``+`` (``+ <reply> <q...>``), or a ``|`` stands for no reply (``| <q...>``)."""
    head = _bytes(f"{account} {subject}")
    if queues:
        names = " ".join(queues)
        mid = _bytes(f" + {reply} {names}" if reply else f" | {names}")
    elif reply:
        mid = b" " + _bytes(reply)
    else:
        mid = b""
    if headers is None:
        return b"RMSG %b%b %d\r\n%b\r\n" % (head, mid, len(payload), payload)
    hdr = len(headers)
    return b"HMSG %b%b %d %d\r\n%b%b\r\n" % (head, mid, hdr, hdr + len(payload), headers, payload)
