"""The bulk read API's columnar frame (``$JS.API.LEAFJET.READ.<stream>``), sans-IO.

One frame carries a run of a stream's messages as columns, so a reader moves many messages per
NATS message and a columnar consumer (pyarrow's ``Array.from_buffers``) builds its arrays from
the frame's buffers without a per-row loop. Layout, version 1, every integer little-endian,
every section starting on an 8-byte boundary (zero padding after a section that does not end
on one):

    header   16 B  magic b"LJRF", u16 version (1), u16 flags (0), u32 count, u32 reserved (0)
    seqs     count x u64                  stream sequences, strictly increasing
    ts       count x i64                  timestamps, ns since the epoch
    subject  (count + 1) x i32 offsets    Arrow's binary layout: offsets[0] == 0, non-decreasing,
             offsets[count] bytes         row i is bytes[offsets[i]:offsets[i + 1]]
    headers  the same                     the NATS header block; empty: the message has none
    data     the same                     the payload

Version rule: a reader refuses a version it does not know (``FrameError``); a new version is
made for any change of layout or meaning; ``flags`` bits a reader does not know also refuse
the frame. The whole frame may be zstd-compressed (``compress_frame``); that is said outside the
frame (the reply's ``Leafjet-Read-Encoding: zstd`` header), never inside it.

Decoding checks every length and offset before it slices: a truncated or forged frame raises
``FrameError``, never another exception, and never allocates more than the frame's own size. The
checks run over whole columns (offsets non-decreasing, sequences increasing: core/vector.py, numpy
when installed), and the decoded columns are views of the frame, not copies.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

import zstandard

from core.vector import increasing, non_decreasing

MAGIC = b"LJRF"
VERSION = 1
HEADER = struct.Struct("<4sHHII")
MAX_COLUMN_BYTES = (1 << 31) - 1  # an i32 offset
# What a compressed frame may expand to: the API's largest frame (max_bytes, clamped to a few
# MiB) plus the per-message columns, with room to spare. A frame claiming more is refused.
MAX_DECOMPRESSED = 64 << 20

_LITTLE = sys.byteorder == "little"


class FrameError(ValueError):
    """The bytes are no frame this reader understands (truncated, corrupt, another version)."""


def _pad(n: int) -> int:
    return -n % 8


def _le(a: array[int]) -> bytes:
    if not _LITTLE:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _native(a: array[int]) -> bytes | memoryview:
    """An array's bytes, little-endian: a view of it on a little-endian host (no copy)."""
    return memoryview(a) if _LITTLE else _le(a)


def _column(offsets: array[int], values: bytes | memoryview) -> list[bytes | memoryview]:
    off = _native(offsets)
    return [
        off,
        b"\0" * _pad(len(off) if isinstance(off, bytes) else off.nbytes),
        values,
        b"\0" * _pad(len(values)),
    ]


def encode_columns(
    count: int,
    seqs: array[int],
    timestamps: array[int],
    subjects: tuple[array[int], bytes | memoryview],
    headers: tuple[array[int], bytes | memoryview],
    data: tuple[array[int], bytes | memoryview],
) -> bytes:
    """A version-1 frame of ``count`` rows from columns already laid out: ``seqs`` ("Q") and
    ``timestamps`` ("q") of ``count`` values, and (offsets ("i", ``count + 1``), values) for each
    variable column (core/store/columns.py makes them). One join: no per-row work."""
    if not (len(seqs) == len(timestamps) == count) or not all(
        len(off) == count + 1 and off[0] == 0 and off[count] == len(val)
        for off, val in (subjects, headers, data)
    ):
        raise ValueError("columns of different lengths")
    if (
        seqs.typecode != "Q"
        or timestamps.typecode != "q"
        or any(c[0].typecode != "i" for c in (subjects, headers, data))
    ):
        raise ValueError("columns of the wrong type")
    parts: list[bytes | memoryview] = [
        HEADER.pack(MAGIC, VERSION, 0, count, 0),
        _native(seqs),
        _native(timestamps),
    ]
    parts += _column(*subjects)
    parts += _column(*headers)
    parts += _column(*data)
    return b"".join(parts)


def _offsets_of(values: Sequence[bytes]) -> array[int]:
    try:
        return array("i", accumulate(map(len, values), initial=0))
    except OverflowError:
        raise FrameError("column too large") from None


def encode_frame(
    seqs: Sequence[int],
    timestamps: Sequence[int],
    subjects: Sequence[bytes],
    headers: Sequence[bytes],
    data: Sequence[bytes],
) -> bytes:
    """A version-1 frame of ``len(seqs)`` rows (the five sequences are columns of equal length;
    a message without headers has ``b""``)."""
    n = len(seqs)
    if not (len(timestamps) == len(subjects) == len(headers) == len(data) == n):
        raise ValueError("columns of different lengths")
    total = sum(map(len, subjects)) + sum(map(len, headers)) + sum(map(len, data))
    if total > MAX_COLUMN_BYTES:
        raise FrameError("frame too large")
    try:
        fixed = array("Q", seqs), array("q", timestamps)
    except OverflowError:
        raise FrameError("a column's value is out of range") from None
    return encode_columns(
        n,
        *fixed,
        (_offsets_of(subjects), b"".join(subjects)),
        (_offsets_of(headers), b"".join(headers)),
        (_offsets_of(data), b"".join(data)),
    )


# A decoded integer column: a view of the frame cast to the column's type on a little-endian host
# (no copy), an array byte-swapped from it elsewhere. Both index and iterate as ints.
IntColumn = memoryview | array


