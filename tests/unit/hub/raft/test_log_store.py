"""The durable RAFT log on real files: what it keeps across a reopen, how it treats a write cut at
any byte and a bit flipped anywhere, and that every write is fsynced before it returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.raft.files import MAX_APPEND_HANDLES, OsFiles
from hub.raft.log_store import HARD_STATE, SNAPSHOT, CorruptLog, LogStore, encode_record
from hub.raft.types import Entry, EntryKind, HardState, Snapshot, SnapshotMeta


def entries(lo: int, hi: int, term: int = 1, size: int = 5) -> list[Entry]:
    return [Entry(term, i, EntryKind.NORMAL, bytes([i % 251]) * size) for i in range(lo, hi + 1)]


def reopen(path: Path, segment_bytes: int = 1 << 20) -> tuple[LogStore, list[Entry]]:
    store = LogStore(OsFiles(path), segment_bytes)
    loaded = store.open()
    return store, loaded.entries


def segments(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(".seg"))


def test_entries_hard_state_and_snapshot_survive_a_reopen(tmp_path: Path) -> None:
    store, got = reopen(tmp_path)
    assert got == []
    store.append(entries(1, 10))
    store.append([Entry(2, 11, EntryKind.NOOP), Entry(2, 12, EntryKind.CONF, b"\x00" + bytes(8))])
    store.save_hard_state(HardState(term=2, vote=3, commit=9))
    store2, got = reopen(tmp_path)
    assert got == [
        *entries(1, 10),
        Entry(2, 11, EntryKind.NOOP),
        Entry(2, 12, EntryKind.CONF, b"\x00" + bytes(8)),
    ]
    assert store2.hard_state == HardState(2, 3, 9)


def test_writing_at_an_index_drops_what_was_stored_from_there_on(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, segment_bytes=100)  # several segments
    store.append(entries(1, 20))
    store.append(entries(8, 9, term=2))
    _, got = reopen(tmp_path, segment_bytes=100)
    assert got == [*entries(1, 7), *entries(8, 9, term=2)]


def test_segments_roll_over_and_compaction_deletes_whole_ones(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, segment_bytes=200)
    store.append(entries(1, 40))
    before = segments(tmp_path)
    assert len(before) > 3
    snap = Snapshot(SnapshotMeta(25, 1, frozenset({1, 2, 3})), b"state")
    store.save_snapshot(snap)
    store.compact(25)
    after = segments(tmp_path)
    assert len(after) < len(before) and int(after[0][:-4]) <= 26
    store2, got = reopen(tmp_path, segment_bytes=200)
    assert store2.snapshot == snap
    assert got == entries(26, 40)
    with pytest.raises(ValueError):
        store2.compact(30)  # past the saved snapshot


def test_installing_a_leaders_snapshot_replaces_the_log(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, segment_bytes=200)
    store.append(entries(1, 30))
    snap = Snapshot(SnapshotMeta(50, 3, frozenset({1, 2})), b"x")
    store.install_snapshot(snap)
    store.append(entries(51, 52, term=3))
    _, got = reopen(tmp_path, segment_bytes=200)
    assert got == entries(51, 52, term=3)


def test_a_snapshot_install_cut_short_is_finished_on_open(tmp_path: Path) -> None:
    # the snapshot file landed but the old segments were not deleted yet
    store, _ = reopen(tmp_path)
    store.append(entries(1, 30))
    store.save_snapshot(Snapshot(SnapshotMeta(20, 5, frozenset({1})), b"x"))  # term 5 != stored term 1 at 20
    store2, got = reopen(tmp_path)
    assert got == []
    store2.append(entries(21, 22, term=5))
    _, got = reopen(tmp_path)
    assert got == entries(21, 22, term=5)


def _write_batches(path: Path, batches: list[list[Entry]]) -> tuple[str, bytes, list[tuple[int, int, int]]]:
    """Write ``batches`` (one append each) to a fresh store; return the segment name, its bytes,
    and each record's (start, end, batch number)."""
    store, _ = reopen(path)
    records: list[tuple[int, int, int]] = []
    at = 0
    for b, batch in enumerate(batches):
        store.append(batch)
        for e in batch:
            n = len(encode_record(e, batch[0].index))
            records.append((at, at + n, b))
            at += n
    (name,) = segments(path)
    data = (path / name).read_bytes()
    assert len(data) == at
    return name, data, records


BATCHES = [entries(1, 3), entries(4, 4, size=40), entries(5, 8, size=1)]


