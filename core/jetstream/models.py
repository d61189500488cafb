"""Stream configuration, state and info with the reference's JSON names (pure data).

Facts taken from nats-server ``server/stream.go`` (``StreamConfig`` json tags, ``checkStreamCfg``,
``configUpdateCheck``), ``server/jetstream_api.go`` (``jsStreamCreateRequest``/``UpdateRequest``,
``unmarshalRequest``) and ``server/jetstream_versioning.go``; each was checked against a live
nats-server 2.15.1 (see ``tests/unit/core/jetstream/test_models.py``).

Decoding follows Go's ``encoding/json`` as the reference uses it, because its messages reach clients
inside ``JSInvalidJSONErr`` (10025): keys match case-insensitively; ``null`` leaves a field at its
zero value; a wrong JSON type, an out-of-range number or (in strict mode, the reference's default)
an unknown field is an error, and the first error in document order is the one reported.

Durations are int nanoseconds. Nested objects (mirror, sources, placement, republish, ...) are kept
as plain dicts in the reference's JSON shape (its ``omitempty`` rules applied); treat them as
read-only.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from core import jsonsafe
from core.api_errors import ApiError, api_error
from core.jetstream.gotime import format_go_time, parse_go_time, rfc3339_nano
from core.store.api import MAX_SEQ
from core.subject_transform import TransformError, compile_transform, validate_mapping
from core.subjects import SubjectIndex, is_subset, is_valid_literal_subject, is_valid_subject, overlaps

API_TYPE_PREFIX = "io.nats.jetstream.api.v1."
JS_API_PREFIX = "$JS.API"

MAX_NAME_LEN = 255  # JSMaxNameLen (bytes)
MAX_DESCRIPTION_LEN = 4 * 1024  # JSMaxDescriptionLen (bytes)
MAX_METADATA_LEN = 128 * 1024  # JSMaxMetadataLen (sum of key and value bytes)
STREAM_MAX_REPLICAS = 5  # StreamMaxReplicas
DEFAULT_DUPLICATE_WINDOW = 120 * 1_000_000_000  # StreamDefaultDuplicatesWindow, 2 min
_MS100 = 100 * 1_000_000
_SECOND = 1_000_000_000

RETENTIONS = ("limits", "interest", "workqueue")
DISCARDS = ("old", "new")
STORAGES = ("file", "memory")
COMPRESSIONS = ("none", "s2")
PERSIST_MODES = ("default", "async")

# Stream metadata the reference manages itself (jetstream_versioning.go).
META_REQUIRED_LEVEL = "_nats.req.level"  # stored
META_SERVER_VERSION = "_nats.ver"  # responses only
META_SERVER_LEVEL = "_nats.level"  # responses only

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT64 = (0, (1 << 64) - 1)
_WHITESPACE = frozenset(" \t\r\n\f")
_ASSET_NAME_FORBIDDEN = _WHITESPACE | frozenset(".*>\\/")


def is_valid_asset_name(name: str) -> bool:
    """The reference's ``isValidAssetName``: non-empty, no whitespace, ``.``, ``*``, ``>``, ``\\``, ``/``."""
    return bool(name) and not _ASSET_NAME_FORBIDDEN.intersection(name)


def _blen(s: str) -> int:
    return len(s.encode())


def _invalid_config(msg: str) -> ApiError:
    return api_error("JSStreamInvalidConfigF", err=msg)


def _pedantic(msg: str) -> ApiError:
    return api_error("JSPedanticErrF", err=msg)


# --------------------------------------------------------------------------- Go-style JSON decoding


class _FloatLiteral(float):
    """A JSON number with a fraction or exponent that remembers its source text (Go quotes it)."""

    __slots__ = ("literal",)  # no instance dict: half the cost of a body full of numbers
    literal: str

    def __new__(cls, text: str) -> _FloatLiteral:
        obj = super().__new__(cls, text)
        obj.literal = text
        return obj


class _NegativeZero(int):
    """``-0`` in a JSON body: zero to Python, but Go refuses it for an unsigned field."""

    def __new__(cls) -> _NegativeZero:
        return super().__new__(cls, 0)


_NEGATIVE_ZERO = _NegativeZero()


def _parse_json_int(text: str) -> int | float:
    """``json``'s ``parse_int`` for request bodies: keeps ``-0`` apart from ``0``; an integer too
    long for any Go integer is kept as its text (``int()`` would refuse 4,300 digits, and is
    quadratic below that), which every integer field then refuses, quoting it, as Go does."""
    if text == "-0":
        return _NEGATIVE_ZERO
    return _FloatLiteral(text) if len(text) > jsonsafe.MAX_INT_CHARS else int(text)


class _DecodeError(Exception):
    pass


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise _DecodeError(f"json: unsupported value {v!r}")


def _number_text(v: Any) -> str:
    if isinstance(v, _NegativeZero):
        return "-0"
    if isinstance(v, _FloatLiteral | jsonsafe.BigNumber):
        return v.literal
    return repr(v) if isinstance(v, float) else str(v)


def _raw_text(v: Any) -> str:
    if isinstance(v, _FloatLiteral | jsonsafe.BigNumber):
        return v.literal
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


_ABSENT = object()


class _T:
    go: str = ""
    zero: Any = None  # Go's zero value, what a JSON null element of a slice becomes

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:  # pragma: no cover
        raise NotImplementedError


def _type_error(value_desc: str, path: list[Any], root: str, go: str) -> _DecodeError:
    if not path:
        return _DecodeError(f"json: cannot unmarshal {value_desc} into Go value of type server.{root}")
    where = ".".join([root, *map(str, path)])
    if isinstance(path[-1], int):
        return _DecodeError(f"json: cannot unmarshal {value_desc} into {where} of type {go}")
    return _DecodeError(f"json: cannot unmarshal {value_desc} into Go struct field {where} of type {go}")


class _Str(_T):
    go = "string"
    zero = ""

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, str):
            raise _type_error(_json_kind(v), path, root, self.go)
        return v


class _Bool(_T):
    go = "bool"
    zero = False

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, bool):
            raise _type_error(_json_kind(v), path, root, self.go)
        return v


class _Int(_T):
    def __init__(self, go: str, bounds: tuple[int, int]) -> None:
        self.go = go
        self.lo, self.hi = bounds
        self.zero = 0

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        kind = _json_kind(v)
        if kind != "number":
            raise _type_error(kind, path, root, self.go)
        if (
            isinstance(v, float)
            or not self.lo <= v <= self.hi
            or (self.lo == 0 and isinstance(v, _NegativeZero))
        ):
            raise _type_error(f"number {_number_text(v)}", path, root, self.go)
        return int(v)


class _Slice(_T):
    def __init__(self, elem: _T, go: str) -> None:
        self.elem, self.go = elem, go

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, list):
            raise _type_error(_json_kind(v), path, root, self.go)
        out = []
        for i, item in enumerate(v):
            d = self.elem.decode(item, [*path, i], root, strict)
            out.append(self.elem.zero if d is _ABSENT else d)
        return out


