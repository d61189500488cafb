"""The RAFT wire codec: every message round-trips; any other bytes are a WireError."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.raft.types import Entry, EntryKind, Message, MsgType, Snapshot, SnapshotMeta
from hub.raft.wire import WireError, decode_message, encode_message

u64 = st.integers(min_value=0, max_value=2**64 - 1)
entries = st.builds(Entry, u64, u64, st.sampled_from(list(EntryKind)), st.binary(max_size=64))
snapshots = st.builds(
    Snapshot, st.builds(SnapshotMeta, u64, u64, st.frozensets(u64, max_size=5)), st.binary(max_size=64)
)
messages = st.builds(
    Message,
    st.sampled_from(list(MsgType)),
    u64,
    u64,
    u64,
    index=u64,
    log_term=u64,
    commit=u64,
    entries=st.lists(entries, max_size=4).map(tuple),
    reject=st.booleans(),
    reject_hint=u64,
    snapshot=st.none() | snapshots,
    lost=st.booleans(),
    transfer=st.booleans(),
)


@given(messages)
def test_every_message_round_trips(m: Message) -> None:
    assert decode_message(encode_message(m)) == m


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_bytes_give_a_message_or_a_wire_error(data: bytes) -> None:
    with contextlib.suppress(WireError):
        decode_message(data)


def test_truncated_and_padded_messages_are_refused() -> None:
    m = Message(MsgType.APPEND, 1, 2, 3, entries=(Entry(3, 1, EntryKind.NORMAL, b"abc"),))
    raw = encode_message(m)
    for cut in range(len(raw)):
        with pytest.raises(WireError):
            decode_message(raw[:cut])
    with pytest.raises(WireError):
        decode_message(raw + b"\x00")
    with pytest.raises(WireError, match="version"):
        decode_message(b"\x09" + raw[1:])


def test_unknown_flags_are_refused() -> None:
    raw = bytearray(encode_message(Message(MsgType.VOTE, 1, 2, 3, transfer=True)))
    flags_at = 2 + 6 * 8  # version, type, then six u64 fields
    assert raw[flags_at] == 4
    raw[flags_at] |= 8
    with pytest.raises(WireError, match="flags"):
        decode_message(bytes(raw))