def test_a_write_cut_at_any_byte_keeps_exactly_the_whole_records_before_it(tmp_path: Path) -> None:
    name, data, records = _write_batches(tmp_path / "src", BATCHES)
    written = [e for b in BATCHES for e in b]
    work = tmp_path / "cut"
    for cut in range(len(data) + 1):
        if work.exists():
            for p in work.iterdir():
                p.unlink()
        work.mkdir(exist_ok=True)
        (work / name).write_bytes(data[:cut])
        store = LogStore(OsFiles(work))
        loaded = store.open()
        whole = sum(1 for _, end, _ in records if end <= cut)
        assert loaded.entries == written[:whole], f"cut at {cut}"
        kept = records[whole - 1][1] if whole else 0
        assert loaded.torn_bytes == cut - kept
        assert (work / name).stat().st_size == kept  # the torn tail is gone from the file
        # and the log goes on from there
        store.append(written[whole : whole + 1] or entries(9, 9))
        again = LogStore(OsFiles(work)).open()
        assert again.entries[:whole] == written[:whole] and len(again.entries) == whole + 1


def test_a_flipped_bit_is_a_torn_tail_in_the_last_batch_and_corruption_before_it(tmp_path: Path) -> None:
    name, data, records = _write_batches(tmp_path / "src", BATCHES)
    written = [e for b in BATCHES for e in b]
    last_batch = records[-1][2]
    work = tmp_path / "flip"
    work.mkdir()
    for pos in range(len(data)):
        k = next(i for i, (start, end, _) in enumerate(records) if start <= pos < end)
        for bit in (0, 5):
            damaged = bytearray(data)
            damaged[pos] ^= 1 << bit
            (work / name).write_bytes(bytes(damaged))
            store = LogStore(OsFiles(work))
            if records[k][2] == last_batch:
                # not provably fsynced (nothing was written after its batch): cut off, like a torn write
                assert store.open().entries == written[:k], f"flip at byte {pos}"
            else:
                with pytest.raises(CorruptLog):
                    store.open()


def test_a_bad_record_in_an_older_segment_is_corruption(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, segment_bytes=100)
    store.append(entries(1, 20))
    first = tmp_path / segments(tmp_path)[0]
    damaged = bytearray(first.read_bytes())
    damaged[-3] ^= 0x10  # the last record of a segment that is not the newest
    first.write_bytes(bytes(damaged))
    with pytest.raises(CorruptLog):
        reopen(tmp_path, segment_bytes=100)


def test_a_damaged_hard_state_or_snapshot_file_refuses_to_open(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    store.save_hard_state(HardState(4, 2, 0))
    store.save_snapshot(Snapshot(SnapshotMeta(3, 1, frozenset({1})), b"abc"))
    for name in (HARD_STATE, SNAPSHOT):
        good = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
        with pytest.raises(CorruptLog):
            reopen(tmp_path)
        (tmp_path / name).write_bytes(good)
    (tmp_path / f"{HARD_STATE}.tmp").write_bytes(b"half a write")  # a crash mid-replace: ignored
    store2, _ = reopen(tmp_path)
    assert store2.hard_state == HardState(4, 2, 0)


class RecordingFiles(OsFiles):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.ops: list[tuple[str, str]] = []

    def append(self, name: str, data: bytes) -> None:
        self.ops.append(("append", name))
        super().append(name, data)

    def fsync(self, name: str) -> None:
        self.ops.append(("fsync", name))
        super().fsync(name)

    def write_atomic(self, name: str, data: bytes) -> None:
        self.ops.append(("write_atomic", name))
        super().write_atomic(name, data)


def test_every_write_is_fsynced_before_it_returns_and_a_batch_costs_one_fsync(tmp_path: Path) -> None:
    files = RecordingFiles(tmp_path)
    store = LogStore(files)
    store.open()
    store.append(entries(1, 1))
    files.ops.clear()
    store.append(entries(2, 500))  # a batch of 499 entries
    assert files.ops == [("append", "00000000000000000001.seg"), ("fsync", "00000000000000000001.seg")]
    files.ops.clear()
    store.save_hard_state(HardState(1, 1, 0))
    assert files.ops == [("write_atomic", HARD_STATE)]


def test_a_log_of_many_small_segments_keeps_few_files_open(tmp_path: Path) -> None:
    """One segment per entry (the smallest ``meta_segment_bytes``): the store holds a bounded
    number of append handles, not one per segment, and every entry still reads back."""
    files = OsFiles(tmp_path)
    store = LogStore(files, segment_bytes=1)
    store.open()
    for i in range(1, 201):
        store.append(entries(i, i))
    assert len(segments(tmp_path)) == 200
    assert len(files._fds) <= MAX_APPEND_HANDLES
    files.close()
    _, got = reopen(tmp_path, segment_bytes=1)
    assert got == entries(1, 200)