@dataclass(frozen=True, slots=True)
class ReadFrame:
    """A decoded frame: the fixed-width columns as integer columns, the variable ones as (offsets,
    bytes). Everything is a view of the frame, not a copy, until a row is taken."""

    seqs: IntColumn
    timestamps: IntColumn
    subject_offsets: IntColumn
    subject_bytes: memoryview
    header_offsets: IntColumn
    header_bytes: memoryview
    data_offsets: IntColumn
    data_bytes: memoryview

    def __len__(self) -> int:
        return len(self.seqs)

    def rows(self) -> Iterator[tuple[int, str, bytes | None, bytes, int]]:
        """``(seq, subject, headers or None, data, ts)`` per message, in order. A subject that
        is no UTF-8 keeps its bytes as surrogates (as the client parser does)."""
        so, sb = self.subject_offsets, self.subject_bytes
        ho, hb = self.header_offsets, self.header_bytes
        do, db = self.data_offsets, self.data_bytes
        ts = self.timestamps
        for i, seq in enumerate(self.seqs):
            h0, h1 = ho[i], ho[i + 1]
            yield (
                seq,
                str(sb[so[i] : so[i + 1]], "utf-8", "surrogateescape"),
                bytes(hb[h0:h1]) if h1 > h0 else None,
                bytes(db[do[i] : do[i + 1]]),
                ts[i],
            )

    def arrow_buffers(self) -> dict[str, tuple[bytes | memoryview, ...]]:
        """The buffers as Arrow's layouts want them (no validity bitmaps): ``seq`` and ``ts`` one
        value buffer each, the binary columns (offsets, values); views of the frame on a
        little-endian host. A reader with pyarrow does
        ``pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(off), pa.py_buffer(val)])``."""
        return {
            "seq": (_le_bytes(self.seqs),),
            "ts": (_le_bytes(self.timestamps),),
            "subject": (_le_bytes(self.subject_offsets), self.subject_bytes),
            "headers": (_le_bytes(self.header_offsets), self.header_bytes),
            "data": (_le_bytes(self.data_offsets), self.data_bytes),
        }


def _le_bytes(col: IntColumn) -> bytes | memoryview:
    return col.cast("B") if isinstance(col, memoryview) else _le(col)


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise FrameError(f"truncated frame: {what} needs {n} bytes at {self.pos}, has {len(self.buf)}")
        out = self.buf[self.pos : end]
        self.pos = end + _pad(n)
        if self.pos > len(self.buf):
            raise FrameError(f"truncated frame: padding after {what}")
        return out

    def ints(self, typecode: Literal["Q", "q", "i"], n: int, what: str) -> IntColumn:
        raw = self.take(n * struct.calcsize(typecode), what)
        if _LITTLE:
            return raw.cast(typecode)
        a = array(typecode)
        a.frombytes(raw)
        a.byteswap()
        return a


def _offsets(cur: _Cursor, n: int, what: str) -> tuple[IntColumn, memoryview]:
    off = cur.ints("i", n + 1, f"{what} offsets")
    if off[0] != 0:
        raise FrameError(f"{what} offsets do not start at 0")
    # non-decreasing and the last within the frame: every row's slice is inside the column
    if not non_decreasing(off if isinstance(off, memoryview) else memoryview(off)):
        raise FrameError(f"{what} offsets decrease")
    return off, cur.take(off[-1], f"{what} bytes")


def decode_frame(frame: bytes | bytearray | memoryview) -> ReadFrame:
    """Parse a frame; raises ``FrameError`` for anything that is not a whole version-1 frame.
    The checks run over whole columns (core/vector.py), not row by row."""
    buf = memoryview(frame).cast("B")
    if len(buf) < HEADER.size:
        raise FrameError("truncated frame: no header")
    magic, version, flags, count, _reserved = HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise FrameError("not a read frame (bad magic)")
    if version != VERSION:
        raise FrameError(f"read frame version {version} is not supported (this reader knows {VERSION})")
    if flags:
        raise FrameError(f"read frame flags {flags:#x} are not supported")
    if count * 16 > len(buf):  # each row takes at least its sequence and timestamp
        raise FrameError(f"truncated frame: {count} rows in {len(buf)} bytes")
    cur = _Cursor(buf)
    cur.pos = HEADER.size
    seqs = cur.ints("Q", count, "seqs")
    ts = cur.ints("q", count, "timestamps")
    so, sb = _offsets(cur, count, "subject")
    ho, hb = _offsets(cur, count, "headers")
    do, db = _offsets(cur, count, "data")
    if cur.pos != len(buf):
        raise FrameError(f"{len(buf) - cur.pos} bytes after the frame")
    if count and (seqs[0] < 1 or not increasing(seqs if isinstance(seqs, memoryview) else memoryview(seqs))):
        raise FrameError("sequences are not increasing")
    return ReadFrame(seqs, ts, so, sb, ho, hb, do, db)


def compress_frame(frame: bytes, level: int = 1) -> bytes:
    """The frame as one zstd frame (with its content size, so the reader can bound it)."""
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(frame)


def decompress_frame(data: bytes, max_size: int = MAX_DECOMPRESSED) -> bytes:
    """Undo ``compress_frame``, refusing (``FrameError``) what is corrupt or would expand past
    ``max_size``."""
    try:
        params = zstandard.get_frame_parameters(data)
        if params.content_size <= 0 or params.content_size > max_size:
            raise FrameError(f"compressed frame size {params.content_size} is out of bounds")
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=max_size)
    except zstandard.ZstdError as e:
        raise FrameError(f"compressed frame is corrupt: {e}") from None
