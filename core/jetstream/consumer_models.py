"""Consumer configuration, create/update rules, info and pull requests (pure data).

Facts taken from nats-server ``server/consumer.go`` (``ConsumerConfig`` json tags,
``setConsumerConfigDefaults``, ``checkConsumerCfg``, ``addConsumerWithAssignment``,
``checkNewConsumerConfig``/``updateConfig``, ``infoWithSnapAndReply``, ``nextReqFromMsg``,
``processNextMsgRequest``), ``server/jetstream_api.go`` (``jsConsumerCreateRequest``, consumer
names/list) and ``server/jetstream_versioning.go``; each was checked against a live nats-server
2.15.1 (see ``tests/unit/core/jetstream/test_consumer_models.py``).

The create path is split in two, as the reference's handler is:

1. ``parse_create_request(subject, body)`` decodes the body (Go's ``encoding/json`` rules, via
   ``models``) and applies the checks that depend only on the request subject (stream name,
   durable/ephemeral forms, the filter token, replicas on a single server).
2. ``resolve_create(request, stream=..., consumers=...)`` fills in the reference's defaults,
   validates, and decides between a new consumer and an update of an existing one (``action``,
   work-queue partitions, ``max_consumers``, the allowed edits of ``check_consumer_update``).

Durations are int nanoseconds. Times (``opt_start_time``, ``pause_until``) are Unix nanoseconds
plus the UTC offset they were sent with (``*_offset``, seconds), because the reference echoes
the offset back (``"2020-01-01T02:00:00+02:00"``) until an update normalises ``pause_until``
to UTC. ``ConsumerConfig`` defaults are Go's zero values: a config is complete only after
``resolve_create``.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from core import jsonsafe
from core.api_errors import ApiError, api_error
from core.errors import LeafjetError
from core.jetstream.gotime import format_go_time, parse_go_time, rfc3339_nano
from core.jetstream.models import (
    _ABSENT,
    _INT64,
    _T,
    _UINT64,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    META_REQUIRED_LEVEL,
    META_SERVER_LEVEL,
    META_SERVER_VERSION,
    StreamConfig,
    _Bool,
    _ConstantError,
    _DecodeError,
    _FloatLiteral,
    _go_quote_char,
    _go_syntax_error,
    _Int,
    _json_kind,
    _raw_text,
    _reject_constant,
    _Slice,
    _Str,
    _StrMap,
    _Struct,
    _type_error,
    decode_request,
    is_json_object_or_array,
    is_valid_asset_name,
)
from core.subjects import SubjectIndex, has_wildcard, is_subset, is_valid_subject, overlaps

DELIVER_POLICIES = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject")
ACK_POLICIES = ("none", "all", "explicit", "flow_control")
REPLAY_POLICIES = ("instant", "original")
PRIORITY_POLICIES = ("none", "overflow", "pinned_client", "prioritized")
ACTIONS = ("", "create", "update")

_MS = 1_000_000
_SECOND = 1_000_000_000
DEFAULT_ACK_WAIT = 30 * _SECOND  # JsAckWaitDefault
DEFAULT_INACTIVE_THRESHOLD = 5 * _SECOND  # JsDeleteWaitTimeDefault (ephemerals)
DEFAULT_MAX_ACK_PENDING = 1000  # JsDefaultMaxAckPending
DEFAULT_MAX_WAITING = 512  # JSWaitQueueDefaultMax (pull consumers)
DEFAULT_PINNED_TTL = 120 * _SECOND  # JsDefaultPinnedTTL
FLOW_CONTROL_HEARTBEAT = _SECOND  # sourceHealthHB, forced by ack policy flow_control
NAMES_LIMIT = 1024  # JSApiNamesLimit
LIST_LIMIT = 256  # JSApiListLimit
GO_ZERO_TIME_NS = -62_135_596_800 * _SECOND  # 0001-01-01T00:00:00Z, Go's time.Time{}

CREATE_RESPONSE = "consumer_create_response"
INFO_RESPONSE = "consumer_info_response"
NAMES_RESPONSE = "consumer_names_response"
LIST_RESPONSE = "consumer_list_response"

_VALID_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DIGITS = frozenset("0123456789")


def _invalid_config(msg: str) -> ApiError:
    return api_error("JSStreamInvalidConfigF", err=msg)


def _pedantic(msg: str) -> ApiError:
    return api_error("JSPedanticErrF", err=msg)


def _blen(s: str) -> int:
    return len(s.encode())


def new_consumer_name() -> str:
    """A random 8-character base62 name, like the reference's legacy ephemeral names."""
    return "".join(secrets.choice(_BASE62) for _ in range(8))


# ------------------------------------------------------------------------------ Go formatting


def go_duration(ns: int) -> str:
    """``time.Duration.String()``: ``1m30s``, ``1.5s``, ``100ms``, ``0s``."""
    if ns == 0:
        return "0s"
    sign, u = ("-" if ns < 0 else ""), abs(ns)

    def frac(value: int, digits: int) -> str:
        whole, rest = divmod(value, 10**digits)
        tail = f"{rest:0{digits}d}".rstrip("0")
        return f"{whole}.{tail}" if tail else str(whole)

    if u < _SECOND:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < _MS:
            return f"{sign}{frac(u, 3)}µs"
        return f"{sign}{frac(u, 6)}ms"
    secs, rest = divmod(u, _SECOND)
    hours, secs = divmod(secs, 3600)
    minutes, secs = divmod(secs, 60)
    out = frac(secs * _SECOND + rest, 9) + "s"
    if hours:
        out = f"{hours}h{minutes}m{out}"
    elif minutes:
        out = f"{minutes}m{out}"
    return sign + out