class _Map(_T):
    """``map[string]<item>``."""

    def __init__(self, item: _T, go: str) -> None:
        self.item, self.go = item, go

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, dict):
            raise _type_error(_json_kind(v), path, root, self.go)
        out = {}
        for k, item in v.items():
            d = self.item.decode(item, [*path, k], root, strict)
            out[k] = self.item.zero if d is _ABSENT else d  # null: Go's zero value, as in a slice
        return out


class _StrMap(_Map):
    """``map[string]string`` (a stream's or consumer's metadata)."""

    def __init__(self) -> None:
        super().__init__(_Str(), "map[string]string")


class _Enum(_T):
    """A type with its own UnmarshalJSON: ``can not unmarshal "<raw>"`` for anything not listed."""

    def __init__(self, values: Iterable[str], *, fold: bool = False, empty_as: str | None = None) -> None:
        self.values, self.fold, self.empty_as = tuple(values), fold, empty_as

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if isinstance(v, str):
            s = v.lower() if self.fold else v
            if s in self.values:
                return s
            if s == "" and self.empty_as is not None:
                return self.empty_as
        raise _DecodeError(f"can not unmarshal {json.dumps(_raw_text(v), ensure_ascii=False)}")


class _Compression(_T):
    go = "string"

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is not None and not isinstance(v, str):
            raise _DecodeError(f"json: cannot unmarshal {_json_kind(v)} into Go value of type string")
        if v not in COMPRESSIONS:
            raise _DecodeError("unknown compression algorithm")
        return v


class _Time(_T):
    go = "time.Time"

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, str):
            raise _type_error(_json_kind(v), path, root, self.go)
        try:
            ns, offset = parse_go_time(v)
        except ValueError as e:
            raise _DecodeError(str(e)) from None
        return format_go_time(ns, offset)  # as Go re-marshals it: offset kept, fraction trimmed


class _Struct(_T):
    def __init__(self, go: str, spec: dict[str, _T], shape: Callable[[dict], dict] | None = None) -> None:
        self.go = go
        self.spec = spec
        self.folded = {k.casefold(): k for k in spec}
        self.shape = shape

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, dict):
            raise _type_error(_json_kind(v), path, root, self.go)
        out: dict[str, Any] = {}
        for key, item in v.items():
            name = key if key in self.spec else self.folded.get(key.casefold())
            if name is None:
                if strict:
                    raise _DecodeError(f"json: unknown field {json.dumps(key)}")
                continue
            d = self.spec[name].decode(item, [*path, name], root, strict)
            if d is not _ABSENT:
                out[name] = d
        return self.shape(out) if self.shape else out


# Shapes: the reference's JSON form of each nested struct after a decode/encode round trip.


def _shape_transform(d: dict) -> dict:
    return {"src": d.get("src", ""), "dest": d.get("dest", "")}


def _shape_external(d: dict) -> dict:
    return {"api": d.get("api", ""), "deliver": d.get("deliver", "")}


def _shape_omitempty(order: tuple[str, ...]) -> Callable[[dict], dict]:
    return lambda d: {k: d[k] for k in order if d.get(k)}


def _shape_source(d: dict) -> dict:
    out: dict[str, Any] = {"name": d.get("name", "")}
    for k in ("opt_start_seq", "opt_start_time", "filter_subject", "subject_transforms"):
        if d.get(k):
            out[k] = d[k]
    if "subject_transforms" in out:
        out["subject_transforms"] = [_shape_transform(t or {}) for t in out["subject_transforms"]]
    for k in ("external", "consumer"):
        if k in d:
            out[k] = d[k]
    return out


def _shape_republish(d: dict) -> dict:
    out: dict[str, Any] = {}
    if d.get("src"):
        out["src"] = d["src"]
    out["dest"] = d.get("dest", "")
    if d.get("headers_only"):
        out["headers_only"] = True
    return out


_STR, _BOOL, _DUR = _Str(), _Bool(), _Int("time.Duration", _INT64)
_TRANSFORM = _Struct("server.SubjectTransformConfig", {"src": _STR, "dest": _STR}, _shape_transform)
_SOURCE = _Struct(
    "server.StreamSource",
    {
        "name": _STR,
        "opt_start_seq": _Int("uint64", _UINT64),
        "opt_start_time": _Time(),
        "filter_subject": _STR,
        "subject_transforms": _Slice(_TRANSFORM, "[]server.SubjectTransformConfig"),
        "external": _Struct("server.ExternalStream", {"api": _STR, "deliver": _STR}, _shape_external),
        "consumer": _Struct(
            "server.StreamConsumerSource",
            {"name": _STR, "deliver_subject": _STR},
            _shape_omitempty(("name", "deliver_subject")),
        ),
    },
    _shape_source,
)
_PLACEMENT = _Struct(
    "server.Placement",
    {"cluster": _STR, "tags": _Slice(_STR, "[]string"), "preferred": _STR},
    _shape_omitempty(("cluster", "tags", "preferred")),
)
_STREAM_CONFIG_REQUEST = _Struct(
    "StreamConfigRequest",
    {
        "name": _STR,
        "description": _STR,
        "subjects": _Slice(_STR, "[]string"),
        "retention": _Enum(RETENTIONS),
        "max_consumers": _Int("int", _INT64),
        "max_msgs": _Int("int64", _INT64),
        "max_bytes": _Int("int64", _INT64),
        "max_age": _DUR,
        "max_msgs_per_subject": _Int("int64", _INT64),
        "max_msg_size": _Int("int32", _INT32),
        "discard": _Enum(DISCARDS, fold=True),
        "storage": _Enum(STORAGES),
        "num_replicas": _Int("int", _INT64),
        "no_ack": _BOOL,
        "duplicate_window": _DUR,
        "placement": _PLACEMENT,
        "mirror": _SOURCE,
        "sources": _Slice(_SOURCE, "[]*server.StreamSource"),
        "compression": _Compression(),
        "first_seq": _Int("uint64", _UINT64),
        "subject_transform": _TRANSFORM,
        "republish": _Struct(
            "server.RePublish", {"src": _STR, "dest": _STR, "headers_only": _BOOL}, _shape_republish
        ),
        "allow_direct": _BOOL,
        "mirror_direct": _BOOL,
        "discard_new_per_subject": _BOOL,
        "sealed": _BOOL,
        "deny_delete": _BOOL,
        "deny_purge": _BOOL,
        "allow_rollup_hdrs": _BOOL,
        "consumer_limits": _Struct(
            "server.StreamConsumerLimits",
            {"inactive_threshold": _DUR, "max_ack_pending": _Int("int", _INT64)},
            _shape_omitempty(("inactive_threshold", "max_ack_pending")),
        ),
        "allow_msg_ttl": _BOOL,
        "subject_delete_marker_ttl": _DUR,
        "allow_msg_counter": _BOOL,
        "allow_atomic": _BOOL,
        "allow_msg_schedules": _BOOL,
        "persist_mode": _Enum(PERSIST_MODES, empty_as="default"),
        "allow_batched": _BOOL,
        "metadata": _StrMap(),
        "pedantic": _BOOL,
    },
)


