"""The stream store contract: stored messages, stream state, operations, and the StreamStore protocol.

Every mutation of a stream is an operation (a frozen dataclass) handed to ``StreamStore.apply``. The
operations are deterministic -- each carries its own timestamp and, where it matters, its sequence -- so a
replicated log can sit between deciding an operation and applying it, and a follower that replays the same
operations reaches the same state. Reads never mutate.

Sequence rules (the reference's): ``last_seq`` never moves back -- not after a purge, a delete or an
expiry, and not across a restart; an empty stream reports ``first_seq == last_seq + 1``.

Message size (``bytes`` in the state, what max_bytes limits) is counted the way the reference's
store of the same kind counts it (subject in UTF-8 bytes): the memory store
``len(subject) + len(headers) + len(data) + 16`` (``msg_size``); the file store, whose role the
SQLite store plays, its record length ``len(subject) + len(data) + 30``, plus ``len(headers) + 4``
with headers (``file_msg_size``). ``StreamStore.size_of`` says which a store uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeAlias, runtime_checkable

from core.errors import StoreError
from core.store.columns import MsgColumns
from core.subjects import is_valid_literal_subject, is_valid_subject

# The largest sequence a store holds (SQLite's INTEGER is an int64). A client may name any uint64
# sequence; beyond this one there is no message, and a stream cannot start there.
MAX_SEQ = (1 << 63) - 1
MSG_OVERHEAD = 16
FILE_MSG_OVERHEAD = 30
"""Bytes added per message on top of subject, headers and data (sequence and timestamp)."""

META_KEY_MAX = 1024


class InvalidOperation(StoreError, ValueError):
    """An operation or query argument is malformed (a caller bug or an unchecked API input)."""


class SequenceMismatch(StoreError):
    """An explicit sequence is not beyond the stream's last sequence; nothing of the call was applied."""

    def __init__(self, seq: int, last_seq: int) -> None:
        super().__init__(f"sequence {seq} is not beyond the last sequence {last_seq}")
        self.seq = seq
        self.last_seq = last_seq


class PositionMismatch(StoreError):
    """A conditional ``SourcePosOp`` found another position stored than the one it expects (a
    batch before it did not commit); nothing of the call was applied."""

    def __init__(self, key: str, expected: int, stored: int) -> None:
        super().__init__(f"source {key!r}: position {stored} stored, expected {expected}; batch not stored")
        self.key = key
        self.expected = expected
        self.stored = stored


class StoreFull(StoreError):
    """The disk (or the store's configured file size limit) is full; nothing of the batch was stored."""


class StoreClosed(StoreError):
    """The store was closed (or failed for good) and takes no more calls."""


def msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
    """The reference's memory-store message size: subject + headers + data + 16."""
    n = len(subject) if subject.isascii() else len(subject.encode())
    return n + (len(headers) if headers else 0) + len(data) + MSG_OVERHEAD


def file_msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
    """The reference's file-store message size, its record length: a 22-byte head (length,
    sequence, time, subject length), the subject, a 4-byte header length and the headers if any,
    the data, an 8-byte hash."""
    n = len(subject) if subject.isascii() else len(subject.encode())
    return n + len(data) + FILE_MSG_OVERHEAD + (len(headers) + 4 if headers else 0)


