"""The one decoder for JSON that arrives from clients (CONNECT, ``$JS.API`` bodies, pull requests,
ack bodies): Python's ``json`` made safe for untrusted bytes.

What plain ``json.loads`` does with hostile input, and what happens here instead:

- **deep nesting** (``{"a":{"a":…`` a few thousand levels) raises ``RecursionError`` from the C
  scanner, and a value just under the limit makes every later recursive walk (``json.dumps``, a
  type check) fail. A cheap pre-scan bounds the depth to ``MAX_DEPTH``: past it the body is
  refused as invalid JSON (``JSONError``). The reference (Go) accepts up to 10,000 levels; no
  NATS request or CONNECT needs more than a handful, so leafjet is stricter here, on purpose.
- **huge integers**: ``int()`` refuses more than 4,300 digits (``ValueError``) and is quadratic
  below that. An integer literal longer than any 64-bit value becomes a ``float`` subclass
  holding its text (``BigNumber``; ``inf`` beyond float's range), which every integer-typed field
  refuses as out of range, with the text Go quotes.
- **lone surrogate escapes** (``"\\ud800"``): Python keeps them in the ``str``, which then cannot
  be encoded to UTF-8. Go turns each into U+FFFD; so does ``loads``.
- **invalid UTF-8**: bytes are decoded with U+FFFD for each bad byte, as Go does inside strings.
- ``NaN``/``Infinity`` are not JSON (Go refuses them): ``JSONError``.

``JSONError`` is a ``ValueError``; callers turn it into their own invalid-JSON answer.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 128

# An integer literal this long cannot be an int64 or uint64 (20 digits and a sign): kept as text.
MAX_INT_CHARS = 21

_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
_SURROGATE_ESCAPE_STR = re.compile(r"\\[uU][dD][89a-fA-F]")
_SURROGATES = re.compile("[\ud800-\udfff]")
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


class JSONError(ValueError):
    """Untrusted bytes that are not acceptable JSON (too deep, NaN, or not JSON at all)."""


class BigNumber(float):
    """An integer literal too long for any Go integer type; ``literal`` is its text."""

    __slots__ = ("literal",)
    literal: str

    def __new__(cls, text: str) -> BigNumber:
        obj = super().__new__(cls, float(text))  # float() has no digit limit; inf past 1e308
        obj.literal = text
        return obj


def parse_int(text: str) -> int | float:
    """``json``'s ``parse_int`` for untrusted input: no ``ValueError`` and no quadratic ``int()``."""
    return BigNumber(text) if len(text) > MAX_INT_CHARS else int(text)


