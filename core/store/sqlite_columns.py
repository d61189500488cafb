"""The SQLite store's columnar read: one aggregate query that SQLite answers with whole columns.

A bulk read of 100,000 rows through ``fetchall`` made a tuple, an int, a str and a bytes object per
row, then a ``StoredMsg``, then the frame's lists: about 4 us of CPU per row, most of the server's
share of a Spark scan. Here SQLite concatenates each column itself (``group_concat``, in C, with the
GIL released for the whole statement), and Python gets one row: counts, the variable columns as one
blob each, and the integer columns (timestamps, lengths, sequences when they are not contiguous) as
comma-separated text, parsed by numpy when it is installed (a C loop), else by ``int``.

Every ``group_concat`` of one statement sees the rows in one order, the order SQLite visits them:
the rowid (sequence) order for a range of sequences, the ``(subject, seq)`` index's order for one
subject, ordered by a subquery for a limited one (SQLite documents group_concat's order as
arbitrary before 3.44; in practice it is the visiting order, and the tests compare every read with
``range``). What can be checked is: fetched sequences must come out strictly increasing; without
them (a contiguous range) the count must equal ``max - min + 1``; every column's lengths must add
up to its blob. A read that fails a check is refused (``StoreError``), never sent.

Only a store whose rows are stored as is can be read so: a row with ``flags`` (compressed or sealed)
makes ``parse`` answer ``FLAGGED``, and the caller reads those rows the row-by-row way, decoding each.
"""

from __future__ import annotations

from array import array
from typing import Any, Final, Literal

from core.errors import StoreError
from core.store.columns import EMPTY, MsgColumns, offsets
from core.vector import increasing, numpy

# Aggregates of one row per message; ``ifnull``: ``group_concat`` skips NULLs, and a message
# without headers (NULL) must still take its place in the lengths. The subjects are joined with a
# space (a NATS subject has none), so their lengths come from where the spaces are instead of from
# one more column of numbers as text: that column and its CAST copy were ~10% of the statement.
# A store that holds a subject with a space anyway is read again with the lengths (``SPACED``).
_HEAD = "count(*), min(seq), max(seq), max(flags), group_concat(ts), "
_SUBJECT_LENGTHS = "group_concat(length(CAST(subject AS BLOB))), "
_TAIL = "group_concat(ifnull(length(hdr), 0)), group_concat(length(data)), "
_BLOBS = "CAST(group_concat(hdr, '') AS BLOB), CAST(group_concat(data, '') AS BLOB)"
_SPACED_SUBJECTS = "CAST(group_concat(subject, ' ') AS BLOB), "
_JOINED_SUBJECTS = "CAST(group_concat(subject, '') AS BLOB), "
_SEQS = ", group_concat(seq)"
_ROW = "seq, ts, subject, hdr, data, flags"


def _aggregates(lengths: bool) -> str:
    if lengths:
        return _HEAD + _SUBJECT_LENGTHS + _TAIL + _JOINED_SUBJECTS + _BLOBS
    return _HEAD + "NULL, " + _TAIL + _SPACED_SUBJECTS + _BLOBS


def range_sql(with_seqs: bool, lengths: bool = False) -> str:
    """Every message with ``? <= seq <= ?``: one scan of the table by its key. Without
    ``with_seqs`` the sequences are taken as contiguous, which ``parse`` checks (a store with no
    deleted sequence in the range, the usual case, saves a column). ``lengths``: the subjects'
    lengths as a column of their own (after ``SPACED``)."""
    return f"SELECT {_aggregates(lengths)}{_SEQS if with_seqs else ''} FROM msgs WHERE seq >= ? AND seq <= ?"


def subject_sql(lengths: bool = False) -> str:
    """The first ``?`` messages of one literal subject with ``? <= seq <= ?`` (params: subject,
    first, last, limit), by the ``(subject, seq)`` index."""
    return (
        f"SELECT {_aggregates(lengths)}{_SEQS} FROM (SELECT {_ROW} FROM msgs "
        "WHERE subject = ? AND seq >= ? AND seq <= ? ORDER BY seq LIMIT ?)"
    )


# Fewer rows than this are parsed with ``split`` and ``int``: numpy's fixed cost per column (a
# parse, a cast, a copy: about 30 us on a loaded machine) is more than that for a live read's
# message or few, read once per commit, five columns each (measured crossover: 8-16 rows).
NUMPY_FROM = 8


def _ints(text: str | None, n: int, typecode: str, what: str) -> array[int]:
    out = array(typecode)
    if n == 0:
        return out
    if text is None:
        raise StoreError(f"columnar read: no {what}")
    _np = numpy() if n >= NUMPY_FROM else None
    if _np is not None:
        parsed = _np.fromstring(text, dtype=_np.int64, sep=",")
        if len(parsed) != n:
            raise StoreError(f"columnar read: {len(parsed)} {what} for {n} rows")
        out.frombytes(parsed.astype(_np.dtype(typecode)).tobytes())
        return out
    try:
        out.extend(map(int, text.split(",")))
    except (ValueError, OverflowError):  # a value that is no integer of the type: a damaged file
        raise StoreError(f"columnar read: a value of the {what} is not an integer") from None
    if len(out) != n:
        raise StoreError(f"columnar read: {len(out)} {what} for {n} rows")
    return out