def _go_quote(s: str) -> str:
    """``strconv.Quote`` for the texts the reference quotes in its errors (close enough)."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# ----------------------------------------------------------------------------- JSON decoding


class _GoTime(_T):
    go = "time.Time"

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if v is None:
            return _ABSENT
        if not isinstance(v, str):
            raise _type_error(_json_kind(v), path, root, self.go)
        try:
            return parse_go_time(v)
        except ValueError as e:
            raise _DecodeError(str(e)) from None


class _Choice(_T):
    """A Go type with its own UnmarshalJSON; ``null`` and unknown values are errors."""

    def __init__(self, mapping: Mapping[str, str], message: Callable[[str], str]) -> None:
        self.mapping, self.message = dict(mapping), message

    def decode(self, v: Any, path: list[Any], root: str, strict: bool) -> Any:
        if isinstance(v, str) and v in self.mapping:
            return self.mapping[v]
        raise _DecodeError(self.message(_raw_text(v)))


def _cannot_unmarshal(raw: str) -> str:
    return f"can not unmarshal {json.dumps(raw, ensure_ascii=False)}"


_STR, _BOOL = _Str(), _Bool()
_DUR = _Int("time.Duration", _INT64)
_GO_INT = _Int("int", _INT64)
_CONSUMER_CONFIG = _Struct(
    "server.ConsumerConfig",
    {
        "durable_name": _STR,
        "name": _STR,
        "description": _STR,
        "deliver_policy": _Choice({p: p for p in DELIVER_POLICIES} | {"undefined": "all"}, _cannot_unmarshal),
        "opt_start_seq": _Int("uint64", _UINT64),
        "opt_start_time": _GoTime(),
        "ack_policy": _Choice(
            {p: p for p in ACK_POLICIES},
            lambda raw: f"can not unmarshal {json.dumps(raw, ensure_ascii=False)}",
        ),
        "ack_wait": _DUR,
        "max_deliver": _GO_INT,
        "backoff": _Slice(_DUR, "[]time.Duration"),
        "filter_subject": _STR,
        "filter_subjects": _Slice(_STR, "[]string"),
        "replay_policy": _Choice({p: p for p in REPLAY_POLICIES}, _cannot_unmarshal),
        "rate_limit_bps": _Int("uint64", _UINT64),
        "sample_freq": _STR,
        "max_waiting": _GO_INT,
        "max_ack_pending": _GO_INT,
        "flow_control": _BOOL,
        "headers_only": _BOOL,
        "max_batch": _GO_INT,
        "max_expires": _DUR,
        "max_bytes": _GO_INT,
        "deliver_subject": _STR,
        "deliver_group": _STR,
        "idle_heartbeat": _DUR,
        "inactive_threshold": _DUR,
        "num_replicas": _GO_INT,
        "mem_storage": _BOOL,
        "direct": _BOOL,
        "sourcing": _BOOL,
        "metadata": _StrMap(),
        "pause_until": _GoTime(),
        "priority_groups": _Slice(_STR, "[]string"),
        "priority_policy": _Choice(
            {p: p for p in PRIORITY_POLICIES}, lambda raw: f"unknown priority policy: {raw}"
        ),
        "priority_timeout": _DUR,
    },
)
_CREATE_REQUEST = _Struct(
    "server.CreateConsumerRequest",
    {
        "stream_name": _STR,
        "config": _CONSUMER_CONFIG,
        "action": _Choice({a: a for a in ACTIONS}, lambda raw: f"unknown consumer action: {raw}"),
        "pedantic": _BOOL,
    },
)
_CONSUMERS_REQUEST = _Struct("server.JSApiConsumersRequest", {"offset": _GO_INT})
_PAUSE_REQUEST = _Struct("server.JSApiConsumerPauseRequest", {"pause_until": _GoTime()})
_PULL_REQUEST = _Struct(
    "",
    {
        "expires": _DUR,
        "batch": _GO_INT,
        "max_bytes": _GO_INT,
        "no_wait": _BOOL,
        "idle_heartbeat": _DUR,
        "group": _STR,
        "min_pending": _Int("int64", _INT64),
        "min_ack_pending": _Int("int64", _INT64),
        "id": _STR,
        "priority": _GO_INT,
    },
)


def _decode(spec: _Struct, d: Any, root: str, strict: bool) -> dict[str, Any]:
    try:
        out = spec.decode(d, [], root, strict)
    except _DecodeError as e:
        raise api_error("JSInvalidJSONErr", err=str(e)) from None
    return {} if out is _ABSENT else out


# ----------------------------------------------------------------------------- ConsumerConfig


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """A consumer's configuration with the reference's JSON names; defaults are Go's zero values.

    ``opt_start_time``/``pause_until`` are Unix ns (``None`` = not set) and their ``*_offset``
    the UTC offset in seconds they are rendered with.
    """

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: str = "all"
    opt_start_seq: int = 0
    opt_start_time: int | None = None
    ack_policy: str = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: tuple[int, ...] = ()
    filter_subject: str = ""
    filter_subjects: tuple[str, ...] = ()
    replay_policy: str = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    pause_until: int | None = None
    priority_groups: tuple[str, ...] = ()
    priority_policy: str = "none"
    priority_timeout: int = 0
    opt_start_time_offset: int = 0
    pause_until_offset: int = 0

    # ----------------------------------------------------------------------------- properties

    @property
    def is_durable(self) -> bool:
        return bool(self.durable_name)

    @property
    def is_pull(self) -> bool:
        return not self.deliver_subject

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def filters(self) -> tuple[str, ...]:
        """The subject filters (``filter_subjects`` plus ``filter_subject``); empty = all."""
        return self.filter_subjects + ((self.filter_subject,) if self.filter_subject else ())

    @property
    def sample_frequency(self) -> int:
        """``sample_freq`` as a percentage (0 when unset)."""
        s = self.sample_freq.removesuffix("%")
        return int(s) if s else 0

    # ------------------------------------------------------------------------------ encoding

    def to_json(self, *, server_version: str | None = None, api_level: int | None = None) -> dict[str, Any]:
        """The reference's JSON for this config: its field order, ``omitempty`` ones left out.

        With ``server_version``/``api_level`` the response-only metadata ``_nats.ver`` and
        ``_nats.level`` are added, as in create and info responses (not in list responses).
        """
        d: dict[str, Any] = {}
        if self.durable_name:
            d["durable_name"] = self.durable_name
        if self.name:
            d["name"] = self.name
        if self.description:
            d["description"] = self.description
        d["deliver_policy"] = self.deliver_policy
        if self.opt_start_seq:
            d["opt_start_seq"] = self.opt_start_seq
        if self.opt_start_time is not None:
            d["opt_start_time"] = format_go_time(self.opt_start_time, self.opt_start_time_offset)
        d["ack_policy"] = self.ack_policy
        if self.ack_wait:
            d["ack_wait"] = self.ack_wait
        if self.max_deliver:
            d["max_deliver"] = self.max_deliver
        if self.backoff:
            d["backoff"] = list(self.backoff)
        if self.filter_subject:
            d["filter_subject"] = self.filter_subject
        if self.filter_subjects:
            d["filter_subjects"] = list(self.filter_subjects)
        d["replay_policy"] = self.replay_policy
        for key in ("rate_limit_bps", "sample_freq", "max_waiting", "max_ack_pending", "flow_control"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        for key in ("headers_only", "max_batch", "max_expires", "max_bytes", "deliver_subject"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        for key in ("deliver_group", "idle_heartbeat", "inactive_threshold"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        d["num_replicas"] = self.num_replicas
        for key in ("mem_storage", "direct", "sourcing"):
            if getattr(self, key):
                d[key] = True
        meta = dict(self.metadata)
        if server_version is not None:
            meta[META_SERVER_VERSION] = server_version
        if api_level is not None:
            meta[META_SERVER_LEVEL] = str(api_level)
        if meta:
            d["metadata"] = dict(sorted(meta.items()))
        if self.pause_until is not None:
            d["pause_until"] = format_go_time(self.pause_until, self.pause_until_offset)
        if self.priority_groups:
            d["priority_groups"] = list(self.priority_groups)
        if self.priority_policy != "none":
            d["priority_policy"] = self.priority_policy
        if self.priority_timeout:
            d["priority_timeout"] = self.priority_timeout
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConsumerConfig:
        """Load a config written by ``to_json`` (stored state, a response's ``config``).

        No defaults and no validation; unknown fields are ignored and the response-only
        metadata keys dropped. A value of the wrong type raises ``ValueError``.
        """
        try:
            raw = _CONSUMER_CONFIG.decode(dict(d), [], "ConsumerConfig", False)
        except _DecodeError as e:
            raise ValueError(str(e)) from None
        c = _from_decoded({} if raw is _ABSENT else raw)
        c["metadata"] = {
            k: v for k, v in c["metadata"].items() if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)
        }
        return _build(c)


def _zero_config() -> dict[str, Any]:
    return {f.name: {} if f.name == "metadata" else f.default for f in fields(ConsumerConfig)}


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: Any) -> Any:
    """Go decodes a lone UTF-16 surrogate escape as U+FFFD; Python keeps it (and cannot encode it)."""
    return _LONE_SURROGATE.sub("\ufffd", value) if isinstance(value, str) else value


def _from_decoded(raw: Mapping[str, Any]) -> dict[str, Any]:
    c = _zero_config()
    for key, value in raw.items():
        if key in ("opt_start_time", "pause_until"):
            c[key], c[key + "_offset"] = value
        elif isinstance(value, list):
            c[key] = [_text(v) for v in value]
        elif isinstance(value, dict):
            c[key] = {_text(k): _text(v) for k, v in value.items()}
        else:
            c[key] = _text(value)
    return c


def _build(c: Mapping[str, Any]) -> ConsumerConfig:
    c = dict(c)
    for key in ("backoff", "filter_subjects", "priority_groups"):
        c[key] = tuple(c[key])
    return ConsumerConfig(**c)


# ------------------------------------------------------------------------ the create request


@dataclass(frozen=True, slots=True)
class CreateConsumerRequest:
    """A decoded ``CONSUMER.CREATE``/``CONSUMER.DURABLE.CREATE`` request.

    ``config`` holds what was sent (Go zero values elsewhere), with ``name`` set from the
    subject as the reference does. ``consumer_name`` is the name the request addresses ("" for
    a legacy ephemeral without a name: the server makes one up).
    """

    stream_name: str
    consumer_name: str
    config: ConsumerConfig
    action: str = ""
    pedantic: bool = False
    filter_token: str = ""
    legacy_ephemeral: bool = False
    legacy_durable: bool = False


def parse_create_request(
    subject: str, body: bytes | str | Mapping[str, Any], *, strict: bool = True, clustered: bool = False
) -> CreateConsumerRequest:
    """Decode a create request and apply the handler's subject checks, in the reference's order.

    ``subject`` is the API subject in its ``$JS.API.`` form (map a domain prefix first); the
    reference answers ``$JS.API.CONSUMER.CREATE.<s>``, ``...CREATE.<s>.<c>[.<filter...>]`` and
    ``$JS.API.CONSUMER.DURABLE.CREATE.<s>.<d>`` only, anything else is a ``ValueError`` (route
    nothing else here: the reference does not reply). Errors, as ``ApiError``: invalid JSON
    (10025), stream name mismatch (10056), path separators in the name (10127), durable-name
    rules (10017, 10018, 10020), ``filter_subjects`` with a filter token (10137), a filter token
    that is not ``filter_subject`` (10131), replicas > 1 on a single server (10074).
    ``strict`` is the server's JetStream ``strict`` option (unknown fields rejected).
    """
    tokens = subject.split(".")
    n = len(tokens)
    if n < 5 or tokens[:3] != ["$JS", "API", "CONSUMER"]:
        raise ValueError(f"not a consumer create subject: {subject!r}")
    durable_form = tokens[3] == "DURABLE"
    if (durable_form and (n != 7 or tokens[4] != "CREATE")) or (not durable_form and tokens[3] != "CREATE"):
        raise ValueError(f"not a consumer create subject: {subject!r}")

    d = body if isinstance(body, Mapping) else decode_request(body)
    raw = _decode(_CREATE_REQUEST, d, "CreateConsumerRequest", strict)
    c = _from_decoded(raw.get("config") or {})
    req_stream = raw.get("stream_name", "")

    filter_token = ""
    legacy_ephemeral = legacy_durable = False
    if n == 5:
        legacy_ephemeral = True
        stream_name, consumer_name = tokens[4], c["name"]
    elif durable_form:
        legacy_durable = True
        stream_name, consumer_name = tokens[5], tokens[6]
    else:
        stream_name, consumer_name = tokens[4], tokens[5]
        if n > 6:
            filter_token = ".".join(tokens[6:])

    if stream_name != req_stream:
        raise api_error("JSStreamMismatchErr")
    if consumer_name and ("\\" in consumer_name or "/" in consumer_name):
        raise api_error("JSConsumerNameContainsPathSeparatorsErr")
    if legacy_durable:
        if not c["durable_name"]:
            raise api_error("JSConsumerDurableNameNotSetErr")
        if consumer_name != c["durable_name"]:
            raise api_error("JSConsumerDurableNameNotMatchSubjectErr")
        c["name"] = consumer_name
    elif not legacy_ephemeral:
        if c["durable_name"] and consumer_name != c["durable_name"]:
            raise api_error("JSConsumerDurableNameNotMatchSubjectErr")
        c["name"] = consumer_name
    elif c["durable_name"]:
        raise api_error("JSConsumerEphemeralWithDurableNameErr")
    if filter_token and c["filter_subjects"]:
        raise api_error("JSConsumerMultipleFiltersNotAllowed")
    if filter_token and c["filter_subject"] != filter_token:
        raise api_error("JSConsumerCreateFilterSubjectMismatchErr")
    if not clustered and c["num_replicas"] > 1:
        raise api_error("JSStreamReplicasNotSupportedErr")
    return CreateConsumerRequest(
        stream_name=stream_name,
        consumer_name=consumer_name,
        config=_build(c),
        action=raw.get("action", ""),
        pedantic=raw.get("pedantic", False),
        filter_token=filter_token,
        legacy_ephemeral=legacy_ephemeral,
        legacy_durable=legacy_durable,
    )


@dataclass(frozen=True, slots=True)
class ConsumerLimits:
    """Server (``jetstream.limits``) and account limits that bear on consumers; 0 = none."""

    max_ack_pending: int = 0
    max_request_batch: int = 0
    account_max_ack_pending: int = 0
    account_max_consumers: int = 0


@dataclass(frozen=True, slots=True)
class CreateOutcome:
    """What a create request resolves to: the consumer's ``name`` and the config to run.

    ``existing`` says the request addressed a consumer that already exists: its config is
    replaced by ``config`` (which may equal the old one). For a legacy ephemeral without a name,
    ``name`` is new and ``config.name`` stays empty, as in the reference's responses.
    """

    name: str
    config: ConsumerConfig
    existing: bool


def resolve_create(
    request: CreateConsumerRequest,
    *,
    stream: StreamConfig,
    consumers: Mapping[str, ConsumerConfig] = {},
    limits: ConsumerLimits = ConsumerLimits(),
    has_interest: Callable[[str], bool] | None = None,
    new_name: Callable[[], str] = new_consumer_name,
) -> CreateOutcome:
    """Fill in defaults, validate and decide, as the reference's ``addConsumerWithAssignment``.

    ``consumers`` maps the stream's consumer names to their configs. ``has_interest(subject)``
    tells whether a push consumer's current deliver subject has subscribers (changing it is
    then ``JSConsumerNameExistErr``). Raises ``ApiError`` with the reference's first error.
    """
    c = _from_config(request.config)
    cname = c["durable_name"] or c["name"]
    existing = consumers.get(cname) if cname else None

    if c["direct"] and c["sourcing"] and c["name"]:
        if stream.retention != "limits":
            c.update(direct=False, durable_name=c["name"], ack_policy="flow_control")
            c.update(ack_wait=0, max_deliver=0, inactive_threshold=0)
        else:
            c["name"] = f"{c['name']}-{new_name()}"
        cname = c["durable_name"] or c["name"]
        existing = consumers.get(cname)

    if existing is not None:
        c["pause_until"], c["pause_until_offset"] = existing.pause_until, existing.pause_until_offset
        if c["sourcing"] and c["durable_name"]:
            c["deliver_policy"] = existing.deliver_policy
            c["opt_start_seq"] = existing.opt_start_seq
            c["opt_start_time"] = existing.opt_start_time
            c["opt_start_time_offset"] = existing.opt_start_time_offset

    _set_static_metadata(c)
    _set_defaults(c, stream, limits, request.pedantic)
    _check_cfg(c, stream, limits)

    wq = stream.retention == "workqueue"
    if existing is not None:
        if request.action == "create":
            probe = dict(c)
            probe["metadata"] = _copied_metadata(c["metadata"], existing.metadata)
            if _build(probe) != existing:
                raise api_error("JSConsumerAlreadyExists")
        if wq and not _partition_unique(cname, _filters(c), consumers):
            raise api_error("JSConsumerWQConsumerNotUniqueErr")
        interest = (
            has_interest(existing.deliver_subject) if has_interest and existing.deliver_subject else False
        )
        return CreateOutcome(cname, check_consumer_update(existing, _build(c), has_interest=interest), True)
    if request.action == "update":
        raise api_error("JSConsumerDoesNotExist")

    limitable = sum(1 for o in consumers.values() if not o.sourcing)
    maxc = stream.max_consumers
    if maxc <= 0 or 0 < limits.account_max_consumers < maxc:
        maxc = limits.account_max_consumers
    if maxc > 0 and limitable >= maxc:
        raise api_error("JSMaximumConsumersLimitErr")

    if wq and not c["direct"] and not c["sourcing"]:
        if c["ack_policy"] not in ("explicit", "flow_control"):
            raise api_error("JSConsumerWQRequiresExplicitAckErr")
        if c["deliver_policy"] != "all":
            raise api_error("JSConsumerWQConsumerNotDeliverAllErr")
        if limitable > 0:
            filters = _filters(c)
            if not filters:
                raise api_error("JSConsumerWQMultipleUnfilteredErr")
            if not _partition_unique(cname, filters, consumers):
                raise api_error("JSConsumerWQConsumerNotUniqueErr")

    if c["durable_name"]:
        if _blen(c["durable_name"]) > MAX_NAME_LEN:
            raise api_error("JSConsumerNameTooLongErrF", max=MAX_NAME_LEN)
        name = c["durable_name"]
    elif c["name"]:
        name = c["name"]
    else:
        name = new_name()
        while name in consumers:
            name = new_name()
    if not is_valid_asset_name(name):
        raise api_error("JSConsumerBadDurableNameErr")
    if _blen(name) > MAX_NAME_LEN and stream.storage == "file" and not c["mem_storage"]:
        # The reference's file store cannot make a directory for so long a name.
        raise _update_error("error creating store for consumer")
    if not c["durable_name"] and c["inactive_threshold"] <= 0:
        c["inactive_threshold"] = DEFAULT_INACTIVE_THRESHOLD
    return CreateOutcome(name, _build(c), False)


def _from_config(cfg: ConsumerConfig) -> dict[str, Any]:
    c = {f.name: getattr(cfg, f.name) for f in fields(ConsumerConfig)}
    c["metadata"] = dict(cfg.metadata)
    for key in ("backoff", "filter_subjects", "priority_groups"):
        c[key] = list(c[key])
    return c


def _filters(c: Mapping[str, Any]) -> list[str]:
    return list(c["filter_subjects"]) + ([c["filter_subject"]] if c["filter_subject"] else [])


def _partition_unique(name: str, partitions: Iterable[str], consumers: Mapping[str, ConsumerConfig]) -> bool:
    for partition in partitions:
        for other_name, other in consumers.items():
            if other_name == name or other.direct or other.sourcing:
                continue
            if not other.filters:
                return False
            if any(overlaps(partition, f) for f in other.filters):
                return False
    return True


def _required_api_level(c: Mapping[str, Any]) -> int:
    level = 0
    if c["pause_until"] is not None and c["pause_until"] != GO_ZERO_TIME_NS:
        level = 1
    if c["priority_policy"] != "none" or c["priority_timeout"] != 0 or c["priority_groups"]:
        level = 1
    if c["ack_policy"] == "flow_control":
        level = 4
    return level


def _set_static_metadata(c: dict[str, Any]) -> None:
    meta = dict(c["metadata"] or {})
    meta.pop(META_SERVER_VERSION, None)
    meta.pop(META_SERVER_LEVEL, None)
    meta[META_REQUIRED_LEVEL] = str(_required_api_level(c))
    c["metadata"] = meta


def _copied_metadata(meta: Mapping[str, str], prev: Mapping[str, str]) -> dict[str, str]:
    """``copyConsumerMetadata``: the stored required level is taken from the previous config."""
    out = {k: v for k, v in meta.items() if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)}
    if META_REQUIRED_LEVEL in prev:
        out[META_REQUIRED_LEVEL] = prev[META_REQUIRED_LEVEL]
    else:
        out.pop(META_REQUIRED_LEVEL, None)
    return out


# Negative values become 0 (pedantic mode: an error naming the field), in the reference's order.
_NON_NEGATIVE = (
    "max_batch",
    "max_expires",
    "max_bytes",
    "idle_heartbeat",
    "inactive_threshold",
    "priority_timeout",
)


def _set_defaults(c: dict[str, Any], stream: StreamConfig, limits: ConsumerLimits, pedantic: bool) -> None:
    """``setConsumerConfigDefaults`` (in place)."""
    if c["max_deliver"] == 0 or c["max_deliver"] < -1:
        if pedantic and c["max_deliver"] < -1:
            raise _pedantic("max_deliver must be set to -1")
        c["max_deliver"] = -1
    if c["max_waiting"] < 0:
        if pedantic:
            raise _pedantic("max_waiting must not be negative")
        c["max_waiting"] = 0
    if c["max_ack_pending"] < -1:
        if pedantic:
            raise _pedantic("max_ack_pending must be set to -1")
        c["max_ack_pending"] = -1
    for key in _NON_NEGATIVE:
        if c[key] < 0:
            if pedantic:
                raise _pedantic(f"{key} must not be negative")
            c[key] = 0
    if not c["deliver_subject"] and c["max_waiting"] == 0:
        c["max_waiting"] = DEFAULT_MAX_WAITING
    if c["ack_wait"] == 0 and c["ack_policy"] in ("explicit", "all"):
        c["ack_wait"] = DEFAULT_ACK_WAIT
    if c["backoff"]:
        if pedantic and c["ack_wait"] != c["backoff"][0]:
            raise _pedantic("first backoff value has to equal batch AckWait")
        c["ack_wait"] = c["backoff"][0]
    stream_limits = stream.consumer_limits or {}
    stream_map = stream_limits.get("max_ack_pending", 0)
    stream_it = stream_limits.get("inactive_threshold", 0)
    if c["max_ack_pending"] == 0:
        if pedantic and stream_map > 0:
            raise _pedantic("max_ack_pending must be set if it's configured in stream limits")
        c["max_ack_pending"] = stream_map
    if c["inactive_threshold"] == 0:
        if pedantic and stream_it > 0:
            raise _pedantic("inactive_threshold must be set if it's configured in stream limits")
        c["inactive_threshold"] = stream_it
    if c["max_ack_pending"] == 0 and c["ack_policy"] != "none":
        pending = DEFAULT_MAX_ACK_PENDING
        if 0 < limits.max_ack_pending < pending:
            pending = limits.max_ack_pending
        if 0 < limits.account_max_ack_pending < pending:
            pending = limits.account_max_ack_pending
        c["max_ack_pending"] = pending
    if not c["deliver_subject"] and c["max_batch"] == 0 and limits.max_request_batch > 0:
        if pedantic:
            raise _pedantic("max_request_batch must be set if it's JetStream limits are set")
        c["max_batch"] = limits.max_request_batch
    if c["priority_policy"] == "pinned_client" and c["priority_timeout"] == 0:
        c["priority_timeout"] = DEFAULT_PINNED_TTL
    if c["ack_policy"] == "flow_control" and not pedantic:
        c["flow_control"] = True
        c["idle_heartbeat"] = FLOW_CONTROL_HEARTBEAT


def _atoi_error(s: str) -> str | None:
    """``strconv.Atoi``'s error text for ``s`` (None when it parses), or "<nil>" when negative."""
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or not _DIGITS.issuperset(body):
        return f"strconv.Atoi: parsing {_go_quote(s)}: invalid syntax"
    if not _INT64[0] <= int(s) <= _INT64[1]:
        return f"strconv.Atoi: parsing {_go_quote(s)}: value out of range"
    return "<nil>" if int(s) < 0 else None


