"""The byte form of a RAFT ``Message`` on the wire: explicit, versioned, length-checked.

Layout (little-endian): ``VERSION u8 | type u8 | src u64 | dst u64 | term u64 | index u64 |
log_term u64 | commit u64 | flags u8 (bit 0: reject, bit 1: lost, bit 2: transfer) |
reject_hint u64 | entry count u32 | entries | has snapshot u8 | snapshot``; an entry is
``term u64 | index u64 | kind u8 | length u32 | data``; a snapshot is ``index u64 | term u64 |
voter count u32 | voters u64… | length u32 | data``.

Decoding checks every length against what is left and refuses trailing bytes: a peer's bytes
give a ``Message`` or ``WireError``, never an exception from deep inside (the node then checks
the RAFT-level shape, ``node.malformed``).
"""

from __future__ import annotations

import struct

from hub.raft.types import Entry, EntryKind, Message, MsgType, Snapshot, SnapshotMeta

VERSION = 1
_HEAD = struct.Struct("<BBQQQQQQBQI")
_ENTRY = struct.Struct("<QQBI")
_SNAP = struct.Struct("<QQI")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
MAX_VOTERS = 1024


class WireError(ValueError):
    """Bytes that are no RAFT message of this version."""


def encode_message(m: Message) -> bytes:
    parts = [
        _HEAD.pack(
            VERSION,
            m.type,
            m.src,
            m.dst,
            m.term,
            m.index,
            m.log_term,
            m.commit,
            (1 if m.reject else 0) | (2 if m.lost else 0) | (4 if m.transfer else 0),
            m.reject_hint,
            len(m.entries),
        )
    ]
    for e in m.entries:
        parts.append(_ENTRY.pack(e.term, e.index, e.kind, len(e.data)))
        parts.append(e.data)
    if m.snapshot is None:
        parts.append(b"\x00")
    else:
        snap = m.snapshot
        voters = sorted(snap.meta.voters)
        parts.append(b"\x01")
        parts.append(_SNAP.pack(snap.index, snap.term, len(voters)))
        parts.extend(_U64.pack(v) for v in voters)
        parts.append(_U32.pack(len(snap.data)))
        parts.append(snap.data)
    return b"".join(parts)


def decode_message(buf: bytes) -> Message:
    try:
        return _decode(memoryview(buf))
    except struct.error as e:
        raise WireError(f"truncated message: {e}") from None


def _decode(buf: memoryview) -> Message:
    if len(buf) < _HEAD.size:
        raise WireError(f"message of {len(buf)} bytes is shorter than its header")
    version, kind, src, dst, term, index, log_term, commit, reject, hint, count = _HEAD.unpack_from(buf)
    if version != VERSION:
        raise WireError(f"unknown version {version}")
    try:
        msg_type = MsgType(kind)
    except ValueError:
        raise WireError(f"unknown message type {kind}") from None
    if reject & ~7:
        raise WireError(f"unknown flags {reject:#x}")
    at = _HEAD.size
    if count > (len(buf) - at) // _ENTRY.size:
        raise WireError(f"{count} entries cannot fit in {len(buf) - at} bytes")
    entries: list[Entry] = []
    for _ in range(count):
        e_term, e_index, e_kind, length = _ENTRY.unpack_from(buf, at)
        at += _ENTRY.size
        if e_kind not in (EntryKind.NORMAL, EntryKind.NOOP, EntryKind.CONF):
            raise WireError(f"unknown entry kind {e_kind}")
        if length > len(buf) - at:
            raise WireError("entry data runs past the message")
        entries.append(Entry(e_term, e_index, EntryKind(e_kind), bytes(buf[at : at + length])))
        at += length
    if at >= len(buf):
        raise WireError("snapshot flag missing")
    flag = buf[at]
    at += 1
    snapshot: Snapshot | None = None
    if flag == 1:
        s_index, s_term, n = _SNAP.unpack_from(buf, at)
        at += _SNAP.size
        if n > MAX_VOTERS or n * 8 > len(buf) - at:
            raise WireError(f"{n} voters cannot fit")
        voters = frozenset(_U64.unpack_from(buf, at + 8 * k)[0] for k in range(n))
        at += 8 * n
        (length,) = _U32.unpack_from(buf, at)
        at += 4
        if length != len(buf) - at:
            raise WireError("snapshot data length does not match the message")
        snapshot = Snapshot(SnapshotMeta(s_index, s_term, voters), bytes(buf[at:]))
        at = len(buf)
    elif flag != 0:
        raise WireError("snapshot flag is not 0 or 1")
    if at != len(buf):
        raise WireError(f"{len(buf) - at} trailing bytes")
    return Message(
        msg_type,
        src,
        dst,
        term,
        index=index,
        log_term=log_term,
        commit=commit,
        entries=tuple(entries),
        reject=bool(reject & 1),
        reject_hint=hint,
        lost=bool(reject & 2),
        transfer=bool(reject & 4),
        snapshot=snapshot,
    )
