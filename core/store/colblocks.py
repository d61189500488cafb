"""Column blocks: sealed ranges of a SQLite stream kept also as pre-built columns (sans-IO part).

A bulk read (core/jetstream/bulk_read.py) of a range the store holds as rows has SQLite build the
columns with one aggregate statement (core/store/sqlite_columns.py): about 0.9 us of server CPU per
row, on every read. A Parquet file is laid out in columns once, when it is written. A column block
is that for a stream: the messages of one aligned range of ``rows`` sequences (``lo = k*rows + 1``
to ``hi = (k+1)*rows``), once the stream's last sequence is past ``hi`` (no message can be added to
the range any more), serialized in the bulk read's layout into one blob of the ``colblocks`` table.
A read serves the blocks it covers from their blobs (no per-row work but copies) and only the rest
through the aggregate. core/store/DESIGN.md ("Column blocks") has the invariants; the SQLite store
(sqlite.py) builds the blocks in a background job and checks each block before serving it.

Body layout (all integers little-endian)::

    magic "LJCB", u32 count, u64 subjects' bytes, u64 headers' bytes, u64 data's bytes,
    seqs (u64 x count), timestamps (i64 x count),
    subject offsets, header offsets, data offsets (i32 x (count + 1) each),
    subjects, headers, data

``encoding`` (a column of the table, not of the body): 0 the body as is, 1 the body zstd-compressed.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from typing import Final

from core.errors import StoreError
from core.store.columns import EMPTY, MsgColumns
from core.vector import increasing, non_decreasing, numpy

# Rows per block: a 64-byte message's block is ~450 KiB. Large enough that a block's fixed costs
# (a blob's row, its decode, a part to concatenate) are nothing per row, small enough that the
# piece of a block a read does not want (its first and last block are partial) costs little.
BLOCK_ROWS: Final = 4096
# A block is read for a piece of at least 1/USE_FRACTION of its rows; a smaller piece goes through
# the aggregate: reading and decoding a block costs a small fraction of building its columns.
USE_FRACTION: Final = 16
# Blocks built per pool job (then it goes to the back of the pool's queue): bounded work per job.
BLOCKS_PER_JOB: Final = 4
# Blocks are built only while the stream's mean stored message is at most this many bytes. A
# block saves a read the aggregate's cost per row (~0.9 us, fixed) and costs its build once,
# which grows with the bytes (read, copied, written as overflow pages, checkpointed): with
# 64-byte messages ~1 us/msg at ingest, with 1 KiB ~6 us/msg (16 -> 22 in bench.colblocks), and
# a hub catching up from the reference lost a third of its rate (bench sources, ref -> lj).
MAX_MEAN_BYTES: Final = 512

PLAIN: Final = 0
ZSTD: Final = 1

_MAGIC = b"LJCB"
_HEAD = struct.Struct("<4sIQQQ")
_BIG = sys.byteorder == "big"

INSERT = "INSERT OR REPLACE INTO colblocks (lo, hi, count, encoding, body) VALUES (?, ?, ?, ?, ?)"
# The blocks with ``? <= lo <= ?`` of the store's block size (a block of another size, left by an
# open with another setting, is never read). With ``counted``: each one's rows now in its range,
# counted in the same statement (one read snapshot with the blob).
_SELECT = (
    "SELECT lo, hi, count, encoding, body{} FROM colblocks AS b "
    "WHERE lo >= ? AND lo <= ? AND hi = lo + ? ORDER BY lo"
)
SELECT = _SELECT.format("")
SELECT_COUNTED = _SELECT.format(", (SELECT count(*) FROM msgs WHERE seq >= b.lo AND seq <= b.hi)")


def bounds(k: int, rows: int) -> tuple[int, int]:
    """Block ``k``'s first and last sequence."""
    return k * rows + 1, (k + 1) * rows


def block_of(seq: int, rows: int) -> int:
    return (max(seq, 1) - 1) // rows


def _le(a: array[int]) -> bytes:
    if _BIG:  # pragma: no cover - the machines this runs on are little-endian
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _array(typecode: str, data: memoryview) -> array[int]:
    out = array(typecode)
    out.frombytes(data)
    if _BIG:  # pragma: no cover
        out.byteswap()
    return out


def encode(cols: MsgColumns) -> bytes:
    """A block's body (uncompressed)."""
    n = len(cols)
    return b"".join(
        (
            _HEAD.pack(_MAGIC, n, len(cols.subjects), len(cols.headers), len(cols.data)),
            _le(cols.seqs),
            _le(cols.timestamps),
            _le(cols.subject_offsets),
            _le(cols.header_offsets),
            _le(cols.data_offsets),
            cols.subjects,
            cols.headers,
            cols.data,
        )
    )