def decode_request(data: bytes | str) -> Any:
    """Parse an API request body as the reference's streaming decoder does.

    Empty input is ``{}``; several concatenated JSON objects merge, later keys winning (a value
    that is not an object is returned as is, for the type error Go reports). Syntax errors raise
    ``JSInvalidJSONErr`` with Go's text for the common cases (approximate for the rest).
    Numbers with a fraction or exponent keep their source text so type errors can quote it.
    """
    text = jsonsafe.text(data)
    if jsonsafe.too_deep(text):
        raise api_error("JSInvalidJSONErr", err="exceeded max depth")
    # ``-0`` (kept apart from 0 for unsigned fields) needs the Python parse_int; else C's int().
    decoder = _REQUEST_DECODER if "-0" in text else _REQUEST_DECODER_FAST
    result: Any = _ABSENT
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            break
        try:
            value, pos = jsonsafe.raw_decode(decoder, _REQUEST_DECODER, text, pos)
        except json.JSONDecodeError as e:
            raise api_error("JSInvalidJSONErr", err=_go_syntax_error(e, text)) from None
        except _ConstantError as e:
            at = text.find(e.name, pos)
            if e.name.startswith("-"):
                msg = f"invalid character 'I' in numeric literal at offset {at + 2}"
            else:
                msg = f"invalid character '{e.name[0]}' looking for beginning of value at offset {at + 1}"
            raise api_error("JSInvalidJSONErr", err=msg) from None
        if value is None:
            continue
        if jsonsafe.needs_clean(text):
            value = jsonsafe.clean(value)  # a lone surrogate escape is U+FFFD, as in Go
        if not isinstance(value, dict):
            # Go stops at the first value it cannot decode into the request struct.
            return value
        result = value if result is _ABSENT else {**result, **value}
    return {} if result is _ABSENT else result


