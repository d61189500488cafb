"""The driver proposes together what is queued together: three real drivers (files on disk, one
event loop, messages handed from one to another), many concurrent proposals on the leader. Each
proposer gets its own entry's index, every server applies them in that order, and the leader
sends far fewer appends than one per proposal per follower."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hub.raft.driver import RaftDriver
from hub.raft.files import OsFiles
from hub.raft.log_store import LogStore
from hub.raft.types import Entry, Message, MsgType, Snapshot

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PROPOSALS = 200


class Recorder:
    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def read_snapshot(self, data: bytes) -> None:
        return None

    def restore(self, snapshot: Snapshot, state: None) -> None:
        self.applied = []

    def snapshot(self) -> bytes:
        return b""

    def apply(self, entry: Entry) -> None:
        self.applied.append((entry.index, entry.data))


async def test_concurrent_proposals_share_appends_and_keep_their_order(tmp_path: Path) -> None:
    ids = (1, 2, 3)
    machines = {i: Recorder() for i in ids}
    drivers = {
        i: RaftDriver("t", i, LogStore(OsFiles(tmp_path / f"n{i}")), machines[i], tick_interval=0.01)
        for i in ids
    }
    appends: dict[int, int] = dict.fromkeys(ids, 0)  # appends with entries, by sender

    def sender(src: int):
        def send(m: Message) -> None:
            if m.type is MsgType.APPEND and m.entries:
                appends[src] += 1
            drivers[m.dst].step(m)

        return send

    async with anyio.create_task_group() as tg:
        for i, d in drivers.items():
            assert d.open(ids)
            d.send = sender(i)
            await tg.start(d.run)
        with anyio.fail_after(60):
            while not any(d.is_leader() for d in drivers.values()):
                await anyio.sleep(0.01)
        leader = next(d for d in drivers.values() if d.is_leader())
        with anyio.fail_after(60):  # followers replicating (not probing) before the burst
            for k in range(3):
                index, _term = await leader.propose([b"warm-up %d" % k])
                for d in drivers.values():
                    await d.wait_applied(index)
        before = appends[leader.id]

        results: dict[int, tuple[int, int]] = {}

        async def propose(k: int) -> None:
            results[k] = await leader.propose([b"p%d" % k])

        with anyio.fail_after(60):
            async with anyio.create_task_group() as burst:
                for k in range(PROPOSALS):
                    burst.start_soon(propose, k)
            last = max(index for index, _term in results.values())
            for d in drivers.values():
                await d.wait_applied(last)
        sent = appends[leader.id] - before
        tg.cancel_scope.cancel()
    for d in drivers.values():
        d.close()

    indexes = sorted(index for index, _term in results.values())
    assert indexes == list(range(indexes[0], indexes[0] + PROPOSALS)), "one entry, one index each"
    by_index = {index: b"p%d" % k for k, (index, _term) in results.items()}
    for m in machines.values():
        got = {i: data for i, data in m.applied if i in by_index}
        assert got == by_index, "every server applied each proposer's entry at the index it was told"
    # one append per follower per proposal without batching (2 x PROPOSALS)
    assert sent < PROPOSALS // 2, f"{sent} appends for {PROPOSALS} proposals"