_POLICY_NAMES = {
    "all": "all",
    "last": "last",
    "last_per_subject": "last per subject",
    "new": "new",
    "by_start_sequence": "by start sequence",
    "by_start_time": "by start time",
}


def _check_start(c: Mapping[str, Any]) -> None:
    policy = c["deliver_policy"]
    dp = _POLICY_NAMES[policy]

    def bad_start(start: str) -> ApiError:
        return api_error(
            "JSConsumerInvalidPolicyErrF",
            err=f"consumer delivery policy is deliver {dp}, but optional start {start} is also set",
        )

    def not_set(what: str) -> ApiError:
        return api_error(
            "JSConsumerInvalidPolicyErrF",
            err=f"consumer delivery policy is deliver {dp}, but optional {what} is not set",
        )

    seq, start_time = c["opt_start_seq"], c["opt_start_time"]
    if policy in ("all", "last", "last_per_subject", "new"):
        if seq > 0:
            raise bad_start("sequence")
        if start_time is not None:
            raise bad_start("time")
        if policy == "last_per_subject" and not c["filter_subject"] and not c["filter_subjects"]:
            raise not_set("filter subject")
    elif policy == "by_start_sequence":
        if seq == 0:
            raise not_set("start sequence")
        if start_time is not None:
            raise bad_start("time")
    elif policy == "by_start_time":
        if start_time is None:
            raise not_set("start time")
        if seq != 0:
            raise bad_start("start sequence")