def _int(name: str, value: object, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise InvalidOperation(f"{name} must be an int >= {minimum}, got {value!r}")


# Subjects repeat; remember the recently validated ones so validation costs a set lookup.
_VALID_SUBJECTS: set[str] = set()
_VALID_SUBJECTS_MAX = 4096


def _check_literal_subject(subject: object) -> None:
    if subject in _VALID_SUBJECTS:
        return
    if type(subject) is not str or not is_valid_literal_subject(subject) or not _is_utf8(subject):
        raise InvalidOperation(f"invalid subject {subject!r}")
    if len(_VALID_SUBJECTS) >= _VALID_SUBJECTS_MAX:
        _VALID_SUBJECTS.clear()
    _VALID_SUBJECTS.add(subject)


def _is_utf8(subject: str) -> bool:
    """Whether a subject can be stored (and sized) as UTF-8: not one with surrogates, the bytes
    a parser kept from a subject that was no UTF-8."""
    if subject.isascii():
        return True
    try:
        subject.encode()
    except UnicodeEncodeError:
        return False
    return True


def normalize_filter(subject_filter: str | None) -> str | None:
    """``None`` and ``">"`` both mean every subject (returned as ``None``); anything else is validated."""
    if subject_filter is None or subject_filter == ">":
        return None
    if type(subject_filter) is not str or not is_valid_subject(subject_filter):
        raise InvalidOperation(f"invalid subject filter {subject_filter!r}")
    return subject_filter


# --------------------------------------------------------------------------------------------- data


class StoredMsg(NamedTuple):
    """One stored message. ``ts`` is wall-clock nanoseconds since the epoch.

    Immutable, like the operations; a NamedTuple rather than a frozen dataclass because reads
    make one per message delivered, and a frozen dataclass costs about 2.5x as much to build.
    """

    seq: int
    subject: str
    headers: bytes | None
    data: bytes
    ts: int


@dataclass(frozen=True, slots=True)
class StreamState:
    """A stream's counters, with the reference's semantics (see the module docstring).

    ``num_deleted`` counts the sequences between ``first_seq`` and ``last_seq`` that hold no message
    (interior deletes, skipped sequences, and deleted messages at the tail). ``deleted`` lists them when
    asked for. ``first_ts`` is 0 for an empty stream; ``last_ts`` survives purges. ``consumer_count`` is
    filled in by the stream layer; a store always reports 0.
    """

    msgs: int
    bytes: int
    first_seq: int
    first_ts: int
    last_seq: int
    last_ts: int
    num_subjects: int
    num_deleted: int
    deleted: tuple[int, ...] | None = None
    consumer_count: int = 0

    def __post_init__(self) -> None:
        if self.msgs == 0 and self.first_seq != self.last_seq + 1:
            raise InvalidOperation(f"empty stream must report first_seq = last_seq + 1: {self!r}")
        if self.msgs and not (1 <= self.first_seq <= self.last_seq):
            raise InvalidOperation(f"inconsistent stream state: {self!r}")


def make_state(
    *,
    msgs: int,
    nbytes: int,
    first_seq: int,
    first_ts: int,
    last_seq: int,
    last_ts: int,
    num_subjects: int,
    deleted: tuple[int, ...] | None = None,
) -> StreamState:
    """Build a StreamState from a store's counters, deriving the empty-stream and deleted-count rules."""
    if msgs == 0:
        first_seq, first_ts, num_deleted = last_seq + 1, 0, 0
    else:
        num_deleted = (last_seq - first_seq + 1) - msgs
    return StreamState(
        msgs=msgs,
        bytes=nbytes,
        first_seq=first_seq,
        first_ts=first_ts,
        last_seq=last_seq,
        last_ts=last_ts,
        num_subjects=num_subjects,
        num_deleted=num_deleted,
        deleted=deleted,
    )


# ---------------------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class Append:
    """Store one message. ``seq=None`` takes ``last_seq + 1``; an explicit ``seq`` (a mirror or a follower
    keeping the origin's numbering) must be beyond ``last_seq`` -- the gap becomes deleted sequences, or,
    on an empty stream, moves ``first_seq`` up. Result: the message's sequence."""

    subject: str
    headers: bytes | None
    data: bytes
    ts: int
    seq: int | None = None

    def __post_init__(self) -> None:
        _check_literal_subject(self.subject)
        if self.headers is not None and type(self.headers) is not bytes:
            raise InvalidOperation("headers must be bytes or None")
        if type(self.data) is not bytes:
            raise InvalidOperation("data must be bytes")
        if type(self.ts) is not int or self.ts < 0:
            raise InvalidOperation(f"ts must be an int >= 0, got {self.ts!r}")
        if self.seq is not None:
            _int("seq", self.seq, 1)


_STR, _BYTES, _BYTES_OR_NONE = frozenset({str}), frozenset({bytes}), frozenset({bytes, type(None)})


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """Store messages one after the other, each at ``last_seq + 1``, all with the timestamp
    ``ts``: what a run of ``Append`` ops would store, as columns instead of an op per message
    (a source's batch holds thousands, and an op each was most of the hub's work per message).
    At least one message; the columns have one entry each. Result: the last one's sequence."""

    subjects: Sequence[str]
    headers: Sequence[bytes | None]
    data: Sequence[bytes]
    ts: int

    def __post_init__(self) -> None:
        n = len(self.subjects)
        if n == 0 or len(self.headers) != n or len(self.data) != n:
            raise InvalidOperation(f"columns of {n}, {len(self.headers)} and {len(self.data)} messages")
        # each column's types as a set (map and set run in C: no Python step per message)
        if not set(map(type, self.subjects)) <= _STR:
            raise InvalidOperation("subjects must be str")
        for subject in set(self.subjects):  # a source's subjects repeat
            _check_literal_subject(subject)
        if not set(map(type, self.headers)) <= _BYTES_OR_NONE:
            raise InvalidOperation("headers must be bytes or None")
        if not set(map(type, self.data)) <= _BYTES:
            raise InvalidOperation("data must be bytes")
        if type(self.ts) is not int or self.ts < 0:
            raise InvalidOperation(f"ts must be an int >= 0, got {self.ts!r}")

    def __len__(self) -> int:
        return len(self.subjects)


@dataclass(frozen=True, slots=True)
class PurgeOp:
    """The reference's purge request. No fields: remove everything. ``subject`` restricts the purge to the
    messages matching a (wildcard) filter; ``keep`` leaves the newest N matching messages; ``up_to_seq``
    removes the matching messages with a sequence below it (exclusive). ``keep`` and ``up_to_seq`` cannot be
    combined (as in the reference). Without a filter, ``up_to_seq`` beyond ``last_seq + 1`` also moves
    ``last_seq`` up to ``up_to_seq - 1`` (the next message gets ``up_to_seq``). Result: messages removed."""

    subject: str | None = None
    keep: int | None = None
    up_to_seq: int | None = None

    def __post_init__(self) -> None:
        if self.subject is not None:
            normalize_filter(self.subject)
        if self.keep is not None:
            _int("keep", self.keep, 1)
        if self.up_to_seq is not None:
            _int("up_to_seq", self.up_to_seq, 1)
        if self.keep is not None and self.up_to_seq is not None:
            raise InvalidOperation("purge: keep and up_to_seq are mutually exclusive")


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Remove one message (anywhere in the stream). ``erase`` overwrites its payload before removal.
    ``last_seq`` does not move. Result: whether the message existed."""

    seq: int
    erase: bool = False

    def __post_init__(self) -> None:
        _int("seq", self.seq, 1)
        if type(self.erase) is not bool:
            raise InvalidOperation("erase must be a bool")


@dataclass(frozen=True, slots=True)
class ExpireOp:
    """Expire by age (max_age): remove messages with ``ts < up_to_ts``, walking from the oldest sequence and
    stopping at the first message that is not expired (the reference's rule; timestamps are assumed not
    to decrease along the sequence). Result: messages removed."""

    up_to_ts: int

    def __post_init__(self) -> None:
        _int("up_to_ts", self.up_to_ts, 0)


@dataclass(frozen=True, slots=True)
class SkipOp:
    """Advance ``last_seq`` to ``seq`` without storing a message (mirrors use it for gaps). ``ts`` (if given)
    becomes ``last_ts``. A ``seq`` at or below ``last_seq`` changes nothing. Result: whether it advanced."""

    seq: int
    ts: int | None = None

    def __post_init__(self) -> None:
        _int("seq", self.seq, 1)
        if self.ts is not None:
            _int("ts", self.ts, 0)


def _check_meta_key(key: object) -> None:
    if type(key) is not str or not key or len(key) > META_KEY_MAX:
        raise InvalidOperation(f"meta key must be a non-empty str of at most {META_KEY_MAX} chars")


@dataclass(frozen=True, slots=True)
class SetMetaOp:
    """Set a key in the stream's metadata side table (dedup ids, consumer state...), committed in the
    same transaction as the messages of the batch. Result: None."""

    key: str
    value: bytes

    def __post_init__(self) -> None:
        _check_meta_key(self.key)
        if type(self.value) is not bytes:
            raise InvalidOperation("meta value must be bytes")


@dataclass(frozen=True, slots=True)
class DelMetaOp:
    """Remove a metadata key. Result: whether it existed."""

    key: str

    def __post_init__(self) -> None:
        _check_meta_key(self.key)


SOURCE_POS_PREFIX = "srcpos/"
"""Where ``SourcePosOp`` keeps its positions in the metadata side table (no other key starts so)."""


@dataclass(frozen=True, slots=True)
class SourcePosOp:
    """Record the last upstream sequence a source delivered into this stream (``key`` names the
    source: its index name). Put into the same call as the messages it stored, it commits with
    them or not at all: a sourcing stream resumes at ``seq + 1`` with nothing stored twice or
    skipped. Purges and deletes leave it alone; ``source_positions()`` reads it back (after a
    reopen too); a snapshot carries it. Result: None.

    ``expect`` makes the whole call conditional: it applies only if the position stored for
    ``key`` (0 when none is) is ``expect``, else nothing of it is and it fails with
    ``PositionMismatch``. A source that submits a batch while the one before it still commits
    expects that one's position, so a batch never commits after an earlier one failed."""

    key: str
    seq: int
    expect: int | None = None

    def __post_init__(self) -> None:
        _check_meta_key(SOURCE_POS_PREFIX + self.key if type(self.key) is str else self.key)
        _int("seq", self.seq, 0)
        if self.expect is not None:
            _int("expect", self.expect, 0)

    @property
    def meta_key(self) -> str:
        return SOURCE_POS_PREFIX + self.key

    @property
    def meta_value(self) -> bytes:
        return b"%d" % self.seq


def decode_source_positions(items: Iterable[tuple[str, bytes]]) -> dict[str, int]:
    """``source_positions()`` from the metadata rows under ``SOURCE_POS_PREFIX``."""
    return {k[len(SOURCE_POS_PREFIX) :]: int(v) for k, v in items if k.startswith(SOURCE_POS_PREFIX)}


Op: TypeAlias = (
    Append | AppendBatch | PurgeOp | DeleteOp | ExpireOp | SkipOp | SetMetaOp | DelMetaOp | SourcePosOp
)
Result: TypeAlias = int | bool | None
OP_TYPES = (Append, AppendBatch, PurgeOp, DeleteOp, ExpireOp, SkipOp, SetMetaOp, DelMetaOp, SourcePosOp)


def check_ops(ops: Sequence[Op], last_seq: int) -> None:
    """Decide, before anything is applied, whether a call's operations can all apply.

    The only operation that can be refused is an Append with an explicit sequence at or below the last
    sequence at that point of the call, and only Append and SkipOp move ``last_seq`` -- so simulating
    ``last_seq`` is enough to make each ``apply`` call all-or-nothing without savepoints.
    """
    last = last_seq
    for op in ops:
        if isinstance(op, Append):
            if op.seq is None:
                last += 1
            elif op.seq <= last:
                raise SequenceMismatch(op.seq, last)
            else:
                last = op.seq
        elif isinstance(op, AppendBatch):
            last += len(op.subjects)
        elif isinstance(op, SkipOp):
            last = max(last, op.seq)
        elif isinstance(op, PurgeOp):
            if op.subject is None or op.subject == ">":
                up = op.up_to_seq
                if up is not None and up > last + 1:
                    last = up - 1
        elif op.__class__ not in OP_TYPES:
            raise InvalidOperation(f"not a store operation: {op!r}")


def check_positions(ops: Sequence[Op], stored: Callable[[str], int]) -> None:
    """Refuse a call (``PositionMismatch``) whose conditional ``SourcePosOp`` expects another
    position than the one ``stored`` (meta key -> position, 0 when none) returns -- or than an
    earlier op of the same call writes. Run before anything of the call is applied."""
    written: dict[str, int] = {}
    for op in ops:
        if isinstance(op, SourcePosOp):
            key = op.meta_key
            if op.expect is not None:
                now = written[key] if key in written else stored(key)
                if now != op.expect:
                    raise PositionMismatch(op.key, op.expect, now)
            written[key] = op.seq


# ----------------------------------------------------------------------------------------- protocol


@runtime_checkable
class StreamStore(Protocol):
    """What the stream layer needs from a store. Implementations: MemoryStore, SqliteStore."""

    def size_of(self, subject: str, headers: bytes | None, data: bytes) -> int:
        """A message's size as this store counts it in ``bytes`` (``msg_size`` or ``file_msg_size``)."""
        ...

    async def apply(self, ops: Sequence[Op]) -> list[Result]:
        """Apply the operations atomically, in order; one result per operation. Returns after the
        operations are committed (for a durable store: on disk)."""
        ...

    async def submit(self, ops: Sequence[Op]) -> Awaitable[list[Result]]:
        """Queue the operations and return (once the store has room for them) an awaitable of what
        ``apply`` would return. Calls are applied in the order they were submitted, so a caller can
        decide its next batch while this one commits. A failure is raised by the awaitable, which
        must be awaited."""
        ...

    async def append(
        self, subject: str, headers: bytes | None, data: bytes, ts: int | None = None
    ) -> tuple[int, int]:
        """Store one message (``ts`` defaults to the store's wall clock); returns ``(seq, ts)``."""
        ...

    async def get(self, seq: int) -> StoredMsg | None: ...

    async def last_by_subject(self, subject_filter: str) -> StoredMsg | None:
        """The highest-sequence message matching the (wildcard) filter."""
        ...

    async def first_after(self, seq: int, subject_filter: str | None = None) -> StoredMsg | None:
        """The first message with a sequence >= ``seq`` matching the filter."""
        ...

    async def range(
        self,
        start_seq: int,
        end_seq: int | None = None,
        limit: int = 1000,
        subject_filter: str | None = None,
    ) -> list[StoredMsg]:
        """Messages with ``start_seq <= seq <= end_seq`` matching the filter, in order, at most ``limit``."""
        ...

    async def read_columns(
        self, start_seq: int, end_seq: int, limit: int, subject_filter: str | None = None
    ) -> tuple[MsgColumns, int]:
        """The messages ``range`` would return, as columns (core/store/columns.py: no object per
        message), and the last sequence the read covers: every matching message with
        ``start_seq <= seq <= covered`` is in the columns (``covered`` may be past the last one
        returned, up to ``end_seq``, and is ``start_seq - 1`` or more). At most ``limit`` rows.
        For the bulk read API (core/jetstream/bulk_read.py)."""
        ...

    async def state(self, with_deleted: bool = False) -> StreamState: ...

    async def subjects_state(self, subject_filter: str = ">") -> dict[str, int]:
        """Message count per subject, for the subjects matching the filter."""
        ...

    async def msgs_for_subject(self, subject: str) -> int:
        """How many messages the subject (or filter) holds -- for ``max_msgs_per_subject``."""
        ...

    async def num_pending(self, from_seq: int, subject_filter: str | None = None) -> int:
        """How many messages with a sequence >= ``from_seq`` match the filter."""
        ...

    async def meta_get(self, key: str) -> bytes | None: ...

    async def meta_items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        """The metadata entries whose key starts with ``prefix``, sorted by key."""
        ...

    async def source_positions(self) -> dict[str, int]:
        """What ``SourcePosOp`` recorded: source key -> last upstream sequence stored."""
        ...

    def snapshot(
        self, keep_meta: Callable[[str], bool] | None = None, *, check: bool = False
    ) -> AsyncIterator[bytes]:
        """A consistent point-in-time copy in the versioned snapshot format (see ``snapshot.py``);
        with ``keep_meta``, only the metadata entries whose key it keeps; with ``check``, the
        store's own integrity check first (a damaged store raises StoreError before any byte)."""
        ...

    async def restore(
        self, chunks: AsyncIterator[bytes] | Iterable[bytes], *, batch_bytes: int | None = None
    ) -> None:
        """Load a snapshot into this (fresh, empty) store (``snapshot.restore_into``)."""
        ...

    async def flush(self) -> None:
        """Make everything acknowledged so far durable (the shutdown path calls it)."""
        ...

    async def close(self) -> None: ...
