"""NATS message headers (ADR-4): the block carried by HPUB/HMSG.

::

    NATS/1.0[ <code>[ <description>]]\\r\\n
    Name: Value\\r\\n          (any number, a name may repeat)
    \\r\\n

Names keep their case and their order; values are stripped of surrounding whitespace. Text is
UTF-8 with ``surrogateescape`` (like subjects), so any bytes survive a parse and an encode.

Errors are ``HeaderError`` (a ``ValueError``), not ``ProtocolError``: the parser forwards an HPUB
header block untouched, as the reference does, so a malformed block is a problem for whoever
reads it (e.g. JetStream looking for ``Nats-Msg-Id``), not a reason to close the connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

_VERSION = "NATS/1.0"


class HeaderError(ValueError):
    """A header block that cannot be parsed, or a name/value that cannot be encoded."""


@dataclass(frozen=True, slots=True)
class Headers:
    """A parsed header block: the status line's code and description, then the fields in order."""

    status: int | None
    description: str
    items: tuple[tuple[str, str], ...]

    def get(self, name: str) -> str | None:
        """The first value of ``name``: an exact match first, else a case-insensitive one."""
        for key, value in self.items:
            if key == name:
                return value
        folded = name.lower()
        for key, value in self.items:
            if key.lower() == folded:
                return value
        return None

    def get_all(self, name: str) -> list[str]:
        """Every value of ``name`` in order (exact matches; case-insensitive if there are none)."""
        values = [value for key, value in self.items if key == name]
        if not values:
            folded = name.lower()
            values = [value for key, value in self.items if key.lower() == folded]
        return values


def parse_headers(block: bytes) -> Headers:
    """Parse a header block; raise ``HeaderError`` if it is malformed.

    Lenient where nothing is ambiguous: a bare ``\\n`` line ending is accepted and the final
    blank line may be missing. Anything after the blank line is an error.
    """
    if not block.startswith(b"NATS/1.0"):
        raise HeaderError("header block does not start with NATS/1.0")
    lines = block.decode("utf-8", "surrogateescape").split("\n")
    status_line = lines[0].removesuffix("\r")[len(_VERSION) :]
    status: int | None = None
    description = ""
    if status_line:
        if status_line[0] not in " \t":
            raise HeaderError("malformed status line")
        code, _, description = status_line.strip().partition(" ")
        if code:
            if not (code.isascii() and code.isdigit()):
                raise HeaderError(f"malformed status code {code!r}")
            status = int(code)
        description = description.strip()
    items: list[tuple[str, str]] = []
    ended = False
    for raw in lines[1:]:
        line = raw.removesuffix("\r")
        if ended:
            if line:
                raise HeaderError("data after the end of the header block")
            continue
        if not line:
            ended = True
            continue
        name, colon, value = line.partition(":")
        name = name.strip()
        if not colon or not name:
            raise HeaderError(f"malformed header line {line!r}")
        items.append((name, value.strip()))
    return Headers(status, description, tuple(items))


def slice_header(block: bytes, name: str) -> str | None:
    """The value of header ``name`` read the way the reference's server reads the headers it
    acts on (``Nats-Msg-Id``, ``Nats-TTL``, ``Nats-Expected-*``...): the name matches exactly,
    case included, at the start of a line and followed by ``:``; spaces before the value are
    skipped and the rest of the line is kept as it is, trailing whitespace included. None when
    absent."""
    needle = b"\r\n" + name.encode() + b":"
    i = block.find(needle)
    if i < 0:
        return None
    i += len(needle)
    n = len(block)
    while i < n and block[i] == 0x20:
        i += 1
    end = block.find(b"\r\n", i)
    return block[i : n if end < 0 else end].decode("utf-8", "surrogateescape")


def replace_header(block: bytes, name: str, value: str) -> bytes:
    """``block`` with header ``name`` (exact name, every line of it) removed and ``name: value``
    added last, as the reference rewrites a header it adjusts."""
    lines = block.split(b"\r\n")
    prefix = name.encode() + b":"
    kept = [line for line in lines[1:] if line and not line.startswith(prefix)]
    return b"\r\n".join([lines[0], *kept, f"{name}: {value}".encode(), b"", b""])


def _check(kind: str, text: str) -> None:
    if "\r" in text or "\n" in text:
        raise HeaderError(f"header {kind} contains CR or LF: {text!r}")


def encode_headers(
    items: Iterable[tuple[str, str]], status: int | None = None, description: str = ""
) -> bytes:
    """A header block with the given fields (and optional status), ending with the blank line.

    Raises ``HeaderError`` for a CR or LF anywhere (it would inject protocol), an empty name, a
    name containing ``:`` or whitespace, or a description without a status.
    """
    parts = [_VERSION]
    if status is not None:
        if status < 0:
            raise HeaderError(f"negative status {status}")
        parts.append(f" {status}")
        if description:
            _check("description", description)
            parts.append(f" {description}")
    elif description:
        raise HeaderError("a description needs a status code")
    for name, value in items:
        if not name or ":" in name or name != "".join(name.split()):
            raise HeaderError(f"invalid header name {name!r}")
        _check("value", value)
        parts.append(f"\r\n{name}: {value}")
    parts.append("\r\n\r\n")
    return "".join(parts).encode("utf-8", "surrogateescape")


def no_responders_headers(subject: str) -> bytes:
    """The 503 a requester gets when nobody answers ``subject`` (the reference names it)."""
    return encode_headers((("Nats-Subject", subject),), status=503)


def status_headers(code: int, description: str = "", items: Iterable[tuple[str, str]] = ()) -> bytes:
    """A status-only block such as ``NATS/1.0 503\\r\\n\\r\\n`` or ``NATS/1.0 404 No Messages...``."""
    return encode_headers(items, code, description)
