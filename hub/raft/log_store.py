"""The durable RAFT log: segment files of checksummed records, a hard-state file, a snapshot file.

Layout of one directory (see DESIGN.md for the invariants):
- ``<first index, 20 digits>.seg``: records ``MAGIC | u32 length | u32 crc32(length, payload) |
  payload``, payload = ``u64 index | u64 term | u8 kind | data``; a segment rolls over (after an
  fsync) once it passes ``segment_bytes``, so compaction deletes whole files;
- ``hardstate``: term, vote, commit and a crc32, replaced atomically;
- ``snapshot``: the newest snapshot (meta, voters, data) and a crc32, replaced atomically.

Recovery on open: a bad record at the end of the newest segment is a torn write (it was never
fsynced, so never acknowledged) and is cut off. A bad record followed by a good one, or a bad record
in an older segment, is corruption of data that was acknowledged: opening fails with
``CorruptLog`` rather than silently forgetting it.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hub.raft.files import Files
from hub.raft.types import Entry, EntryKind, HardState, Snapshot, SnapshotMeta

log = logging.getLogger(__name__)

MAGIC = b"\xabRf1"
_HEADER = struct.Struct("<4sII")  # magic, payload length, crc32 of (length, payload)
_ENTRY = struct.Struct("<QQQB")  # index, term, first index of its write batch, kind
_HARD = struct.Struct("<QQQ")
_SNAP = struct.Struct("<4sQQI")  # magic, index, term, voter count
_CRC = struct.Struct("<I")
MAX_RECORD = 1 << 30
HARD_STATE = "hardstate"
SNAPSHOT = "snapshot"
RECOVERING = "recovering"  # present while this server catches up after losing its log
SEGMENT_SUFFIX = ".seg"


class CorruptLog(Exception):
    """Acknowledged data failed its checksum: the store will not open (repair from peers)."""


def encode_record(entry: Entry, batch_first: int) -> bytes:
    payload = _ENTRY.pack(entry.index, entry.term, batch_first, entry.kind) + entry.data
    length = len(payload)
    crc = zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little")))
    return _HEADER.pack(MAGIC, length, crc) + payload


def _decode_at(buf: bytes, offset: int) -> tuple[Entry, int, int] | None:
    """The entry at ``offset``, the first index of its write batch and the offset after it; None
    when there is no whole, valid record there."""
    if offset + _HEADER.size > len(buf):
        return None
    magic, length, crc = _HEADER.unpack_from(buf, offset)
    start = offset + _HEADER.size
    if magic != MAGIC or length < _ENTRY.size or length > MAX_RECORD or start + length > len(buf):
        return None
    payload = buf[start : start + length]
    if zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little"))) != crc:
        return None
    index, term, batch_first, kind = _ENTRY.unpack_from(payload)
    if kind not in (EntryKind.NORMAL, EntryKind.NOOP, EntryKind.CONF):
        return None
    return Entry(term, index, EntryKind(kind), payload[_ENTRY.size :]), batch_first, start + length


def _later_batch_after(buf: bytes, offset: int, bad_index: int) -> bool:
    """Whether a valid record after ``offset`` belongs to a write batch that began after the bad
    record's. Batches are fsynced one after the other, so such a record proves the bad one was
    fsynced (corruption); records of the bad one's own batch prove nothing (a torn write)."""
    at = buf.find(MAGIC, offset + 1)
    while at != -1:
        got = _decode_at(buf, at)
        if got is not None and got[1] > bad_index:
            return True
        at = buf.find(MAGIC, at + 1)
    return False


def encode_hard_state(hs: HardState) -> bytes:
    body = _HARD.pack(hs.term, hs.vote, hs.commit)
    return body + _CRC.pack(zlib.crc32(body))


def decode_hard_state(buf: bytes) -> HardState:
    if (
        len(buf) != _HARD.size + _CRC.size
        or zlib.crc32(buf[: _HARD.size]) != _CRC.unpack_from(buf, _HARD.size)[0]
    ):
        raise CorruptLog("hard state file fails its checksum")
    return HardState(*_HARD.unpack_from(buf))


def encode_snapshot(snap: Snapshot) -> bytes:
    voters = sorted(snap.meta.voters)
    body = (
        _SNAP.pack(MAGIC, snap.index, snap.term, len(voters))
        + b"".join(v.to_bytes(8, "little") for v in voters)
        + snap.data
    )
    return body + _CRC.pack(zlib.crc32(body))


