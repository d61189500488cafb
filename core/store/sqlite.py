"""SqliteStore: a durable StreamStore in one SQLite database file per stream.

Shape (see DESIGN.md for the reasoning):

* **One writer.** The store holds the only writing connection, used by one thread at a time. Callers
  on the event loop put requests (a call's operations and a future) on the store's queue; a job on
  the shared pool (``core.store.pool``) takes everything queued, runs it in ONE transaction, COMMITs,
  publishes the new counters, and only then resolves the futures of the whole batch (group commit).
  A failed transaction fails every call of the batch and stores nothing.
* **Reads** go through a second connection (WAL lets them run beside the writer): on the loop's
  thread for a read of one row by an index, or a range by sequence expected to hold at most
  ``LOOP_RANGE_BYTES`` (``_point_fetch``), as a pool job otherwise. Counters
  (``state()``, per-subject counts) are kept in memory, loaded at open and published after each commit.
* **Durability.** ``sync="always"``: ``synchronous=FULL`` -- the WAL is fsynced by every COMMIT, so an
  acknowledged write is on disk. ``sync="interval"``: ``synchronous=NORMAL`` and the writer fsyncs the
  WAL every ``sync_interval`` seconds (and on ``flush``/``close``); a process crash loses nothing that was
  acknowledged, a power loss or kernel crash can lose the last ``sync_interval`` of acknowledged writes.
* **Checkpoints**: PASSIVE on a timer while there are new commits, as a pool job on the reading
  connection, beside the writer; TRUNCATE only when the WAL file grows past ``wal_brake_bytes``
  and the writer is idle; never RESTART. SQLite's own auto-checkpoint is off.
* **Open files are capped** (``pool.SLOTS``): an idle store closes its connections when another needs
  a slot, and reopens them on its next use; its counters stay in memory meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import Any, Literal, TypeGuard

import anyio

from core.errors import StoreError, StoreKeyError
from core.fsync import fsync_dir
from core.store import colblocks, columns, schema, sqlite_columns
from core.store.api import (
    FILE_MSG_OVERHEAD,
    MAX_SEQ,
    SOURCE_POS_PREFIX,
    Append,
    AppendBatch,
    DeleteOp,
    DelMetaOp,
    ExpireOp,
    InvalidOperation,
    Op,
    PurgeOp,
    Result,
    SetMetaOp,
    SkipOp,
    SourcePosOp,
    StoreClosed,
    StoredMsg,
    StoreFull,
    StreamState,
    check_ops,
    check_positions,
    decode_source_positions,
    file_msg_size,
    make_state,
    normalize_filter,
)
from core.store.crypto import CipherSpec, KdfParams, key_matches
from core.store.pool import POOL, SLOTS
from core.store.rowcodec import RowCodec
from core.store.snapshot import SnapshotEncoder, SnapshotHeader, restore_into
from core.store.spare import SpareStores, build_store_file
from core.subjects import has_wildcard, match, tokens_match

SMALL_FANOUT = 256
"""A wildcard filter matching at most this many subjects is served by per-subject index lookups; a
broader one by a sequence-ordered scan with a SQL match function."""
MAX_BATCH_OPS = 20_000
# The largest call committed on the loop's thread (see SqliteStore._commit_inline), in rows
# (``_rows``): a publish batch of a few messages, a live source's batch of a few, a KV put with
# its purge, a consumer's state.
INLINE_MAX_OPS = 16
# ... and a source's batch committed inline holds at most this many payload bytes
INLINE_MAX_BATCH_BYTES = 64 << 10
# With sync="always" a COMMIT fsyncs, so a small call commits inline only while the store's recent
# transactions took at most this long (``_commit_cost``, a moving average): a fast disk's fsync
# (about 0.1 ms) costs the loop less than the hand-over to the writer thread and back; a slow
# one's (an SD card, a busy disk: milliseconds) goes to the writer, where the loop goes on.
INLINE_DURABLE_COMMIT_S = 0.0005
# The weight of the newest transaction in ``_commit_cost``
COMMIT_COST_WEIGHT = 0.25
OFFLOAD_DECODE_BYTES = 256 << 10
# The rows of the newest transaction are kept for a live reader (see ``_Tail``) when it appended at
# most this many messages of at most this many payload bytes: a live commit's few, never a catch-up's.
TAIL_MAX_ROWS = 64
TAIL_MAX_BYTES = 256 << 10
# What the tails of all the stores of this process may hold together: past it a commit keeps no
# tail (its live reader queries, as before tails existed), so ten thousand streams that each
# last committed a large batch cannot hold 256 KiB apiece.
TAIL_BUDGET_BYTES = 16 << 20
# A range read by sequence runs on the loop's thread (see _point_fetch) when its rows are
# expected to hold at most this much: the rows it can find (its limit, or fewer when the range
# ends near the last sequence) x the stream's mean stored message size.
LOOP_RANGE_BYTES = 64 << 10
# ``PRAGMA quick_check`` reads the whole file (~1.7 s a GB here): at open it runs on a file up to
# this size, or on any file whose last close was not clean (its WAL is still there)
QUICK_CHECK_ALWAYS_BYTES = 64 << 20
# A range read with a wildcard filter that spans at most this many sequences up to the last one
# (a live reader just behind it) reads them by sequence on the loop's thread and matches the
# subjects here: the subject lookups (a json_each list, a sort) cost more than the rows, and the
# hand-over to a reader thread and back more than both.
LOOP_WILDCARD_ROWS = 64
POINT_READ_BUSY_MS = 20
"""How long a read on the reading connection waits for a busy database: on the loop, before it goes to
the pool; on the pool, before it tries again (up to READ_BUSY_TIMEOUT)."""
READ_BUSY_TIMEOUT = 5.0
COLS = "seq, subject, hdr, data, ts, flags"
IN_SUBJECTS = "subject IN (SELECT value FROM json_each(?))"

INSERT_CHUNK = 64
# A new file's page size (an existing file keeps its own). SQLite's default suits a stream that
# takes a message per transaction; one that takes thousands per transaction (a stream with
# sources or a mirror: a catch-up) spends about 15% less store CPU per 1 KiB row, and half the
# checkpoint CPU, with 16 KiB pages, at the price of more bytes per small commit (store/DESIGN.md).
DEFAULT_PAGE_SIZE = 4096
BULK_PAGE_SIZE = 16384
PAGE_SIZES = frozenset({4096, 8192, 16384, 32768, 65536})
# A purge that keeps the newest N and drops at most this many (a KV put's history limit, a
# stream at max_msgs) deletes the oldest in one statement that returns them, instead of finding
# the cut, summing the dropped rows and deleting them in three.
RETURNING_MAX = 256
# Adjacent purges that each keep the newest N (N at most TRIM_KEEP_MAX) of one literal subject --
# a batch of KV puts, each trimming its key to the bucket's history -- run as one DELETE. Its
# correlated count walks a subject's newer rows for each of its rows, so it serves only subjects
# holding at most 2 * TRIM_KEEP_MAX messages; otherwise each purge runs alone.
TRIM_KEEP_MAX = 8
TRIM_SQL = (
    "DELETE FROM msgs WHERE seq IN (SELECT m.seq FROM json_each(?) AS j JOIN msgs AS m ON m.subject = j.value"
    " WHERE (SELECT COUNT(*) FROM msgs AS n WHERE n.subject = m.subject AND n.seq > m.seq) >= ?)"
    " RETURNING seq, subject, size"
)
# The newest messages of literal subjects kept per store (see SqliteStore._last): an edge device
# may hold many streams, so the budget is small. A message over 1/16 of it is never kept.
LAST_CACHE_BYTES = 1 << 20
_LAST_ENTRY_OVERHEAD = 256  # about what a dict slot, the key and a StoredMsg cost beyond the bytes
_HDR_OVERHEAD = FILE_MSG_OVERHEAD + 4  # a message with headers: their 4-byte length too
_INSERT_CHUNK_SQL = schema.INSERT_MSG + ", (?, ?, ?, ?, ?, ?, ?)" * (INSERT_CHUNK - 1)
_ROW_COLUMNS = ("seq", "subject", "hdr", "data", "ts", "size", "flags")  # INSERT_MSG's, in order

_APPLY, _FLUSH, _LIMIT, _STOP, _OPEN_REQ = range(5)

# The sqlite3 module binds an int, float, str or bytearray as it is, but looks every other
# parameter up as something to adapt: a key tuple, a dict miss, then ``__adapt__`` and
# ``__conform__`` looked for on the protocol and the object -- for each ``bytes`` (a row's
# headers and data), about a tenth of a store thread's CPU in a catch-up of 1 KiB messages
# (py-spy --native, leafjet -> leafjet). An adapter registered for ``bytes`` ends the search at
# the dict: ``bytes(b)`` is ``b`` itself for a bytes object, so what is stored is unchanged
# (only exact ``bytes`` is looked up; the registry is process-wide, and nothing else here
# registers one).
sqlite3.register_adapter(bytes, bytes)

# Stores open in this process, by real path: two writers on one file would corrupt the counters.
_OPEN: set[str] = set()
_OPEN_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counters for monitoring. ``commits`` counts transactions that committed (each a group commit of
    ``requests`` calls so far); ``pending`` is calls queued or in flight right now."""

    commits: int
    failed_commits: int
    requests: int
    ops: int
    max_batch: int
    pending: int
    checkpoints: int
    wal_truncations: int
    syncs: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class BlockStats:
    """Column blocks (colblocks.py): ``through`` is the last sequence of the newest block built (0:
    none), ``built`` the blocks built or rebuilt and ``served`` the messages read from blocks since
    the store was opened."""

    through: int
    built: int
    served: int


class _Stats:
    __slots__ = (
        "checkpoints",
        "commits",
        "failed_commits",
        "last_error",
        "max_batch",
        "ops",
        "requests",
        "syncs",
        "wal_truncations",
    )

    def __init__(self) -> None:
        self.commits = self.failed_commits = self.requests = self.ops = self.max_batch = 0
        self.checkpoints = self.wal_truncations = self.syncs = 0
        self.last_error: str | None = None


class _Counters:
    __slots__ = ("first_seq", "first_ts", "last_seq", "last_ts", "msgs", "nbytes")

    def __init__(self, first_seq: int, first_ts: int, last_seq: int, last_ts: int, msgs: int, nbytes: int):
        self.first_seq, self.first_ts, self.last_seq = first_seq, first_ts, last_seq
        self.last_ts, self.msgs, self.nbytes = last_ts, msgs, nbytes

    def copy(self) -> _Counters:
        return _Counters(self.first_seq, self.first_ts, self.last_seq, self.last_ts, self.msgs, self.nbytes)


class _Tail:
    """The newest transaction's messages, when all it did was append a few (``TAIL_MAX_ROWS``).

    A live bulk reader (a source following this stream, core/jetstream/bulk_read.py) asks, after
    each commit, for exactly the messages that commit added: without this, each time an aggregate
    query on the reading connection and the parse of its columns, a fixed cost per commit larger
    than the commit's own Python work. ``pub`` is the committed counters object published with
    these rows: every change of the stored messages (a commit, a reload after a failure or a
    restore) publishes a new one, so the tail is valid exactly while ``store._pub is pub``.
    ``after`` is the last sequence before the transaction: every message with a sequence in
    ``(after, pub.last_seq]`` is one of ``rows`` (an appending transaction only adds above it)."""

    __slots__ = ("after", "nbytes", "pub", "rows")

    def __init__(self, pub: _Counters, after: int, rows: list[tuple[Any, ...]], nbytes: int):
        self.pub, self.after, self.rows, self.nbytes = pub, after, rows, nbytes