def decode(body: bytes) -> MsgColumns:
    """The columns of a body (uncompressed); ``StoreError`` when it does not hold together (a
    damaged file: the caller reads the range the old way)."""
    view = memoryview(body)
    if len(view) < _HEAD.size:
        raise StoreError("column block: short")
    magic, n, ls, lh, ld = _HEAD.unpack_from(view)
    if magic != _MAGIC or len(view) != _HEAD.size + 16 * n + 12 * (n + 1) + ls + lh + ld:
        raise StoreError("column block: bad layout")
    pos = _HEAD.size
    cuts = []
    for size in (8 * n, 8 * n, 4 * (n + 1), 4 * (n + 1), 4 * (n + 1), ls, lh, ld):
        cuts.append(view[pos : pos + size])
        pos += size
    seqs, stamps, so, ho, do, subjects, headers, data = cuts
    cols = MsgColumns(
        _array("Q", seqs),
        _array("q", stamps),
        _array("i", so),
        subjects,
        _array("i", ho),
        headers,
        _array("i", do),
        data,
    )
    for off, blob in ((cols.subject_offsets, ls), (cols.header_offsets, lh), (cols.data_offsets, ld)):
        if off[0] != 0 or off[n] != blob or not non_decreasing(memoryview(off)):
            raise StoreError("column block: offsets do not match the columns")
    # a damaged body: offsets that would cut the blobs wrongly, sequences that mislead rows_between
    if not increasing(memoryview(cols.seqs)):
        raise StoreError("column block: sequences out of order")
    return cols


def _rebased(off: array[int], a: int, b: int) -> array[int]:
    """``off[a : b + 1]`` less ``off[a]`` (the offsets of rows ``a..b-1`` of a column)."""
    base = off[a]
    if not base:
        return off[a : b + 1]
    np = numpy()
    if np is None:
        return array("i", [x - base for x in off[a : b + 1]])
    out = array("i")
    out.frombytes((np.frombuffer(off, dtype=np.int32)[a : b + 1] - np.int32(base)).tobytes())
    return out


def rows_between(cols: MsgColumns, lo: int, hi: int) -> MsgColumns:
    """The rows with ``lo <= seq <= hi`` (sequences increase), the blobs as views."""
    a = bisect.bisect_left(cols.seqs, lo)
    b = bisect.bisect_right(cols.seqs, hi)
    if a == 0 and b == len(cols):
        return cols
    if a >= b:
        return EMPTY
    so, ho, do = cols.subject_offsets, cols.header_offsets, cols.data_offsets
    return MsgColumns(
        cols.seqs[a:b],
        cols.timestamps[a:b],
        _rebased(so, a, b),
        memoryview(cols.subjects)[so[a] : so[b]],
        _rebased(ho, a, b),
        memoryview(cols.headers)[ho[a] : ho[b]],
        _rebased(do, a, b),
        memoryview(cols.data)[do[a] : do[b]],
    )


def wanted(start: int, last: int, rows: int, top: int) -> tuple[int, int] | None:
    """The blocks worth reading for ``[start, last]`` (blocks exist up to sequence ``top``): the
    first and last block index, or None. A partial block at either end is read only when the read
    wants at least 1/USE_FRACTION of it."""
    last = min(last, top)
    if last < start:
        return None
    k0, k1 = block_of(start, rows), block_of(last, rows)
    need = max(1, rows // USE_FRACTION)
    if min(last, bounds(k0, rows)[1]) - start + 1 < need:
        k0 += 1
    if k1 >= k0 and last - max(start, bounds(k1, rows)[0]) + 1 < need:
        k1 -= 1
    return (k0, k1) if k0 <= k1 else None


def pack(cols: MsgColumns, compress: bool) -> tuple[int, bytes]:
    """(encoding, body) of a block: zstd-compressed for a store that compresses its rows."""
    body = encode(cols)
    if not compress:
        return PLAIN, body
    import zstandard

    return ZSTD, zstandard.ZstdCompressor(level=3).compress(body)


def unpack(encoding: int, body: bytes) -> MsgColumns:
    if encoding == ZSTD:
        import zstandard

        try:
            body = zstandard.ZstdDecompressor().decompress(body)
        except (zstandard.ZstdError, MemoryError) as e:  # a damaged frame's content size too
            raise StoreError(f"column block: {e!r}") from None
    elif encoding != PLAIN:
        raise StoreError(f"column block: unknown encoding {encoding}")
    return decode(body)
