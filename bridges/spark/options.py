"""The leafjet Spark source's options: parsed once, validated, and carried as plain picklable data.

Spark hands a data source a case-insensitive dict of strings. Everything a worker's ``read()`` needs
travels inside the partition object, so these dataclasses are frozen, slotted and made of plain values
(no sockets, no SSL contexts; those are built inside ``read()``).
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from core.config import check_url
from core.errors import ConfigError

BASE_COLUMNS = ("stream", "seq", "subject", "timestamp", "headers", "data")
BASE_DDL = (
    "stream STRING, seq BIGINT, subject STRING, timestamp TIMESTAMP, headers MAP<STRING,STRING>, data BINARY"
)
CORRUPT_COLUMN = "_corrupt"
JSON_KINDS = ("string", "double", "float", "long", "int", "short", "boolean", "timestamp")


class OptionError(ValueError):
    """A missing or malformed option of the leafjet source; the message names the option."""


@dataclass(frozen=True, slots=True)
class ConnOptions:
    """How to reach the server: URLs, credentials, TLS files, and the per-request deadline."""

    servers: tuple[str, ...]
    user: str | None = None
    password: str | None = None
    token: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    timeout: float = 5.0

    @property
    def display(self) -> str:
        return ",".join(self.servers)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    conn: ConnOptions
    stream: str
    subject: str | None = None
    start_seq: int | None = None
    end_seq: int | None = None
    start_time_us: int | None = None
    end_time_us: int | None = None
    json_schema: str | None = None
    fail_on_data_loss: bool = True
    max_records_per_batch: int | None = None
    num_partitions: int = 2
    min_partition_size: int = 1000
    batch_size: int = 1000  # messages per batched direct-get request (the server caps it at 1000)
    in_flight: int = 8  # batched direct-get requests outstanding per partition
    rows_per_arrow_batch: int = 8192
    use_direct: str = "auto"  # auto | true | false
    bulk_read: str = "auto"  # auto | true | false: leafjet's bulk read API (bulk.py)
    compression: str = "auto"  # auto | zstd | none: zstd frames from the bulk read API
    # a message without headers gets a null ``headers`` instead of an empty map: Spark's JVM writes
    # no map for it (0.10-0.16 us/row less, bench.spark_floor); off by default, as the contract was {}
    null_headers: bool = False
    # auto | jvm | python: which reader does a batch read when the JVM reader's jar is on the
    # classpath (it hands this source what it cannot do); here only "jvm" means anything: an error
    reader: str = "auto"


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {key!r} must be >= {minimum}, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {key!r} must be true or false, got {raw!r}")


def _choice(opts: Mapping[str, str], key: str, allowed: tuple[str, ...]) -> str:
    value = str(opts.get(key.lower(), allowed[0])).strip().lower()
    if value not in allowed:
        raise OptionError(f"option {key!r} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def parse_time_us(value: str, key: str = "time") -> int:
    """An ISO-8601 timestamp (naive means UTC) or epoch milliseconds, as epoch microseconds."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text) * 1000
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(f"option {key!r} must be ISO-8601 or epoch milliseconds, got {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


SERVER_SCHEMES = ("nats", "tls", "ws", "wss")


def _check_server_url(url: str) -> None:
    """A server of option 'servers' as the clients take it (``nats://`` when it names no
    scheme; core/config.py's URL check), refused here with its name: a NATS client would fail
    on it later, with a message naming neither the option nor the URL, or keep retrying a name
    that cannot resolve."""
    try:
        check_url(url, "", SERVER_SCHEMES, ", ".join(SERVER_SCHEMES), port_required=False)
    except ConfigError as e:
        raise OptionError(f"option 'servers' has a malformed URL {url!r}: {e.reason}") from None
    parts = urllib.parse.urlsplit(url if "://" in url else f"nats://{url}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:  # a server URL names no more
        raise OptionError(f"option 'servers' has a malformed URL {url!r}: expected scheme://host:port")


def parse_options(opts: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option dict (keys case-insensitive) into :class:`SourceOptions`."""
    lower = {str(k).lower(): v for k, v in opts.items()}
    servers = tuple(s.strip() for s in str(lower.get("servers", "")).split(",") if s.strip())
    if not servers:
        raise OptionError("option 'servers' is required, e.g. nats://127.0.0.1:4222")
    for url in servers:
        _check_server_url(url)
    stream = str(lower.get("stream", "")).strip()
    if not stream or any(c in stream for c in " .*>\t"):
        raise OptionError(f"option 'stream' must name a stream (no spaces, '.', '*' or '>'), got {stream!r}")
    timeout_raw = lower.get("timeout", "5")
    try:
        timeout = float(timeout_raw)
    except ValueError:
        raise OptionError(f"option 'timeout' must be seconds, got {timeout_raw!r}") from None
    if not math.isfinite(timeout) or timeout <= 0:  # 0, negative or NaN: every read would time out at once
        raise OptionError(f"option 'timeout' must be seconds > 0, got {timeout_raw!r}")
    conn = ConnOptions(
        servers=servers,
        user=lower.get("user") or None,
        password=lower.get("password") or None,
        token=lower.get("token") or None,
        ca_file=lower.get("tlscafile") or lower.get("cafile") or None,
        cert_file=lower.get("tlscertfile") or None,
        key_file=lower.get("tlskeyfile") or None,
        timeout=timeout,
    )
    start_time = lower.get("starttime")
    end_time = lower.get("endtime")
    use_direct = str(lower.get("usedirect", "auto")).lower()
    if use_direct not in ("auto", "true", "false"):
        raise OptionError(f"option 'useDirect' must be auto, true or false, got {use_direct!r}")
    bulk_read = _choice(lower, "bulkRead", ("auto", "true", "false"))
    compression = _choice(lower, "compression", ("auto", "zstd", "none"))
    json_schema = (lower.get("jsonschema") or "").strip() or None
    subject = (lower.get("subject") or "").strip() or None
    default_parts = max(1, os.cpu_count() or 1)
    result = SourceOptions(
        conn=conn,
        stream=stream,
        subject=subject,
        start_seq=_int(lower, "startseq", None, 1),
        end_seq=_int(lower, "endseq", None, 1),
        start_time_us=parse_time_us(start_time, "startTime") if start_time else None,
        end_time_us=parse_time_us(end_time, "endTime") if end_time else None,
        json_schema=json_schema,
        fail_on_data_loss=_bool(lower, "failondataloss", True),
        max_records_per_batch=_int(lower, "maxrecordsperbatch", None, 1),
        num_partitions=_int(lower, "numpartitions", default_parts, 1) or default_parts,
        min_partition_size=_int(lower, "minpartitionsize", 1000, 1) or 1000,
        batch_size=min(_int(lower, "batchsize", 1000, 1) or 1000, 1000),
        in_flight=_int(lower, "inflight", 8, 1) or 8,
        rows_per_arrow_batch=_int(lower, "rowsperarrowbatch", 8192, 1) or 8192,
        use_direct=use_direct,
        bulk_read=bulk_read,
        compression=compression,
        null_headers=_bool(lower, "nullheaders", False),
        reader=_choice(lower, "reader", ("auto", "jvm", "python")),
    )
    if result.reader == "jvm":
        raise OptionError(
            "option reader=jvm, but the JVM reader is not on Spark's classpath: build it with "
            "scripts/build_spark_reader and add build/spark/leafjet-spark.jar to spark.jars"
        )
    if result.start_seq is not None and result.start_time_us is not None:
        raise OptionError("options 'startSeq' and 'startTime' are exclusive; give one")
    if result.end_seq is not None and result.end_time_us is not None:
        raise OptionError("options 'endSeq' and 'endTime' are exclusive; give one")
    return result


def split_range(first: int, last: int, parts: int, min_size: int) -> list[tuple[int, int]]:
    """Split the inclusive sequence range ``first..last`` into at most ``parts`` contiguous sub-ranges.

    Deterministic for a given input (streaming replay plans the same range again); no gaps, no overlap.
    """
    if last < first:
        return []
    span = last - first + 1
    n = max(1, min(parts, -(-span // max(1, min_size))))
    size, extra = divmod(span, n)
    out, lo = [], first
    for i in range(n):
        hi = lo + size + (1 if i < extra else 0) - 1
        out.append((lo, hi))
        lo = hi + 1
    return out
