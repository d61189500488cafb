"""The zstd stream codec: round trips under any chunking, bounded output, corrupt input."""

from __future__ import annotations

import json
import tracemalloc

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ProtocolError
from core.protocol.compress import CORRUPT, ZstdReader, ZstdWriter
from tests.unit.core.protocol.test_parser_properties import chunked

PROPERTY = settings(max_examples=100, deadline=None, database=None)

MiB = 1 << 20


def drain(reader: ZstdReader, data: bytes) -> bytes:
    """Everything ``data`` decompresses to, checking each call's bound on the way."""
    out = [reader.decompress(data)]
    while reader.pending():
        out.append(reader.decompress(b""))
    assert all(len(piece) <= reader.max_output for piece in out)
    return b"".join(out)


def _block(size: int, kind: int, last: bool = False) -> bytes:
    """A zstd block header: last-block bit, type (0 raw, 1 RLE, 2 compressed), size."""
    return ((size << 3) | (kind << 1) | last).to_bytes(3, "little")


# frame header: magic, descriptor (no content size, no checksum), window descriptor 2 MiB
_FRAME = bytes.fromhex("28b52ffd") + b"\x00" + b"\x58"


def rle_bomb(blocks: int) -> bytes:
    """``blocks`` RLE blocks of 128 KiB: 4 bytes on the wire for each 128 KiB."""
    return _FRAME + (_block(128 * 1024, 1) + b"\x00") * blocks


# ====================================================================== round trips


def test_each_compressed_piece_is_decodable_at_once():
    writer, reader = ZstdWriter(), ZstdReader(MiB)
    for message in (b"PING\r\n", b"LS+ foo\r\n", b"LMSG foo 2\r\nhi\r\n" * 3, b"x"):
        piece = writer.compress(message)
        assert reader.decompress(piece) == message
        assert not reader.pending()


def test_compressing_nothing_gives_nothing():
    writer, reader = ZstdWriter(), ZstdReader(10)
    assert writer.compress(b"") == b""
    assert reader.decompress(b"") == b""
    assert not reader.pending()


def test_repeated_json_compresses_well_with_one_context():
    writer = ZstdWriter()
    frames = [
        b"LMSG telemetry.d-%d 0 %d\r\n" % (i % 20, 0)
        + json.dumps({"device": f"d-{i % 20}", "temp": 20 + i % 7 / 2, "seq": i, "status": "ok"}).encode()
        + b"\r\n"
        for i in range(200)
    ]
    raw = sum(map(len, frames))
    assert raw / sum(len(writer.compress(f)) for f in frames) > 3  # frame by frame
    assert raw / len(ZstdWriter().compress(b"".join(frames))) > 8  # batched


@pytest.mark.parametrize("level", [-5, 1, 19, 22])
def test_any_level_is_readable_by_a_default_reader(level: int):
    # the writer caps its window at what the reader accepts (level 22 would use 128 MiB)
    data = b"abc" * 1000 + bytes(range(256)) * 10
    assert drain(ZstdReader(MiB), ZstdWriter(level).compress(data)) == data


@PROPERTY
@given(
    messages=st.lists(st.binary(max_size=300) | st.sampled_from([b"A" * 5000, b"LS+ foo\r\n"]), max_size=8),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    max_output=st.sampled_from([1, 7, 100, MiB]),
)
def test_round_trip_under_any_chunking(messages: list[bytes], cuts: list[int], max_output: int):
    writer = ZstdWriter()
    stream = b"".join(writer.compress(m) for m in messages)
    reader = ZstdReader(max_output)
    assert b"".join(drain(reader, chunk) for chunk in chunked(stream, cuts)) == b"".join(messages)


def test_a_stream_of_several_frames_is_read_across_them():
    frames = b"".join(zstandard.ZstdCompressor().compress(m) for m in (b"one ", b"two ", b"three"))
    assert drain(ZstdReader(100), frames) == b"one two three"


# ====================================================================== bounds


def test_a_bomb_gives_at_most_max_output_per_call():
    reader = ZstdReader(MiB)
    bomb = rle_bomb(8192)  # 32 KiB that decompress to 1 GiB
    tracemalloc.start()
    try:
        first = reader.decompress(bomb)
        peak = tracemalloc.get_traced_memory()[1]
        total = len(first)
        for _ in range(16):
            tracemalloc.reset_peak()
            piece = reader.decompress(b"")
            peak = max(peak, tracemalloc.get_traced_memory()[1])
            assert len(piece) == MiB
            total += len(piece)
    finally:
        tracemalloc.stop()
    assert len(first) == MiB
    assert reader.pending()
    assert total == 17 * MiB
    assert peak < 8 * MiB  # linear in max_output (measured ~6 MiB), never in the 1 GiB


def test_a_small_budget_still_makes_progress_on_big_blocks():
    reader = ZstdReader(1000)
    pieces = [reader.decompress(rle_bomb(2))]
    while reader.pending():
        pieces.append(reader.decompress(b""))
    assert all(len(p) <= 1000 for p in pieces)
    assert b"".join(pieces) == bytes(256 * 1024)


def test_a_legitimate_big_stream_drains_completely():
    data = bytes(6 * MiB) + b"end"
    compressed = ZstdWriter().compress(data)
    assert len(compressed) < 1000
    assert drain(ZstdReader(MiB), compressed) == data


def test_max_output_must_be_positive():
    with pytest.raises(ValueError):
        ZstdReader(0)


# ====================================================================== corrupt input


@pytest.mark.parametrize(
    "data",
    [
        b"not zstd at all",
        _FRAME + _block(131073, 1) + b"\x00",  # a block larger than 128 KiB
        bytes.fromhex("28b52ffd") + b"\x00" + b"\xf8" + _block(1, 1) + b"a",  # a 2**41 window
        _FRAME + _block(40, 2) + bytes(40),  # a compressed block that is garbage
    ],
)
def test_corrupt_input_is_a_protocol_error_and_the_reader_stays_dead(data: bytes):
    reader = ZstdReader(MiB)
    with pytest.raises(ProtocolError) as info:
        drain(reader, data)
    assert (info.value.message, info.value.close) == (CORRUPT, True)
    with pytest.raises(ProtocolError):
        reader.decompress(ZstdWriter().compress(b"x"))


def test_corruption_after_good_data_keeps_the_good_part_out_first():
    writer = ZstdWriter()
    reader = ZstdReader(MiB)
    assert reader.decompress(writer.compress(b"hello")) == b"hello"
    with pytest.raises(ProtocolError):
        drain(reader, b"\xff" * 64)


def test_a_truncated_stream_waits_for_more():
    compressed = ZstdWriter().compress(b"hello world " * 100)
    reader = ZstdReader(MiB)
    assert reader.decompress(compressed[:-3]) == b""
    assert drain(reader, compressed[-3:]) == b"hello world " * 100


@PROPERTY
@given(
    data=st.binary(max_size=400) | st.binary(max_size=300).map(lambda b: _FRAME + b),
    cuts=st.lists(st.integers(min_value=0), max_size=6),
)
def test_any_bytes_give_bytes_or_protocol_error(data: bytes, cuts: list[int]):
    reader = ZstdReader(4096)
    try:
        for chunk in chunked(data, cuts):
            assert type(drain(reader, chunk)) is bytes
    except ProtocolError as e:
        assert e.message == CORRUPT