def _offsets(text: str | None, n: int, what: str) -> array[int]:
    """A column's ``n + 1`` offsets from its lengths (text)."""
    _np = numpy() if n >= NUMPY_FROM else None
    if _np is not None:
        if text is None:
            raise StoreError(f"columnar read: no {what} lengths")
        lengths = _np.fromstring(text, dtype=_np.int64, sep=",")
        if len(lengths) != n:
            raise StoreError(f"columnar read: {len(lengths)} {what} lengths for {n} rows")
        ends = _np.cumsum(lengths)
        if ends[-1] > (1 << 31) - 1:
            raise StoreError("a read's column is larger than 2 GiB")
        out = array("i", [0])
        out.frombytes(ends.astype(_np.int32).tobytes())
        return out
    return offsets(_ints(text, n, "q", f"{what} lengths"))


def _contiguous(lo: int, hi: int) -> array[int]:
    """The sequences ``lo..hi`` as a "Q" array: numpy's arange when installed (``array(range)``
    made a Python int per row: ~45 ns of a read's ~1 us per row)."""
    _np = numpy() if hi - lo + 1 >= NUMPY_FROM else None
    if _np is None:
        return array("Q", range(lo, hi + 1))
    out = array("Q")
    out.frombytes(_np.arange(lo, hi + 1, dtype=_np.uint64).tobytes())
    return out


def _spaced(joined: bytes, n: int) -> tuple[array[int], bytes] | None:
    """(offsets, subjects) from ``n`` subjects joined by single spaces, or None when a subject
    holds a space itself (more spaces than joins: the caller asks for the lengths)."""
    if joined.count(b" ") != n - 1:
        return None
    if len(joined) - (n - 1) > (1 << 31) - 1:
        raise StoreError("a read's column is larger than 2 GiB")
    _np = numpy() if n >= NUMPY_FROM else None
    if _np is not None:
        # the k-th space ends the k-th subject; the k spaces before it are not in the values
        ends = _np.flatnonzero(_np.frombuffer(joined, dtype=_np.uint8) == 32) - _np.arange(n - 1)
        out = array("i", [0])
        out.frombytes(ends.astype(_np.int32).tobytes())
        out.append(len(joined) - (n - 1))
        return out, joined.replace(b" ", b"")
    parts = joined.split(b" ")
    return offsets(array("q", map(len, parts))), b"".join(parts)


FLAGGED: Final = "flagged"  # a row is stored compressed or sealed: read the rows one by one
GAPS: Final = "gaps"  # the range has deleted sequences: ask again with the sequences (range_sql(True))
SPACED: Final = "spaced"  # a subject holds a space: ask again with the subjects' lengths (lengths=True)


def parse(row: Any) -> MsgColumns | Literal["flagged", "gaps", "spaced"]:
    """The columns of an aggregate row (``range_sql``/``subject_sql``), or why not (``FLAGGED``,
    ``GAPS``, ``SPACED``). Raises ``StoreError`` when the columns do not line up (never seen; a
    guard against an order SQLite did not keep)."""
    n, lo, hi, flags, ts, subj_len, hdr_len, data_len, subj, hdrs, data = row[:11]
    if not n:
        return EMPTY
    if flags:
        return FLAGGED
    if len(row) > 11:
        seqs = _ints(row[11], n, "Q", "sequences")
        if seqs[0] != lo or seqs[-1] != hi or not increasing(memoryview(seqs)):
            raise StoreError("columnar read: the sequences are out of order")
    elif hi - lo + 1 != n:
        return GAPS
    else:
        seqs = _contiguous(lo, hi)
    if subj_len is None:  # joined by spaces (lengths=False)
        spaced = _spaced(subj or b"", n)
        if spaced is None:
            return SPACED
        subject_offsets, subjects = spaced
    else:
        subject_offsets, subjects = _offsets(subj_len, n, "subject"), subj or b""
    cols = MsgColumns(
        seqs,
        _ints(ts, n, "q", "timestamps"),
        subject_offsets,
        subjects,
        _offsets(hdr_len, n, "header"),
        hdrs or b"",
        _offsets(data_len, n, "data"),
        data or b"",
    )
    if (
        cols.subject_offsets[n] != len(cols.subjects)
        or cols.header_offsets[n] != len(cols.headers)
        or cols.data_offsets[n] != len(cols.data)
    ):
        raise StoreError("columnar read: the lengths do not match the columns")
    return cols
