"""The bulk read API's columnar frame: round trips, Arrow's layout, and garbage refused."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.protocol.readframe import (
    HEADER,
    MAGIC,
    FrameError,
    compress_frame,
    decode_frame,
    decompress_frame,
    encode_frame,
)

PROPERTY = settings(max_examples=150, deadline=None, database=None)

Row = tuple[int, str, bytes | None, bytes, int]


def frame_of(rows: list[Row]) -> bytes:
    return encode_frame(
        [r[0] for r in rows],
        [r[4] for r in rows],
        [r[1].encode("utf-8", "surrogateescape") for r in rows],
        [r[2] or b"" for r in rows],
        [r[3] for r in rows],
    )


ROWS: list[Row] = [
    (1, "orders.1", None, b"hello", 1_700_000_000_000_000_000),
    (2, "orders.2", b"NATS/1.0\r\nA: b\r\n\r\n", b"", 1_700_000_000_000_000_001),
    (7, "orders.\u00e9", None, b"x" * 1000, -5),
]


def test_round_trip_keeps_every_column() -> None:
    assert list(decode_frame(frame_of(ROWS)).rows()) == ROWS


def test_empty_frame_round_trips() -> None:
    frame = frame_of([])
    assert len(decode_frame(frame)) == 0
    assert len(frame) % 8 == 0


def test_every_section_starts_on_an_eight_byte_boundary() -> None:
    # 3 rows, subjects of 8+8+9 bytes: header 16, seqs 24, ts 24, subject offsets 16: subjects at 80
    frame = frame_of(ROWS)
    f = decode_frame(frame)
    assert bytes(f.subject_bytes) == frame[80 : 80 + 25]
    assert len(frame) % 8 == 0


def test_arrow_builds_arrays_from_the_buffers() -> None:
    pa = pytest.importorskip("pyarrow")
    f = decode_frame(frame_of(ROWS))
    bufs = f.arrow_buffers()
    n = len(f)
    seq = pa.Array.from_buffers(pa.uint64(), n, [None, pa.py_buffer(bufs["seq"][0])])
    data = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(bufs["data"][0]), pa.py_buffer(bufs["data"][1])]
    )
    subject = pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(bufs["subject"][0]), pa.py_buffer(bufs["subject"][1])]
    )
    assert seq.to_pylist() == [1, 2, 7]
    assert data.to_pylist() == [b"hello", b"", b"x" * 1000]
    assert subject.to_pylist() == ["orders.1", "orders.2", "orders.\u00e9"]


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_frame([1, 2], [0], [b"a", b"b"], [b"", b""], [b"", b""])


def test_an_out_of_range_sequence_is_a_frame_error() -> None:
    with pytest.raises(FrameError):
        encode_frame([-1], [0], [b"a"], [b""], [b""])


@pytest.mark.parametrize("cut", [0, 3, 15, 16, 23, 40, -1])
def test_truncated_frames_raise_frame_error(cut: int) -> None:
    frame = frame_of(ROWS)
    with pytest.raises(FrameError):
        decode_frame(frame[:cut])


def test_every_prefix_of_a_frame_is_refused() -> None:
    frame = frame_of(ROWS)
    for cut in range(len(frame)):
        with pytest.raises(FrameError):
            decode_frame(frame[:cut])


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(FrameError, match="after the frame"):
        decode_frame(frame_of(ROWS) + b"\0" * 8)


def test_another_version_is_refused_by_name() -> None:
    frame = bytearray(frame_of(ROWS))
    struct.pack_into("<H", frame, 4, 2)
    with pytest.raises(FrameError, match="version 2"):
        decode_frame(bytes(frame))


def test_unknown_flags_and_magic_are_refused() -> None:
    frame = bytearray(frame_of(ROWS))
    frame[6] = 1
    with pytest.raises(FrameError, match="flags"):
        decode_frame(bytes(frame))
    with pytest.raises(FrameError, match="magic"):
        decode_frame(b"XXXX" + frame_of(ROWS)[4:])


def test_forged_offsets_are_refused() -> None:
    frame = bytearray(frame_of(ROWS[:1]))
    # the subject offsets follow the 16-byte header, one seq and one ts: [0, 8] -> [0, 9999]
    struct.pack_into("<i", frame, HEADER.size + 16 + 4, 9999)
    with pytest.raises(FrameError):
        decode_frame(bytes(frame))
    struct.pack_into("<ii", frame, HEADER.size + 16, 4, 8)
    with pytest.raises(FrameError, match="start at 0"):
        decode_frame(bytes(frame))


def test_sequences_must_increase() -> None:
    rows = [ROWS[1], ROWS[0]]
    with pytest.raises(FrameError, match="increasing"):
        decode_frame(frame_of(rows))


def test_a_huge_count_is_refused_before_allocating() -> None:
    with pytest.raises(FrameError, match="rows in"):
        decode_frame(HEADER.pack(MAGIC, 1, 0, 0xFFFFFFFF, 0))


def test_compressed_frames_round_trip_and_are_bounded() -> None:
    frame = frame_of(ROWS)
    assert decompress_frame(compress_frame(frame)) == frame
    with pytest.raises(FrameError, match="out of bounds"):
        decompress_frame(compress_frame(b"\0" * 4096), max_size=1024)
    with pytest.raises(FrameError):
        decompress_frame(b"garbage that is no zstd")


rows_strategy = st.lists(
    st.tuples(
        st.integers(1, 1000),
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=20),
        st.one_of(st.none(), st.binary(min_size=1, max_size=40)),
        st.binary(max_size=200),
        st.integers(-(1 << 63), (1 << 63) - 1),
    ),
    max_size=30,
)


@PROPERTY
@given(rows_strategy)
def test_any_rows_round_trip(raw: list[Row]) -> None:
    seq = 0
    rows: list[Row] = []
    for step, subject, headers, data, ts in raw:
        seq += step
        rows.append((seq, subject, headers, data, ts))
    assert list(decode_frame(frame_of(rows)).rows()) == rows


@PROPERTY
@given(st.binary(max_size=300))
def test_any_bytes_give_a_frame_or_a_frame_error(data: bytes) -> None:
    with contextlib.suppress(FrameError):
        decode_frame(data)


@PROPERTY
@given(rows_strategy.filter(bool), st.data())
def test_any_corruption_gives_a_frame_or_a_frame_error(raw: list[Row], data: st.DataObject) -> None:
    rows = [(i + 1, s, h, d, t) for i, (_x, s, h, d, t) in enumerate(raw)]
    frame = bytearray(frame_of(rows))
    pos = data.draw(st.integers(0, len(frame) - 1))
    frame[pos] ^= data.draw(st.integers(1, 255))
    try:
        for _row in decode_frame(bytes(frame)).rows():
            pass
    except FrameError:
        pass


@pytest.fixture(params=["numpy", "no numpy"])
def vectors(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The whole-column checks run with numpy when it is installed, else as C-level maps: both."""
    from core import vector

    if request.param == "no numpy":
        monkeypatch.setattr(vector, "_NUMPY", False)
    elif vector.numpy() is None:
        pytest.skip("numpy is not installed")
    return str(request.param)