def decode_snapshot(buf: bytes) -> Snapshot:
    if (
        len(buf) < _SNAP.size + _CRC.size
        or zlib.crc32(buf[: -_CRC.size]) != _CRC.unpack_from(buf, len(buf) - 4)[0]
    ):
        raise CorruptLog("snapshot file fails its checksum")
    magic, index, term, n = _SNAP.unpack_from(buf)
    at = _SNAP.size + 8 * n
    if magic != MAGIC or at > len(buf) - _CRC.size:
        raise CorruptLog("snapshot file is malformed")
    voters = frozenset(
        int.from_bytes(buf[_SNAP.size + 8 * k : _SNAP.size + 8 * k + 8], "little") for k in range(n)
    )
    return Snapshot(SnapshotMeta(index, term, voters), buf[at : -_CRC.size])


@dataclass
class _Segment:
    name: str
    first: int  # index of its first entry (or of the first one it will hold)
    offsets: list[int]  # offsets[k]: where entry first+k starts
    size: int


@dataclass(frozen=True, slots=True)
class Loaded:
    hard_state: HardState
    snapshot: Snapshot
    entries: list[Entry]
    torn_bytes: int  # bytes cut off the end of the newest segment
    recovering: bool = False  # the RECOVERING marker is there


def _segment_name(first: int) -> str:
    return f"{first:020d}{SEGMENT_SUFFIX}"