def _check_cfg(c: dict[str, Any], stream: StreamConfig, limits: ConsumerLimits) -> None:
    """``checkConsumerCfg``: the reference's validation, in its order."""
    if c["name"] and not is_valid_asset_name(c["name"]):
        raise _invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")
    if c["durable_name"] and not is_valid_asset_name(c["durable_name"]):
        raise _invalid_config("consumer durable name can not contain '.', '*', '>', '\\', '/'")
    replicas = c["num_replicas"]
    if replicas > 0 and replicas > stream.num_replicas:
        raise api_error("JSConsumerReplicasExceedsStream")
    if replicas < 0:
        raise api_error("JSReplicasCountCannotBeNegative")
    if stream.retention in ("interest", "workqueue") and replicas not in (0, stream.num_replicas):
        raise api_error("JSConsumerReplicasShouldMatchStream")
    if any(b < 0 for b in c["backoff"]):
        raise api_error("JSConsumerBackOffNegativeErr")
    if c["ack_wait"] < 0:
        raise api_error("JSConsumerAckWaitNegativeErr")

    push = bool(c["deliver_subject"])
    if c["ack_policy"] == "flow_control":
        if not push:
            raise api_error("JSConsumerAckFCRequiresPushErr")
        if not c["flow_control"]:
            raise api_error("JSConsumerAckFCRequiresFCErr")
        if c["idle_heartbeat"] != FLOW_CONTROL_HEARTBEAT:
            raise _invalid_config("flow control ack policy heartbeat needs to be 1s")
        if c["max_ack_pending"] <= 0:
            raise api_error("JSConsumerAckFCRequiresMaxAckPendingErr")
        if c["ack_wait"] != 0 or c["backoff"]:
            raise api_error("JSConsumerAckFCRequiresNoAckWaitErr")
        if c["max_deliver"] > 0:
            raise api_error("JSConsumerAckFCRequiresNoMaxDeliverErr")

    if c["backoff"] and c["max_deliver"] != -1 and len(c["backoff"]) > c["max_deliver"]:
        raise api_error("JSConsumerMaxDeliverBackoffErr")
    if _blen(c["description"]) > MAX_DESCRIPTION_LEN:
        raise api_error("JSConsumerDescriptionTooLongErrF", max=MAX_DESCRIPTION_LEN)

    if push:
        ds = c["deliver_subject"]
        if has_wildcard(ds):
            raise api_error("JSConsumerDeliverToWildcardsErr")
        if not is_valid_subject(ds):
            raise api_error("JSConsumerInvalidDeliverSubject")
        if any(is_subset(ds, s) for s in stream.subjects):
            raise api_error("JSConsumerDeliverCycleErr")
        if c["max_waiting"] != 0:
            raise api_error("JSConsumerPushMaxWaitingErr")
        if c["max_ack_pending"] > 0 and c["ack_policy"] == "none":
            raise api_error("JSConsumerMaxPendingAckPolicyRequiredErr")
        if 0 < c["idle_heartbeat"] < 100 * _MS:
            raise api_error("JSConsumerSmallHeartbeatErr")
    else:
        if c["ack_policy"] == "none" and stream.retention == "workqueue":
            raise api_error("JSConsumerPullRequiresAckErr")
        if c["rate_limit_bps"] > 0:
            raise api_error("JSConsumerPullWithRateLimitErr")
        if c["max_waiting"] < 0:
            raise api_error("JSConsumerMaxWaitingNegativeErr")
        if c["idle_heartbeat"] > 0:
            raise api_error("JSConsumerHBRequiresPushErr")
        if c["flow_control"]:
            raise api_error("JSConsumerFCRequiresPushErr")
        if c["max_batch"] < 0:
            raise api_error("JSConsumerMaxRequestBatchNegativeErr")
        if c["max_expires"] != 0 and c["max_expires"] < _MS:
            raise api_error("JSConsumerMaxRequestExpiresTooSmall")
        if 0 < limits.max_request_batch < c["max_batch"]:
            raise api_error("JSConsumerMaxRequestBatchExceededF", limit=limits.max_request_batch)

    stream_limits = stream.consumer_limits or {}
    for limit in (
        limits.max_ack_pending,
        limits.account_max_ack_pending,
        stream_limits.get("max_ack_pending", 0),
    ):
        if limit > 0 and c["max_ack_pending"] > limit:
            raise api_error("JSConsumerMaxPendingAckExcessErrF", limit=limit)
    stream_it = stream_limits.get("inactive_threshold", 0)
    if stream_it > 0 and c["inactive_threshold"] > stream_it:
        raise api_error("JSConsumerInactiveThresholdExcess", limit=go_duration(stream_it))

    if c["direct"]:
        if not push:
            raise api_error("JSConsumerDirectRequiresPushErr")
        if c["durable_name"]:
            raise api_error("JSConsumerDirectRequiresEphemeralErr")

    if c["filter_subject"] and c["filter_subjects"]:
        raise api_error("JSConsumerDuplicateFilterSubjects")
    if c["filter_subject"] and not is_valid_subject(c["filter_subject"]):
        raise _invalid_config("invalid subject")
    if any(f == "" for f in c["filter_subjects"]):
        raise api_error("JSConsumerEmptyFilter")
    filters = _filters(c)
    index = SubjectIndex((f, j) for j, f in enumerate(filters))  # not a pass over every pair
    for i, subject in enumerate(filters):
        if not is_valid_subject(subject):
            raise _invalid_config("invalid subject")
        if any(j != i for j in index.supersets(subject)):
            raise api_error("JSConsumerOverlappingSubjectFilters")

    _check_start(c)

    if c["sample_freq"]:
        err = _atoi_error(c["sample_freq"].removesuffix("%"))
        if err is not None:
            raise api_error("JSConsumerInvalidSamplingErrF", err=err)
    if c["flow_control"] and c["idle_heartbeat"] == 0:
        raise api_error("JSConsumerWithFlowControlNeedsHeartbeats")
    if c["durable_name"] and c["name"] and c["durable_name"] != c["name"]:
        raise api_error("JSConsumerCreateDurableAndNameMismatch")
    if sum(_blen(k) + _blen(v) for k, v in c["metadata"].items()) > MAX_METADATA_LEN:
        raise api_error("JSConsumerMetadataLengthErrF", limit=f"{MAX_METADATA_LEN // 1024}KB")

    if c["priority_policy"] != "none":
        if push:
            raise api_error("JSConsumerPushWithPriorityGroupErr")
        if not c["priority_groups"]:
            raise api_error("JSConsumerPriorityPolicyWithoutGroup")
        for group in c["priority_groups"]:
            if group == "":
                raise api_error("JSConsumerEmptyGroupName")
            if not _VALID_GROUP_NAME.fullmatch(group):
                raise api_error("JSConsumerInvalidGroupNameErr")
    else:
        if c["priority_groups"]:
            raise api_error("JSConsumerPriorityGroupWithPolicyNone")
        if c["priority_timeout"] > 0:
            raise api_error("JSConsumerPinnedTTLWithoutPriorityPolicyNone")


