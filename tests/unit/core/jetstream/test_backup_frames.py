"""A backup's bytes as a restore reads them back (core/jetstream/backup.py): the store snapshot in
Snappy framing, one framed stream per piece, concatenated. Whatever the bytes, reading them
gives the pieces back or a StoreError; never another exception, never a hang."""

from __future__ import annotations

import contextlib
import io
import os

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import StoreError
from core.jetstream.backup import SNAPPY_MAGIC, _read_frames


def read_all(data: bytes) -> bytes:
    """What the restore reads from a spool holding ``data`` (its identifier checked first)."""
    f = io.BytesIO(data)
    if f.read(len(SNAPPY_MAGIC)) != SNAPPY_MAGIC:
        raise StoreError("not a leafjet stream backup")
    out = []
    while (piece := _read_frames(f, 1000)) is not None:
        out.append(piece)
    return b"".join(out)


def framed(*pieces: bytes) -> bytes:
    return b"".join(bytes(cramjam.snappy.compress(p)) for p in pieces)


def test_pieces_framed_one_by_one_read_back_whole() -> None:
    pieces = [os.urandom(70_000), b"x" * 300_000, b"", os.urandom(5)]
    assert read_all(framed(*pieces)) == b"".join(pieces)
    # and the concatenation is one framed stream to another reader (an S2 reader reads it so)
    assert bytes(cramjam.snappy.decompress(framed(*pieces))) == b"".join(pieces)


def test_a_cut_anywhere_in_a_frame_is_a_store_error() -> None:
    data = framed(os.urandom(3000), b"y" * 5000)
    for cut in range(len(SNAPPY_MAGIC) + 1, len(data), 97):
        try:
            got = read_all(data[:cut])
        except StoreError:
            continue
        # a cut on a frame boundary reads the frames before it (fewer bytes): the snapshot's
        # own end record then finds the snapshot truncated
        assert len(got) < 8000


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_after_the_identifier_give_pieces_or_a_store_error(tail: bytes) -> None:
    with contextlib.suppress(StoreError):
        read_all(SNAPPY_MAGIC + tail)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=len(SNAPPY_MAGIC), max_value=4000), st.integers(min_value=1, max_value=255))
def test_a_flipped_byte_gives_other_bytes_or_a_store_error(at: int, flip: int) -> None:
    data = bytearray(framed(os.urandom(2000), b"z" * 2000))
    if at >= len(data):
        return
    data[at] ^= flip
    with contextlib.suppress(StoreError):
        read_all(bytes(data))  # other bytes: the snapshot's checksum refuses them (its own tests)


def test_another_servers_backup_is_refused_by_its_identifier() -> None:
    s2_stream = b"\xff\x06\x00\x00S2sTwO" + b"\x00" * 20  # how a nats-server backup begins
    with pytest.raises(StoreError):
        read_all(s2_stream)