class LogStore:
    """One writer; every mutating call returns once its data is durable (``append`` fsyncs once
    for the whole batch)."""

    def __init__(self, files: Files, segment_bytes: int = 64 << 20) -> None:
        self.files = files
        self.segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self.snapshot = Snapshot()
        self.hard_state = HardState()
        self.recovering = False

    # -- opening ---------------------------------------------------------------------------------

    def open(self) -> Loaded:
        names = self.files.list()
        self.recovering = RECOVERING in names
        if HARD_STATE in names:
            self.hard_state = decode_hard_state(self.files.read(HARD_STATE))
        if SNAPSHOT in names:
            self.snapshot = decode_snapshot(self.files.read(SNAPSHOT))
        seg_names = sorted(n for n in names if n.endswith(SEGMENT_SUFFIX) and n[:-4].isdigit())
        entries: list[Entry] = []
        torn = 0
        self._segments = []
        for k, name in enumerate(seg_names):
            last_segment = k == len(seg_names) - 1
            buf = self.files.read(name)
            seg = _Segment(name, int(name[:-4]), [], 0)
            if entries and seg.first != entries[-1].index + 1:
                raise CorruptLog(f"{name}: does not continue the segment before it")
            offset = 0
            while offset < len(buf):
                got = _decode_at(buf, offset)
                if got is None:
                    bad_index = seg.first + len(seg.offsets)
                    if not last_segment or _later_batch_after(buf, offset, bad_index):
                        raise CorruptLog(f"{name}: bad record at byte {offset} before good data")
                    torn = len(buf) - offset
                    log.warning("raft log %s: cutting a torn tail of %d bytes at %d", name, torn, offset)
                    self.files.truncate(name, offset)
                    self.files.fsync(name)
                    break
                entry, _, end = got
                expected = seg.first + len(seg.offsets)
                if entry.index != expected:
                    raise CorruptLog(f"{name}: entry {entry.index} where {expected} belongs")
                seg.offsets.append(offset)
                entries.append(entry)
                offset = end
            seg.size = offset
            self._segments.append(seg)
        entries = self._reconcile_with_snapshot(entries)
        return Loaded(self.hard_state, self.snapshot, entries, torn, self.recovering)

    def _reconcile_with_snapshot(self, entries: list[Entry]) -> list[Entry]:
        snap = self.snapshot
        if not entries or entries[-1].index <= snap.index:
            if self._segments and (entries or self._segments[-1].first != snap.index + 1):
                self._reset(snap.index + 1)  # everything stored is covered by the snapshot
            return []
        if entries[0].index > snap.index + 1:
            raise CorruptLog(f"log starts at {entries[0].index}, after the snapshot at {snap.index}")
        at_snap = snap.index - entries[0].index
        if at_snap >= 0 and entries[at_snap].term != snap.term:
            # a crash while installing a leader's snapshot: the old log does not continue it
            log.warning("raft log: dropping entries that do not continue the snapshot at %d", snap.index)
            self._reset(snap.index + 1)
            return []
        return [e for e in entries if e.index > snap.index]

    @staticmethod
    def _last_index_of(seg: _Segment) -> int:
        return seg.first + len(seg.offsets) - 1

    # -- writing ---------------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Write ``entries`` (contiguous); one at index i first drops stored entries from i on."""
        if not entries:
            return
        first = entries[0].index
        self._truncate_from(first)
        if not self._segments:
            self._new_segment(first)
        seg = self._segments[-1]
        if seg.first + len(seg.offsets) != first:
            # after a snapshot or a truncation to a segment boundary: start where the entries do
            self._new_segment(first)
            seg = self._segments[-1]
        chunks: list[bytes] = []
        for e in entries:
            rec = encode_record(e, first)
            if seg.size >= self.segment_bytes and seg.offsets:
                self.files.append(seg.name, b"".join(chunks))
                chunks = []
                self.files.fsync(seg.name)
                seg = self._new_segment(e.index)
            seg.offsets.append(seg.size)
            seg.size += len(rec)
            chunks.append(rec)
        self.files.append(seg.name, b"".join(chunks))
        self.files.fsync(seg.name)

    def _truncate_from(self, index: int) -> None:
        removed = False
        while self._segments and self._segments[-1].first > index:
            self.files.remove(self._segments.pop().name)
            removed = True
        if removed:
            self.files.sync_dir()
        if not self._segments:
            return
        seg = self._segments[-1]
        k = index - seg.first
        if k < len(seg.offsets):
            if k == 0 and len(self._segments) > 1:
                self.files.remove(self._segments.pop().name)
                self.files.sync_dir()
                return
            seg.size = seg.offsets[k] if k < len(seg.offsets) else seg.size
            del seg.offsets[k:]
            self.files.truncate(seg.name, seg.size)
            self.files.fsync(seg.name)

    def _new_segment(self, first: int) -> _Segment:
        seg = _Segment(_segment_name(first), first, [], 0)
        self.files.append(seg.name, b"")
        self.files.fsync(seg.name)
        self.files.sync_dir()
        self._segments.append(seg)
        return seg

    def save_hard_state(self, hs: HardState) -> None:
        self.files.write_atomic(HARD_STATE, encode_hard_state(hs))
        self.hard_state = hs

    def mark_recovering(self, on: bool) -> None:
        """Durably note (or clear) that this server lost its log and is catching up: a restart
        in the middle must not make it a voter again before it has caught up."""
        if on:
            self.files.write_atomic(RECOVERING, b"lost its log; catching up from the leader\n")
        else:
            self.files.remove(RECOVERING)
            self.files.sync_dir()
        self.recovering = on

    def save_snapshot(self, snap: Snapshot) -> None:
        """Persist a snapshot; entries it covers are deleted by ``compact`` (a local snapshot) or
        all dropped (``install_snapshot``)."""
        self.files.write_atomic(SNAPSHOT, encode_snapshot(snap))
        self.snapshot = snap

    def install_snapshot(self, snap: Snapshot) -> None:
        """A leader's snapshot replaces the whole log: snapshot first, then the old segments go
        (a crash in between is sorted out on open)."""
        self.save_snapshot(snap)
        self._reset(snap.index + 1)

    def compact(self, index: int) -> None:
        """Delete segments wholly covered by the snapshot (which must already be saved)."""
        if index > self.snapshot.index:
            raise ValueError(f"compacting to {index} past the saved snapshot at {self.snapshot.index}")
        removed = False
        while len(self._segments) > 1 and self._last_index_of(self._segments[0]) <= index:
            self.files.remove(self._segments.pop(0).name)
            removed = True
        if removed:
            self.files.sync_dir()

    def _reset(self, first: int) -> None:
        for seg in self._segments:
            self.files.remove(seg.name)
        self._segments = []
        self.files.sync_dir()
        self._new_segment(first)

    def entries(self) -> Iterable[Entry]:
        """Re-read every stored entry (tests and diagnostics)."""
        for seg in self._segments:
            buf = self.files.read(seg.name)
            for off in seg.offsets:
                got = _decode_at(buf, off)
                if got is None:
                    raise CorruptLog(f"{seg.name}: bad record at byte {off}")
                yield got[0]
