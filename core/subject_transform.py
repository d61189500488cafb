"""Subject transforms: a source pattern and a destination template, compiled once (pure).

The reference's ``server/subject_transform.go``, rebuilt from its behaviour: a destination is a
subject whose tokens are literals, legacy ``$N`` placeholders, or one "mustache" function each:
``{{wildcard(n)}}``, ``{{partition(buckets[, n...])}}``, ``{{split(n, delim)}}``,
``{{splitFromLeft(n, pos)}}``, ``{{splitFromRight(n, pos)}}``, ``{{sliceFromLeft(n, size)}}``,
``{{sliceFromRight(n, size)}}``, ``{{left(n, len)}}``, ``{{right(n, len)}}``, ``{{random(max)}}``.
``n`` counts the source's ``*`` tokens from 1. A trailing ``>`` carries the rest of the subject.

Streams use transforms in four places (core/jetstream/DESIGN.md, "Subject transforms"): a
stream's ``subject_transform`` on ingest, its ``republish``, and the ``subject_transforms`` of its
sources and its mirror. Their configs are checked with ``validate_mapping`` (the reference's
``ValidateMapping``), whose error texts the API errors carry.

The token functions work on the subject's UTF-8 bytes, as the reference's Go strings do: a
subject that is not ASCII is cut where the reference cuts it (bytes that are not UTF-8 are kept
as the parser keeps them, lone surrogates). ``partition`` hashes with 32-bit FNV-1a, so a
subject lands in the same bucket as on nats-server.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from core.subjects import tokens_match

__all__ = [
    "SubjectTransform",
    "TransformError",
    "compile_transform",
    "fnv1a_32",
    "validate_mapping",
]

# The reference's messages (server/errors.go): every destination error starts with this.
_INVALID_DEST = "invalid mapping destination"
INVALID_TRANSFORM = f"{_INVALID_DEST}: invalid transform"
NOT_ALL_WILDCARDS = f"{_INVALID_DEST}: not using all of the token wildcard(s)"
UNKNOWN_FUNCTION = f"{_INVALID_DEST}: unknown function"
INDEX_OUT_OF_RANGE = f"{_INVALID_DEST}: wildcard index out of range"
NOT_ENOUGH_ARGS = f"{_INVALID_DEST}: not enough arguments passed to the function"
INVALID_ARG = f"{_INVALID_DEST}: function argument is invalid or in the wrong format"
TOO_MANY_ARGS = f"{_INVALID_DEST}: too many arguments passed to the function"
BAD_SUBJECT = "invalid subject"

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class TransformError(ValueError):
    """A source or destination the reference refuses; ``str()`` is the reference's text."""

    @classmethod
    def at(cls, message: str, token: str) -> TransformError:
        """The reference's ``mappingDestinationErr``: ``<message> in <token>``."""
        return cls(f"{message} in {token}" if token else message)


class Kind(Enum):
    LITERAL = "literal"
    WILDCARD = "wildcard"
    PARTITION = "partition"
    SPLIT_FROM_LEFT = "splitFromLeft"
    SPLIT_FROM_RIGHT = "splitFromRight"
    SLICE_FROM_LEFT = "sliceFromLeft"
    SLICE_FROM_RIGHT = "sliceFromRight"
    SPLIT = "split"
    LEFT = "left"
    RIGHT = "right"
    RANDOM = "random"


# Go's regexp ``\s`` is [\t\n\f\r ] (not \v): spelled out so Python's matches the same bytes.
_WS = r"[\t\n\f\r ]"


def _function(name: str) -> re.Pattern[str]:
    # "[wW]ildcard": only the first letter's case is free (``{{WildCard(1)}}`` is unknown),
    # "splitFromLeft": each word's first letter.
    spelled = "".join(f"[{c.lower()}{c.upper()}]" if c.isupper() or i == 0 else c for i, c in enumerate(name))
    return re.compile(r"\{\{" + _WS + "*" + spelled + _WS + r"*\((.*)\)" + _WS + r"*\}\}")


# In the order the reference tries them: the first whose pattern is found in a token wins.
_FUNCTIONS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    (Kind.WILDCARD, _function("wildcard")),
    (Kind.PARTITION, _function("partition")),
    (Kind.SPLIT_FROM_LEFT, _function("splitFromLeft")),
    (Kind.SPLIT_FROM_RIGHT, _function("splitFromRight")),
    (Kind.SLICE_FROM_LEFT, _function("sliceFromLeft")),
    (Kind.SLICE_FROM_RIGHT, _function("sliceFromRight")),
    (Kind.RIGHT, _function("right")),
    (Kind.LEFT, _function("left")),
    (Kind.SPLIT, _function("split")),
    (Kind.RANDOM, _function("random")),
)
_PATTERNS = dict(_FUNCTIONS)
_COMMA = re.compile(r"," + _WS + "*")
_GO_INT = re.compile(r"[+-]?[0-9]+")
_WHITESPACE = frozenset("\t\n\f\r ")


