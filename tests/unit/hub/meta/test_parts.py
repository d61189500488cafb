"""RAFT messages in parts (hub/meta/parts.py): split and joined whole, and every bound held.

The bus test sends a 3 MiB snapshot between two buses of one account, in 64 KiB parts: a route
would close on it whole (its max_payload is 1 MiB)."""

from __future__ import annotations

import os
import random

import anyio
import pytest

from core.protocol.headers import encode_headers
from core.server.accounts import Account
from hub.meta import parts as parts_module
from hub.meta.bus import RAFT_PREFIX, Bus
from hub.meta.parts import PART_HEADER, Assembler, PartError, split
from hub.raft.types import Message, MsgType, Snapshot, SnapshotMeta


def test_parts_taken_in_any_order_give_back_the_message():
    data = os.urandom(10_000)
    pieces = list(split(data, 999))
    assert len(pieces) == 11 and all(len(p) <= 999 for _, p in pieces)
    random.Random(7).shuffle(pieces)
    a = Assembler()
    got = [a.add(h, p, 0.0) for h, p in pieces]
    assert got[:-1] == [None] * 10 and got[-1] == data
    assert len(a) == 0


def test_two_messages_in_parts_at_once_do_not_mix():
    one, two = os.urandom(5000), os.urandom(5000)
    a = Assembler()
    out = []
    for (h1, p1), (h2, p2) in zip(split(one, 1000), split(two, 1000), strict=True):
        out += [a.add(h1, p1, 0.0), a.add(h2, p2, 0.0)]
    assert [x for x in out if x is not None] == [one, two]


@pytest.mark.parametrize(
    "header",
    [
        "abc 0",  # too few fields
        "abc 0 2 x",  # too many
        "abc x 2",
        "abc 0 ²",  # a digit int() refuses
        "abc 2 2",  # part beyond the count
        "abc 0 1",  # a message of one part is sent whole
        f"abc 0 {parts_module.MAX_PARTS + 1}",
        "abc 0 99999999999",
        " 0 2",  # no id
    ],
)
def test_a_malformed_part_header_is_refused(header: str):
    with pytest.raises(PartError):
        Assembler().add(header, b"x", 0.0)


def test_a_part_that_disagrees_on_the_count_is_refused():
    a = Assembler()
    assert a.add("abc 0 3", b"x", 0.0) is None
    with pytest.raises(PartError, match="says 4 parts"):
        a.add("abc 1 4", b"y", 0.0)


def test_a_message_past_the_byte_bound_is_dropped(monkeypatch):
    monkeypatch.setattr(parts_module, "MAX_MESSAGE_BYTES", 100)
    a = Assembler()
    assert a.add("abc 0 3", b"x" * 60, 0.0) is None
    with pytest.raises(PartError, match="passes 100 bytes"):
        a.add("abc 1 3", b"x" * 60, 0.0)
    assert len(a) == 0


def test_waiting_parts_are_bounded_in_bytes_all_together(monkeypatch):
    monkeypatch.setattr(parts_module, "MAX_PENDING_BYTES", 250)
    a = Assembler()
    assert a.add("one 0 2", b"x" * 100, 0.0) is None
    assert a.add("two 0 2", b"x" * 100, 0.0) is None
    assert a.add("three 0 2", b"x" * 100, 0.0) is None  # past 250 together: "one" goes
    assert len(a) == 2 and a.dropped == 1
    assert a.add("one 1 2", b"y", 0.0) is None  # its first part is gone: it waits again
    assert a.add("three 1 2", b"y" * 10, 0.0) == b"x" * 100 + b"y" * 10


def test_waiting_messages_are_bounded_in_number_and_time():
    a = Assembler()
    for i in range(parts_module.MAX_PENDING + 2):
        a.add(f"m{i} 0 2", b"x", 0.0)
    assert len(a) == parts_module.MAX_PENDING and a.dropped == 2
    assert a.add("m0 1 2", b"y", 0.0) is None  # pushed out: its second part starts over
    a.add("late 0 2", b"x", parts_module.PART_TIMEOUT + 1)  # the others are stale by then
    assert len(a) == 1


def test_a_duplicate_part_changes_nothing():
    a = Assembler()
    assert a.add("abc 0 2", b"x", 0.0) is None
    assert a.add("abc 0 2", b"z", 0.0) is None
    assert a.add("abc 1 2", b"y", 0.0) == b"xy"


@pytest.mark.anyio
async def test_a_snapshot_larger_than_a_route_takes_crosses_in_parts():
    account = Account("$SYS")
    sender = Bus(account, "a" * 16, part_bytes=64 << 10)
    receiver = Bus(account, "b" * 16, part_bytes=64 << 10)
    got: list[Message] = []
    done = anyio.Event()

    def on_raft(m: Message) -> None:
        got.append(m)
        done.set()

    receiver.on_raft = on_raft
    receiver.start()
    snap = Snapshot(SnapshotMeta(42, 3, frozenset({1, 2, 3})), os.urandom(3 << 20))
    m = Message(MsgType.SNAPSHOT, 1, 2, 3, snapshot=snap)
    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver.serve, tg)
        # a garbage part first: dropped and counted, the real message still gets through
        account.publish(f"{RAFT_PREFIX}{'b' * 16}", None, encode_headers(((PART_HEADER, "zz 5 2"),)), b"junk")
        sender.send_raft("b" * 16, m)
        with anyio.fail_after(10):
            await done.wait()
        tg.cancel_scope.cancel()
    assert got == [m]
    assert receiver.bad_messages == 1
    receiver.close()