def _rows(n: int) -> list[Row]:
    hdr = b"NATS/1.0\r\n\r\n"
    return [(i + 1, f"s.{i % 7}", hdr if i % 5 == 0 else None, b"d" * (i % 13), i) for i in range(n)]


OFFSETS_AT = HEADER.size + 2 * 8 * 300  # 300 rows: the subject offsets follow seqs and timestamps


@pytest.mark.parametrize("row", [1, 150, 299])
def test_an_offset_that_goes_back_anywhere_is_refused(vectors: str, row: int) -> None:
    frame = bytearray(frame_of(_rows(300)))
    (prev,) = struct.unpack_from("<i", frame, OFFSETS_AT + 4 * (row - 1))
    struct.pack_into("<i", frame, OFFSETS_AT + 4 * row, prev - 1)
    with pytest.raises(FrameError, match="subject offsets decrease"):
        decode_frame(bytes(frame))


@pytest.mark.parametrize("row", [1, 150, 299])
def test_a_sequence_out_of_order_anywhere_is_refused(vectors: str, row: int) -> None:
    frame = bytearray(frame_of(_rows(300)))
    struct.pack_into("<Q", frame, HEADER.size + 8 * row, row)  # equal to the one before
    with pytest.raises(FrameError, match="not increasing"):
        decode_frame(bytes(frame))


def test_sequence_zero_is_refused(vectors: str) -> None:
    frame = bytearray(frame_of(_rows(3)))
    struct.pack_into("<Q", frame, HEADER.size, 0)
    with pytest.raises(FrameError, match="not increasing"):
        decode_frame(bytes(frame))


def test_a_last_offset_past_the_frame_is_refused(vectors: str) -> None:
    frame = bytearray(frame_of(_rows(300)))
    struct.pack_into("<i", frame, OFFSETS_AT + 4 * 300, 1 << 30)  # non-decreasing, but out of bounds
    with pytest.raises(FrameError, match="truncated"):
        decode_frame(bytes(frame))


def test_decoded_columns_are_views_of_the_frame_and_round_trip(vectors: str) -> None:
    rows = _rows(300)
    frame = frame_of(rows)
    f = decode_frame(frame)
    assert list(f.rows()) == rows
    assert list(f.seqs) == [r[0] for r in rows] and list(f.timestamps) == [r[4] for r in rows]
    bufs = f.arrow_buffers()
    assert bytes(bufs["seq"][0]) == frame[HEADER.size : HEADER.size + 8 * 300]
