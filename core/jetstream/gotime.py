"""Go's ``time.Time`` in JSON: the reference's timestamps, parsed and printed as Go does.

One place for the RFC 3339 texts the API reads (``opt_start_time``, ``pause_until``) and writes
(``created``, ``ts``, ``first_ts``, ``Nats-Time-Stamp``): Go's lenient parser with its error
texts, and its ``MarshalJSON`` rendering (offset kept, fraction's trailing zeros trimmed). And
``time.ParseDuration``, for the delays clients write as Go durations (``-NAK 2s``).
"""

from __future__ import annotations

import re

_SECOND = 1_000_000_000
_DIGITS = frozenset("0123456789")
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's time.Time{}


def _time_quote(s: str) -> str:
    """The ``time`` package's own quote: non-ASCII and control bytes as ``\\xNN``."""
    out = ['"']
    for ch in s:
        if ord(ch) >= 0x80 or ord(ch) < 0x20:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400  # floor division: no C-style correction for negative years
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def parse_go_time(value: str) -> tuple[int, int]:
    """Parse RFC 3339 text as Go's ``time.Time.UnmarshalJSON`` does.

    Returns ``(unix_ns, utc_offset_seconds)``. Go's parser is lenient (a one-digit hour, a comma
    before the fraction, more than 9 fraction digits) and its error texts are reproduced for the
    common mistakes; a ``ValueError`` carries the text.
    """
    layout = "2006-01-02T15:04:05Z07:00"

    def cannot(layout_elem: str, value_elem: str) -> ValueError:
        return ValueError(
            f"parsing time {_time_quote(value)} as {_time_quote(layout)}: "
            f"cannot parse {_time_quote(value_elem)} as {_time_quote(layout_elem)}"
        )

    def out_of_range(what: str) -> ValueError:
        return ValueError(f"parsing time {_time_quote(value)}: {what} out of range")

    def getnum(s: str, fixed: bool) -> tuple[int, str] | None:
        if not s or s[0] not in _DIGITS:
            return None
        if len(s) < 2 or s[1] not in _DIGITS:
            return None if fixed else (int(s[0]), s[1:])
        return int(s[:2]), s[2:]

    def literal(s: str, prefix: str) -> str:
        if not s.startswith(prefix):
            raise cannot(prefix, s)
        return s[len(prefix) :]

    v = value
    if len(v) < 4 or v[0] not in _DIGITS or not _DIGITS.issuperset(v[:4]):
        raise cannot("2006", v)
    year, v = int(v[:4]), v[4:]
    v = literal(v, "-")
    hold = v
    if (r := getnum(v, True)) is None:
        raise cannot("01", hold)
    month, v = r
    if not 1 <= month <= 12:
        raise out_of_range("month")
    v = literal(v, "-")
    hold = v
    if (r := getnum(v, True)) is None:
        raise cannot("02", hold)
    day, v = r
    v = literal(v, "T")
    hold = v
    if (r := getnum(v, False)) is None:
        raise cannot("15", hold)
    hour, v = r
    if hour >= 24:
        raise out_of_range("hour")
    v = literal(v, ":")
    hold = v
    if (r := getnum(v, True)) is None:
        raise cannot("04", hold)
    minute, v = r
    if minute >= 60:
        raise out_of_range("minute")
    v = literal(v, ":")
    hold = v
    if (r := getnum(v, True)) is None:
        raise cannot("05", hold)
    sec, v = r
    if sec >= 60:
        raise out_of_range("second")
    nsec = 0
    if len(v) >= 2 and v[0] in ".," and v[1] in _DIGITS:
        n = 2
        while n < len(v) and v[n] in _DIGITS:
            n += 1
        digits = v[1 : min(n, 10)]
        nsec = int(digits) * 10 ** (9 - len(digits))
        v = v[n:]
    hold = v
    offset = 0
    if v.startswith("Z"):
        v = v[1:]
    else:
        if len(v) < 6 or v[3] != ":":
            raise cannot("Z07:00", hold)
        sign, hh, mm, v = v[0], v[1:3], v[4:6], v[6:]
        h, m = getnum(hh, True), getnum(mm, True)
        if h is not None and h[0] > 24:
            raise out_of_range("time zone offset hour")
        if m is not None and m[0] > 60:
            raise out_of_range("time zone offset minute")
        if h is None or m is None or sign not in "+-":
            raise cannot("Z07:00", hold)
        offset = (h[0] * 60 + m[0]) * 60 * (1 if sign == "+" else -1)
    if v:
        raise ValueError(f"parsing time {_time_quote(value)}: extra text: {_time_quote(v)}")
    if not 1 <= day <= _days_in(month, year):
        raise out_of_range("day")
    secs = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + sec - offset
    return secs * _SECOND + nsec, offset


def format_go_time(ns: int, offset: int = 0) -> str:
    """Unix ns as Go's ``time.Time.MarshalJSON`` (RFC 3339, fraction trimmed) at ``offset`` s."""
    local = ns + offset * _SECOND
    secs, frac = divmod(local, _SECOND)
    days, rem = divmod(secs, 86400)
    y, mo, d = _civil_from_days(days)
    out = f"{y:04d}-{mo:02d}-{d:02d}T{rem // 3600:02d}:{rem // 60 % 60:02d}:{rem % 60:02d}"
    if frac:
        out += "." + f"{frac:09d}".rstrip("0")
    if offset == 0:
        return out + "Z"
    sign = "+" if offset > 0 else "-"
    h, m = divmod(abs(offset) // 60, 60)
    return f"{out}{sign}{h:02d}:{m:02d}"


def parse_rfc3339(s: str) -> int:
    """RFC 3339 text -> Unix nanoseconds (Go's parser; ``ValueError`` with its wording)."""
    return parse_go_time(s)[0]


def rfc3339_nano(ns: int | None) -> str:
    """Unix nanoseconds as Go's ``time.RFC3339Nano`` in UTC (fraction's trailing zeros trimmed).

    ``0`` and ``None`` stand for Go's zero time, ``"0001-01-01T00:00:00Z"``, which the reference
    prints for the timestamps of an empty stream.
    """
    return format_go_time(ns) if ns else ZERO_TIME


_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]+)")


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a duration written as Go's ``time.ParseDuration`` reads it: an optional
    sign, then one or more decimal numbers each with a unit (``1h30m``, ``1.5s``, ``300ms``);
    a lone ``0`` is zero. ``ValueError`` for anything else."""
    s = text
    sign = -1 if s[:1] == "-" else 1
    if s[:1] in "+-":
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"time: invalid duration {text!r}")
    total, pos = 0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None or not (m.group(1) or m.group(2)) or m.group(3) not in _DURATION_UNITS:
            raise ValueError(f"time: invalid duration {text!r}")
        whole, frac, unit = m.group(1) or "0", m.group(2) or "", _DURATION_UNITS[m.group(3)]
        total += int(whole) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)
        pos = m.end()
    if total > (1 << 63) - (sign > 0):  # Go's Duration is an int64: beyond it is no duration
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * total


def format_go_seconds(seconds: int) -> str:
    """A whole number of seconds as Go's ``time.Duration.String`` writes it: ``1s``, ``1m0s``,
    ``1h0m0s``."""
    h, rest = divmod(seconds, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"
