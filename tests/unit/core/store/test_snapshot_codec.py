"""The snapshot format: whole, byte by byte, truncated anywhere, tampered, versioned; never anything but a
SnapshotError for bad input."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.store import StoredMsg
from core.store.snapshot import (
    MAGIC,
    VERSION,
    SnapshotDecoder,
    SnapshotEncoder,
    SnapshotError,
    SnapshotHeader,
)

MSGS = [
    StoredMsg(3, "a.b", None, b"one", 10),
    StoredMsg(5, "a.c", b"NATS/1.0\r\n\r\n", b"", 11),
    StoredMsg(6, "\u00e9t\u00e9.x", b"", b"\x00" * 300, 12),
]
METAS = [("dedup/1", b"3"), ("c\u00e9", b"")]


def encode(msgs: list[StoredMsg] = MSGS, metas: list[tuple[str, bytes]] = METAS, last: int = 7) -> bytes:
    first = msgs[0].seq if msgs else last + 1
    enc = SnapshotEncoder(SnapshotHeader(first, last, 99, len(msgs), len(metas)))
    out = [c for m in msgs if (c := enc.msg(m)) is not None]
    out += [c for k, v in metas if (c := enc.meta(k, v)) is not None]
    out.append(enc.finish())
    return b"".join(out)


def decode(data: bytes, step: int | None = None) -> object:
    dec = SnapshotDecoder()
    if step is None:
        dec.feed(data)
    else:
        for i in range(0, len(data), step):
            dec.feed(data[i : i + step])
    return dec.finish()


def test_round_trip_whole_and_byte_by_byte() -> None:
    blob = encode()
    for step in (None, 1, 7):
        snap = decode(blob, step)
        assert snap.header == SnapshotHeader(3, 7, 99, 3, 2)  # type: ignore[attr-defined]
        assert snap.msgs == MSGS  # type: ignore[attr-defined]
        assert snap.metas == METAS  # type: ignore[attr-defined]


def test_empty_snapshot_round_trips() -> None:
    snap = decode(encode([], [], last=0))
    assert snap.header == SnapshotHeader(1, 0, 99, 0, 0)  # type: ignore[attr-defined]


def test_truncation_anywhere_is_an_error() -> None:
    blob = encode()
    for cut in range(len(blob)):
        with pytest.raises(SnapshotError):
            decode(blob[:cut])


def test_trailing_data_is_an_error() -> None:
    with pytest.raises(SnapshotError):
        decode(encode() + b"\x00")


def test_any_flipped_byte_is_an_error() -> None:
    blob = encode()
    for i in range(len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 0x41
        with pytest.raises(SnapshotError):
            decode(bytes(bad))


def test_newer_version_is_refused() -> None:
    blob = MAGIC + struct.pack(">H", VERSION + 1) + encode()[len(MAGIC) + 2 :]
    with pytest.raises(SnapshotError, match="newer"):
        decode(blob)


def test_not_a_snapshot() -> None:
    with pytest.raises(SnapshotError, match="not a leafjet"):
        decode(b"PK\x03\x04 a zip file")


def test_out_of_order_messages_are_refused() -> None:
    with pytest.raises(SnapshotError):
        decode(encode([MSGS[1], MSGS[0]]))


def test_encoder_refuses_a_count_that_does_not_match_its_header() -> None:
    enc = SnapshotEncoder(SnapshotHeader(1, 1, 0, 2, 0))
    enc.msg(StoredMsg(1, "a", None, b"", 0))
    with pytest.raises(SnapshotError):
        enc.finish()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 17))
def test_arbitrary_bytes_give_a_snapshot_error_only(data: bytes, step: int) -> None:
    for blob in (data, MAGIC + struct.pack(">H", VERSION) + data):
        with contextlib.suppress(SnapshotError):
            decode(blob, step)
