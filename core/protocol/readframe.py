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
``FrameError``, never another exception, and never allocates more than the frame's own size.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

import zstandard

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


def _var_column(values: Sequence[bytes]) -> list[bytes]:
    offsets = array("i", [0])
    offsets.extend(accumulate(map(len, values)))
    if offsets[-1] > MAX_COLUMN_BYTES:  # array('i') would already have overflowed: belt and braces
        raise FrameError("column too large")
    off = _le(offsets)
    body = b"".join(values)
    return [off, b"\0" * _pad(len(off)), body, b"\0" * _pad(len(body))]


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
        parts = [HEADER.pack(MAGIC, VERSION, 0, n, 0), _le(array("Q", seqs)), _le(array("q", timestamps))]
        parts += _var_column(subjects)
        parts += _var_column(headers)
        parts += _var_column(data)
    except OverflowError:
        raise FrameError("a column's value is out of range") from None
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class ReadFrame:
    """A decoded frame: the fixed-width columns as arrays, the variable ones as (offsets, bytes).
    The bytes are slices of the frame, not copies (memoryview), until a row is taken."""

    seqs: array[int]
    timestamps: array[int]
    subject_offsets: array[int]
    subject_bytes: memoryview
    header_offsets: array[int]
    header_bytes: memoryview
    data_offsets: array[int]
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
        value buffer each, the binary columns (offsets, values). A reader with pyarrow does
        ``pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(off), pa.py_buffer(val)])``."""
        return {
            "seq": (_le(self.seqs),),
            "ts": (_le(self.timestamps),),
            "subject": (_le(self.subject_offsets), self.subject_bytes),
            "headers": (_le(self.header_offsets), self.header_bytes),
            "data": (_le(self.data_offsets), self.data_bytes),
        }


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

    def ints(self, typecode: str, n: int, what: str) -> array[int]:
        a = array(typecode)
        a.frombytes(self.take(n * a.itemsize, what))
        if not _LITTLE:
            a.byteswap()
        return a


def _offsets(cur: _Cursor, n: int, what: str) -> tuple[array[int], memoryview]:
    off = cur.ints("i", n + 1, f"{what} offsets")
    if off[0] != 0:
        raise FrameError(f"{what} offsets do not start at 0")
    prev = 0
    for o in off:  # non-decreasing: every row's slice is inside the column
        if o < prev:
            raise FrameError(f"{what} offsets decrease")
        prev = o
    return off, cur.take(off[-1], f"{what} bytes")


def decode_frame(frame: bytes | bytearray | memoryview) -> ReadFrame:
    """Parse a frame; raises ``FrameError`` for anything that is not a whole version-1 frame."""
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
    prev = 0
    for s in seqs:
        if s <= prev:
            raise FrameError("sequences are not increasing")
        prev = s
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