@dataclass(frozen=True, slots=True)
class _Step:
    """One destination token: a literal, or a function of source tokens (their indexes in the
    subject, not wildcard numbers), an integer and a string argument."""

    kind: Kind
    literal: str = ""
    indexes: tuple[int, ...] = ()
    number: int = -1
    text: str = ""


@dataclass(frozen=True, slots=True)
class _Placeholder:
    kind: Kind
    wildcards: tuple[int, ...] = ()  # wildcard numbers as written (1 = the first ``*``)
    number: int = -1
    text: str = ""


# ------------------------------------------------------------------------------ parsing


def _go_atoi(text: str) -> int | None:
    """``strconv.Atoi``: an optional sign and ASCII digits, in int64 range; None otherwise."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _int32(value: int) -> int:
    """Go's ``int32(x)``: wraps."""
    return (value + 2**31) % 2**32 - 2**31


def _args(kind: Kind, token: str) -> list[str] | None:
    m = _PATTERNS[kind].search(token)
    return _COMMA.split(m.group(1)) if m else None


def _index_and_int(kind: Kind, token: str, args: list[str]) -> _Placeholder:
    """``transformIndexIntArgsHelper``: (wildcard number, int32)."""
    if len(args) < 2:
        raise TransformError.at(NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise TransformError.at(TOO_MANY_ARGS, token)
    index = _go_atoi(args[0].strip(" "))
    number = _go_atoi(args[1].strip(" "))
    if index is None or number is None or not -(2**31) <= number <= _INT32_MAX:
        raise TransformError.at(INVALID_ARG, token)
    return _Placeholder(kind, (index,), number)


def _placeholder(token: str) -> _Placeholder:
    """``indexPlaceHolders``: what a destination token asks for."""
    n = len(token)
    if n <= 1:
        return _Placeholder(Kind.LITERAL)
    if token[0] == "$":
        index = _go_atoi(token[1:])
        # "$JS" and the like are literals: other things rely on tokens that start with '$'
        return _Placeholder(Kind.LITERAL) if index is None else _Placeholder(Kind.WILDCARD, (index,))
    if not (n > 4 and token.startswith("{{") and token.endswith("}}")):
        return _Placeholder(Kind.LITERAL)
    if (args := _args(Kind.WILDCARD, token)) is not None:
        if len(args) == 1 and args[0] == "":
            raise TransformError.at(NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise TransformError.at(TOO_MANY_ARGS, token)
        index = _go_atoi(args[0].strip(" "))
        if index is None:
            raise TransformError.at(INVALID_ARG, token)
        return _Placeholder(Kind.WILDCARD, (index,))
    if (args := _args(Kind.PARTITION, token)) is not None:
        buckets = _go_atoi(args[0].strip(" "))
        if buckets is None or buckets > _INT32_MAX:
            raise TransformError.at(INVALID_ARG, token)
        indexes = []
        for arg in args[1:]:
            index = _go_atoi(arg.strip(" "))
            if index is None:
                raise TransformError.at(INVALID_ARG, token)
            indexes.append(index)
        return _Placeholder(Kind.PARTITION, tuple(indexes), _int32(buckets))
    for kind in (
        Kind.SPLIT_FROM_LEFT,
        Kind.SPLIT_FROM_RIGHT,
        Kind.SLICE_FROM_LEFT,
        Kind.SLICE_FROM_RIGHT,
        Kind.RIGHT,
        Kind.LEFT,
    ):
        if (args := _args(kind, token)) is not None:
            return _index_and_int(kind, token, args)
    if (args := _args(Kind.SPLIT, token)) is not None:
        if len(args) < 2:
            raise TransformError.at(NOT_ENOUGH_ARGS, token)
        if len(args) > 2:
            raise TransformError.at(TOO_MANY_ARGS, token)
        index = _go_atoi(args[0].strip(" "))
        if index is None or " " in args[1] or "." in args[1]:
            raise TransformError.at(INVALID_ARG, token)
        return _Placeholder(Kind.SPLIT, (index,), -1, args[1])
    if (args := _args(Kind.RANDOM, token)) is not None:
        if len(args) != 1:
            raise TransformError.at(NOT_ENOUGH_ARGS, token)
        ceiling = _go_atoi(args[0].strip(" "))
        if ceiling is None or ceiling > _INT32_MAX:
            raise TransformError.at(INVALID_ARG, token)
        return _Placeholder(Kind.RANDOM, (), _int32(ceiling))
    raise TransformError.at(UNKNOWN_FUNCTION, token)


def _subject_info(subject: str) -> tuple[list[str], int, bool] | None:
    """``subjectInfo``: tokens, count of ``*``, whether it ends in ``>``; None when invalid
    (an empty token, or anything after ``>``)."""
    if not subject:
        return None
    tokens = subject.split(".")
    pwcs, fwc = 0, False
    for t in tokens:
        if not t or fwc:
            return None
        if t == ">":
            fwc = True
        elif t == "*":
            pwcs += 1
    return tokens, pwcs, fwc


# ------------------------------------------------------------------------------ the transform


def fnv1a_32(data: bytes) -> int:
    """32-bit FNV-1a (Go's ``hash/fnv.New32a``), the reference's partition hash."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def _raw(token: str) -> bytes:
    return token.encode("utf-8", "surrogateescape")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _split_at(token: str, position: int) -> str:
    """``token[:position] + "." + token[position:]`` on bytes, unless ``position`` is outside it."""
    raw = _raw(token)
    if 0 < position < len(raw):
        return _text(raw[:position] + b"." + raw[position:])
    return token


def _slices_from_left(token: str, size: int) -> str:
    raw = _raw(token)
    if not 0 < size < len(raw):
        return token
    return _text(b".".join(raw[i : i + size] for i in range(0, len(raw), size)))


def _slices_from_right(token: str, size: int) -> str:
    raw = _raw(token)
    if not 0 < size < len(raw):
        return token
    head = len(raw) % size
    parts = [raw[:head]] if head else []
    parts.extend(raw[i : i + size] for i in range(head, len(raw), size))
    return _text(b".".join(parts))


def _split(token: str, delim: str) -> str:
    """The reference's ``split``: empty pieces vanish, with the separators around them."""
    pieces = list(token) if delim == "" else token.split(delim)  # Go splits "" into characters
    out: list[str] = []
    last = len(pieces) - 1
    for j, piece in enumerate(pieces):
        if piece:
            out.append(piece)
        if j < last and pieces[j + 1] and not (j == 0 and not piece):
            out.append(".")
    return "".join(out)


Render = Callable[[list[str]], str]


def _renderer(step: _Step) -> Render:
    """What one destination token becomes for a subject's tokens, decided once at compile time
    (a per-message dispatch on the kind cost more than the work itself)."""
    kind, n = step.kind, step.number
    if kind is Kind.LITERAL:
        literal = step.literal
        return lambda _tokens: literal
    if kind is Kind.RANDOM:
        ceiling = abs(n)  # Go's rand.Int31() % n is never negative
        return lambda _tokens: str(random.getrandbits(31) % ceiling) if ceiling else "0"
    if kind is Kind.PARTITION:
        if n == 0:
            return lambda _tokens: "0"
        buckets, indexes = n & 0xFFFFFFFF, step.indexes  # Go's uint32(n)
        if indexes:
            return lambda tokens: str(fnv1a_32(b"".join(_raw(tokens[j]) for j in indexes)) % buckets)
        return lambda tokens: str(fnv1a_32(_raw(".".join(tokens))) % buckets)
    if not step.indexes:  # pragma: no cover - every other function names a token
        return lambda _tokens: ""
    i = step.indexes[0]
    if kind is Kind.WILDCARD:
        return lambda tokens: tokens[i] if i < len(tokens) else ""
    if kind is Kind.SPLIT_FROM_LEFT:
        return lambda tokens: _split_at(tokens[i], n)
    if kind is Kind.SPLIT_FROM_RIGHT:
        return lambda tokens: _split_from_right(tokens[i], n)
    if kind is Kind.SLICE_FROM_LEFT:
        return lambda tokens: _slices_from_left(tokens[i], n)
    if kind is Kind.SLICE_FROM_RIGHT:
        return lambda tokens: _slices_from_right(tokens[i], n)
    if kind is Kind.SPLIT:
        delim = step.text
        return lambda tokens: _split(tokens[i], delim)
    if kind is Kind.LEFT:
        return lambda tokens: _left(tokens[i], n)
    return lambda tokens: _right(tokens[i], n)


def _split_from_right(token: str, n: int) -> str:
    size = len(_raw(token))
    return _split_at(token, size - n) if 0 < n < size else token


def _left(token: str, n: int) -> str:
    raw = _raw(token)
    return _text(raw[:n]) if 0 < n < len(raw) else token


def _right(token: str, n: int) -> str:
    raw = _raw(token)
    return _text(raw[len(raw) - n :]) if 0 < n < len(raw) else token


class SubjectTransform:
    """A compiled transform. ``match`` rewrites a subject the source pattern takes (None for one
    it does not); ``transform_tokens`` rewrites one already known to match."""

    __slots__ = ("_identity", "_renders", "_rest_from", "_src_tokens", "_tail", "dest", "src")

    def __init__(self, src: str, dest: str, src_tokens: list[str], steps: tuple[_Step, ...]) -> None:
        self.src = src
        self.dest = dest
        self._src_tokens = src_tokens
        self._tail = dest.split(".")[-1] == ">"
        # a trailing ">" is no step: the subject's tokens from the source's ">" on follow
        renders = [_renderer(s) for s in steps]
        self._renders = tuple(renders[:-1] if self._tail else renders)
        self._rest_from = len(src_tokens) - 1
        self._identity = src in ("", ">") and dest in ("", ">")

    def __repr__(self) -> str:
        return f"SubjectTransform({self.src!r}, {self.dest!r})"

    def match(self, subject: str) -> str | None:
        """The transformed subject, or None when ``subject`` is not a literal subject the source
        pattern matches (the reference's ``Match`` errors)."""
        if self._identity:
            return subject
        tokens = subject.split(".")
        if "" in tokens or "*" in tokens or ">" in tokens:
            return None
        if self.src != ">" and not tokens_match(self._src_tokens, tokens):
            return None
        return self.transform_tokens(tokens)

    def transform_tokens(self, tokens: list[str]) -> str:
        parts = [render(tokens) for render in self._renders]
        if self._tail:
            parts.append(".".join(tokens[self._rest_from :]))
        return ".".join(parts)


def compile_transform(src: str, dest: str) -> SubjectTransform | None:
    """``NewSubjectTransform``: None for an empty destination (no transform); an empty source
    is ``>``. Raises TransformError with the reference's text for what it refuses."""
    if dest == "":
        return None
    if src == "":
        src = ">"
    s_info, d_info = _subject_info(src), _subject_info(dest)
    if s_info is None or d_info is None:
        raise TransformError(BAD_SUBJECT)
    s_tokens, npwcs, s_fwc = s_info
    d_tokens, d_pwcs, d_fwc = d_info
    if d_pwcs > 0 or s_fwc != d_fwc:
        raise TransformError(BAD_SUBJECT)
    steps: list[_Step] = []
    if npwcs > 0 or s_fwc:
        # wildcard number -> the index of that '*' in the subject; Go's map gives 0 for others
        positions = {n: i for n, i in enumerate((i for i, t in enumerate(s_tokens) if t == "*"), 1)}
        for token in d_tokens:
            ph = _placeholder(token)
            if ph.kind is Kind.LITERAL:
                steps.append(_Step(Kind.LITERAL, literal=token))
            elif ph.kind is Kind.RANDOM:
                steps.append(_Step(Kind.RANDOM, number=ph.number))
            else:
                indexes = []
                for w in ph.wildcards:
                    if w > npwcs:
                        raise TransformError.at(INDEX_OUT_OF_RANGE, f"{token}: [{w}]")
                    indexes.append(positions.get(w, 0))
                steps.append(_Step(ph.kind, indexes=tuple(indexes), number=ph.number, text=ph.text))
    else:
        for token in d_tokens:
            ph = _placeholder(token)
            if ph.kind is Kind.LITERAL:
                steps.append(_Step(Kind.LITERAL, literal=token))
            elif ph.kind in (Kind.RANDOM, Kind.PARTITION):
                # without wildcards a partition hashes the whole subject, whatever it names
                steps.append(_Step(ph.kind, number=ph.number))
            else:
                raise TransformError.at(INDEX_OUT_OF_RANGE, token)
    return SubjectTransform(src, dest, s_tokens, tuple(steps))


def validate_mapping(src: str, dest: str) -> str | None:
    """``ValidateMapping``: None when ``dest`` is a destination a stream may use with the
    source ``src``, else the reference's error text (which the API errors embed)."""
    if dest == "":
        return None
    after_fwc = False
    for t in dest.split("."):
        if not t or after_fwc:
            return str(TransformError.at(INVALID_TRANSFORM, t))
        n = len(t)
        if n > 4 and t.startswith("{{") and t.endswith("}}"):
            if not any(pattern.search(t) for _kind, pattern in _FUNCTIONS):
                return str(TransformError.at(UNKNOWN_FUNCTION, t))
            continue
        if t == ">":
            after_fwc = True
        elif _WHITESPACE.intersection(t):
            return INVALID_TRANSFORM
    try:
        compile_transform(src, dest)
    except TransformError as e:
        return str(e)
    return None