# ---------------------------------------------------------------------------------- updates


def _update_error(msg: str) -> ApiError:
    return api_error("JSConsumerCreateErrF", err=msg)


def check_consumer_update(
    old: ConsumerConfig, new: ConsumerConfig, *, has_interest: bool = False
) -> ConsumerConfig:
    """The reference's allowed edits of an existing consumer; returns the config to run.

    ``new`` is a defaulted, validated config (``resolve_create`` does both and calls this).
    Forbidden edits raise ``JSConsumerCreateErrF`` (10012, e.g. "deliver policy can not be
    updated"); a new deliver subject while the old one ``has_interest`` raises
    ``JSConsumerNameExistErr``; too short a ``max_deliver`` for ``backoff`` raises 10116.
    The returned config has ``pause_until`` in UTC and an ephemeral's default inactive
    threshold stamped again, as the reference's ``updateConfig`` leaves them.
    """
    if new != old:
        if old.deliver_policy != new.deliver_policy:
            raise _update_error("deliver policy can not be updated")
        if old.mem_storage != new.mem_storage:
            raise _update_error("storage type can not be updated")
        if old.direct != new.direct:
            raise _update_error("direct can not be updated")
        if old.sourcing != new.sourcing:
            raise _update_error("sourcing can not be updated")
        if old.opt_start_seq != new.opt_start_seq:
            raise _update_error("start sequence can not be updated")
        if old.opt_start_time != new.opt_start_time:
            raise _update_error("start time can not be updated")
        if old.ack_policy != new.ack_policy:
            raise _update_error("ack policy can not be updated")
        if old.replay_policy != new.replay_policy:
            raise _update_error("replay policy can not be updated")
        if old.idle_heartbeat != new.idle_heartbeat:
            raise _update_error("heart beats can not be updated")
        if old.flow_control != new.flow_control:
            raise _update_error("flow control can not be updated")
        if old.deliver_subject != new.deliver_subject:
            if not old.deliver_subject:
                raise _update_error("can not update pull consumer to push based")
            if not new.deliver_subject:
                raise _update_error("can not update push consumer to pull based")
            if has_interest:
                raise api_error("JSConsumerNameExistErr")
        if old.max_waiting != new.max_waiting:
            raise _update_error("max waiting can not be updated")
        if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
            raise api_error("JSConsumerMaxDeliverBackoffErr")
    if new.pause_until is not None and new.pause_until_offset:
        new = replace(new, pause_until_offset=0)
    if (
        new.inactive_threshold != old.inactive_threshold
        and not old.is_durable
        and new.inactive_threshold <= 0
    ):
        new = replace(new, inactive_threshold=DEFAULT_INACTIVE_THRESHOLD)
    return new


