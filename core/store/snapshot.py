"""The stream snapshot format: versioned, length-checked, checksummed; never pickle.

A snapshot is a logical copy of one stream -- its sequence counters, its messages (plaintext: the
receiving store may use another key or no compression) and its metadata -- independent of the store
that wrote it. Layout (integers big-endian)::

    magic  b"LJSNAP\\0"  u16 version
    record*: u8 kind, u32 length, payload[length]
      STATE  u64 first_seq, u64 last_seq, i64 last_ts, u64 msgs, u64 metas      (first record)
      MSG    u64 seq, i64 ts, u32 subject_len, subject, i32 hdr_len (-1: none), hdr, data (rest)
      META   u32 key_len, key, value (rest)
      END    u64 msgs, u64 metas, u32 crc32 of every byte before the END record   (last record)

The encoder and the decoder are pure (bytes in, records out); ``restore_into`` turns a decoded snapshot
into store operations and applies them in one call, so a restore is all-or-nothing. With
``batch_bytes`` it applies them in batches as they are decoded instead (memory bounded by a batch,
not by the stream): the store then holds a partial copy when the snapshot turns out bad, and the
caller discards that store (a stream restore builds it in a staging folder: jetstream/backup.py).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import anyio

from core.errors import StoreError
from core.store.api import Append, Op, SetMetaOp, SkipOp, StoredMsg, StreamStore
from core.subjects import is_valid_literal_subject

MAGIC = b"LJSNAP\x00"
VERSION = 1
MAX_RECORD = 64 << 20
CHUNK = 256 << 10
SUBJECTS_CACHED = 4096  # distinct subjects a decoder remembers as checked
BATCH_MSGS = 10_000  # a batched restore applies at most about this many messages per call

K_STATE, K_MSG, K_META, K_END = 1, 2, 3, 4

_REC = struct.Struct(">BI")
_STATE = struct.Struct(">QQqQQ")
_MSG = struct.Struct(">QqI")
_HLEN = struct.Struct(">i")
_KLEN = struct.Struct(">I")
_END = struct.Struct(">QQI")


class SnapshotError(StoreError):
    """A snapshot is malformed, truncated, of a newer version, or does not fit the target store."""


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    first_seq: int
    last_seq: int
    last_ts: int
    msgs: int
    metas: int


# ------------------------------------------------------------------------------------------ encoding


def _record(kind: int, payload: bytes) -> bytes:
    return _REC.pack(kind, len(payload)) + payload


def encode_state(h: SnapshotHeader) -> bytes:
    return _record(K_STATE, _STATE.pack(h.first_seq, h.last_seq, h.last_ts, h.msgs, h.metas))


def encode_msg(m: StoredMsg) -> bytes:
    subj = m.subject.encode()
    hdr = m.headers
    parts = [_MSG.pack(m.seq, m.ts, len(subj)), subj]
    if hdr is None:
        parts.append(_HLEN.pack(-1))
    else:
        parts += [_HLEN.pack(len(hdr)), hdr]
    parts.append(m.data)
    return _record(K_MSG, b"".join(parts))


def encode_meta(key: str, value: bytes) -> bytes:
    k = key.encode()
    return _record(K_META, _KLEN.pack(len(k)) + k + value)


class SnapshotEncoder:
    """Feed records in order (state, messages, metas); get chunks of about ``CHUNK`` bytes."""

    def __init__(self, header: SnapshotHeader) -> None:
        self._header = header
        self._crc = 0
        self._buf: list[bytes] = []
        self._size = 0
        self._msgs = 0
        self._metas = 0
        self._add(MAGIC + struct.pack(">H", VERSION))
        self._add(encode_state(header))

    def _add(self, b: bytes) -> bytes | None:
        self._crc = zlib.crc32(b, self._crc)
        self._buf.append(b)
        self._size += len(b)
        if self._size >= CHUNK:
            return self._take()
        return None

    def _take(self) -> bytes:
        out = b"".join(self._buf)
        self._buf, self._size = [], 0
        return out

    def msg(self, m: StoredMsg) -> bytes | None:
        self._msgs += 1
        return self._add(encode_msg(m))

    def meta(self, key: str, value: bytes) -> bytes | None:
        self._metas += 1
        return self._add(encode_meta(key, value))

    def finish(self) -> bytes:
        h = self._header
        if (self._msgs, self._metas) != (h.msgs, h.metas):
            raise SnapshotError(
                f"snapshot source changed while copying: {self._msgs}/{self._metas} records "
                f"for a header of {h.msgs}/{h.metas}"
            )
        end = _record(K_END, _END.pack(self._msgs, self._metas, self._crc))
        self._buf.append(end)
        return self._take()


# ------------------------------------------------------------------------------------------ decoding


@dataclass(frozen=True, slots=True)
class Snapshot:
    header: SnapshotHeader
    msgs: list[StoredMsg]
    metas: list[tuple[str, bytes]]


class SnapshotDecoder:
    """Sans-IO: ``feed(chunk)`` any number of times, then ``finish()`` returns the validated Snapshot.
    Any malformation raises SnapshotError; nothing else escapes."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._crc = 0
        self._started = False
        self._header: SnapshotHeader | None = None
        self._msgs: list[StoredMsg] = []
        self._metas: list[tuple[str, bytes]] = []
        self._done = False
        # counted over the whole snapshot: ``drain`` empties the lists as it goes
        self._n_msgs = 0
        self._n_metas = 0
        self._last_seq = 0
        self._pending_bytes = 0
        self._subjects: dict[bytes, str] = {}  # checked subjects (a stream's repeat)

    def feed(self, chunk: bytes) -> None:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise SnapshotError("snapshot chunks must be bytes")
        self._buf += chunk
        self._parse()

    @property
    def header(self) -> SnapshotHeader | None:
        return self._header

    @property
    def pending_bytes(self) -> int:
        """Payload bytes of the messages decoded and not yet drained."""
        return self._pending_bytes

    @property
    def pending_msgs(self) -> int:
        return len(self._msgs)

    def drain_msgs(self) -> list[StoredMsg]:
        """The messages decoded since the last drain (in order), handed over: a restore applies
        them in batches. ``finish`` still checks the whole snapshot."""
        msgs, self._msgs, self._pending_bytes = self._msgs, [], 0
        return msgs

    def _consume(self, n: int) -> bytes:
        b = bytes(self._buf[:n])
        del self._buf[:n]
        return b

    def _parse(self) -> None:
        if not self._started:
            head = len(MAGIC) + 2
            if len(self._buf) < head:
                if not MAGIC.startswith(bytes(self._buf[: len(MAGIC)])):
                    raise SnapshotError("not a leafjet stream snapshot")
                return
            b = self._consume(head)
            if b[: len(MAGIC)] != MAGIC:
                raise SnapshotError("not a leafjet stream snapshot")
            (version,) = struct.unpack(">H", b[len(MAGIC) :])
            if version > VERSION:
                raise SnapshotError(f"snapshot version {version} is newer than supported ({VERSION})")
            if version < 1:
                raise SnapshotError(f"bad snapshot version {version}")
            self._crc = zlib.crc32(b)
            self._started = True
        # The whole records in the buffer, parsed by offset in one immutable copy (a record
        # consumed from the front of the buffer moved the rest each time: a restore spent
        # most of its time there); what is left of an unfinished record stays buffered.
        data = bytes(self._buf)
        view = memoryview(data)
        pos, n = 0, len(data)
        while n - pos >= _REC.size:
            if self._done:
                raise SnapshotError("trailing data after the end of the snapshot")
            kind, length = _REC.unpack_from(data, pos)
            if length > MAX_RECORD:
                raise SnapshotError(f"snapshot record of {length} bytes exceeds {MAX_RECORD}")
            end = pos + _REC.size + length
            if end > n:
                break
            if kind == K_END:
                self._end(data[pos + _REC.size : end])
            else:
                self._crc = zlib.crc32(view[pos:end], self._crc)
                if kind == K_MSG and self._header is not None:
                    self._msg(data, pos + _REC.size, end)
                else:
                    self._record(kind, data[pos + _REC.size : end])
            pos = end
        if pos:
            self._buf = bytearray(view[pos:])

    def _record(self, kind: int, payload: bytes) -> None:
        if self._header is None:
            if kind != K_STATE or len(payload) != _STATE.size:
                raise SnapshotError("snapshot does not start with a state record")
            self._header = SnapshotHeader(*_STATE.unpack(payload))
            h = self._header
            if h.last_seq < 0 or h.first_seq < 1 or h.first_seq > h.last_seq + 1 or h.last_ts < 0:
                raise SnapshotError(f"bad snapshot state {h}")
            return
        if kind == K_META:
            self._meta(payload)
        else:
            raise SnapshotError(f"unknown snapshot record kind {kind}")

    def _msg(self, b: bytes, start: int, end: int) -> None:
        """The message record in ``b[start:end]`` (its payload, after the record header)."""
        h = self._header
        assert h is not None
        if end - start < _MSG.size + _HLEN.size:
            raise SnapshotError("truncated message record")
        seq, ts, slen = _MSG.unpack_from(b, start)
        off = start + _MSG.size
        if off + slen + _HLEN.size > end:
            raise SnapshotError("truncated message subject")
        raw_subject = b[off : off + slen]
        subject = self._subjects.get(raw_subject)
        if subject is None:
            try:
                subject = raw_subject.decode()
            except UnicodeDecodeError:
                raise SnapshotError("message subject is not UTF-8") from None
            if not is_valid_literal_subject(subject):
                raise SnapshotError(f"bad message {seq}")
            if len(self._subjects) < SUBJECTS_CACHED:
                self._subjects[raw_subject] = subject
        off += slen
        (hlen,) = _HLEN.unpack_from(b, off)
        off += _HLEN.size
        if hlen < -1 or off + max(hlen, 0) > end:
            raise SnapshotError("bad message header length")
        hdr = None if hlen == -1 else b[off : off + hlen]
        data = b[off + max(hlen, 0) : end]
        prev = self._last_seq if self._n_msgs else h.first_seq - 1
        if not (prev < seq <= h.last_seq) or (not self._n_msgs and seq != h.first_seq):
            raise SnapshotError(f"message sequence {seq} out of order or outside the snapshot range")
        if ts < 0:
            raise SnapshotError(f"bad message {seq}")
        self._msgs.append(StoredMsg(seq, subject, hdr, data, ts))
        self._n_msgs += 1
        self._last_seq = seq
        self._pending_bytes += len(data) + len(hdr or b"")

    def _meta(self, p: bytes) -> None:
        if len(p) < _KLEN.size:
            raise SnapshotError("truncated meta record")
        (klen,) = _KLEN.unpack_from(p)
        if _KLEN.size + klen > len(p) or klen == 0:
            raise SnapshotError("bad meta key length")
        try:
            key = p[_KLEN.size : _KLEN.size + klen].decode()
        except UnicodeDecodeError:
            raise SnapshotError("meta key is not UTF-8") from None
        self._metas.append((key, p[_KLEN.size + klen :]))
        self._n_metas += 1

    def _end(self, payload: bytes) -> None:
        if self._header is None or len(payload) != _END.size:
            raise SnapshotError("misplaced or malformed end record")
        msgs, metas, crc = _END.unpack(payload)
        if crc != self._crc:
            raise SnapshotError("snapshot checksum mismatch")
        h = self._header
        if (msgs, metas) != (self._n_msgs, self._n_metas) or (msgs, metas) != (h.msgs, h.metas):
            raise SnapshotError("snapshot record counts do not match")
        if not msgs and h.first_seq != h.last_seq + 1:
            raise SnapshotError("an empty snapshot must have first_seq = last_seq + 1")
        self._done = True

    def finish(self) -> Snapshot:
        """The validated snapshot (its messages and metadata: those not drained)."""
        if not self._done or self._buf:
            raise SnapshotError("snapshot is truncated" if not self._done else "trailing data in snapshot")
        assert self._header is not None
        return Snapshot(self._header, self._msgs, self._metas)