def too_deep(data: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Does ``data`` nest arrays and objects more than ``limit`` deep? Brackets inside strings do
    not count; unclosed ones do (the scanner recurses into them before it finds the text
    invalid). No Python loop per character: the common case (fewer brackets than ``limit``) is
    two ``count`` calls; else strings and everything but brackets are cut out and the depth
    measured by a running sum in C (less than what ``json`` then takes for the same text)."""
    if isinstance(data, str):
        if data.count("[") + data.count("{") <= limit:
            return False
    elif data.count(b"[") + data.count(b"{") <= limit:
        return False
    steps = _brackets(data).translate(_STEPS)
    return max(map(operator.sub, itertools.accumulate(steps), itertools.count(1)), default=0) > limit


def _brackets(data: bytes | str) -> bytes:
    """The brackets of a JSON text outside its strings, in order: one regex and a
    ``bytes.translate``, both in C (brackets, quotes and backslashes are ASCII, never part of a
    longer UTF-8 sequence)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if b'"' in raw:
        raw = _STRINGS.sub(b"", raw)
    return raw.translate(None, _NOT_BRACKETS)


def _depths(brackets: bytes) -> list[int]:
    """The nesting depth after each bracket: 2 * (opening brackets so far) - position, a running
    sum in C (a closing bracket of the other kind counts as closing: the scanner stops there)."""
    return list(map(operator.sub, itertools.accumulate(brackets.translate(_STEPS)), itertools.count(1)))


def innermost_open(prefix: str) -> str | None:
    """The innermost array or object (``"["`` or ``"{"``) still open at the end of ``prefix``, a
    JSON text read so far (brackets inside strings do not count); None at the top level. No
    Python loop per character: after the last point where the depth was one less than at the
    end comes the bracket that opened the innermost level."""
    brackets = _brackets(prefix)
    depths = [0, *_depths(brackets)]
    final = depths[-1]
    if final <= 0:
        return None
    last_below = len(depths) - 1 - depths[::-1].index(final - 1)
    return chr(brackets[last_below])  # depths[k] follows brackets[k - 1]: the next bracket opens


def text(data: bytes | bytearray | memoryview | str) -> str:
    """Untrusted bytes as text: each byte that is not UTF-8 becomes U+FFFD (as Go reads them)."""
    if isinstance(data, str):
        return data
    return bytes(data).decode("utf-8", "replace")


def _reject_constant(name: str) -> Any:
    raise JSONError(f"{name} is not JSON")


def decoder(
    *,
    parse_float: Callable[[str], Any] | None = None,
    parse_int_: Callable[[str], Any] | None = None,
    parse_constant: Callable[[str], Any] | None = None,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> json.JSONDecoder:
    """A ``json.JSONDecoder`` with the safe defaults (``parse_int``, NaN refused); for callers that
    need ``raw_decode``. They must call ``check`` first and ``clean`` on what they decode."""
    return json.JSONDecoder(
        parse_float=parse_float,
        parse_int=parse_int_ or parse_int,
        parse_constant=parse_constant or _reject_constant,
        object_pairs_hook=object_pairs_hook,
    )


def raw_decode(fast: json.JSONDecoder, slow: json.JSONDecoder, text: str, pos: int = 0) -> tuple[Any, int]:
    """``fast.raw_decode`` — a decoder whose ``parse_int`` is ``int``, which the C scanner runs
    without a Python call (a body of 500,000 integers: ~10x faster) — or, when it meets an
    integer past ``int()``'s digit limit, ``slow``'s (whose ``parse_int`` is safe)."""
    try:
        return fast.raw_decode(text, pos)
    except json.JSONDecodeError:
        raise
    except ValueError as e:
        if "integer string conversion" not in str(e):
            raise
        return slow.raw_decode(text, pos)


def check(data: bytes | str, limit: int = MAX_DEPTH) -> None:
    """Raise ``JSONError`` when ``data`` nests deeper than ``limit``."""
    if too_deep(data, limit):
        raise JSONError(f"JSON nested deeper than {limit} levels")


def needs_clean(data: bytes | str) -> bool:
    """May decoding ``data`` give a string holding a lone surrogate? (A ``\\uD8..``-``\\uDF..``
    escape in it: valid pairs are joined by the decoder, lone ones are kept.)"""
    if isinstance(data, str):
        return _SURROGATE_ESCAPE_STR.search(data) is not None
    return _SURROGATE_ESCAPE.search(data) is not None


def clean(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys included) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, tuple):  # object_pairs_hook=tuple-like callers
        return tuple(clean(v) for v in value)
    return value


def loads(data: bytes | bytearray | memoryview | str, *, limit: int = MAX_DEPTH, **kw: Any) -> Any:
    """``json.loads`` for untrusted input: one JSON value, nothing after it. ``JSONError`` (a
    ``ValueError``; ``json.JSONDecodeError`` for syntax errors) for anything unacceptable. Keyword
    arguments go to ``json.JSONDecoder`` (``parse_int`` defaults to the safe one)."""
    if not isinstance(data, str):
        data = bytes(data)
    check(data, limit)
    s = text(data)
    kw.setdefault("parse_int", parse_int)
    kw.setdefault("parse_constant", _reject_constant)
    try:
        value = json.loads(s, **kw)
    except RecursionError:  # not reachable past check(); kept so no caller ever sees one
        raise JSONError("JSON nested too deep") from None
    return clean(value) if needs_clean(s) else value