# ------------------------------------------------------------------------------------- info


def _sequence_info(seqs: tuple[int, int, int | None] | tuple[int, int]) -> dict[str, Any]:
    d: dict[str, Any] = {"consumer_seq": seqs[0], "stream_seq": seqs[1]}
    if len(seqs) > 2 and seqs[2]:
        d["last_active"] = rfc3339_nano(seqs[2])
    return d


def consumer_info_json(
    stream_name: str,
    name: str,
    config: ConsumerConfig,
    created_ns: int,
    *,
    delivered: tuple[int, int, int | None] | tuple[int, int] = (0, 0, None),
    ack_floor: tuple[int, int, int | None] | tuple[int, int] = (0, 0, None),
    num_ack_pending: int = 0,
    num_redelivered: int = 0,
    num_waiting: int = 0,
    num_pending: int = 0,
    push_bound: bool = False,
    pinned_client_id: str = "",
    pinned_ts_ns: int = 0,
    cluster: Mapping[str, Any] | None = None,
    now_ns: int | None = None,
    server_version: str | None = None,
    api_level: int | None = None,
) -> dict[str, Any]:
    """The reference's ``ConsumerInfo`` JSON (no ``type``; wrap it with ``api_response``).

    ``delivered``/``ack_floor`` are ``(consumer_seq, stream_seq, last_active_ns | None)``.
    ``paused``/``pause_remaining`` come from ``config.pause_until`` and ``now_ns`` (the wall
    clock if omitted), ``num_redelivered`` reads 0 with ``max_deliver`` 1 as in the reference,
    and a consumer with priority groups reports its first group with the pin. A single
    reference server sends no ``cluster``; pass one to add it. ``server_version``/``api_level``
    add the response-only metadata (create and info responses have it, list responses do not).
    """
    now = time.time_ns() if now_ns is None else now_ns
    d: dict[str, Any] = {
        "stream_name": stream_name,
        "name": name,
        "created": rfc3339_nano(created_ns),
        "config": config.to_json(server_version=server_version, api_level=api_level),
        "delivered": _sequence_info(delivered),
        "ack_floor": _sequence_info(ack_floor),
        "num_ack_pending": num_ack_pending,
        "num_redelivered": 0 if config.max_deliver == 1 else num_redelivered,
        "num_waiting": num_waiting,
        "num_pending": num_pending,
    }
    if cluster is not None:
        d["cluster"] = dict(cluster)
    if push_bound:
        d["push_bound"] = True
    if config.pause_until is not None and now < config.pause_until:
        d["paused"] = True
        d["pause_remaining"] = config.pause_until - now
    d["ts"] = rfc3339_nano(now)
    if config.priority_groups:
        group: dict[str, Any] = {"group": config.priority_groups[0]}
        if pinned_client_id:
            group["pinned_client_id"] = pinned_client_id
        group["pinned_ts"] = rfc3339_nano(pinned_ts_ns)
        d["priority_groups"] = [group]
    return d