def _msg_ops(msgs: Iterable[StoredMsg]) -> list[Op]:
    return [Append(m.subject, m.headers, m.data, m.ts, seq=m.seq) for m in msgs]


def _tail_ops(h: SnapshotHeader, metas: Iterable[tuple[str, bytes]]) -> list[Op]:
    # A tail of deleted or skipped sequences, or an empty purged stream: carry last_seq and last_ts.
    ops: list[Op] = [SkipOp(h.last_seq, ts=h.last_ts)] if h.last_seq else []
    return ops + [SetMetaOp(k, v) for k, v in metas]


def snapshot_ops(snap: Snapshot) -> list[Op]:
    """The operations that rebuild ``snap`` in an empty store."""
    return _msg_ops(snap.msgs) + _tail_ops(snap.header, snap.metas)


async def _each(chunks: AsyncIterator[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterator):
        async for c in chunks:
            yield c
    else:
        for c in chunks:
            yield c


async def decode_chunks(chunks: AsyncIterator[bytes] | Iterable[bytes]) -> Snapshot:
    dec = SnapshotDecoder()
    async for c in _each(chunks):
        dec.feed(c)
    return dec.finish()


async def restore_into(
    store: StreamStore, chunks: AsyncIterator[bytes] | Iterable[bytes], *, batch_bytes: int | None = None
) -> None:
    """Decode a whole snapshot (validating it before touching the store), then apply it in one
    call; with ``batch_bytes``, apply its messages in batches of about that many payload bytes
    as they are decoded (see the module's docstring: a bad snapshot leaves a partial copy)."""
    st = await store.state()
    if st.last_seq != 0 or st.msgs or await store.meta_items(""):
        raise SnapshotError("restore needs a fresh, empty store")
    if batch_bytes is None:
        snap = await decode_chunks(chunks)
        await store.apply(snapshot_ops(snap))
    else:
        snap = await _apply_in_batches(store, chunks, batch_bytes)
    after = await store.state()
    h = snap.header
    if (after.msgs, after.last_seq) != (h.msgs, h.last_seq) or (h.msgs and after.first_seq != h.first_seq):
        raise SnapshotError(f"restored state {after} does not match the snapshot {h}")


async def _apply_in_batches(
    store: StreamStore, chunks: AsyncIterator[bytes] | Iterable[bytes], batch_bytes: int
) -> Snapshot:
    # The decoding (~7 us a message of Python) runs in a worker thread, a chunk at a time: a
    # restore of a large stream must not hold the event loop. (A writer task applying one batch
    # while the next is decoded was tried: ~10% faster, the decode and the store's thread share
    # the GIL; not worth a second task's failure paths.)
    dec = SnapshotDecoder()

    def feed(c: bytes) -> list[Op] | None:
        dec.feed(c)
        if dec.pending_bytes >= batch_bytes or dec.pending_msgs >= BATCH_MSGS:
            return _msg_ops(dec.drain_msgs())
        return None

    async for c in _each(chunks):
        if (ops := await anyio.to_thread.run_sync(feed, c)) is not None:
            await store.apply(ops)
    snap = dec.finish()
    ops = _msg_ops(snap.msgs) + _tail_ops(snap.header, snap.metas)
    if ops:
        await store.apply(ops)
    return snap