class _ConstantError(ValueError):
    """``NaN``/``Infinity``: Python's json accepts them, Go's does not."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _reject_constant(name: str) -> Any:
    raise _ConstantError(name)


_REQUEST_DECODER = json.JSONDecoder(
    parse_float=_FloatLiteral, parse_int=_parse_json_int, parse_constant=_reject_constant
)
_REQUEST_DECODER_FAST = json.JSONDecoder(
    parse_float=_FloatLiteral, parse_int=int, parse_constant=_reject_constant
)


def parse_json_value(data: bytes) -> Any:
    """One JSON value, as Go's ``json.Unmarshal`` reads a body (a direct get's): nothing else
    before or after it, no NaN or Infinity, and numbers kept as the request structs need them
    (``-0``, a fraction's text). ``ValueError`` for anything else (too deep included)."""
    return jsonsafe.loads(
        data, parse_float=_FloatLiteral, parse_int=_parse_json_int, parse_constant=_reject_constant
    )


def _go_quote_char(ch: str) -> str:
    if ch == "'":
        return "'\\''"
    return "'" + json.dumps(ch)[1:-1].replace('\\"', '"') + "'"


def _go_syntax_error(e: json.JSONDecodeError, text: str) -> str:
    if e.pos >= len(text) or e.msg.startswith("Unterminated string"):
        return "unexpected EOF"
    literal = next((w for w in ("true", "false", "null") if w[0] == text[e.pos]), None)
    if literal is not None and e.msg.startswith("Expecting value"):
        # Go reads a literal letter by letter: the first wrong one, or the end, is the error
        for i, want in enumerate(literal[1:], start=e.pos + 1):
            if i >= len(text):
                return "unexpected EOF"
            if text[i] != want:
                return (
                    f"invalid character {_go_quote_char(text[i])} in literal {literal} "
                    f"(expecting {_go_quote_char(want)}) at offset {i + 1}"
                )
    ch = _go_quote_char(text[e.pos])
    off = e.pos + 1
    if e.msg.startswith("Expecting property name"):
        what = "looking for beginning of object key string"
    elif e.msg.startswith("Expecting ':'"):
        what = "after object key"
    elif e.msg.startswith("Expecting ','"):
        # Python reports the position of the bad character; decide object or array by nesting.
        inner = jsonsafe.innermost_open(text[: e.pos])
        what = "after array element" if inner == "[" else "after object key:value pair"
    elif e.msg.startswith("Invalid control character"):
        what = "in string"
    else:
        what = "looking for beginning of value"
    return f"invalid character {ch} {what} at offset {off}"


_OFFSET, _U64 = _Int("int", _INT64), _Int("uint64", _UINT64)
_API_REQUESTS = {
    "stream_info": _Struct(
        "server.JSApiStreamInfoRequest",
        {"deleted_details": _BOOL, "subjects_filter": _STR, "offset": _OFFSET},
    ),
    "stream_names": _Struct("server.JSApiStreamNamesRequest", {"subject": _STR, "offset": _OFFSET}),
    "stream_list": _Struct("server.JSApiStreamListRequest", {"subject": _STR, "offset": _OFFSET}),
    "stream_purge": _Struct("server.JSApiStreamPurgeRequest", {"filter": _STR, "seq": _U64, "keep": _U64}),
    "consumer_reset": _Struct("server.JSApiConsumerResetRequest", {"seq": _U64}),
    "msg_get": _Struct(
        "server.JSApiMsgGetRequest",
        {
            "seq": _U64,
            "last_by_subj": _STR,
            "next_by_subj": _STR,
            "batch": _OFFSET,
            "max_bytes": _OFFSET,
            "start_time": _Time(),
            "multi_last": _Slice(_STR, "[]string"),
            "up_to_seq": _U64,
            "up_to_time": _Time(),
            "no_hdr": _BOOL,
        },
    ),
    "msg_delete": _Struct("server.JSApiMsgDeleteRequest", {"seq": _U64, "no_erase": _BOOL}),
    "stream_remove_peer": _Struct("server.JSApiStreamRemovePeerRequest", {"peer": _STR}),
    "consumer_unpin": _Struct("server.JSApiConsumerUnpinRequest", {"group": _STR}),
    # a restore's stream config is the create request's without ``pedantic``; its state, as
    # stream info shows it
    "stream_restore": _Struct(
        "server.JSApiStreamRestoreRequest",
        {
            "config": _Struct(
                "server.StreamConfig",
                {k: v for k, v in _STREAM_CONFIG_REQUEST.spec.items() if k != "pedantic"},
            ),
            "state": _Struct(
                "server.StreamState",
                {
                    "messages": _U64,
                    "bytes": _U64,
                    "first_seq": _U64,
                    "first_ts": _Time(),
                    "last_seq": _U64,
                    "last_ts": _Time(),
                    "num_subjects": _OFFSET,
                    "subjects": _Map(_U64, "map[string]uint64"),
                    "num_deleted": _OFFSET,
                    "deleted": _Slice(_U64, "[]uint64"),
                    "lost": _Struct(
                        "server.LostStreamData", {"msgs": _Slice(_U64, "[]uint64"), "bytes": _U64}
                    ),
                    "consumer_count": _OFFSET,
                },
            ),
        },
    ),
    "meta_leader_stepdown": _Struct("server.JSApiLeaderStepdownRequest", {"placement": _PLACEMENT}),
    "stream_snapshot": _Struct(
        "server.JSApiStreamSnapshotRequest",
        {
            "deliver_subject": _STR,
            "no_consumers": _BOOL,
            "chunk_size": _OFFSET,
            "window_size": _OFFSET,
            "jsck": _BOOL,
        },
    ),
}


def is_json_object_or_array(data: bytes | str) -> bool:
    """Whether an optional request body (INFO, NAMES, LIST, PURGE) is read at all: the reference
    reads it only when its first character after JSON whitespace is ``{`` or ``[``, and treats
    anything else as no body."""
    if isinstance(data, str):
        return data.lstrip(" \t\r\n")[:1] in ("{", "[")
    return data.lstrip(b" \t\r\n")[:1] in (b"{", b"[")


def is_empty_request(data: bytes) -> bool:
    """The reference's test for a missing body where one is required (MSG.GET, MSG.DELETE):
    nothing, or a JSON object with no fields. Whitespace alone or ``null`` is not empty."""
    if not data or data == b"{}":
        return True
    if b'"' in data:
        return False  # an object with a field has a quoted name: no need to parse it here
    try:
        v = parse_json_value(data)
    except ValueError:
        return False
    return isinstance(v, dict) and not v


def decode_api_body(kind: str, body: Any, *, strict: bool = True) -> dict[str, Any]:
    """A parsed request body (``decode_request``) read into the reference's request struct for
    ``kind`` (a key of ``_API_REQUESTS``): the known fields with their Go types; a wrong type, or
    an unknown field when ``strict`` (the reference's default for the JSON API, not for direct
    gets), is ``JSInvalidJSONErr`` with Go's text."""
    spec = _API_REQUESTS[kind]
    try:
        out = spec.decode(body, [], spec.go.removeprefix("server."), strict)
    except _DecodeError as e:
        raise api_error("JSInvalidJSONErr", err=str(e)) from None
    return {} if out is _ABSENT else out


def _decode_stream_request(d: Any, strict: bool) -> dict[str, Any]:
    try:
        out = _STREAM_CONFIG_REQUEST.decode(d, [], "StreamConfigRequest", strict)
    except _DecodeError as e:
        raise api_error("JSInvalidJSONErr", err=str(e)) from None
    return {} if out is _ABSENT else out


# --------------------------------------------------------------------------------- StreamConfig


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """A stream's configuration, with the reference's JSON field names and filled-in defaults.

    Build one with ``from_json`` (validates like the reference); the defaults here are the values
    the reference fills in, so ``StreamConfig(name="X", subjects=("X",))`` is a created stream.
    """

    name: str
    description: str = ""
    subjects: tuple[str, ...] = ()
    retention: str = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = DEFAULT_DUPLICATE_WINDOW
    placement: dict[str, Any] | None = None
    mirror: dict[str, Any] | None = None
    sources: tuple[dict[str, Any], ...] = ()
    compression: str = "none"
    first_seq: int = 0
    subject_transform: dict[str, Any] | None = None
    republish: dict[str, Any] | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: dict[str, int] = field(default_factory=dict)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: str = "default"
    allow_batched: bool = False
    metadata: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ decoding and validation

    @classmethod
    def from_json(
        cls,
        d: Any,
        *,
        pedantic: bool = False,
        strict: bool = True,
        create: bool = True,
        expected_name: str | None = None,
        clustered: bool = False,
        lookup: Callable[[str], StreamConfig | None] | None = None,
    ) -> StreamConfig:
        """Decode and validate a stream create (or update) request body, filling in defaults.

        ``d`` is the parsed JSON (``decode_request``); a ``"pedantic": true`` key in it turns on
        pedantic mode like the ``pedantic`` argument. ``strict`` is the server's JetStream
        ``strict`` option (default on): unknown fields are ``JSInvalidJSONErr``.
        ``create=True`` adds the create handler's checks (sealed, mirror_direct without a mirror,
        path separators, R>1 on a non-clustered server, mirror/source filters); ``create=False`` is
        the update path (pair it with ``check_update``). ``expected_name`` is the stream token
        of the request subject: a different name is ``JSStreamMismatchErr``, checked where the
        reference checks it. ``lookup(name)`` returns another stream of the account, if any,
        for the checks that look at the origin of a mirror or source.
        Raises ``ApiError`` with the reference's error for the first problem found.
        """
        raw = _decode_stream_request(d, strict)
        pedantic = pedantic or bool(raw.pop("pedantic", False))
        c: dict[str, Any] = {
            "name": "",
            "description": "",
            "subjects": [],
            "retention": "limits",
            "max_consumers": 0,
            "max_msgs": 0,
            "max_bytes": 0,
            "max_age": 0,
            "max_msgs_per_subject": 0,
            "max_msg_size": 0,
            "discard": "old",
            "storage": "file",
            "num_replicas": 0,
            "duplicate_window": 0,
            "placement": None,
            "mirror": None,
            "sources": [],
            "compression": "none",
            "first_seq": 0,
            "subject_transform": None,
            "republish": None,
            "consumer_limits": {},
            "subject_delete_marker_ttl": 0,
            "persist_mode": "default",
            "metadata": {},
        }
        for f in fields(cls):
            c.setdefault(f.name, False)
        c.update(copy.deepcopy(raw))
        _set_static_metadata(c)

        if create:
            if expected_name is not None and expected_name != c["name"]:
                raise api_error("JSStreamMismatchErr")
            if "\\" in c["name"] or "/" in c["name"]:
                raise api_error("JSStreamNameContainsPathSeparatorsErr")
            if c["sealed"]:
                raise _invalid_config("stream configuration for create can not be sealed")
            if c["mirror_direct"] and c["mirror"] is None:
                raise _invalid_config("stream has no mirror but does have mirror direct")

        _check_stream_cfg(c, pedantic, lookup)

        if create:
            if not clustered and c["num_replicas"] > 1:
                raise api_error("JSStreamReplicasNotSupportedErr")
            _check_source_filters(c)
        elif expected_name is not None and expected_name != c["name"]:
            raise api_error("JSStreamMismatchErr")

        c["subjects"] = tuple(c["subjects"])
        c["sources"] = tuple(c["sources"])
        return cls(**c)

    # ------------------------------------------------------------------------------- encoding

    def to_json(self, *, server_version: str | None = None, api_level: int | None = None) -> dict[str, Any]:
        """The reference's JSON for this config, fields in its order, ``omitempty`` ones left out.

        With ``server_version``/``api_level`` the response-only metadata ``_nats.ver`` and
        ``_nats.level`` are added, as the reference does in every stream info it sends.
        """
        d: dict[str, Any] = {"name": self.name}
        if self.description:
            d["description"] = self.description
        if self.subjects:
            d["subjects"] = list(self.subjects)
        d["retention"] = self.retention
        d["max_consumers"] = self.max_consumers
        d["max_msgs"] = self.max_msgs
        d["max_bytes"] = self.max_bytes
        d["max_age"] = self.max_age
        d["max_msgs_per_subject"] = self.max_msgs_per_subject
        if self.max_msg_size:
            d["max_msg_size"] = self.max_msg_size
        d["discard"] = self.discard
        d["storage"] = self.storage
        d["num_replicas"] = self.num_replicas
        if self.no_ack:
            d["no_ack"] = True
        if self.duplicate_window:
            d["duplicate_window"] = self.duplicate_window
        if self.placement is not None:
            d["placement"] = copy.deepcopy(self.placement)
        if self.mirror is not None:
            d["mirror"] = copy.deepcopy(self.mirror)
        if self.sources:
            d["sources"] = copy.deepcopy(list(self.sources))
        d["compression"] = self.compression
        if self.first_seq:
            d["first_seq"] = self.first_seq
        if self.subject_transform is not None:
            d["subject_transform"] = dict(self.subject_transform)
        if self.republish is not None:
            d["republish"] = dict(self.republish)
        d["allow_direct"] = self.allow_direct
        d["mirror_direct"] = self.mirror_direct
        if self.discard_new_per_subject:
            d["discard_new_per_subject"] = True
        d["sealed"] = self.sealed
        d["deny_delete"] = self.deny_delete
        d["deny_purge"] = self.deny_purge
        d["allow_rollup_hdrs"] = self.allow_rollup_hdrs
        d["consumer_limits"] = dict(self.consumer_limits)
        d["allow_msg_ttl"] = self.allow_msg_ttl
        if self.subject_delete_marker_ttl:
            d["subject_delete_marker_ttl"] = self.subject_delete_marker_ttl
        if self.allow_msg_counter:
            d["allow_msg_counter"] = True
        if self.allow_atomic:
            d["allow_atomic"] = True
        if self.allow_msg_schedules:
            d["allow_msg_schedules"] = True
        if self.persist_mode != "default":
            d["persist_mode"] = self.persist_mode
        if self.allow_batched:
            d["allow_batched"] = True
        meta = dict(self.metadata)
        if server_version is not None:
            meta[META_SERVER_VERSION] = server_version
        if api_level is not None:
            meta[META_SERVER_LEVEL] = str(api_level)
        if meta:
            d["metadata"] = dict(sorted(meta.items()))
        return d

    # -------------------------------------------------------------------------------- updates

    @staticmethod
    def check_update(old: StreamConfig, new: StreamConfig, *, clustered: bool = False) -> StreamConfig:
        """Reject the changes the reference forbids on update; return the config to apply.

        ``new`` comes from ``from_json(..., create=False)``. The returned config is ``new`` with
        the reference's adjustments for sealing (no max_age, discard new, deny delete and purge,
        no roll-ups). Account limits and overlap with other streams are the caller's checks.
        """
        if new.name != old.name:
            raise _invalid_config("stream configuration name must match original")
        if not clustered and new.num_replicas > 1:
            raise api_error("JSStreamReplicasNotSupportedErr")
        if new.storage != old.storage:
            raise _invalid_config("stream configuration update can not change storage type")
        if new.retention != old.retention and "workqueue" in (old.retention, new.retention):
            raise _invalid_config(
                "stream configuration update can not change retention policy to/from workqueue"
            )
        if old.sealed and not new.sealed:
            raise _invalid_config("stream configuration update can not unseal a sealed stream")
        if old.deny_delete and not new.deny_delete:
            raise _invalid_config("stream configuration update can not cancel deny message deletes")
        if old.deny_purge and not new.deny_purge:
            raise _invalid_config("stream configuration update can not cancel deny purge")
        if new.mirror is not None and new.mirror != old.mirror:
            raise api_error("JSStreamMirrorNotUpdatableErr")
        if new.discard_new_per_subject:
            if new.discard != "new":
                raise _invalid_config("discard new per subject requires discard new policy to be set")
            if new.max_msgs_per_subject <= 0:
                raise _invalid_config("discard new per subject requires max msgs per subject > 0")
        if old.allow_msg_ttl and not new.allow_msg_ttl:
            raise _invalid_config("message TTL status can not be disabled")
        if old.allow_msg_counter != new.allow_msg_counter:
            raise _invalid_config("stream configuration update can not change message counter setting")
        if old.allow_msg_schedules and not new.allow_msg_schedules:
            raise _invalid_config("message schedules can not be disabled")
        if old.persist_mode != new.persist_mode:
            raise _invalid_config("stream configuration update can not change persist mode")
        if new.sealed:
            new = replace(
                new, max_age=0, discard="new", deny_delete=True, deny_purge=True, allow_rollup_hdrs=False
            )
        return new


_RESERVED_FIRST_TOKENS = frozenset(("$JS", "$JSC", "$NRG", "$SYS", "*", ">"))


def _required_api_level(c: Mapping[str, Any]) -> int:
    level = 0
    if c["allow_msg_ttl"] or c["subject_delete_marker_ttl"] > 0:
        level = max(level, 1)  # TTLs, v2.11
    if c["allow_msg_counter"] or c["allow_atomic"] or c["allow_msg_schedules"]:
        level = max(level, 2)  # counters, atomic batches, schedules, v2.12
    if c["persist_mode"] == "async":
        level = max(level, 2)
    if c["allow_batched"]:
        level = max(level, 4)  # fast batch publish, v2.14
    return level


def _set_static_metadata(c: dict[str, Any]) -> None:
    meta = dict(c["metadata"] or {})
    meta.pop(META_SERVER_VERSION, None)
    meta.pop(META_SERVER_LEVEL, None)
    meta[META_REQUIRED_LEVEL] = str(_required_api_level(c))
    c["metadata"] = meta


def _default_limit(c: dict[str, Any], key: str, pedantic: bool) -> None:
    v = c[key]
    if v == 0 or v < -1:
        if pedantic and v < -1:
            raise _pedantic(f"{key} must be set to -1")
        c[key] = -1


def _check_stream_cfg(
    c: dict[str, Any], pedantic: bool, lookup: Callable[[str], StreamConfig | None] | None
) -> None:
    """``checkStreamCfg``: validate ``c`` in the reference's order and fill in defaults (in place)."""
    name = c["name"]
    if not is_valid_asset_name(name):
        raise _invalid_config("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if _blen(name) > MAX_NAME_LEN:
        raise _invalid_config(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if _blen(c["description"]) > MAX_DESCRIPTION_LEN:
        raise _invalid_config(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(_blen(k) + _blen(v) for k, v in c["metadata"].items()) > MAX_METADATA_LEN:
        raise _invalid_config(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")

    if c["num_replicas"] == 0:
        c["num_replicas"] = 1
    if c["num_replicas"] > STREAM_MAX_REPLICAS:
        raise _invalid_config(f"maximum replicas is {STREAM_MAX_REPLICAS}")
    if c["num_replicas"] < 0:
        raise api_error("JSReplicasCountCannotBeNegative")
    for key in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        _default_limit(c, key, pedantic)
    max_age = c["max_age"]
    if max_age < 0:
        raise _invalid_config("max age can not be negative")
    if max_age != 0 and max_age < _MS100:
        raise _invalid_config("max age needs to be >= 100ms")

    if c["duplicate_window"] == 0 and c["mirror"] is None and not c["sources"]:
        if max_age != 0 and max_age < DEFAULT_DUPLICATE_WINDOW:
            if pedantic:
                raise _pedantic("duplicate window cannot be bigger than max age")
            c["duplicate_window"] = max_age
        else:
            c["duplicate_window"] = DEFAULT_DUPLICATE_WINDOW
    dup = c["duplicate_window"]
    if dup < 0:
        raise _invalid_config("duplicates window can not be negative")
    if max_age != 0 and dup > max_age:
        raise _invalid_config("duplicates window can not be larger then max age")
    if 0 < dup < _MS100:
        raise _invalid_config("duplicates window needs to be >= 100ms")

    if c["deny_purge"] and c["allow_rollup_hdrs"]:
        raise _invalid_config("roll-ups require the purge permission")

    if c["allow_msg_counter"]:
        if c["discard"] == "new":
            raise _invalid_config("counter stream cannot use discard new")
        if c["allow_msg_ttl"]:
            raise _invalid_config("counter stream cannot use message TTLs")
        if c["allow_msg_schedules"]:
            raise _invalid_config("counter stream cannot use message schedules")
        if c["retention"] != "limits":
            raise _invalid_config("counter stream can only use limits retention")

    if c["discard_new_per_subject"]:
        if c["discard"] != "new":
            raise _invalid_config("discard new per subject requires discard new policy to be set")
        if c["max_msgs_per_subject"] <= 0:
            raise _invalid_config("discard new per subject requires max msgs per subject > 0")

    sdm = c["subject_delete_marker_ttl"]
    if sdm > 0:
        if sdm < _SECOND:
            raise _invalid_config("subject delete marker TTL must be at least 1 second")
        if not c["allow_msg_ttl"]:
            if pedantic:
                raise _invalid_config("subject delete marker cannot be set if message TTLs are disabled")
            c["allow_msg_ttl"] = True
        if not c["allow_rollup_hdrs"]:
            if pedantic:
                raise _invalid_config("subject delete marker cannot be set if roll-ups are disabled")
            c["allow_rollup_hdrs"], c["deny_purge"] = True, False
    elif sdm < 0:
        raise _invalid_config("subject delete marker TTL must not be negative")

    if c["allow_msg_schedules"]:
        if c["discard"] == "new":
            raise _invalid_config("message scheduling cannot use discard new")
        if not c["allow_rollup_hdrs"]:
            if pedantic:
                raise _invalid_config("message scheduling cannot be set if roll-ups are disabled")
            c["allow_rollup_hdrs"], c["deny_purge"] = True, False

    if c["persist_mode"] == "async":
        if c["storage"] != "file":
            raise _invalid_config("async persist mode is only supported on file storage")
        if c["num_replicas"] > 1:
            raise _invalid_config("async persist mode is not supported on replicated streams")
        if c["allow_atomic"]:
            raise _invalid_config("async persist mode is not supported with atomic batch publish")

    if c["first_seq"] > MAX_SEQ:
        # The reference takes any uint64 and then reports a stream whose last sequence is below
        # its first; leafjet's stores hold sequences up to MAX_SEQ.
        raise _invalid_config(f"first sequence must be at most {MAX_SEQ}")

    stream_subs: list[str] = []
    deliver_prefixes: list[str] = []
    api_prefixes: list[str] = []

    mirror = c["mirror"]
    if mirror is not None:
        _check_mirror(c, mirror, pedantic, lookup, stream_subs, deliver_prefixes, api_prefixes)

    if c["sources"] and c["allow_msg_schedules"]:
        raise api_error("JSSourceWithMsgSchedulesErr")
    inames: set[tuple] = set()
    cnames: set[tuple] = set()
    for src in c["sources"]:
        _check_source(c, src, lookup, inames, cnames, stream_subs, deliver_prefixes, api_prefixes)

    for pfx in deliver_prefixes:
        if not is_valid_literal_subject(pfx):
            raise api_error("JSStreamInvalidExternalDeliverySubjErrF", prefix=pfx)
        for sub in stream_subs:
            if overlaps(sub, f"{pfx}.{sub}"):
                raise api_error("JSStreamExternalDelPrefixOverlapsErrF", prefix=pfx, subject=sub)
    for pfx in api_prefixes:
        if not is_valid_literal_subject(pfx):
            raise _invalid_config(
                f"stream external api prefix {json.dumps(pfx)} must be a valid subject without wildcards"
            )
        if overlaps(pfx, JS_API_PREFIX):
            raise api_error("JSStreamExternalApiOverlapErrF", prefix=pfx, subject=JS_API_PREFIX)

    if lookup is not None:
        _check_cycles(c, lookup)

    subjects: list[str] = c["subjects"]
    if not subjects:
        if mirror is None and not c["sources"]:
            subjects.append(name)
    else:
        if mirror is not None:
            raise api_error("JSMirrorWithSubjectsErr")
        seen: set[str] = set()
        # Each subject is checked against the ones after it, as a pairwise pass would (the error
        # names the first later one that overlaps), through an index of them all.
        index = SubjectIndex((s, i) for i, s in enumerate(subjects))
        for i, subj in enumerate(subjects):
            if not is_valid_subject(subj):
                raise _invalid_config("invalid subject")
            if subj in seen:
                raise _invalid_config("duplicate subjects detected")
            if subj == ">":
                if not c["no_ack"]:
                    raise _invalid_config("capturing all subjects requires no-ack to be true")
                if c["num_replicas"] != 1:
                    raise _invalid_config("capturing all subjects requires replicas of 1")
            # (only a subject whose first token is one of these, or a wildcard, can overlap them)
            if not c["no_ack"] and subj.partition(".")[0] in _RESERVED_FIRST_TOKENS:
                for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                    if overlaps(subj, ns) and not is_subset(subj, "$JS.EVENT.>"):
                        raise _invalid_config(
                            "subjects that overlap with jetstream api require no-ack to be true"
                        )
                if overlaps(subj, "$SYS.>") and not is_subset(subj, "$SYS.ACCOUNT.>"):
                    raise _invalid_config("subjects that overlap with system api require no-ack to be true")
            later = [j for j in index.overlapping(subj) if j > i]
            if later:
                other = subjects[min(later)]
                raise _invalid_config(f"subject {json.dumps(subj)} overlaps with {json.dumps(other)}")
            seen.add(subj)

    if not subjects and not c["sources"] and mirror is None:  # pragma: no cover - as in the reference
        raise _invalid_config("stream needs at least one configured subject or be a source/mirror")

    st = c["subject_transform"]
    if st is not None:
        if st["src"] and not is_valid_subject(st["src"]):
            raise api_error("JSStreamTransformInvalidSource", err=f"invalid subject {st['src']}")
        if (err := validate_mapping(st["src"], st["dest"])) is not None:
            raise api_error("JSStreamTransformInvalidDestination", err=err)

    rp = c["republish"]
    if rp is not None:
        if not rp.get("src"):
            if pedantic:
                raise _pedantic("republish source can not be empty")
            rp = {"src": ">", **rp}
        if (
            rp["dest"] == ">"
            and rp["src"] == ">"
            and st is not None
            and len(subjects) == 1
            and st["src"] == subjects[0]
        ):
            if pedantic:
                raise _pedantic("implicit republish based on subject transform")
            rp = {**rp, "src": st["dest"], "dest": st["dest"]}
        c["republish"] = _shape_republish(rp)
        if rp["dest"] and any(overlaps(rp["dest"], s) for s in subjects):
            raise _invalid_config("stream configuration for republish destination forms a cycle")
        if not _republish_transform_ok(rp["src"], rp["dest"]):
            raise _invalid_config(
                f"stream configuration for republish with transform from '{rp['src']}' "
                f"to '{rp['dest']}' not valid"
            )

    if c["placement"] is not None:
        if not c["placement"]:
            c["placement"] = None
        elif c["placement"].get("preferred"):
            raise _invalid_config("preferred server not permitted in placement")


def _republish_transform_ok(src: str, dest: str) -> bool:
    """Whether the reference's ``NewSubjectTransform`` takes a republish's source and destination."""
    try:
        compile_transform(src, dest)
    except TransformError:
        return False
    return True


def _check_mirror(
    c: dict[str, Any],
    m: dict[str, Any],
    pedantic: bool,
    lookup: Callable[[str], StreamConfig | None] | None,
    stream_subs: list[str],
    deliver_prefixes: list[str],
    api_prefixes: list[str],
) -> None:
    if c["first_seq"] > 0:
        raise api_error("JSMirrorWithFirstSeqErr")
    if c["subjects"]:
        raise api_error("JSMirrorWithSubjectsErr")
    if c["sources"]:
        raise api_error("JSMirrorWithSourcesErr")
    if c["allow_msg_counter"]:
        raise api_error("JSMirrorWithCountersErr")
    if c["allow_atomic"]:
        raise api_error("JSMirrorWithAtomicPublishErr")
    if c["allow_batched"]:
        raise api_error("JSMirrorWithBatchPublishErr")
    if c["allow_msg_schedules"]:
        raise api_error("JSMirrorWithMsgSchedulesErr")
    cons = m.get("consumer")
    if cons is not None and (
        not is_valid_asset_name(cons.get("name", ""))
        or not is_valid_literal_subject(cons.get("deliver_subject", ""))
        or m.get("opt_start_seq")
        or m.get("opt_start_time")
        or m.get("filter_subject")
    ):
        raise api_error("JSMirrorDurableConsumerCfgInvalid")
    transforms = m.get("subject_transforms", [])
    if m.get("filter_subject") and transforms:
        raise api_error("JSMirrorMultipleFiltersNotAllowed")
    if c["subject_delete_marker_ttl"] > 0:
        raise _invalid_config("subject delete markers forbidden on mirrors")
    index = SubjectIndex((tr["src"], j) for j, tr in enumerate(transforms))  # not pairwise
    for i, tr in enumerate(transforms):
        if tr["src"] and not is_valid_subject(tr["src"]):
            raise api_error("JSMirrorInvalidSubjectFilter", err=f"invalid subject {tr['src']}")
        if (err := validate_mapping(tr["src"], tr["dest"])) is not None:
            raise api_error("JSMirrorInvalidTransformDestination", err=err)
        if any(j != i for j in index.overlapping(tr["src"])):
            raise api_error("JSMirrorOverlappingSubjectFilters")
    ext = m.get("external")
    if ext is None:
        if not is_valid_asset_name(m["name"]):
            raise api_error("JSMirrorInvalidStreamName")
        origin = lookup(m["name"]) if lookup is not None else None
        if origin is not None:
            stream_subs.extend(origin.subjects)
            if 0 < c["max_msg_size"] < origin.max_msg_size:
                raise api_error("JSMirrorMaxMessageSizeTooBigErr")
            if pedantic and c["mirror_direct"] != origin.allow_direct:
                raise _pedantic("origin stream has direct get set, mirror has it disabled")
            c["mirror_direct"] = origin.allow_direct
    else:
        if ext["deliver"]:
            deliver_prefixes.append(ext["deliver"])
        if ext["api"]:
            api_prefixes.append(ext["api"])


def _source_iname(src: Mapping[str, Any]) -> tuple:
    transforms = src.get("subject_transforms", [])
    if transforms:
        key: tuple = tuple((t["src"] or ">", t["dest"] or ">") for t in transforms)
    else:
        key = ((src.get("filter_subject") or ">", ">"),)
    ext = src.get("external")
    cons = src.get("consumer")
    return (
        src["name"],
        ext["api"] if ext is not None else None,
        cons.get("name", "") if cons is not None else None,
        key,
    )


def _check_source(
    c: dict[str, Any],
    src: dict[str, Any] | None,
    lookup: Callable[[str], StreamConfig | None] | None,
    inames: set[tuple],
    cnames: set[tuple],
    stream_subs: list[str],
    deliver_prefixes: list[str],
    api_prefixes: list[str],
) -> None:
    if src is None or not is_valid_asset_name(src["name"]):
        raise api_error("JSSourceInvalidStreamName")
    iname = _source_iname(src)
    if iname in inames:
        raise api_error("JSSourceDuplicateDetected")
    inames.add(iname)
    transforms = src.get("subject_transforms", [])
    if src.get("filter_subject") and transforms:
        raise api_error("JSSourceMultipleFiltersNotAllowed")
    for tr in transforms:
        if tr["src"] and not is_valid_subject(tr["src"]):
            raise api_error("JSSourceInvalidSubjectFilter", err=f"invalid subject {tr['src']}")
        if (err := validate_mapping(tr["src"], tr["dest"])) is not None:
            raise api_error("JSSourceInvalidTransformDestination", err=err)
    index = SubjectIndex((tr["src"], j) for j, tr in enumerate(transforms))  # not pairwise
    for i, tr in enumerate(transforms):
        if any(j != i for j in index.supersets(tr["src"])):
            raise api_error("JSSourceOverlappingSubjectFilters")
    cons = src.get("consumer")
    if cons is not None:
        if (
            not is_valid_asset_name(cons.get("name", ""))
            or not is_valid_literal_subject(cons.get("deliver_subject", ""))
            or src.get("opt_start_seq")
            or src.get("opt_start_time")
            or src.get("filter_subject")
        ):
            raise api_error("JSSourceDurableConsumerCfgInvalid")
        ext = src.get("external")
        cname = (src["name"], ext["api"] if ext is not None else None, cons.get("name", ""))
        if cname in cnames:
            raise api_error("JSSourceDurableConsumerDuplicateDetected")
        cnames.add(cname)
    ext = src.get("external")
    if ext is None:
        origin = lookup(src["name"]) if lookup is not None else None
        if origin is not None:
            stream_subs.extend(origin.subjects)
            if 0 < c["max_msg_size"] < origin.max_msg_size:
                raise api_error("JSSourceMaxMessageSizeTooBigErr")
    else:
        if ext["deliver"]:
            deliver_prefixes.append(ext["deliver"])
        if ext["api"]:
            api_prefixes.append(ext["api"])


def _check_cycles(c: dict[str, Any], lookup: Callable[[str], StreamConfig | None]) -> None:
    """The reference's source/mirror cycle check over the account's streams."""

    def parts(x: Any) -> tuple[str, list[str], list[dict], dict | None]:
        if isinstance(x, StreamConfig):
            return x.name, list(x.subjects), list(x.sources), x.mirror
        return x["name"], x["subjects"], x["sources"], x["mirror"]

    to_visit: list[Any] = [c]
    visited: set[str] = set()
    while to_visit:
        name, subjects, sources, mirror = parts(to_visit.pop(0))
        visited.add(name)
        for src in sources:
            if src is None or src.get("external") is not None:
                continue
            if src["name"] in visited:
                flt = src.get("filter_subject", "")
                if not flt or any(overlaps(s, flt) for s in subjects):
                    raise _invalid_config("detected cycle")
            elif (o := lookup(src["name"])) is not None:
                to_visit.append(o)
        if mirror is not None and mirror.get("external") is None:
            if mirror["name"] in visited:
                raise _invalid_config("detected cycle")
            if (o := lookup(mirror["name"])) is not None:
                to_visit.append(o)


def _check_source_filters(c: dict[str, Any]) -> None:
    """The filter checks ``addStream`` makes after ``checkStreamCfg`` (``JSStreamCreateErrF``)."""
    m = c["mirror"]
    if m is not None and not m.get("subject_transforms"):
        flt = m.get("filter_subject", "")
        if flt and not is_valid_subject(flt):
            raise api_error(
                "JSStreamCreateErrF", err=f"subject filter '{flt}' for the mirror invalid subject"
            )
    for src in c["sources"]:
        if not src.get("subject_transforms"):
            flt = src.get("filter_subject", "")
            if flt and not is_valid_subject(flt):
                raise api_error(
                    "JSStreamCreateErrF", err=f"subject filter '{flt}' for the source: invalid subject"
                )


# ------------------------------------------------------------------------------ state and info


def stream_state_json(
    *,
    messages: int,
    num_bytes: int,
    first_seq: int,
    first_ts: int,
    last_seq: int,
    last_ts: int,
    consumer_count: int,
    num_subjects: int = 0,
    subjects: Mapping[str, int] | None = None,
    num_deleted: int = 0,
    deleted: Iterable[int] | None = None,
    lost: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The reference's ``StreamState`` JSON; timestamps are Unix ns (0 = Go's zero time)."""
    d: dict[str, Any] = {
        "messages": messages,
        "bytes": num_bytes,
        "first_seq": first_seq,
        "first_ts": rfc3339_nano(first_ts),
        "last_seq": last_seq,
        "last_ts": rfc3339_nano(last_ts),
    }
    if num_subjects:
        d["num_subjects"] = num_subjects
    if subjects:
        d["subjects"] = dict(subjects)
    if num_deleted:
        d["num_deleted"] = num_deleted
    deleted = list(deleted or ())
    if deleted:
        d["deleted"] = deleted
    if lost:
        d["lost"] = dict(lost)
    d["consumer_count"] = consumer_count
    return d


def stream_source_info_json(
    name: str,
    *,
    lag: int = 0,
    active_ns: int = -1,
    external: Mapping[str, str] | None = None,
    error: ApiError | None = None,
    filter_subject: str = "",
    subject_transforms: Iterable[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """``StreamSourceInfo`` JSON; ``active_ns`` is ns since last contact, -1 when never."""
    d: dict[str, Any] = {"name": name}
    if external is not None:
        d["external"] = {"api": external.get("api", ""), "deliver": external.get("deliver", "")}
    d["lag"] = lag
    d["active"] = active_ns
    if error is not None:
        d["error"] = error.to_json()
    if filter_subject:
        d["filter_subject"] = filter_subject
    transforms = [_shape_transform(dict(t)) for t in subject_transforms]
    if transforms:
        d["subject_transforms"] = transforms
    return d


_STATE_ORDER = (
    "messages",
    "bytes",
    "first_seq",
    "first_ts",
    "last_seq",
    "last_ts",
    "num_subjects",
    "subjects",
    "num_deleted",
    "deleted",
    "lost",
    "consumer_count",
)


def _state_json(
    state: Any, consumer_count: int | None, subjects: Mapping[str, int] | None, first_seq_set: bool = False
) -> dict[str, Any]:
    if isinstance(state, Mapping):
        d = dict(state)
        if consumer_count is not None:
            d["consumer_count"] = consumer_count
        if subjects:
            d["subjects"] = dict(subjects)
        return {k: d[k] for k in _STATE_ORDER if k in d} | {
            k: v for k, v in d.items() if k not in _STATE_ORDER
        }
    # A store state object (msgs, bytes, first_seq, first_ts, last_seq, last_ts, num_subjects, ...).
    # A stream that never held a message reports first_seq 0 (not last_seq + 1), as the reference,
    # unless its first sequence was set (by a first_seq config or a purge).
    never_started = state.last_seq == 0 and state.msgs == 0 and not first_seq_set
    return stream_state_json(
        messages=state.msgs,
        num_bytes=state.bytes,
        first_seq=0 if never_started else state.first_seq,
        first_ts=state.first_ts,
        last_seq=state.last_seq,
        last_ts=state.last_ts,
        consumer_count=consumer_count if consumer_count is not None else getattr(state, "consumer_count", 0),
        num_subjects=getattr(state, "num_subjects", 0),
        subjects=subjects,
        num_deleted=getattr(state, "num_deleted", 0),
        deleted=getattr(state, "deleted", None),
    )


def stream_info_json(
    config: StreamConfig,
    created_ns: int,
    state: Any,
    *,
    now_ns: int | None = None,
    consumer_count: int | None = None,
    subjects: Mapping[str, int] | None = None,
    server_name: str | None = None,
    cluster: Mapping[str, Any] | None = None,
    domain: str | None = None,
    mirror: Mapping[str, Any] | None = None,
    sources: Iterable[Mapping[str, Any]] = (),
    alternates: Iterable[Mapping[str, Any]] = (),
    server_version: str | None = None,
    api_level: int | None = None,
    first_seq_set: bool = False,
) -> dict[str, Any]:
    """The reference's ``StreamInfo`` JSON (no ``type``; wrap it with ``api_response``).

    ``state`` is a ``stream_state_json`` dict or a store state object (``msgs``, ``bytes``,
    ``first_seq``, ``first_ts``...); ``consumer_count`` and ``subjects`` (per-subject counts,
    for a ``subjects_filter`` request) override or add to it. ``server_name`` gives
    ``"cluster": {"leader": <server name>}`` as a single server reports it; ``cluster`` replaces
    that with a full cluster object. ``now_ns`` is the ``ts`` field (the wall clock if omitted).
    ``first_seq_set``: the stream's first sequence was set before it held a message (an empty
    stream then reports it, not 0).
    """
    d: dict[str, Any] = {
        "config": config.to_json(server_version=server_version, api_level=api_level),
        "created": rfc3339_nano(created_ns),
        "state": _state_json(state, consumer_count, subjects, first_seq_set),
    }
    if domain:
        d["domain"] = domain
    if cluster is not None:
        d["cluster"] = dict(cluster)
    elif server_name:
        d["cluster"] = {"leader": server_name}
    if mirror is not None:
        d["mirror"] = dict(mirror)
    srcs = [dict(s) for s in sources]
    if srcs:
        d["sources"] = srcs
    alts = [dict(a) for a in alternates]
    if alts:
        d["alternates"] = alts
    d["ts"] = rfc3339_nano(time.time_ns() if now_ns is None else now_ns)
    return d


# ------------------------------------------------------------------------------------ envelopes


def api_response(type_name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``{"type": "io.nats.jetstream.api.v1.<type_name>", **body}``."""
    return {"type": API_TYPE_PREFIX + type_name, **body}


def error_response(type_name: str, err: ApiError) -> dict[str, Any]:
    """An error reply as the reference renders it: ``{"type": ..., "error": {...}}``."""
    return {"type": API_TYPE_PREFIX + type_name, "error": err.to_json()}