def parse_consumers_request(body: bytes | str, *, strict: bool = True) -> int:
    """The ``offset`` of a ``CONSUMER.NAMES``/``CONSUMER.LIST`` request (0 when absent).

    Only a body starting with ``{`` or ``[`` is decoded (anything else is ignored, as by the
    reference); a bad one raises ``JSInvalidJSONErr``. Negative offsets count as 0.
    """
    if not is_json_object_or_array(body):
        return 0
    raw = _decode(_CONSUMERS_REQUEST, decode_request(body), "JSApiConsumersRequest", strict)
    return max(raw.get("offset", 0), 0)


def parse_pause_request(body: bytes, *, strict: bool = True) -> int | None:
    """The ``pause_until`` (Unix ns) of a ``CONSUMER.PAUSE`` request; None for no pause (no
    body, no field, or Go's zero time, which resume). Read like the other optional bodies: only
    a JSON object or array is decoded; a bad one raises ``JSInvalidJSONErr``."""
    if not is_json_object_or_array(body):
        return None
    raw = _decode(_PAUSE_REQUEST, decode_request(body), "JSApiConsumerPauseRequest", strict)
    until = raw.get("pause_until")
    return None if until is None or until[0] == GO_ZERO_TIME_NS else int(until[0])


def paused_config(config: ConsumerConfig, until_ns: int | None) -> ConsumerConfig:
    """``config`` after a ``CONSUMER.PAUSE``: ``pause_until`` in UTC (None: not paused) and the
    stored required API level recomputed, as the reference does."""
    c = {f.name: getattr(config, f.name) for f in fields(config)}
    c.update(pause_until=until_ns, pause_until_offset=0)
    _set_static_metadata(c)
    return ConsumerConfig(**c)


def pause_json(until_ns: int | None, now_ns: int) -> dict[str, Any]:
    """The body of a ``CONSUMER.PAUSE`` response (no ``type``): ``paused``, ``pause_until`` (Go's
    zero time when not set) and, while paused, ``pause_remaining``."""
    until = GO_ZERO_TIME_NS if until_ns is None else until_ns
    d: dict[str, Any] = {"paused": now_ns < until, "pause_until": format_go_time(until, 0)}
    if now_ns < until:
        d["pause_remaining"] = until - now_ns
    return d


def consumer_names_json(names: Iterable[str], offset: int = 0) -> dict[str, Any]:
    """The body of a consumer names response (no ``type``): sorted, paged by ``NAMES_LIMIT``."""
    ordered = sorted(names)
    offset = min(max(offset, 0), len(ordered))
    return {
        "total": len(ordered),
        "offset": offset,
        "limit": NAMES_LIMIT,
        "consumers": ordered[offset : offset + NAMES_LIMIT],
    }


def consumer_list_json(infos: Iterable[Mapping[str, Any]], offset: int = 0) -> dict[str, Any]:
    """The body of a consumer list response from every consumer's info (sorted by name here)."""
    ordered = sorted(infos, key=lambda i: i["name"])
    offset = min(max(offset, 0), len(ordered))
    return {
        "total": len(ordered),
        "offset": offset,
        "limit": LIST_LIMIT,
        "consumers": [dict(i) for i in ordered[offset : offset + LIST_LIMIT]],
    }


def paged_error_json(err: ApiError) -> dict[str, Any]:
    """An error body of the names/list responses: the reference keeps its empty page fields."""
    return {"error": err.to_json(), "total": 0, "offset": 0, "limit": 0, "consumers": []}


# ------------------------------------------------------------------------------ pull requests


class PullRequestError(LeafjetError):
    """A pull request the reference answers with a status message (``NATS/1.0 <status> <desc>``)."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"{status} {description}")
        self.status = status
        self.description = description


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A decoded ``CONSUMER.MSG.NEXT`` request.

    ``batch`` is what was asked: the reference delivers at most one message for ``batch <= 0``
    (a JSON body without ``batch`` is 0). ``expires_ns`` 0 means no expiry; a negative one
    expires at once (408). ``priority_group`` says the body was JSON (the reference checks the
    priority fields only then).
    """

    batch: int = 1
    expires_ns: int = 0
    max_bytes: int = 0
    no_wait: bool = False
    heartbeat_ns: int = 0
    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0
    priority_group: bool = False


_SYNTAX_DECODER = json.JSONDecoder(
    parse_float=_FloatLiteral, parse_int=jsonsafe.parse_int, parse_constant=_reject_constant
)
_SYNTAX_DECODER_FAST = json.JSONDecoder(
    parse_float=_FloatLiteral, parse_int=int, parse_constant=_reject_constant
)
_PULL_DECODER = json.JSONDecoder(parse_float=_FloatLiteral, parse_int=jsonsafe.parse_int)
_PULL_DECODER_FAST = json.JSONDecoder(parse_float=_FloatLiteral, parse_int=int)