class _TailBudget:
    """The bytes every store's ``_Tail`` holds, against TAIL_BUDGET_BYTES (writer threads)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def swap(self, old: int, new: int) -> bool:
        """Release ``old`` bytes and take ``new``; False (only ``old`` released) when ``new``
        does not fit."""
        with self._lock:
            self.held -= old
            if self.held + new > self.limit:
                return False
            self.held += new
            return True


TAILS = _TailBudget(TAIL_BUDGET_BYTES)


def _large(p: _Counters) -> bool:
    """Are the stream's messages too large for new column blocks (``colblocks.MAX_MEAN_BYTES``:
    a block would cost more at ingest than it saves a read)?"""
    return p.nbytes > p.msgs * colblocks.MAX_MEAN_BYTES


def _tail_columns(
    rows: list[tuple[Any, ...]], start: int, last: int, end: int
) -> tuple[columns.MsgColumns, int]:
    """``read_columns`` of ``[start, last]`` from a ``_Tail``'s rows (which hold every message
    from ``start`` on): the columns and the last sequence covered -- as the query's way, up to
    the next message (at most ``end``) when there is none in the range (a gap of an explicit
    sequence)."""
    got = [r[:5] for r in rows if start <= r[0] <= last]
    if not got:
        last = min(end, next((r[0] for r in rows if r[0] > last), end + 1) - 1)
    return columns.columns_of(got), last


class _Req:
    """One queued call. ``done`` is set (writer thread) once its outcome has been posted to the loop."""

    __slots__ = ("arg", "done", "fut", "kind", "ops", "weight")

    def __init__(self, kind: int, ops: tuple[Op, ...], fut: asyncio.Future[Any] | None, arg: Any = None):
        self.kind, self.ops, self.fut, self.arg = kind, ops, fut, arg
        self.done = False
        # what it counts against MAX_BATCH_OPS: its messages (an AppendBatch holds many)
        self.weight = len(ops) or 1
        if ops and ops[0].__class__ is AppendBatch:
            self.weight += len(ops[0])


@dataclass(frozen=True, slots=True)
class _Trims:
    """A run of adjacent ``PurgeOp(subject=<literal>, keep=keep)`` on distinct subjects (see
    TRIM_KEEP_MAX): the writer applies it in one statement."""

    subjects: tuple[str, ...]
    keep: int


def _is_trim(op: Op) -> TypeGuard[PurgeOp]:
    return (
        op.__class__ is PurgeOp
        and op.keep is not None
        and op.keep <= TRIM_KEEP_MAX
        and op.subject is not None
        and not has_wildcard(op.subject)
    )


def _group_trims(ops: tuple[Op, ...]) -> tuple[Op | _Trims, ...]:
    """``ops`` with each run of two or more trims of distinct subjects and one ``keep`` replaced by
    one ``_Trims`` (whose results are the run's, in order); ``ops`` itself when there is none."""
    if sum(1 for op in ops if op.__class__ is PurgeOp) < 2:
        return ops
    out: list[Op | _Trims] = []
    run: dict[str, PurgeOp] = {}  # the run's purges by subject, in order, all keeping ``keep``
    keep = 0

    def end_run() -> None:
        if len(run) > 1:
            out.append(_Trims(tuple(run), keep))
        else:
            out.extend(run.values())
        run.clear()

    for op in ops:
        if _is_trim(op):
            subject = op.subject or ""  # a literal, by _is_trim
            if run and (subject in run or op.keep != keep):
                end_run()
            keep = op.keep or 0
            run[subject] = op
        else:
            end_run()
            out.append(op)
    end_run()
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _pattern_tokens(pattern: str) -> list[str]:
    return pattern.split(".")


def _sql_match(pattern: str, subject: str) -> int:
    return 1 if tokens_match(_pattern_tokens(pattern), subject.split(".")) else 0


def _fresh(err: BaseException) -> BaseException:
    """A new instance of ``err`` for each waiter (one exception object raised in many tasks would
    collect all their tracebacks)."""
    try:
        e = type(err)(*err.args)
    except Exception:
        e = StoreError(str(err))
    e.__cause__ = err.__cause__ or err.__context__
    return e


def _resolved(value: Any, exc: BaseException | None = None) -> asyncio.Future[Any]:
    """A future that already holds ``value`` (or raises ``exc``)."""
    fut = asyncio.get_running_loop().create_future()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
    return fut


def _rows(ops: tuple[Op, ...]) -> int:
    """The rows a call writes, for the inline bound (``INLINE_MAX_OPS``): an ``AppendBatch``
    counts its messages, so a live source's batch of a few commits inline like a publish, and a
    catch-up's thousands go to the writer. A batch of a few large messages (past
    ``INLINE_MAX_BATCH_BYTES``) counts as past the bound too: its copy into SQLite is not a
    publish's few microseconds on the loop."""
    if len(ops) > INLINE_MAX_OPS:
        return len(ops)
    rows = 0
    for op in ops:
        if not isinstance(op, AppendBatch):
            rows += 1
        elif len(op.subjects) > INLINE_MAX_OPS or sum(map(len, op.data)) > INLINE_MAX_BATCH_BYTES:
            return INLINE_MAX_OPS + 1
        else:
            rows += len(op.subjects)
    return rows


class SqliteStore:
    """A StreamStore in a SQLite file. Create with ``await SqliteStore.open(path, ...)``; end with
    ``await store.close()``. Needs the asyncio event loop -- the anyio asyncio backend is fine."""

    def __init__(
        self,
        path: Path,
        *,
        sync: str,
        sync_interval: float,
        compression: str,
        cipher: CipherSpec | None,
        max_file_bytes: int | None,
        checkpoint_interval: float,
        wal_brake_bytes: int,
        max_pending: int,
        enqueue_timeout: float,
        close_timeout: float,
        quick_check: bool,
        wall_clock: Callable[[], int],
        page_size: int = DEFAULT_PAGE_SIZE,
        spare: SpareStores | None = None,
        sync_new_folder: bool = True,
        block_rows: int = colblocks.BLOCK_ROWS,
    ) -> None:
        self._path = path
        self._spare = spare
        self._sync_new_folder = sync_new_folder
        self._wal = Path(f"{path}-wal")
        self._sync = sync
        self._sync_interval = sync_interval
        self._spec = cipher
        self._codec = RowCodec(compression=compression)
        self._max_file_bytes = max_file_bytes
        self._ckpt_interval = checkpoint_interval
        self._wal_brake = wal_brake_bytes
        self._max_pending = max_pending
        self._enqueue_timeout = enqueue_timeout
        self._close_timeout = close_timeout
        self._quick_check = quick_check
        self._page_size = page_size
        self._clock = wall_clock
        self._key = os.path.realpath(path)

        # Shared between the loop and the writer thread.
        self._lock = threading.Lock()  # guards _subj, _pub, _subj_ver, _last, _last_bytes, _last_ver
        self._subj: dict[str, int] = {}  # committed per-subject counts (mutated by the writer only)
        self._pub = _Counters(1, 0, 0, 0, 0, 0)  # committed counters (replaced, never mutated)
        self._tail: _Tail | None = None  # the newest transaction's rows, for live reads (guarded too)
        self._w_appends_only = False  # (writer) the open transaction only appended so far
        self._w_direct = False  # (writer) it inserted rows straight from columns (not in _rows)
        self._subj_ver = 0  # bumped when the set of subjects changes
        # The newest message of recently asked literal subjects (a KV get asks for one key again and
        # again): filled by reads, emptied of a subject by any commit that adds or removes one of
        # its messages. A read fills only if no commit touched messages while it ran (_last_ver).
        self._last: dict[str, tuple[StoredMsg | None, int]] = {}  # subject -> (message, cost)
        self._last_bytes = 0
        self._last_ver = 0
        self._q: deque[_Req] = deque()
        # Guards _q, _scheduled and _dead: orders "enqueue" against "writer gone".
        self._qlock = threading.Lock()
        self._scheduled = False  # a drain job (self._w_drain) is queued or running on the pool
        # Held while the writing connection is in use: by a pool job for a batch, by the loop for
        # an inline commit, by housekeeping for a TRUNCATE checkpoint, and to open or close the
        # connections (taken before _rlock when both are).
        self._wlock = threading.RLock()  # re-entered by a recovery that reconnects
        # Held while the reading connection is in use (a read, a PASSIVE checkpoint).
        self._rlock = threading.Lock()
        self._loaded = False  # the file was opened and checked once; later opens only reconnect
        self._shut = False  # closed for good (not for idleness): never reopened
        self._park_deadline: float | None = None  # a drain waiting for a slot gives up then
        self._open_timeout = 60.0
        self._opened = False  # the open request was served (the drain job posts _ready)
        # Small batches commit on the loop's thread when the writer is idle and a COMMIT does
        # not fsync (see submit).
        self._inline = sync == "interval"
        # ... and with "always" while fsyncs are fast (see INLINE_DURABLE_COMMIT_S)
        self._inline_durable = sync == "always"
        # A moving average of the transactions' wall time, seconds, in whichever thread they ran.
        # It starts above the bound: the first commits go to the writer and measure the disk.
        self._commit_cost = 2 * INLINE_DURABLE_COMMIT_S
        self._inline_spent = False  # an inline commit ran in this turn of the event loop
        self._dead = False
        # The last write failed for want of room, and none has succeeded since: checkpoints wait
        # (``_checkpoint``).
        self._disk_full = False
        self._fatal: StoreError | None = None
        self._stats = _Stats()

        # Loop side.
        self._loop: asyncio.AbstractEventLoop | None = None
        # The reading connection: point reads on the loop (see _point_fetch), other reads and the
        # checkpoints on the pool. None while the store is closed for idleness.
        self._rconn: sqlite3.Connection | None = None
        self._aux: set[sqlite3.Connection] = set()  # snapshots' connections
        self._closed = False
        self._inflight = 0
        self._reads = 0  # reads waiting on the pool (a store with one is not idle)
        self._space: asyncio.Event | None = None
        self._match_cache: dict[str, tuple[int, list[str]]] = {}
        self._ready: asyncio.Future[Any] | None = None
        self._exited: asyncio.Future[Any] | None = None

        # Writer side.
        self._conn: sqlite3.Connection | None = None
        self._w = self._pub.copy()
        self._delta: dict[str, int] = {}
        self._rows: list[tuple[Any, ...]] = []
        self._w_batch_bytes = 0  # what the last _w_append_batch stored
        self._first_dirty = False
        self._w_batch: list[_Req] = []
        # Housekeeping (interval fsync, checkpoints) runs as a pool job of its own, on the reading
        # connection, so a 10-50 ms fsync or checkpoint never holds up a commit. The writer marks
        # work due and arms one timer; ``_bg_cond`` guards the marks.
        self._bg_cond = threading.Lock()
        self._hk_armed = False
        self._dirty_sync = self._dirty_ckpt = False
        self._next_sync = self._next_ckpt = 0.0
        self._dir_synced = False

        # Column blocks (colblocks.py, DESIGN.md "Column blocks"): built by ``_blk_job`` on the
        # pool, read by ``read_columns``. ``_blk_lock`` guards the fields below (a leaf lock).
        self._blk_rows = block_rows  # rows per block; 0: none (an encrypted store has none)
        self._blk_leftover = False  # without blocks, but holding some it could not drop
        self._blk_lock = threading.Lock()
        self._blk_next = 0  # the next block to build: every one below is built, empty or gone
        self._blk_top = 0  # the last sequence of the newest block built: reads above skip blocks
        self._blk_low = 0  # ``lo`` of the oldest block kept (0: none)
        self._blk_stale: set[int] = set()  # blocks a read found wrong: rebuild them
        self._blk_job_on = False  # a block job is queued or running
        self._blk_swept = False  # blocks of another size were dropped (once per open)
        self._blk_built = 0  # blocks built (and rebuilt) since the open
        self._blk_served = 0  # messages read from blocks since the open

    # ------------------------------------------------------------------------------------- open

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: Literal["always", "interval"] = "always",
        sync_interval: float = 1.0,
        compression: Literal["none", "zstd"] = "none",
        cipher: CipherSpec | None = None,
        max_file_bytes: int | None = None,
        checkpoint_interval: float = 1.0,
        wal_brake_bytes: int = 64 << 20,
        max_pending: int = 10_000,
        enqueue_timeout: float = 30.0,
        open_timeout: float = 60.0,
        close_timeout: float = 10.0,
        quick_check: bool = True,
        wall_clock: Callable[[], int] = time.time_ns,
        page_size: int = DEFAULT_PAGE_SIZE,
        spare: SpareStores | None = None,
        sync_new_folder: bool = True,
        block_rows: int = colblocks.BLOCK_ROWS,
    ) -> SqliteStore:
        """Open (creating if absent) the stream database at ``path``; fails with StoreError naming the
        file if it is not a leafjet stream database, is corrupt or truncated, has a newer schema, or the
        encryption key does not match. ``sync_new_folder=False``: a file created here is whole
        (fsynced) but its name is not yet durable: the caller fsyncs ``path``'s folder before
        anything depends on the store (a prepared stream's config commit does). ``block_rows``:
        the messages per column block (0: no column blocks; see colblocks.py)."""
        if sync not in ("always", "interval"):
            raise ValueError(f"sync must be 'always' or 'interval', not {sync!r}")
        if sync_interval <= 0 or checkpoint_interval <= 0:
            raise ValueError("sync_interval and checkpoint_interval must be > 0")
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        if page_size not in PAGE_SIZES:
            raise ValueError(f"page_size must be one of {sorted(PAGE_SIZES)}, not {page_size!r}")
        if cipher is not None and not isinstance(cipher, CipherSpec):
            raise TypeError("cipher must be a CipherSpec")
        if type(block_rows) is not int or block_rows < 0:
            raise ValueError(f"block_rows must be an int >= 0, not {block_rows!r}")
        store = cls(
            Path(path),
            sync=sync,
            sync_interval=sync_interval,
            compression=compression,
            cipher=cipher,
            max_file_bytes=max_file_bytes,
            checkpoint_interval=checkpoint_interval,
            wal_brake_bytes=wal_brake_bytes,
            max_pending=max_pending,
            enqueue_timeout=enqueue_timeout,
            close_timeout=close_timeout,
            quick_check=quick_check,
            wall_clock=wall_clock,
            page_size=page_size,
            spare=spare,
            sync_new_folder=sync_new_folder,
            block_rows=block_rows,
        )
        await store._start(open_timeout)
        return store

    async def _start(self, open_timeout: float) -> None:
        with _OPEN_LOCK:
            if self._key in _OPEN:
                raise StoreError(f"{self._path}: stream database is already open in this process")
            _OPEN.add(self._key)
        loop = self._loop = asyncio.get_running_loop()
        self._open_timeout = open_timeout
        self._ready = loop.create_future()
        self._exited = loop.create_future()
        # The open is the first request on the store's queue: a pool job opens the file (or fails
        # and releases all it opened), and whatever is queued after it -- a close -- follows.
        with self._qlock:
            self._q.append(_Req(_OPEN_REQ, (), None))
            self._schedule()
        try:
            with anyio.fail_after(open_timeout):
                await asyncio.shield(self._ready)
        except BaseException as e:
            self._closed = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._close_timeout):
                self._put_stop()
                await asyncio.shield(self._exited)
            if isinstance(e, TimeoutError):
                if self._park_deadline is not None:  # it was waiting for a slot all along
                    raise self._no_slot_error() from e
                raise StoreError(f"{self._path}: opening the stream database timed out") from e
            raise

    def _connect_reader(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path, isolation_level=None, check_same_thread=False, cached_statements=32
        )
        try:
            conn.execute("PRAGMA query_only = ON")
            # Short: a read on the loop that finds the database busy goes to the pool instead.
            conn.execute(f"PRAGMA busy_timeout = {POINT_READ_BUSY_MS}")
            conn.create_function("lj_match", 2, _sql_match, deterministic=True)
        except BaseException:
            conn.close()
            raise
        return conn

    # ------------------------------------------------------------------------------- loop side

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"{self._path}: store is closed")
        if self._fatal is not None:
            raise _fresh(self._fatal)

    def _put_stop(self) -> None:
        with self._qlock:
            if not self._dead:
                self._q.append(_Req(_STOP, (), None))
                self._schedule()

    def _schedule(self) -> None:
        """With ``_qlock`` held: make sure a drain job will look at the queue."""
        if not self._scheduled:
            self._scheduled = True
            POOL.submit(self._w_drain)

    async def _submit(self, kind: int, ops: tuple[Op, ...] = (), arg: Any = None) -> Any:
        return await (await self._enqueue(kind, ops, arg))

    async def _enqueue(self, kind: int, ops: tuple[Op, ...] = (), arg: Any = None) -> asyncio.Future[Any]:
        """Queue one request for the writer (waiting, bounded, while the queue is full); its future."""
        self._check_open()
        if self._inflight >= self._max_pending:
            try:
                with anyio.fail_after(self._enqueue_timeout):
                    while self._inflight >= self._max_pending:
                        if self._space is None:
                            self._space = asyncio.Event()
                        await self._space.wait()
                        self._check_open()
            except TimeoutError:
                raise StoreError(
                    f"{self._path}: write queue full ({self._max_pending} calls) for {self._enqueue_timeout}s"
                ) from None
        assert self._loop is not None
        fut = self._loop.create_future()
        with self._qlock:
            if self._dead:
                raise StoreClosed(f"{self._path}: store writer has stopped")
            self._q.append(_Req(kind, ops, fut, arg))
            self._schedule()
        self._inflight += 1
        return fut

    def _inline_turn_over(self) -> None:
        self._inline_spent = False

    def _post(
        self, items: list[tuple[asyncio.Future[Any] | None, Any, BaseException | None]], n: int
    ) -> None:
        """Writer thread -> loop: resolve futures (one wake-up per batch)."""
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            self._loop.call_soon_threadsafe(self._deliver, items, n)

    def _resolve(self, outcomes: list[tuple[_Req, Any, BaseException | None]]) -> None:
        """Writer thread: post the outcomes of requests not resolved yet (each request exactly once)."""
        items: list[tuple[asyncio.Future[Any] | None, Any, BaseException | None]] = []
        for r, value, exc in outcomes:
            if not r.done and r.fut is not None:
                r.done = True
                items.append((r.fut, value, exc))
        if items:
            self._post(items, len(items))

    def _deliver(
        self, items: list[tuple[asyncio.Future[Any] | None, Any, BaseException | None]], n: int
    ) -> None:
        for fut, value, exc in items:
            if fut is None or fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)
        self._inflight -= n
        if self._space is not None and self._inflight < self._max_pending:
            self._space.set()
            self._space = None

    # ---------------------------------------------------------------------------------- writes

    # the reference's file store's count: the SQLite store plays its role
    size_of = staticmethod(file_msg_size)

    async def apply(self, ops: Sequence[Op]) -> list[Result]:
        return await (await self.submit(ops))

    async def submit(self, ops: Sequence[Op]) -> Awaitable[list[Result]]:
        ops = tuple(ops)
        if not ops:
            self._check_open()
            return _resolved([])
        SLOTS.touch(self)
        if (
            self._inflight == 0
            and _rows(ops) <= INLINE_MAX_OPS
            and (self._inline or (self._inline_durable and self._durable_inline_ok(ops)))
        ):
            done = self._commit_inline(ops)
            if done is not None:
                return done
        return await self._enqueue(_APPLY, ops)

    def _durable_inline_ok(self, ops: tuple[Op, ...]) -> bool:
        """(``sync="always"``) May this small call commit on the loop? While commits are fast,
        and not a source's batch (a ``SourcePosOp`` with it). A hub's source reads its link
        and commits in one pipeline: with the commit on the writer, the loop reads and decodes
        the next reply meanwhile. Traced per message (bench sources-latency, lj -> lj, load
        9-12), the leaf's send -> the hub's source has it took 2.3-4.9 ms p50 with the hub's
        batches inline against 0.7-1.6 ms without, in alternating runs; the leaf gains from
        inline commits (its publishes), the hub lost more here."""
        return self._commit_cost <= INLINE_DURABLE_COMMIT_S and not any(type(op) is SourcePosOp for op in ops)

    def _commit_inline(self, ops: tuple[Op, ...]) -> asyncio.Future[Any] | None:
        """Commit a small call on the loop's thread; its resolved future, or None (use the queue).

        With ``sync="interval"``, where a COMMIT writes to the OS and does not fsync (tens of
        microseconds for a few rows); with ``sync="always"`` only while the store's recent
        transactions, fsync included, took at most ``INLINE_DURABLE_COMMIT_S`` on average (a
        slow disk's commits stay on the writer, off the loop). Only while nothing is queued or
        running on the writer (``_inflight == 0`` and ``_wlock`` free), so calls still apply in
        the order they were made. A lone publish, KV put or consumer-state write then costs no
        thread hand-over: the round trip to the writer thread and back (a futex wake, the GIL
        passing back and forth, an eventfd wake of the loop) took longer than the commit itself.
        The loop waits for the commit instead, as it does for the point reads.

        At most one call per turn of the event loop commits inline: the others of a burst (many
        tasks appending at once) go to the writer and are group-committed together."""
        self._check_open()
        if self._inline_spent or not self._wlock.acquire(blocking=False):
            return None  # this turn had its inline commit, or the writer has the connection
        try:
            if self._dead or self._conn is None:
                return None
            req = _Req(_APPLY, ops, None)
            try:
                ((_r, value, exc),) = self._w_transact([req])
            except BaseException as e:  # the connection could not be recovered: as on the writer
                self._fatal = self._writer_failed(e)
                self._put_stop()
                raise _fresh(self._fatal) from e
        finally:
            self._wlock.release()
        assert self._loop is not None
        self._inline_spent = True
        self._loop.call_soon(self._inline_turn_over)
        return _resolved(value, exc)

    async def append(
        self, subject: str, headers: bytes | None, data: bytes, ts: int | None = None
    ) -> tuple[int, int]:
        if ts is None:
            ts = self._clock()
        (seq,) = await self.apply((Append(subject, headers, data, ts),))
        assert isinstance(seq, int)  # an Append's result is its sequence
        return seq, ts

    async def flush(self) -> None:
        """Wait for everything queued before this call, and make it durable (fsync the WAL in interval
        mode; with sync="always" every acknowledgement already followed an fsync)."""
        await self._submit(_FLUSH)

    async def set_max_file_bytes(self, limit: int | None) -> int:
        """Cap the database file (SQLite ``max_page_count``); writes beyond it fail with StoreFull and the
        store stays readable. ``None`` lifts the cap. Returns the effective cap in bytes."""
        return await self._submit(_LIMIT, arg=limit)

    def stats(self) -> StoreStats:
        s = self._stats
        return StoreStats(
            commits=s.commits,
            failed_commits=s.failed_commits,
            requests=s.requests,
            ops=s.ops,
            max_batch=s.max_batch,
            pending=self._inflight,
            checkpoints=s.checkpoints,
            wal_truncations=s.wal_truncations,
            syncs=s.syncs,
            last_error=s.last_error,
        )

    @property
    def path(self) -> Path:
        return self._path

    @property
    def resting(self) -> bool:
        """Closed for idleness (its files given back to the cap), and healthy: it reopens on its
        next use. A health probe skips it rather than reopen every idle store."""
        return self._conn is None and not self._dead

    # ----------------------------------------------------------------------------------- reads

    async def _offload(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as a pool job; its result (or exception)."""
        assert self._loop is not None
        fut = self._loop.create_future()

        def job() -> None:
            if fut.done():  # the caller gave up
                return
            try:
                value, exc = fn(), None
            except BaseException as e:
                value, exc = None, e
            self._post([(fut, value, exc)], 0)

        POOL.submit(job)
        return await fut

    async def _fetch(
        self, sql: str, params: Sequence[Any] = (), then: Callable[[list[Any]], Any] | None = None
    ) -> Any:
        """A read on the reading connection, as a pool job (reopening the store if it was closed
        for idleness): its rows, or ``then(rows)``, run on the pool thread too."""
        self._check_open()
        SLOTS.touch(self)
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        deadline = time.monotonic() + self._enqueue_timeout
        self._reads += 1
        try:
            POOL.submit(functools.partial(self._r_job, fut, sql, params, deadline, then))
            return await fut
        finally:
            self._reads -= 1

    def _r_job(
        self,
        fut: asyncio.Future[Any],
        sql: str,
        params: Sequence[Any],
        deadline: float,
        then: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        """Pool: run a read for ``_fetch``; parked while no slot is free (up to ``deadline``)."""
        if fut.done():
            return
        try:
            busy_until = time.monotonic() + READ_BUSY_TIMEOUT
            while True:
                if not self._ensure_conns():
                    if time.monotonic() >= deadline:
                        raise self._no_slot_error()
                    SLOTS.park(functools.partial(self._r_job, fut, sql, params, deadline, then))
                    return
                with self._rlock:
                    conn = self._rconn
                    if conn is None:
                        continue  # closed for idleness in between: open again
                    try:
                        rows = conn.execute(sql, params).fetchall()
                        break
                    except sqlite3.OperationalError as e:
                        if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > busy_until:
                            raise
                time.sleep(0.002)
            self._post([(fut, rows if then is None else then(rows), None)], 0)
        except sqlite3.Error as e:
            err = StoreError(f"{self._path}: read failed: {e}")
            err.__cause__ = e
            self._post([(fut, None, err)], 0)
        except BaseException as e:
            self._post([(fut, None, e)], 0)
        SLOTS.idle()

    async def _point_fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """A read of at most one row by an index (a sequence, the newest of one subject, a meta key)
        runs on the event loop's thread, on the reading connection.

        It costs a few microseconds; the round trip through a reader thread cost about 50 us
        of CPU and two thread wake-ups, which was most of a KV get or a MSG.GET. WAL readers do
        not wait for the writer. If the database is busy anyway (a TRUNCATE checkpoint), the
        connection is in use on the pool (a checkpoint, a larger read), or the store is closed
        for idleness, the read goes to the pool like any other."""
        self._check_open()
        if self._rconn is not None and self._rlock.acquire(blocking=False):
            try:
                conn = self._rconn
                if conn is not None:
                    SLOTS.touch(self)
                    return conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise StoreError(f"{self._path}: read failed: {e}") from e
            except sqlite3.Error as e:
                raise StoreError(f"{self._path}: read failed: {e}") from e
            finally:
                self._rlock.release()
        return await self._fetch(sql, params)

    async def _point_one(self, sql: str, params: Sequence[Any]) -> StoredMsg | None:
        rows = await self._point_fetch(sql, params)
        return self._decode_sync(rows)[0] if rows else None

    def _decode_sync(self, rows: Iterable[Any]) -> list[StoredMsg]:
        dec = self._codec.decode
        out = []
        for seq, subject, hdr, data, ts, flags in rows:
            if flags:
                hdr, data = dec(seq, hdr, data, flags)
            out.append(StoredMsg(seq, subject, hdr, data, ts))
        return out

    async def _decode(self, rows: list[Any]) -> list[StoredMsg]:
        if len(rows) > 8 and any(r[5] for r in rows) and sum(len(r[3]) for r in rows) > OFFLOAD_DECODE_BYTES:
            return list(await self._offload(functools.partial(self._decode_sync, rows)))
        return self._decode_sync(rows)

    async def _one(self, sql: str, params: Sequence[Any]) -> StoredMsg | None:
        rows = await self._fetch(sql, params)
        return (await self._decode(rows))[0] if rows else None

    def _subjects_for(self, filt: str) -> tuple[list[str], int]:
        """The committed subjects matching a wildcard filter, and the last sequence they are valid for.

        Queries that use the list are bounded by that sequence: a message beyond it may be on a subject
        the list does not have yet, and answering past it could skip that message."""
        with self._lock:
            ver, last = self._subj_ver, self._pub.last_seq
            hit = self._match_cache.get(filt)
            if hit is not None and hit[0] == ver:
                return hit[1], last
            subjects = [s for s in self._subj if match(filt, s)]
        if len(self._match_cache) >= 256:
            self._match_cache.clear()
        self._match_cache[filt] = (ver, subjects)
        return subjects, last

    async def get(self, seq: int) -> StoredMsg | None:
        if not 0 < seq <= MAX_SEQ:  # no message beyond (a client may ask up to 2^64 - 1)
            self._check_open()
            return None
        return await self._point_one(f"SELECT {COLS} FROM msgs WHERE seq = ?", (seq,))

    async def last_by_subject(self, subject_filter: str) -> StoredMsg | None:
        filt = normalize_filter(subject_filter)
        if filt is None:
            return await self._point_one(f"SELECT {COLS} FROM msgs ORDER BY seq DESC LIMIT 1", ())
        if not has_wildcard(filt):
            return await self._last_of(filt)
        subjects, last = self._subjects_for(filt)
        if not subjects:
            return None
        if len(subjects) <= SMALL_FANOUT:
            return await self._one(
                f"SELECT {COLS} FROM msgs WHERE seq = (SELECT MAX(m) FROM (SELECT (SELECT MAX(seq) FROM msgs "
                "WHERE subject = j.value AND seq <= ?) AS m FROM json_each(?) AS j))",
                (last, json.dumps(subjects)),
            )
        return await self._one(
            f"SELECT {COLS} FROM msgs WHERE lj_match(?, subject) ORDER BY seq DESC LIMIT 1", (filt,)
        )

    async def _last_of(self, subject: str) -> StoredMsg | None:
        """The newest message on a literal subject, from ``_last`` when a read already found it."""
        with self._lock:
            hit = self._last.get(subject)
            if hit is not None:
                return hit[0]
            if subject not in self._subj:
                return None
            ver = self._last_ver
        found = await self._point_one(
            f"SELECT {COLS} FROM msgs WHERE subject = ? ORDER BY seq DESC LIMIT 1", (subject,)
        )
        cost = _LAST_ENTRY_OVERHEAD + len(subject)
        if found is not None:
            cost += len(found.data) + len(found.headers or b"")
        if cost <= LAST_CACHE_BYTES >> 4:
            with self._lock:
                if self._last_ver == ver and subject not in self._last:
                    # no commit changed messages while we read: the answer is still the newest
                    last = self._last
                    while last and self._last_bytes + cost > LAST_CACHE_BYTES:
                        self._last_bytes -= last.pop(next(iter(last)))[1]
                    last[subject] = (found, cost)
                    self._last_bytes += cost
        return found

    async def first_after(self, seq: int, subject_filter: str | None = None) -> StoredMsg | None:
        filt = normalize_filter(subject_filter)
        if seq > MAX_SEQ:
            self._check_open()
            return None
        seq = max(seq, 0)
        if filt is None:
            return await self._point_one(
                f"SELECT {COLS} FROM msgs WHERE seq >= ? ORDER BY seq LIMIT 1", (seq,)
            )
        if not has_wildcard(filt):
            return await self._point_one(
                f"SELECT {COLS} FROM msgs WHERE subject = ? AND seq >= ? ORDER BY seq LIMIT 1", (filt, seq)
            )
        subjects, last = self._subjects_for(filt)
        if not subjects:
            return None
        if len(subjects) <= SMALL_FANOUT:
            return await self._one(
                f"SELECT {COLS} FROM msgs WHERE seq = (SELECT MIN(m) FROM (SELECT (SELECT MIN(seq) FROM msgs "
                "WHERE subject = j.value AND seq >= ? AND seq <= ?) AS m FROM json_each(?) AS j))",
                (seq, last, json.dumps(subjects)),
            )
        return await self._one(
            f"SELECT {COLS} FROM msgs WHERE seq >= ? AND lj_match(?, subject) ORDER BY seq LIMIT 1",
            (seq, filt),
        )

    async def range(
        self,
        start_seq: int,
        end_seq: int | None = None,
        limit: int = 1000,
        subject_filter: str | None = None,
    ) -> list[StoredMsg]:
        filt = normalize_filter(subject_filter)
        end = MAX_SEQ if end_seq is None else min(end_seq, MAX_SEQ)
        start = max(start_seq, 0)
        if limit <= 0 or end < start:
            self._check_open()
            return []
        params: tuple[Any, ...]
        with self._lock:
            p, tail = self._pub, self._tail
        if tail is not None and tail.pub is p and tail.after < start <= p.last_seq:
            # a live reader of the newest commit (a consumer's read-ahead): its rows (see _Tail),
            # every message past ``tail.after``, matched here by a filter with wildcards too
            self._check_open()
            top = min(end, p.last_seq)
            hits = [r for r in tail.rows if start <= r[0] <= top]
            if filt is not None and has_wildcard(filt):
                pattern = filt.split(".")
                hits = [r for r in hits if tokens_match(pattern, r[1].split("."))]
            elif filt is not None:
                hits = [r for r in hits if r[1] == filt]
            return [StoredMsg(seq, subj, hdr, data, ts) for seq, subj, hdr, data, ts, _s, _f in hits[:limit]]
        by_index = True  # one index range: no wildcard to match row by row
        if filt is None:
            sql, params = "WHERE seq >= ? AND seq <= ?", (start, end)
        elif not has_wildcard(filt):
            sql, params = "WHERE subject = ? AND seq >= ? AND seq <= ?", (filt, start, end)
        else:
            by_index = False
            top = min(end, p.last_seq)
            if top < start:
                self._check_open()
                return []
            span = top - start + 1
            if p.msgs and span <= LOOP_WILDCARD_ROWS and span * (p.nbytes // p.msgs) <= LOOP_RANGE_BYTES:
                got = await self._point_fetch(
                    f"SELECT {COLS} FROM msgs WHERE seq >= ? AND seq <= ? ORDER BY seq", (start, top)
                )
                pattern = filt.split(".")
                return self._decode_sync([r for r in got if tokens_match(pattern, r[1].split("."))][:limit])
            subjects, last = self._subjects_for(filt)
            if not subjects:
                self._check_open()
                return []
            if len(subjects) <= SMALL_FANOUT:
                sql = f"WHERE {IN_SUBJECTS} AND seq >= ? AND seq <= ?"
                params = (json.dumps(subjects), start, min(end, last))
            else:
                sql, params = "WHERE seq >= ? AND seq <= ? AND lj_match(?, subject)", (start, end, filt)
        query, params = f"SELECT {COLS} FROM msgs {sql} ORDER BY seq LIMIT ?", (*params, limit)
        # At most one row per sequence up to the last committed one: a live reader (a bulk
        # read woken by a commit, a consumer's read-ahead) asks a large limit and finds a row.
        rows = min(limit, end - start + 1, p.last_seq - start + 1)
        if by_index and (rows <= 0 or (p.msgs and rows * (p.nbytes // p.msgs) <= LOOP_RANGE_BYTES)):
            # Small rows: a consumer's read-ahead of 256 x 128 B took about 0.7 ms through
            # a reader thread (aiosqlite), most of it handing the GIL between threads.
            return self._decode_sync(await self._point_fetch(query, params))
        return await self._decode(await self._fetch(query, params))

    async def read_columns(
        self, start_seq: int, end_seq: int, limit: int, subject_filter: str | None = None
    ) -> tuple[columns.MsgColumns, int]:
        """See core/store/sqlite_columns.py: SQLite builds the columns (one aggregate query, on
        the pool, or on the loop when small as ``range``'s reads); an unfiltered read of a sealed
        range takes the column blocks built for it (``_blk_parts``); rows stored compressed or
        sealed, and wildcard filters, are read by ``range`` and turned into columns."""
        filt = normalize_filter(subject_filter)
        end = min(end_seq, MAX_SEQ)
        start = max(start_seq, 1)
        if limit <= 0 or end < start:
            self._check_open()
            return columns.EMPTY, start - 1
        with self._lock:
            p, tail = self._pub, self._tail
        if filt is None and tail is not None and tail.pub is p and tail.after < start <= p.last_seq:
            self._check_open()
            return _tail_columns(tail.rows, start, min(end, start + limit - 1, p.last_seq), end)
        got: columns.MsgColumns | str | None = None
        if filt is None and self._blk_rows and start <= self._blk_top:
            last = min(end, start + limit - 1)
            got = await self._blk_parts(start, last, p)
            if got is not None:
                return got, await self._covered_to(got, last, end)
        # a store that compresses or seals its rows decodes them one by one anyway: no aggregate
        if self._codec.plain and (filt is None or not has_wildcard(filt)):
            last = end if filt is not None else min(end, start + limit - 1)
            if filt is None:
                got = await self._aggregate(start, last, limit, p)
            else:
                got = await self._aggregate_subject(filt, start, end, limit, p)
            if isinstance(got, columns.MsgColumns):
                n = len(got)
                if filt is None:
                    return got, await self._covered_to(got, last, end)
                return got, (last if n < limit else got.seqs[n - 1])
        msgs = await self.range(start, end, limit, filt)
        return columns.columns_of(msgs), columns.covered_by(msgs, start, end, limit)

    async def _covered_to(self, got: columns.MsgColumns, last: int, end: int) -> int:
        """What an unfiltered read of ``[start, last]`` that found ``got`` covers: ``last``, or
        when it found nothing, up to the next message (a read across a long run of deleted
        sequences takes one step, not one per ``limit``)."""
        if len(got) or last >= end:
            return last
        nxt = await self._point_fetch("SELECT MIN(seq) FROM msgs WHERE seq > ?", (last,))
        return end if nxt[0][0] is None else min(end, nxt[0][0] - 1)

    async def _aggregate(self, start: int, last: int, limit: int, p: _Counters) -> columns.MsgColumns | str:
        """Every message of ``[start, last]`` by the aggregate statement, or ``FLAGGED``."""
        gaps = p.msgs != p.last_seq - p.first_seq + 1  # deleted sequences somewhere: ask for seqs
        lengths = False  # subjects' lengths from the spaces that join them (see sqlite_columns)
        while True:
            sql = sqlite_columns.range_sql(gaps, lengths)
            got = await self._read_columns(sql, (start, last), limit, p)
            if got == sqlite_columns.GAPS and not gaps:  # a delete since the counters were read
                gaps = True
            elif got == sqlite_columns.SPACED and not lengths:  # a subject with a space
                lengths = True
            else:
                return got

    async def _aggregate_subject(
        self, subject: str, start: int, end: int, limit: int, p: _Counters
    ) -> columns.MsgColumns | str:
        """The first ``limit`` messages of one literal subject in ``[start, end]``, or ``FLAGGED``."""
        lengths = False
        while True:
            sql = sqlite_columns.subject_sql(lengths)
            got = await self._read_columns(sql, (subject, start, end, limit), limit, p)
            if got == sqlite_columns.SPACED and not lengths:
                lengths = True
            else:
                return got

    async def _piece(self, start: int, last: int, p: _Counters) -> columns.MsgColumns:
        """Every message of ``[start, last]`` as columns, not from blocks (``_blk_parts``)."""
        n = last - start + 1
        if self._codec.plain:
            got = await self._aggregate(start, last, n, p)
            if isinstance(got, columns.MsgColumns):
                return got
        return columns.columns_of(await self.range(start, last, n))

    async def _blk_parts(self, start: int, last: int, p: _Counters) -> columns.MsgColumns | None:
        """Every message of ``[start, last]`` as columns, the sealed part from its column blocks
        and the rest (a block not built yet, or refused) through ``_piece``; None when no block
        is worth reading for this range (``colblocks.wanted``).

        A block is served only when the messages it holds are exactly those in its range now.
        Messages of a sealed range can only be removed (sequences are never reused), so that
        holds exactly when its count equals the messages now in the range: from the published
        counters when the stream has no deleted sequence in it (every sequence from the first
        to the last holds a message), else counted in the statement that reads the blob (one
        snapshot). A block that fails is left out, read the other way, and rebuilt."""
        rows = self._blk_rows
        span = colblocks.wanted(start, last, rows, self._blk_top)
        if span is None:
            return None
        (lo0, _), (lo1, _) = colblocks.bounds(span[0], rows), colblocks.bounds(span[1], rows)
        counted = p.msgs != p.last_seq - p.first_seq + 1

        def load(found: list[Any]) -> list[tuple[int, columns.MsgColumns | None]]:
            # on the pool's thread: decode the blobs there, not on the loop
            out: list[tuple[int, columns.MsgColumns | None]] = []
            for lo, hi, count, encoding, body, *now in found:
                present = now[0] if now else min(hi, p.last_seq) - max(lo, p.first_seq) + 1
                cols = None
                if count == present:
                    with contextlib.suppress(StoreError):  # a damaged blob: read the rows, rebuild
                        cols = colblocks.unpack(encoding, body)
                # its rows in its range (they increase: decode checked), as many as it says
                ends = cols.seqs[:1] + cols.seqs[-1:] if cols is not None else ()
                if cols is not None and (len(cols) != count or any(s < lo or s > hi for s in ends)):
                    cols = None
                out.append((lo, cols))
            return out

        sql = colblocks.SELECT_COUNTED if counted else colblocks.SELECT
        blocks = await self._fetch(sql, (lo0, lo1, rows - 1), then=load)
        parts: list[columns.MsgColumns] = []
        stale: list[int] = []
        pos = start
        for lo, cols in blocks:
            if cols is None:
                stale.append(colblocks.block_of(lo, rows))
                continue
            if lo > pos:
                parts.append(await self._piece(pos, lo - 1, p))
            top = min(lo + rows - 1, last)
            parts.append(colblocks.rows_between(cols, pos, top))
            self._blk_served += len(parts[-1])
            pos = top + 1
        if pos <= last:
            parts.append(await self._piece(pos, last, p))
        if stale:
            with self._blk_lock:
                self._blk_stale.update(stale)
            self._blk_kick()
        parts = [c for c in parts if len(c)]
        return columns.concat(parts) if parts else columns.EMPTY

    def block_stats(self) -> BlockStats:
        """The column blocks' counters (tests, monitoring)."""
        return BlockStats(self._blk_top, self._blk_built, self._blk_served)

    async def _read_columns(
        self, sql: str, params: tuple[Any, ...], limit: int, p: _Counters
    ) -> columns.MsgColumns | str:
        if p.msgs and limit * (p.nbytes // p.msgs) <= LOOP_RANGE_BYTES:
            rows = await self._point_fetch(sql, params)  # a few small rows: as range's, on the loop
            return sqlite_columns.parse(rows[0])
        return await self._fetch(sql, params, then=lambda rows: sqlite_columns.parse(rows[0]))

    async def state(self, with_deleted: bool = False) -> StreamState:
        self._check_open()
        with self._lock:
            p, nsub = self._pub, len(self._subj)
        deleted: tuple[int, ...] | None = None
        if with_deleted:
            deleted = ()
            if p.msgs:
                gaps = await self._fetch(
                    "SELECT seq, nxt FROM (SELECT seq, LEAD(seq, 1, ?) OVER (ORDER BY seq) AS nxt FROM msgs "
                    "WHERE seq >= ? AND seq <= ?) WHERE nxt > seq + 1",
                    (p.last_seq + 1, p.first_seq, p.last_seq),
                )
                deleted = tuple(chain.from_iterable(range(a + 1, b) for a, b in gaps))
        return make_state(
            msgs=p.msgs,
            nbytes=p.nbytes,
            first_seq=p.first_seq,
            first_ts=p.first_ts,
            last_seq=p.last_seq,
            last_ts=p.last_ts,
            num_subjects=nsub,
            deleted=deleted,
        )

    async def subjects_state(self, subject_filter: str = ">") -> dict[str, int]:
        self._check_open()
        filt = normalize_filter(subject_filter)
        with self._lock:
            if filt is None:
                return dict(self._subj)
            if not has_wildcard(filt):
                n = self._subj.get(filt)
                return {filt: n} if n else {}
            return {s: n for s, n in self._subj.items() if match(filt, s)}

    async def msgs_for_subject(self, subject: str) -> int:
        self._check_open()
        filt = normalize_filter(subject)
        with self._lock:
            if filt is None:
                return self._pub.msgs
            if not has_wildcard(filt):
                return self._subj.get(filt, 0)
            return sum(n for s, n in self._subj.items() if match(filt, s))

    async def num_pending(self, from_seq: int, subject_filter: str | None = None) -> int:
        self._check_open()
        filt = normalize_filter(subject_filter)
        if from_seq > MAX_SEQ:
            return 0
        from_seq = max(from_seq, 0)
        with self._lock:
            if from_seq <= self._pub.first_seq:
                if filt is None:
                    return self._pub.msgs
                if not has_wildcard(filt):
                    return self._subj.get(filt, 0)
        if filt is None:
            rows = await self._fetch("SELECT COUNT(*) FROM msgs WHERE seq >= ?", (from_seq,))
        elif not has_wildcard(filt):
            rows = await self._fetch(
                "SELECT COUNT(*) FROM msgs WHERE subject = ? AND seq >= ?", (filt, from_seq)
            )
        else:
            subjects, last = self._subjects_for(filt)
            if not subjects:
                return 0
            if len(subjects) <= SMALL_FANOUT:
                rows = await self._fetch(
                    f"SELECT COUNT(*) FROM msgs WHERE {IN_SUBJECTS} AND seq >= ? AND seq <= ?",
                    (json.dumps(subjects), from_seq, last),
                )
            else:
                rows = await self._fetch(
                    "SELECT COUNT(*) FROM msgs WHERE seq >= ? AND lj_match(?, subject)", (from_seq, filt)
                )
        return int(rows[0][0])

    async def meta_get(self, key: str) -> bytes | None:
        rows = await self._point_fetch("SELECT value FROM meta WHERE key = ?", (key,))
        return self._codec.open_meta(key, rows[0][0]) if rows else None

    async def meta_items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        if prefix:
            upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if ord(prefix[-1]) < 0x10FFFF else None
            if upper is not None:
                rows = await self._fetch(
                    "SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key", (prefix, upper)
                )
            else:
                rows = await self._fetch("SELECT key, value FROM meta WHERE key >= ? ORDER BY key", (prefix,))
        else:
            rows = await self._fetch("SELECT key, value FROM meta ORDER BY key")
        return [(k, self._codec.open_meta(k, v)) for k, v in rows if k.startswith(prefix)]

    async def source_positions(self) -> dict[str, int]:
        return decode_source_positions(await self.meta_items(SOURCE_POS_PREFIX))

    # ------------------------------------------------------------------------ snapshot/restore

    async def snapshot(
        self, keep_meta: Callable[[str], bool] | None = None, *, check: bool = False
    ) -> AsyncIterator[bytes]:
        """A consistent copy, read in one read transaction on a connection of its own (writes go on).
        Use it to the end, or close it: ``async with contextlib.aclosing(store.snapshot()) as it``.
        Its connection's files are beyond the cap on open stores while it runs. ``check``:
        ``PRAGMA quick_check`` in that transaction first (it reads the whole file)."""
        self._check_open()

        def connect() -> sqlite3.Connection:
            c = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            try:
                c.execute("PRAGMA query_only = ON")
                c.execute("BEGIN")
                if check:
                    schema.quick_check(c, self._path)
            except BaseException:
                c.close()
                raise
            return c

        try:
            conn: sqlite3.Connection = await self._offload(connect)
        except sqlite3.Error as e:
            raise StoreError(f"{self._path}: cannot copy the store: {e}") from e
        self._aux.add(conn)

        async def q(sql: str, params: Sequence[Any] = ()) -> list[Any]:
            return list(await self._offload(lambda: conn.execute(sql, params).fetchall()))

        try:
            (first_seq, last_seq, last_ts, msgs, _), *_rest = await q(schema.SELECT_STATE)
            metas = [
                kv
                for kv in await q("SELECT key, value FROM meta ORDER BY key")
                if keep_meta is None or keep_meta(kv[0])
            ]
            header = SnapshotHeader(first_seq if msgs else last_seq + 1, last_seq, last_ts, msgs, len(metas))
            enc = SnapshotEncoder(header)

            def copy_after(after: int) -> tuple[int, list[bytes]] | None:
                """The next 1,000 messages after ``after`` read, decoded and encoded (in the
                pool: a message's Python work stays off the event loop); None at the end."""
                rows = conn.execute(
                    f"SELECT {COLS} FROM msgs WHERE seq > ? ORDER BY seq LIMIT 1000", (after,)
                )
                got = rows.fetchall()
                if not got:
                    return None
                encoded = [c for m in self._decode_sync(got) if (c := enc.msg(m)) is not None]
                return got[-1][0], encoded

            after = 0
            while (step := await self._offload(functools.partial(copy_after, after))) is not None:
                after, encoded = step
                for chunk in encoded:
                    yield chunk
            for k, v in metas:
                if (chunk := enc.meta(k, self._codec.open_meta(k, v))) is not None:
                    yield chunk
            yield enc.finish()
            await q("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"{self._path}: cannot copy the store: {e}") from e
        finally:
            if conn in self._aux:
                self._aux.discard(conn)
                with anyio.CancelScope(shield=True):
                    await self._offload(conn.close)

    async def restore(
        self, chunks: AsyncIterator[bytes] | Iterable[bytes], *, batch_bytes: int | None = None
    ) -> None:
        """Load a snapshot into this fresh store: all-or-nothing (one transaction), or in batches
        (``snapshot.restore_into``)."""
        await restore_into(self, chunks, batch_bytes=batch_bytes)

    # ---------------------------------------------------------------------------------- close

    async def close(self, timeout: float | None = None) -> None:
        """Stop taking calls, let queued writes finish (within ``timeout``, default ``close_timeout``),
        make them durable, and close the connections. Idempotent."""
        timeout = self._close_timeout if timeout is None else timeout
        self._closed = True
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(timeout) as scope:
                for conn in list(self._aux):
                    self._aux.discard(conn)
                    await self._offload(conn.close)
                # The drain job closes the reader, then the writer, so the writer's close
                # checkpoints the WAL and removes it.
                self._put_stop()
                if self._exited is not None:
                    await asyncio.shield(self._exited)
            if scope.cancelled_caught:
                writer = self._conn
                if writer is not None:
                    writer.interrupt()  # thread-safe; aborts the statement the writer is stuck in
                raise StoreError(f"{self._path}: close timed out after {timeout}s with writes still pending")

    # ================================================================================ pool jobs

    def _w_drain(self) -> None:
        """Pool job: run one batch of what is queued -- the store's writer for that batch -- then
        give the thread back, scheduling itself again (behind other stores' jobs) if more is
        queued. ``_scheduled`` keeps at most one drain job per store queued or running, so one
        batch runs at a time and calls commit in the order they were queued."""
        with self._qlock:
            batch = self._w_take()
            if not batch:
                self._scheduled = False
                return
        self._w_batch = batch
        try:
            with self._wlock:
                how = self._w_prepare(batch)
                if how == "parked":
                    return
                more = how == "failed" or (how == "run" and self._w_batch_run(batch))
        except BaseException as e:  # a bug, or a connection that cannot be recovered
            fatal = self._fatal = self._writer_failed(e)
            self._resolve([(r, None, _fresh(fatal)) for r in self._w_batch])
            more = False
        if self._opened:
            # Only now: the first call after open() may commit inline, which needs the lock.
            self._opened = False
            self._post([(self._ready, True, None)], 0)
        if not more:
            self._w_shutdown()
            return
        with self._qlock:
            if self._q:
                POOL.submit(self._w_drain)
                return
            self._scheduled = False
        SLOTS.idle()

    def _w_take(self) -> list[_Req]:
        """With ``_qlock`` held: the next batch (at least one call, up to MAX_BATCH_OPS operations)."""
        q = self._q
        batch: list[_Req] = []
        nops = 0
        while q and nops < MAX_BATCH_OPS:
            r = q.popleft()
            batch.append(r)
            nops += r.weight
        return batch

    def _w_prepare(self, batch: list[_Req]) -> str:
        """With ``_wlock`` held: open the connections the batch needs. "run"; "parked" (no slot
        yet: the batch is back at the head of the queue and the job will be retried); "failed"
        (the calls got the error, the store goes on); "exit" (the first open failed, or a close
        is in the batch: the store stops)."""
        if self._conn is not None or batch[0].kind == _STOP:
            return "run"
        if not self._loaded and any(r.kind == _STOP for r in batch):  # an open given up on
            return self._w_refuse(batch, StoreClosed(f"{self._path}: store is closed"))
        try:
            if self._w_ensure_open():
                self._park_deadline = None
                return "run"
        except BaseException as e:
            err = e if isinstance(e, StoreError) else StoreError(f"{self._path}: cannot open: {e!r}")
            if err is not e:
                err.__cause__ = e
            return self._w_refuse(batch, err)
        now = time.monotonic()
        if self._park_deadline is None:
            # an open gives up before its caller's deadline, so the caller hears why
            wait = self._enqueue_timeout if self._loaded else 0.8 * self._open_timeout
            self._park_deadline = now + wait
        if now >= self._park_deadline:
            self._park_deadline = None
            return self._w_refuse(batch, self._no_slot_error())
        with self._qlock:
            self._q.extendleft(reversed(batch))
        SLOTS.park(self._w_drain)
        return "parked"

    def _w_refuse(self, batch: list[_Req], err: StoreError) -> str:
        """The connections could not be opened: the batch's calls fail with ``err``."""
        if not self._loaded or batch[0].kind == _OPEN_REQ:  # the first open: nothing to keep
            self._post([(self._ready, None, err)], 0)
            self._resolve([(r, None, _fresh(err)) for r in batch])
            return "exit"
        self._resolve([(r, None, _fresh(err)) for r in batch if r.kind != _STOP])
        return "exit" if any(r.kind == _STOP for r in batch) else "failed"

    def _no_slot_error(self) -> StoreError:
        return StoreError(
            f"{self._path}: cannot open the stream database: {SLOTS.cap} stores are open "
            "(jetstream.max_open_stores) and none went idle in time"
        )

    def _w_ensure_open(self) -> bool:
        """With ``_wlock`` held: the connections are open -- opened now if the store was closed
        for idleness (or not opened yet), taking a slot; False if no slot is free. On failure
        everything opened is closed again and the slot released."""
        if self._conn is not None:
            return True
        if self._shut:
            raise StoreClosed(f"{self._path}: store is closed")
        if not SLOTS.acquire(self):
            return False
        try:
            with self._rlock:
                if self._loaded:
                    self._conn = self._w_connect()
                else:
                    self._w_open()
                self._rconn = self._connect_reader()
            self._loaded = True
        except BaseException as e:
            self._w_close_conns()
            if isinstance(e, (sqlite3.Error, OSError)):
                raise StoreError(f"{self._path}: cannot open the stream database: {e}") from e
            raise
        return True

    def _ensure_conns(self) -> bool:
        """Pool, no lock held: as ``_w_ensure_open``, for a reader."""
        if self._rconn is not None:
            return True
        with self._wlock:
            return self._w_ensure_open()

    def _w_close_conns(self) -> None:
        """Close the reading connection, then the writing one (the last close checkpoints the WAL
        and removes it); free the slot."""
        with self._wlock:
            with self._rlock:
                r, self._rconn = self._rconn, None
                if r is not None:
                    with contextlib.suppress(sqlite3.Error):
                        r.close()
            self._w_close_conn()
        SLOTS.forget(self)

    def _try_evict(self) -> bool:
        """Close the connections if the store is idle (nothing queued or running, no read, no
        snapshot), without waiting for its locks; True if it was closed. Called by the slots on
        another store's job; the store reopens on its next use."""
        if self._scheduled or self._inflight or self._reads or self._aux:
            return False
        if not self._wlock.acquire(blocking=False):
            return False
        try:
            if not self._rlock.acquire(blocking=False):
                return False
            try:
                if self._scheduled or self._inflight or self._reads or self._aux or self._conn is None:
                    return False
                r, self._rconn = self._rconn, None
                if r is not None:
                    with contextlib.suppress(sqlite3.Error):
                        r.close()
                self._w_close_conn()  # syncs the WAL first in interval mode
                with self._bg_cond:  # the close checkpointed: no housekeeping is due
                    self._dirty_sync = self._dirty_ckpt = False
            finally:
                self._rlock.release()
        finally:
            self._wlock.release()
        SLOTS.drop(self)
        return True

    def _w_shutdown(self) -> None:
        """After a close (or a fatal error): close the connections, fail what is still queued."""
        with self._wlock:
            self._shut = True
        self._w_close_conns()
        self._w_drop_tail()
        self._w_exit()

    def _writer_failed(self, e: BaseException) -> StoreError:
        """The store's fatal error after the writing connection failed beyond recovery."""
        fatal = StoreError(f"{self._path}: store writer failed: {e!r}")
        fatal.__cause__ = e
        return fatal

    def _w_exit(self) -> None:
        with self._qlock:
            self._dead = True
            left = list(self._q)
            self._q.clear()
        err = self._fatal or StoreClosed(f"{self._path}: store is closed")
        self._resolve([(r, None, _fresh(err)) for r in left])
        with _OPEN_LOCK:
            _OPEN.discard(self._key)
        self._post([(self._exited, None, None)], 0)

    def _w_close_conn(self) -> None:
        with self._wlock:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if self._sync == "interval":
                self._sync_wal()
        except (sqlite3.Error, OSError) as e:
            self._stats.last_error = repr(e)
        finally:
            conn.close()

    # -- open

    def _w_connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path, isolation_level=None, check_same_thread=False, cached_statements=64
        )
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self._path}: cannot switch the database to WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self._sync == 'always' else 'NORMAL'}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA cache_size = -8192")
            conn.execute("PRAGMA temp_store = MEMORY")
            if self._max_file_bytes is not None:
                self._w_set_limit(conn, self._max_file_bytes)
        except BaseException:
            conn.close()
            raise
        return conn

    def _w_open(self) -> None:
        path = self._path
        try:
            new = not path.exists()
            check = False
            if new:
                self._w_create()
            else:
                schema.check_header(path)
                # a file just built and fsynced here is whole; a large one closed cleanly (no WAL
                # left: the last close removes it) is not read whole at every start
                check = self._quick_check and (
                    self._wal.exists() or path.stat().st_size <= QUICK_CHECK_ALWAYS_BYTES
                )
            self._conn = conn = self._w_connect()
            schema.check_version(conn, path)
            if check:
                schema.quick_check(conn, path)
            self._w_setup_cipher(conn)
            self._w_load()
            self._w_blocks_open(conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(
                f"{path}: cannot open the stream database (corrupt, not a database, or unreadable): {e}"
            ) from e
        except OSError as e:
            raise StoreError(f"{path}: cannot open the stream database: {e}") from e

    def _w_create(self) -> None:
        """Create the file atomically (spare.py: a spare built ahead, moved into place, or one
        built here), so an existing file is always a finished store -- and an empty or short one
        is corruption, never "new"."""
        spare, sync = self._spare, self._sync_new_folder
        if spare is None or not spare.take(self._path, self._page_size, self._spec, sync_folder=sync):
            build_store_file(self._path, self._page_size, self._spec, sync_folder=sync)

    def _w_setup_cipher(self, conn: sqlite3.Connection) -> None:
        info = dict(conn.execute("SELECT key, value FROM info").fetchall())
        algorithm = bytes(info.get("cipher", b"none")).decode("ascii", "replace")
        if algorithm == "none":
            if self._spec is not None:
                raise StoreKeyError(
                    f"{self._path}: stream was created without encryption; refusing to open it with a key"
                )
            return
        if self._spec is None:
            raise StoreKeyError(
                f"{self._path}: stream data is encrypted ({algorithm}) and no encryption key is configured"
            )
        if algorithm != self._spec.algorithm:
            raise StoreKeyError(
                f"{self._path}: stream data is encrypted with {algorithm}, "
                f"the configuration says {self._spec.algorithm}"
            )
        try:
            params = KdfParams.decode(bytes(info["kdf"]), bytes(info["salt"]))
            check = bytes(info["keycheck"])
        except KeyError as e:
            raise StoreError(f"{self._path}: encryption parameters missing ({e})") from None
        cipher = self._spec.derive(params, algorithm)
        if not key_matches(cipher, check):
            raise StoreKeyError(f"{self._path}: encryption key does not match the stream's data")
        self._codec = RowCodec(compression="zstd" if self._codec.compress else "none", cipher=cipher)

    def _w_load(self) -> None:
        """Load the counters (state row) and per-subject counts (an index-only scan); heal the counters
        if they disagree with the rows (they are written in the same transactions, so they should not)."""
        conn = self._conn
        assert conn is not None
        first_seq, last_seq, last_ts, msgs, nbytes = conn.execute(schema.SELECT_STATE).fetchone()
        counts = dict(conn.execute("SELECT subject, COUNT(*) FROM msgs GROUP BY subject").fetchall())
        heal = False
        if sum(counts.values()) != msgs:
            msgs, nbytes = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM msgs").fetchone()
            heal = True
        top = conn.execute("SELECT MAX(seq) FROM msgs").fetchone()[0]
        if top is not None and top > last_seq:
            last_seq, heal = top, True
        row = conn.execute("SELECT seq, ts FROM msgs ORDER BY seq LIMIT 1").fetchone()
        first_seq, first_ts = (row[0], row[1]) if row else (last_seq + 1, 0)
        w = _Counters(first_seq, first_ts, last_seq, last_ts, msgs, nbytes)
        with self._lock:
            self._subj = counts
            self._pub = w.copy()
            self._subj_ver += 1
            self._last.clear()
            self._last_bytes = 0
            self._last_ver += 1
        self._w = w
        if heal:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(schema.UPDATE_STATE, (w.first_seq, w.last_seq, w.last_ts, w.msgs, w.nbytes))
            conn.execute("COMMIT")

    # -- the queue

    def _w_batch_run(self, batch: list[_Req]) -> bool:
        """Run a batch taken from the queue (``_wlock`` held); False after a stop."""
        applies: list[_Req] = []
        for i, r in enumerate(batch):
            if r.kind == _APPLY:
                applies.append(r)
                continue
            if applies:
                self._w_commit(applies)
                applies = []
            if r.kind == _STOP:
                self._resolve([(x, None, StoreClosed("store is closed")) for x in batch[i:]])
                return False
            if r.kind == _OPEN_REQ:
                self._opened = True  # the drain job says so once it let go of the writer lock
                continue
            self._w_control(r)
        if applies:
            self._w_commit(applies)
        return True

    def _w_control(self, r: _Req) -> None:
        try:
            value: Any = None
            if r.kind == _FLUSH:
                if self._sync == "interval":
                    self._sync_wal()
            elif r.kind == _LIMIT:
                assert self._conn is not None
                self._max_file_bytes = r.arg
                value = self._w_set_limit(self._conn, r.arg)
            self._resolve([(r, value, None)])
        except (sqlite3.Error, OSError) as e:
            self._resolve([(r, None, StoreError(f"{self._path}: {e}"))])

    @staticmethod
    def _w_set_limit(conn: sqlite3.Connection, limit: int | None) -> int:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = 4294967294 if limit is None else max(1, limit // page)
        got = conn.execute(f"PRAGMA max_page_count = {int(pages)}").fetchone()[0]
        return int(got) * int(page)

    # -- housekeeping: WAL fsync (interval mode) and checkpoints, as pool jobs on a timer

    def _bg_due(self, now: float) -> None:
        """After a commit: start the clocks of the work the commit makes due (a dirty mark always
        has a timer armed)."""
        if self._dirty_ckpt and (self._dirty_sync or self._sync != "interval"):
            return  # both clocks already run: the common case takes no lock
        with self._bg_cond:
            if not self._dirty_ckpt:
                self._dirty_ckpt, self._next_ckpt = True, now + self._ckpt_interval
            if self._sync == "interval" and not self._dirty_sync:
                self._dirty_sync, self._next_sync = True, now + self._sync_interval
            if not self._hk_armed:
                self._hk_armed = True
                POOL.call_at(self._hk_next(), self._hk_job)

    def _hk_next(self) -> float:
        marks = ((self._next_sync, self._dirty_sync), (self._next_ckpt, self._dirty_ckpt))
        return min(t for t, on in marks if on)

    def _hk_job(self) -> None:
        """Pool, on its timer: fsync the WAL (interval mode) and checkpoint, when due.

        WAL lets a PASSIVE checkpoint run beside the writer's transactions, so commits go on
        while pages are copied and the database file is fsynced."""
        now = time.monotonic()
        with self._bg_cond:
            sync = self._dirty_sync and now >= self._next_sync
            ckpt = self._dirty_ckpt and now >= self._next_ckpt
            if sync:
                self._dirty_sync = False
            if ckpt:
                self._dirty_ckpt = False
            if self._dirty_sync or self._dirty_ckpt:
                POOL.call_at(self._hk_next(), self._hk_job)
            else:
                self._hk_armed = False
        if self._dead:
            return
        if sync:
            try:
                self._sync_wal()
            except OSError as e:
                self._stats.last_error = repr(e)
        if ckpt:
            self._checkpoint()

    def _sync_wal(self) -> None:
        """Fsync the WAL file (interval mode: on the timer, on flush and on close)."""
        try:
            fd = os.open(self._wal, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if not self._dir_synced:
            fsync_dir(self._path.parent)
            self._dir_synced = True
        self._stats.syncs += 1

    def _checkpoint(self) -> None:
        """A PASSIVE checkpoint on the reading connection; a TRUNCATE one (holding the writer
        lock, so inline commits never wait for it on the loop) if the WAL is past the brake and
        the writer is idle. A store closed for idleness has nothing to do: its close
        checkpointed.

        Only while the writer is idle: under a writer at work the TRUNCATE waited for the lock
        and then held it while it copied what the writer had added since the PASSIVE one and
        synced the database, and a catch-up's commits stalled behind it every second (a hub
        sourcing a nats-server leaf: 93-94k msgs/s against 98-107k without, in three
        alternating pairs). A busy writer needs no truncation: a PASSIVE checkpoint that
        finishes lets its next transaction start the WAL over, so the file stops growing; its
        commit arms the next try, and the one after its last commit truncates.

        Not while the last write failed for want of room: a checkpoint cannot finish then (the
        database file must take the WAL's pages while the WAL still holds them), and the part it
        copies grows the database file into whatever room was freed, so the next write found
        none and the stream stayed refused after the disk had room again. The next successful
        write lets checkpoints run again."""
        if self._disk_full:
            return
        try:
            with self._rlock:
                conn = self._rconn
                if conn is None:
                    return
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self._stats.checkpoints += 1
            if not (self._wal.exists() and self._wal.stat().st_size > self._wal_brake):
                return
            if not self._wlock.acquire(blocking=False):
                return  # the writer is at work: its commit arms the next try
            try:
                with self._rlock:
                    conn = self._rconn
                    if conn is None:
                        return
                    conn.execute("PRAGMA busy_timeout = 200")
                    try:
                        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                    finally:
                        conn.execute(f"PRAGMA busy_timeout = {POINT_READ_BUSY_MS}")
            finally:
                self._wlock.release()
            self._stats.wal_truncations += 1
        except (sqlite3.Error, OSError) as e:
            self._stats.last_error = repr(e)

    # -- column blocks (colblocks.py; DESIGN.md "Column blocks"): derived data, built off the
    #    publish path by a pool job of their own, each in a transaction of its own

    def _w_blocks_open(self, conn: sqlite3.Connection) -> None:
        """At the first open (``_wlock`` held): the table (a file made before it gets it), and
        where building goes on. An encrypted store keeps none: a block would hold its messages
        in plain text."""
        if self._spec is not None:
            self._blk_rows = 0
        rows = self._blk_rows
        if not rows:
            self._w_blocks_drop(conn)
            return
        try:
            schema.ensure_colblocks(conn)
            top, low = conn.execute(
                "SELECT max(hi), min(lo) FROM colblocks WHERE hi = lo + ?", (rows - 1,)
            ).fetchone()
        except sqlite3.Error as e:  # an old file on a full disk: the store works without blocks
            self._stats.last_error = repr(e)
            self._blk_rows = 0
            return
        with self._blk_lock:
            self._blk_top = top or 0
            self._blk_low = low or 0
            self._blk_next = top // rows if top else colblocks.block_of(self._w.first_seq, rows)
        self._blk_kick()

    def _w_blocks_drop(self, conn: sqlite3.Connection) -> None:
        """A store opened without column blocks drops those built while it had them: nothing
        would keep them in line with the messages (an erased message's copy in its block must
        go with it), and they are derived data. A write only when there are some."""
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'colblocks'")
            if found.fetchone() is not None and conn.execute("SELECT 1 FROM colblocks LIMIT 1").fetchone():
                conn.execute("DELETE FROM colblocks")
        except sqlite3.Error as e:  # a full disk: reads never use them; the next open tries again
            self._stats.last_error = repr(e)
            self._blk_leftover = True  # an erase still removes its message's block

    def _blk_kick(self) -> None:
        """After a commit or an open (any thread): queue the block job when there is work for it
        -- a block sealed and not built, one found stale, or the oldest one below the first
        sequence. A few attribute reads when there is none (every commit calls this)."""
        rows = self._blk_rows
        if not rows or self._blk_job_on or self._dead or self._max_file_bytes is not None:
            return  # a store under a file-size cap spends none of it on derived data
        p = self._pub
        if not (
            (p.last_seq >= (self._blk_next + 1) * rows and not _large(p))
            or self._blk_stale
            or (self._blk_low and p.first_seq > self._blk_low + rows - 1)
        ):
            return
        with self._blk_lock:
            if self._blk_job_on:
                return
            self._blk_job_on = True
        POOL.submit(self._blk_job)

    def _blk_job(self) -> None:
        """Pool: build (or rebuild) up to ``BLOCKS_PER_JOB`` blocks and drop those wholly below
        the first sequence; then again, behind the pool's other jobs, while more are due. A
        store under heavy ingest thus keeps building (a block costs ~1 us a row, far less than
        storing the row) without holding a worker for long. An error outside a block's build
        (a bug) is recorded and ends the job, so the next commit's kick can queue one again
        (escaping, it would leave ``_blk_job_on`` set: no block built until a reopen)."""
        try:
            self._blk_job_run()
        except Exception as e:
            self._stats.last_error = repr(e)
            with self._blk_lock:
                self._blk_job_on = False

    def _blk_job_run(self) -> None:
        more = failed = False
        for _ in range(colblocks.BLOCKS_PER_JOB):
            due = self._blk_due()
            if due is None:
                break
            try:
                built = self._blk_build(*due)
            except Exception as e:  # a damaged range, a bug: that block is left out, reads go on
                self._stats.last_error = repr(e)
                with self._blk_lock:
                    self._blk_next = max(self._blk_next, due[0] + 1)
                built = False
            if not built:
                failed = True  # closed, or failed: stop until the next commit's kick
                break
        else:
            more = True
        if not failed and not self._blk_gc():
            failed = True
        with self._blk_lock:
            again = more and not failed and not self._dead
            self._blk_job_on = again
        if again:
            POOL.submit(self._blk_job)
        elif not failed:
            self._blk_kick()  # a commit while the job ran found it on and did not queue one

    def _blk_due(self) -> tuple[int, bool] | None:
        """The next block to build and whether it is a rebuild (a stale one first), else the next
        sealed one; None when none is."""
        rows = self._blk_rows
        with self._lock:
            p = self._pub
        with self._blk_lock:
            while self._blk_stale:
                k = self._blk_stale.pop()
                if colblocks.bounds(k, rows)[1] <= p.last_seq:  # only ever a sealed range
                    return k, True
            k = self._blk_next = max(self._blk_next, colblocks.block_of(p.first_seq, rows))
        return (k, False) if colblocks.bounds(k, rows)[1] <= p.last_seq and not _large(p) else None

    def _blk_columns(self, conn: sqlite3.Connection, lo: int, hi: int) -> columns.MsgColumns:
        """The messages of ``[lo, hi]`` as columns, on the reading connection (``_rlock`` held):
        the aggregate, or row by row, decoded, when rows are compressed or sealed."""
        lengths = False
        while True:
            row = conn.execute(sqlite_columns.range_sql(True, lengths), (lo, hi)).fetchone()
            got = sqlite_columns.parse(row)
            if got == sqlite_columns.SPACED and not lengths:
                lengths = True
                continue
            if isinstance(got, columns.MsgColumns):
                return got
            break
        rows = conn.execute(f"SELECT {COLS} FROM msgs WHERE seq >= ? AND seq <= ? ORDER BY seq", (lo, hi))
        return columns.columns_of(self._decode_sync(rows.fetchall()))

    def _blk_build(self, k: int, rebuild: bool = False) -> bool:
        """Build block ``k`` (its range is sealed): read its rows on the reading connection,
        serialize them here, write the blob in a transaction of its own. False when the store's
        connections are closed or the write failed (the job stops until the next commit). Rows
        deleted between the read and the write leave a block whose count is above the rows in
        its range: reads refuse it (``_blk_parts``). A rebuild replaces the old blob with
        ``secure_delete`` on: it may hold an erased message (``DeleteOp(erase=True)`` drops the
        block, but a build that read the rows before the erase may have written it since)."""
        rows = self._blk_rows
        lo, hi = colblocks.bounds(k, rows)
        with self._rlock:
            conn = self._rconn
            if conn is None or self._shut:
                return False
            cols = self._blk_columns(conn, lo, hi)
        params: tuple[Any, ...]
        if len(cols):
            encoding, body = colblocks.pack(cols, self._codec.compress)
            sql, params = colblocks.INSERT, (lo, hi, len(cols), encoding, body)
        else:
            sql, params = "DELETE FROM colblocks WHERE lo = ?", (lo,)
        written = self._blk_write(sql, params, secure=rebuild)
        if written is None:
            return False
        with self._blk_lock:
            self._blk_next = max(self._blk_next, k + 1)  # a failed write leaves the block out
            if written and len(cols):
                self._blk_top = max(self._blk_top, hi)
                self._blk_low = min(self._blk_low, lo) if self._blk_low else lo
                self._blk_built += 1
        return written

    def _blk_gc(self) -> bool:
        """Drop the blocks wholly below the first sequence (a purge, limits, expiry); False when
        that failed."""
        rows = self._blk_rows
        with self._lock:
            first = self._pub.first_seq
        low = self._blk_low
        if not low or low + rows - 1 >= first:
            return True
        if not self._blk_write("DELETE FROM colblocks WHERE lo < ?", (first - rows + 1,)):
            return False
        with self._blk_lock:
            self._blk_low = max(self._blk_low, colblocks.bounds(colblocks.block_of(first, rows), rows)[0])
        return True

    def _blk_write(self, sql: str, params: tuple[Any, ...], secure: bool = False) -> bool | None:
        """One statement on the writing connection, in a transaction of its own (``_wlock``: the
        store's batches wait for it as for another batch). It does not fsync even with
        ``sync="always"``: blocks are derived data, and the next durable commit fsyncs the WAL
        with it. True when written; False when it failed (recorded, the block left out); None
        when the connection is closed, or the last write found the disk full (``_disk_full``:
        derived data must not take the room the stream's next write needs; that write's success
        kicks the job again)."""
        with self._wlock:
            conn = self._conn
            if conn is None or self._shut or self._dead or self._disk_full:
                return None
            full = self._sync == "always"
            try:
                if full:
                    conn.execute("PRAGMA synchronous = NORMAL")
                if secure:
                    conn.execute("PRAGMA secure_delete = ON")
                conn.execute("BEGIN IMMEDIATE")
                if not self._blk_swept:  # blocks of another size (an open with another block_rows)
                    conn.execute("DELETE FROM colblocks WHERE hi != lo + ?", (self._blk_rows - 1,))
                conn.execute(sql, params)
                conn.execute("COMMIT")
                self._blk_swept = True
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                self._stats.last_error = repr(e)
                return False
            finally:
                with contextlib.suppress(sqlite3.Error):
                    if full:
                        conn.execute("PRAGMA synchronous = FULL")
                    if secure:
                        conn.execute("PRAGMA secure_delete = OFF")
        self._bg_due(time.monotonic())
        return True

    # -- the batch

    def _w_commit(self, reqs: list[_Req]) -> None:
        self._resolve(self._w_transact(reqs))

    def _w_transact(self, reqs: list[_Req]) -> list[tuple[_Req, Any, BaseException | None]]:
        """Run the calls in one transaction; their outcomes (the caller resolves them). Whoever
        calls this holds ``_wlock``."""
        conn = self._conn
        assert conn is not None
        self._delta = {}
        self._rows = []
        self._first_dirty = False
        w = self._w
        after = w.last_seq
        self._w_appends_only = True  # until _w_run applies anything but an append
        self._w_direct = False  # until _w_insert_columns inserts rows that are not in _rows
        began = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            out, nops = self._w_run(reqs)
            appended = self._rows  # _w_flush_rows starts a new list; this one stays as it was
            self._w_flush_rows()
            if self._first_dirty:
                row = conn.execute("SELECT seq, ts FROM msgs ORDER BY seq LIMIT 1").fetchone()
                w.first_seq, w.first_ts = (row[0], row[1]) if row else (w.last_seq + 1, 0)
            if w.msgs == 0:
                w.first_seq, w.first_ts = w.last_seq + 1, 0
            conn.execute(schema.UPDATE_STATE, (w.first_seq, w.last_seq, w.last_ts, w.msgs, w.nbytes))
            conn.execute("COMMIT")
        except Exception as e:
            return self._w_fail(reqs, e)
        self._disk_full = False
        took = time.perf_counter() - began
        self._commit_cost += (took - self._commit_cost) * COMMIT_COST_WEIGHT
        self._w_publish(self._w_tail_rows(appended), after)
        s = self._stats
        s.commits += 1
        s.requests += len(reqs)
        s.ops += nops
        s.max_batch = max(s.max_batch, len(reqs))
        self._bg_due(time.monotonic())
        self._blk_kick()
        return out

    def _w_tail_rows(self, appended: list[tuple[Any, ...]]) -> list[tuple[Any, ...]] | None:
        """The committed transaction's rows if they may serve live reads (``_Tail``): it only
        appended, a few small plain rows (a store that compresses or seals its rows keeps them
        encoded in ``_rows``, and its reads decode row by row anyway)."""
        if not (self._w_appends_only and appended and self._codec.plain and len(appended) <= TAIL_MAX_ROWS):
            return None
        if self._w_direct:  # more rows than TAIL_MAX_ROWS, some of them not in ``appended``
            return None
        if sum(len(r[3]) for r in appended) > TAIL_MAX_BYTES:
            return None
        return appended

    def _w_new_tail(self, rows: list[tuple[Any, ...]] | None, after: int) -> _Tail | None:
        """With ``_lock`` held: the tail replacing the current one, if the process's budget
        holds it (the current one's bytes are released either way)."""
        old = self._tail.nbytes if self._tail is not None else 0
        nbytes = sum(len(r[3]) + len(r[2] or b"") for r in rows) if rows else 0
        if not TAILS.swap(old, nbytes) or not rows:
            return None
        return _Tail(self._pub, after, rows, nbytes)

    def _w_drop_tail(self) -> None:
        with self._lock:
            if self._tail is not None:
                TAILS.swap(self._tail.nbytes, 0)
                self._tail = None

    def _w_publish(self, tail_rows: list[tuple[Any, ...]] | None = None, after: int = 0) -> None:
        changed = False
        with self._lock:
            subj, last = self._subj, self._last
            if self._delta:
                self._last_ver += 1
            for s, d in self._delta.items():
                if last:  # a subject with messages added or removed (d may be 0: one of each)
                    gone = last.pop(s, None)
                    if gone is not None:
                        self._last_bytes -= gone[1]
                if not d:
                    continue
                n = subj.get(s, 0) + d
                if n > 0:
                    if s not in subj:
                        changed = True
                    subj[s] = n
                else:
                    subj.pop(s, None)
                    changed = True
            if changed:
                self._subj_ver += 1
            self._pub = self._w.copy()
            self._tail = self._w_new_tail(tail_rows, after)
        self._delta = {}

    def _w_fail(self, reqs: list[_Req], e: Exception) -> list[tuple[_Req, Any, BaseException | None]]:
        """The batch's transaction failed: roll back, forget its effects; every call of it fails."""
        conn = self._conn
        assert conn is not None
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        self._w = self._pub.copy()
        self._delta, self._rows = {}, []
        self._stats.failed_commits += 1
        self._stats.last_error = repr(e)
        if isinstance(e, sqlite3.Error) and getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            self._disk_full = True
            err: StoreError = StoreFull(
                f"{self._path}: disk or file size limit full; nothing of the batch was stored"
            )
        elif isinstance(e, StoreError):
            err = e
        else:
            err = StoreError(f"{self._path}: write failed; nothing of the batch was stored: {e}")
        err.__cause__ = e
        self._w_recover()
        return [(r, None, _fresh(err)) for r in reqs]

    def _w_recover(self) -> None:
        """After a failed batch, make sure the connection is usable and the counters match the file (a
        COMMIT that reported failure may, in rare I/O error cases, have reached the disk)."""
        conn = self._conn
        try:
            if conn is None or conn.in_transaction:
                raise sqlite3.OperationalError("transaction still open after rollback")
            row = conn.execute(schema.SELECT_STATE).fetchone()
        except sqlite3.Error:
            self._w_close_conn()
            self._conn = self._w_connect()
            self._w_load()
            return
        p = self._pub
        if (row[1], row[3], row[4]) != (p.last_seq, p.msgs, p.nbytes):
            self._w_load()

    def _w_flush_rows(self) -> None:
        """Insert the pending rows: full chunks through one multi-row INSERT each (one statement step
        per chunk instead of one per row -- about 1.4x the rows/s of ``executemany``), the rest through
        ``executemany``. Both statements are prepared once and cached by the connection."""
        rows = self._rows
        if not rows:
            return
        conn = self._conn
        assert conn is not None
        n, k = len(rows), 0
        while n - k >= INSERT_CHUNK:
            conn.execute(_INSERT_CHUNK_SQL, list(chain.from_iterable(rows[k : k + INSERT_CHUNK])))
            k += INSERT_CHUNK
        if k < n:
            conn.executemany(schema.INSERT_MSG, rows[k:] if k else rows)
        self._rows = []

    def _w_run(self, reqs: list[_Req]) -> tuple[list[tuple[_Req, Any, BaseException | None]], int]:
        """Apply the batch's calls inside the open transaction; returns the futures' outcomes.

        Appends only collect rows (one ``executemany`` per run of appends); any other operation first
        flushes the pending rows so its queries see them. A call whose explicit sequences do not fit
        fails alone, before any of its operations is applied. The loop is written for the common case
        -- a call holding one plain Append -- with the counters in local variables."""
        out: list[tuple[_Req, Any, BaseException | None]] = []
        w = self._w
        delta = self._delta
        codec = self._codec
        plain = codec.plain
        rows = self._rows
        nops = 0
        last, last_ts, msgs, nbytes = w.last_seq, w.last_ts, w.msgs, w.nbytes
        for r in reqs:
            ops: tuple[Op | _Trims, ...] = r.ops
            nops += len(ops)
            if len(ops) == 1 and ops[0].__class__ is Append and ops[0].seq is None:
                simple = True
            else:
                w.last_seq = last
                try:
                    check_ops(r.ops, last)
                    check_positions(r.ops, self._w_position)
                except StoreError as e:
                    out.append((r, None, e))
                    continue
                simple = False
                ops = _group_trims(r.ops)
            res: list[Result] = []
            for op in ops:
                if op.__class__ is Append:
                    seq = op.seq
                    if seq is None:
                        seq = last + 1
                    subject, hdr, data, ts = op.subject, op.headers, op.data, op.ts
                    # file_msg_size, inline: this loop runs once per stored message
                    size = (len(subject) if subject.isascii() else len(subject.encode())) + len(data)
                    size += FILE_MSG_OVERHEAD + (len(hdr) + 4 if hdr else 0)
                    if plain:
                        rows.append((seq, subject, hdr, data, ts, size, 0))
                    else:
                        h, d, f = codec.encode(seq, hdr, data)
                        rows.append((seq, subject, h, d, ts, size, f))
                    delta[subject] = delta.get(subject, 0) + 1
                    if msgs == 0:
                        w.first_seq, w.first_ts = seq, ts
                    msgs += 1
                    nbytes += size
                    last, last_ts = seq, ts
                    res.append(seq)
                    if simple:
                        break
                elif op.__class__ is AppendBatch:
                    if msgs == 0:
                        w.first_seq, w.first_ts = last + 1, op.ts
                    last, n = self._w_append_batch(op, last), len(op)
                    rows = self._rows  # a large batch flushed the rows before it: a new list
                    msgs += n
                    nbytes += self._w_batch_bytes
                    last_ts = op.ts
                    res.append(last)
                elif op.__class__ is SourcePosOp:
                    # a meta row; no message touched: the transaction still only appended, and
                    # a source's live batch may serve its readers as the tail (invariant 13)
                    res.append(self._w_op(op))
                else:
                    self._w_appends_only = False
                    w.last_seq, w.last_ts, w.msgs, w.nbytes = last, last_ts, msgs, nbytes
                    self._w_flush_rows()
                    rows = self._rows
                    if isinstance(op, _Trims):
                        res.extend(self._w_trims(op))
                    else:
                        res.append(self._w_op(op))
                    last, last_ts, msgs, nbytes = w.last_seq, w.last_ts, w.msgs, w.nbytes
            out.append((r, res, None))
        w.last_seq, w.last_ts, w.msgs, w.nbytes = last, last_ts, msgs, nbytes
        return out, nops

    def _w_append_batch(self, op: AppendBatch, last: int) -> int:
        """Collect an ``AppendBatch``'s rows after ``last``; returns its last sequence (and leaves
        its stored bytes in ``_w_batch_bytes``). The rows are built by ``zip`` over the columns:
        no object or loop iteration in Python per message but the size's."""
        subjects, headers, data, ts = op.subjects, op.headers, op.data, op.ts
        # file_msg_size of each message
        sizes = [
            (len(s) if s.isascii() else len(s.encode()))
            + len(d)
            + (len(h) + _HDR_OVERHEAD if h else FILE_MSG_OVERHEAD)
            for s, h, d in zip(subjects, headers, data, strict=True)
        ]
        seqs = range(last + 1, last + 1 + len(sizes))
        if self._codec.plain:
            if len(sizes) > TAIL_MAX_ROWS:
                self._w_insert_columns(seqs, subjects, headers, data, ts, sizes)
            else:
                self._rows.extend(zip(seqs, subjects, headers, data, repeat(ts), sizes, repeat(0)))
        else:
            encode, rows = self._codec.encode, self._rows
            for seq, subject, hdr, body, size in zip(seqs, subjects, headers, data, sizes, strict=True):
                h, d, f = encode(seq, hdr, body)
                rows.append((seq, subject, h, d, ts, size, f))
        delta = self._delta
        for subject, k in Counter(subjects).items():
            delta[subject] = delta.get(subject, 0) + k
        self._w_batch_bytes = sum(sizes)
        return seqs[-1]

    def _w_insert_columns(
        self,
        seqs: Sequence[int],  # a range
        subjects: Sequence[str],
        headers: Sequence[bytes | None],
        data: Sequence[bytes],
        ts: int,
        sizes: list[int],
    ) -> None:
        """Insert a large batch's plain rows straight from its columns: each full chunk's
        parameters are a slice of ONE flat list laid out by a slice assignment per column, so
        there is no row tuple per message, nor a chain over them per chunk (in a catch-up of
        1 KiB messages the tuples, their flattening and the garbage collections they set off
        were about 0.25 us a row of the store thread's ~7). The rows pending before it go first,
        the rest of the batch (less than a chunk) joins ``_rows``. Such a transaction holds more
        than TAIL_MAX_ROWS rows, so it is never kept as the live tail (``_w_direct``): set here,
        not only when whole chunks are inserted, since from here on ``_rows`` holds only part of
        the transaction's rows (the flush below) whatever INSERT_CHUNK is."""
        self._w_direct = True
        self._w_flush_rows()
        conn = self._conn
        assert conn is not None
        n = len(seqs)
        full = n - n % INSERT_CHUNK
        if full:
            width = len(_ROW_COLUMNS)
            flat: list[Any] = [0] * (width * full)  # flags (the last column) stay 0: plain rows
            flat[0::width] = seqs[:full]
            flat[1::width] = subjects[:full]
            flat[2::width] = headers[:full]
            flat[3::width] = data[:full]
            flat[4::width] = [ts] * full
            flat[5::width] = sizes[:full]
            step = width * INSERT_CHUNK
            for k in range(0, width * full, step):
                conn.execute(_INSERT_CHUNK_SQL, flat[k : k + step])
        if full < n:
            rest = slice(full, n)
            self._rows.extend(
                zip(seqs[rest], subjects[rest], headers[rest], data[rest], repeat(ts), sizes[rest], repeat(0))
            )

    def _w_op(self, op: Op) -> Result:
        conn = self._conn
        assert conn is not None
        cls = op.__class__
        if cls is PurgeOp:
            return self._w_purge(op)  # type: ignore[arg-type]
        if cls is DeleteOp:
            return self._w_delete(op)  # type: ignore[arg-type]
        if cls is ExpireOp:
            return self._w_expire(op.up_to_ts)  # type: ignore[union-attr]
        if cls is SkipOp:
            return self._w_skip(op)  # type: ignore[arg-type]
        if cls is SetMetaOp:
            value = self._codec.seal_meta(op.key, op.value)  # type: ignore[union-attr]
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (op.key, value))  # type: ignore[union-attr]
            return None
        if cls is DelMetaOp:
            return conn.execute("DELETE FROM meta WHERE key = ?", (op.key,)).rowcount > 0  # type: ignore[union-attr]
        if cls is SourcePosOp:
            key = op.meta_key  # type: ignore[union-attr]
            value = self._codec.seal_meta(key, op.meta_value)  # type: ignore[union-attr]
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
            return None
        raise InvalidOperation(f"not a store operation: {op!r}")

    def _w_position(self, meta_key: str) -> int:
        """A source's stored position inside the open transaction (a call earlier in it may have
        written it): for a conditional ``SourcePosOp``."""
        conn = self._conn
        assert conn is not None
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (meta_key,)).fetchone()
        return int(self._codec.open_meta(meta_key, row[0])) if row else 0

    def _w_count(self, subject: str) -> int:
        return self._subj.get(subject, 0) + self._delta.get(subject, 0)

    def _w_subjects(self, filt: str) -> list[str]:
        """Subjects holding messages right now (committed + this batch) that match the filter."""
        if not has_wildcard(filt):
            return [filt] if self._w_count(filt) > 0 else []
        keys = set(self._subj).union(self._delta)
        return sorted(s for s in keys if self._w_count(s) > 0 and match(filt, s))

    def _w_remove_where(self, where: str, params: tuple[Any, ...]) -> int:
        conn = self._conn
        assert conn is not None
        groups = conn.execute(
            f"SELECT subject, COUNT(*), SUM(size) FROM msgs WHERE {where} GROUP BY subject", params
        ).fetchall()
        if not groups:
            return 0
        conn.execute(f"DELETE FROM msgs WHERE {where}", params)
        w, delta, n = self._w, self._delta, 0
        for subject, count, size in groups:
            delta[subject] = delta.get(subject, 0) - count
            n += count
            w.nbytes -= size
        w.msgs -= n
        self._first_dirty = True
        return n

    def _w_remove_returning(self, where: str, params: tuple[Any, ...]) -> int:
        """``_w_remove_where`` for a few rows: one DELETE that returns what it removed."""
        conn = self._conn
        assert conn is not None
        rows = conn.execute(f"DELETE FROM msgs WHERE {where} RETURNING seq, subject, size", params).fetchall()
        self._w_removed(rows)
        return len(rows)

    def _w_removed(self, rows: list[Any]) -> None:
        """Count out the ``(seq, subject, size)`` rows a DELETE returned."""
        w, delta = self._w, self._delta
        first = w.first_seq
        for seq, subject, size in rows:
            delta[subject] = delta.get(subject, 0) - 1
            w.nbytes -= size
            if seq == first:
                self._first_dirty = True
        w.msgs -= len(rows)

    def _w_trims(self, trims: _Trims) -> list[int]:
        """The results of the run of purges ``trims`` stands for: messages removed per subject."""
        keep = trims.keep
        over = [s for s in trims.subjects if self._w_count(s) > keep]
        if len(over) < 2 or any(self._w_count(s) > 2 * TRIM_KEEP_MAX for s in over):
            return [self._w_purge(PurgeOp(subject=s, keep=keep)) for s in trims.subjects]
        assert self._conn is not None
        rows = self._conn.execute(TRIM_SQL, (json.dumps(over), keep)).fetchall()
        self._w_removed(rows)
        removed: dict[str, int] = {}
        for _seq, subject, _size in rows:
            removed[subject] = removed.get(subject, 0) + 1
        return [removed.get(s, 0) for s in trims.subjects]

    def _w_remove_all(self) -> int:
        w = self._w
        n = w.msgs
        if n == 0:
            return 0
        assert self._conn is not None
        self._conn.execute("DELETE FROM msgs")
        for s in set(self._subj).union(self._delta):
            self._delta[s] = -self._subj.get(s, 0)
        w.msgs = w.nbytes = 0
        self._first_dirty = True
        return n

    def _w_purge(self, op: PurgeOp) -> int:
        conn = self._conn
        assert conn is not None
        w = self._w
        filt = normalize_filter(op.subject)
        if filt is None:
            if op.keep is not None:
                if op.keep >= w.msgs:
                    return 0
                return self._w_keep_newest("", (), w.msgs, op.keep)
            if op.up_to_seq is not None:
                up = op.up_to_seq
                n = self._w_remove_all() if up > w.last_seq else self._w_remove_where("seq < ?", (up,))
                if up > w.last_seq + 1:
                    w.last_seq = up - 1  # compacting past the end: the next message gets ``up``
                    self._first_dirty = True
                return n
            return self._w_remove_all()
        subjects = self._w_subjects(filt)
        if not subjects:
            return 0
        # One subject (a KV put's history limit, a rollup): a plain index lookup, not json_each.
        where, arg = (
            ("subject = ?", subjects[0]) if len(subjects) == 1 else (IN_SUBJECTS, json.dumps(subjects))
        )
        if op.keep is not None:
            total = sum(self._w_count(s) for s in subjects)
            if op.keep >= total:
                return 0
            return self._w_keep_newest(where, (arg,), total, op.keep)
        if op.up_to_seq is not None:
            return self._w_remove_where(f"{where} AND seq < ?", (arg, op.up_to_seq))
        return self._w_remove_where(where, (arg,))

    def _w_keep_newest(self, cond: str, params: tuple[Any, ...], total: int, keep: int) -> int:
        """Remove all but the newest ``keep`` of the ``total`` messages matching ``cond`` (a SQL
        condition, "" for every message; 0 < keep < total). A few go in one DELETE that returns
        them; many by finding the first kept one, then deleting below it."""
        where = f"WHERE {cond}" if cond else ""
        drop = total - keep
        if drop <= RETURNING_MAX:
            oldest = f"SELECT seq FROM msgs {where} ORDER BY seq LIMIT ?"
            return self._w_remove_returning(f"seq IN ({oldest})", (*params, drop))
        cutoff = self._w_first_kept(where, params, total, keep)
        return self._w_remove_where(f"{cond} AND seq < ?" if cond else "seq < ?", (*params, cutoff))

    def _w_first_kept(self, where: str, params: tuple[Any, ...], total: int, keep: int) -> int:
        """The oldest of the newest ``keep`` of ``total`` matching messages (0 < keep < total).

        The index is walked from whichever end is nearer: a stream at its max_msgs drops a few
        of many messages, and walking from the newest would step over all the kept ones."""
        assert self._conn is not None
        drop = total - keep
        if drop <= keep:
            sql = f"SELECT seq FROM msgs {where} ORDER BY seq LIMIT 1 OFFSET ?"
            return int(self._conn.execute(sql, (*params, drop)).fetchone()[0])
        sql = f"SELECT seq FROM msgs {where} ORDER BY seq DESC LIMIT 1 OFFSET ?"
        return int(self._conn.execute(sql, (*params, keep - 1)).fetchone()[0])

    def _w_delete(self, op: DeleteOp) -> bool:
        conn = self._conn
        assert conn is not None
        row = conn.execute("SELECT subject, size FROM msgs WHERE seq = ?", (op.seq,)).fetchone()
        if row is None:
            return False
        if op.erase:
            # Overwrite the payload in place, and have SQLite zero the freed cells and overflow pages.
            conn.execute("PRAGMA secure_delete = ON")
            try:
                conn.execute(
                    "UPDATE msgs SET data = zeroblob(length(data)), "
                    "hdr = CASE WHEN hdr IS NULL THEN NULL ELSE zeroblob(length(hdr)) END WHERE seq = ?",
                    (op.seq,),
                )
                conn.execute("DELETE FROM msgs WHERE seq = ?", (op.seq,))
                if self._blk_rows:  # its column block holds the payload too: zeroed with it
                    k = colblocks.block_of(op.seq, self._blk_rows)
                    lo, hi = colblocks.bounds(k, self._blk_rows)
                    conn.execute("DELETE FROM colblocks WHERE lo = ?", (lo,))
                    if k <= self._blk_next and hi <= self._w.last_seq:  # built, or being built
                        with self._blk_lock:  # from rows read before this: rebuilt, replacing it
                            self._blk_stale.add(k)
                elif self._blk_leftover:  # blocks off, and dropping those left failed
                    conn.execute("DELETE FROM colblocks WHERE lo <= ? AND hi >= ?", (op.seq, op.seq))
            finally:
                conn.execute("PRAGMA secure_delete = OFF")
        else:
            conn.execute("DELETE FROM msgs WHERE seq = ?", (op.seq,))
        w = self._w
        subject, size = row
        self._delta[subject] = self._delta.get(subject, 0) - 1
        w.msgs -= 1
        w.nbytes -= size
        if op.seq == w.first_seq:
            self._first_dirty = True
        return True

    def _w_expire(self, up_to_ts: int) -> int:
        if self._w.msgs == 0:
            return 0
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT seq FROM msgs WHERE ts >= ? ORDER BY seq LIMIT 1", (up_to_ts,)
        ).fetchone()
        if row is None:
            return self._w_remove_all()
        return self._w_remove_where("seq < ?", (row[0],))

    def _w_skip(self, op: SkipOp) -> bool:
        w = self._w
        if op.seq <= w.last_seq:
            return False
        w.last_seq = op.seq
        if op.ts is not None:
            w.last_ts = op.ts
        if w.msgs == 0:
            w.first_seq, w.first_ts = op.seq + 1, 0
        return True