def _unmarshal_error(text: str) -> str:
    """The error ``json.Unmarshal`` gives for malformed JSON (no offsets, its EOF wording)."""
    if jsonsafe.too_deep(text):
        return "exceeded max depth"
    try:
        _, end = jsonsafe.raw_decode(_SYNTAX_DECODER_FAST, _SYNTAX_DECODER, text)
    except json.JSONDecodeError as e:
        if e.pos >= len(text) or e.msg.startswith("Unterminated string"):
            return "unexpected end of JSON input"
        if e.msg.startswith("Invalid \\escape"):
            return f"invalid escape sequence `{text[e.pos : e.pos + 2]}` in string"
        if text[e.pos] == "-" and e.msg.startswith("Expecting value"):
            if e.pos + 1 >= len(text):
                return "unexpected end of JSON input"
            return f"invalid character {_go_quote_char(text[e.pos + 1])} in numeric literal"
        word = {"t": "true", "f": "false", "n": "null"}.get(text[e.pos])
        if word is not None and e.msg.startswith("Expecting value"):
            # A misspelt literal: Go names the first wrong character and the one it expected.
            for i, expected in enumerate(word):
                if e.pos + i >= len(text):
                    return "unexpected end of JSON input"
                if text[e.pos + i] != expected:
                    got = _go_quote_char(text[e.pos + i])
                    return f"invalid character {got} in literal {word} (expecting '{expected}')"
        return re.sub(r" at offset \d+$", "", _go_syntax_error(e, text))
    except _ConstantError as e:
        at = text.find(e.name)
        if e.name.startswith("-"):
            return "invalid character 'I' in numeric literal"
        return f"invalid character '{text[at]}' looking for beginning of value"
    rest = text[end:].lstrip(" \t\r\n")
    return f"invalid character {_go_quote_char(rest[0])} after top-level value" if rest else ""


def parse_pull_request(
    body: bytes | str, config: ConsumerConfig | None = None, *, pinned_id: str = ""
) -> PullRequest:
    """Decode a pull request body as the reference's ``nextReqFromMsg`` does.

    Whitespace is trimmed; empty is one message; a body starting with ``{`` is JSON (not
    strict, keys case-insensitive); otherwise a decimal integer is the batch (``"+2"`` and
    ``"-2"`` included) and anything else is one message. Malformed JSON and a heartbeat over
    half of ``expires`` raise ``PullRequestError(400, "Bad Request - ...")``.

    With the consumer's ``config`` the checks of ``check_pull_request`` run too, in the
    reference's order (a push consumer is refused before the body is looked at).
    """
    if config is not None and config.is_push:
        raise PullRequestError(409, "Consumer is push based")
    request = _parse_pull_body(body)
    if config is not None:
        check_pull_request(request, config, pinned_id=pinned_id)
    return request


def _parse_pull_body(body: bytes | str) -> PullRequest:
    text = jsonsafe.text(body).strip(" \t\r\n\v\f")
    if not text:
        return PullRequest()
    if text[0] != "{":
        s = text[1:] if text[0] in "+-" else text
        # (a digit string longer than any int64 is no batch; int() would refuse 4,300 digits)
        if s and _DIGITS.issuperset(s) and len(s.lstrip("0")) <= 19 and _INT64[0] <= int(text) <= _INT64[1]:
            return PullRequest(batch=int(text))
        return PullRequest()
    err = _unmarshal_error(text)
    if err:
        raise PullRequestError(400, f"Bad Request - {err}")
    try:
        value = jsonsafe.raw_decode(_PULL_DECODER_FAST, _PULL_DECODER, text)[0]  # checked: one value
        if jsonsafe.needs_clean(text):
            value = jsonsafe.clean(value)
        raw = _PULL_REQUEST.decode(value, [], "", False)
    except _DecodeError as e:
        raise PullRequestError(400, f"Bad Request - {e}") from None
    raw = {} if raw is _ABSENT else raw
    expires, heartbeat = raw.get("expires", 0), raw.get("idle_heartbeat", 0)
    if heartbeat > 0 and heartbeat * 2 > expires:
        raise PullRequestError(400, "Bad Request - heartbeat value too large")
    return PullRequest(
        batch=raw.get("batch", 0),
        expires_ns=expires,
        max_bytes=raw.get("max_bytes", 0),
        no_wait=raw.get("no_wait", False),
        heartbeat_ns=heartbeat,
        group=raw.get("group", ""),
        min_pending=raw.get("min_pending", 0),
        min_ack_pending=raw.get("min_ack_pending", 0),
        id=raw.get("id", ""),
        priority=raw.get("priority", 0),
        priority_group=True,
    )


def check_pull_request(request: PullRequest, config: ConsumerConfig, *, pinned_id: str = "") -> None:
    """The checks of the reference's ``processNextMsgRequest`` before a request is queued.

    Raises ``PullRequestError`` with its status line: 409 "Consumer is push based", 409
    "Exceeded MaxRequestBatch of N" / "Exceeded MaxRequestExpires of <duration>" /
    "Exceeded MaxRequestMaxBytes of N", 400 for priority fields that do not fit the consumer's
    priority policy, 423 "Nats-Pin-Id mismatch" when ``pinned_id`` is set and another id is
    given. (Max waiting, no-wait and expiry depend on the queue and stay with the caller.)
    """
    if config.is_push:
        raise PullRequestError(409, "Consumer is push based")
    if config.max_batch > 0 and request.batch > config.max_batch:
        raise PullRequestError(409, f"Exceeded MaxRequestBatch of {config.max_batch}")
    if request.expires_ns and config.max_expires > 0 and request.expires_ns > config.max_expires:
        raise PullRequestError(409, f"Exceeded MaxRequestExpires of {go_duration(config.max_expires)}")
    if request.max_bytes > 0 and config.max_bytes > 0 and request.max_bytes > config.max_bytes:
        raise PullRequestError(409, f"Exceeded MaxRequestMaxBytes of {config.max_bytes}")
    if not request.priority_group:
        return
    policy = config.priority_policy
    if (request.min_pending or request.min_ack_pending) and policy != "overflow":
        raise PullRequestError(400, "Bad Request - Not a Overflow Priority consumer")
    if request.id and policy != "pinned_client":
        raise PullRequestError(400, "Bad Request - Not a Pinned Client Priority consumer")
    if not 0 <= request.priority <= 9:
        raise PullRequestError(400, "Bad Request - Priority must be between 0 and 9")
    if policy != "none":
        if not request.group:
            raise PullRequestError(400, "Bad Request - Priority Group missing")
        if request.group not in config.priority_groups:
            raise PullRequestError(400, "Bad Request - Invalid Priority Group")
        if pinned_id and request.id and request.id != pinned_id:
            raise PullRequestError(423, "Nats-Pin-Id mismatch")


__all__ = [
    "ACK_POLICIES",
    "CREATE_RESPONSE",
    "DELIVER_POLICIES",
    "INFO_RESPONSE",
    "LIST_RESPONSE",
    "NAMES_RESPONSE",
    "PRIORITY_POLICIES",
    "REPLAY_POLICIES",
    "ConsumerConfig",
    "ConsumerLimits",
    "CreateConsumerRequest",
    "CreateOutcome",
    "PullRequest",
    "PullRequestError",
    "check_consumer_update",
    "check_pull_request",
    "consumer_info_json",
    "consumer_list_json",
    "consumer_names_json",
    "go_duration",
    "new_consumer_name",
    "paged_error_json",
    "parse_consumers_request",
    "parse_create_request",
    "parse_pause_request",
    "parse_pull_request",
    "pause_json",
    "paused_config",
    "resolve_create",
]
