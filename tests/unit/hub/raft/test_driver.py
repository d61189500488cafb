"""The anyio driver on a real log directory, one voter (it elects itself): local snapshots compact
the log (segment files go), a restart loads the snapshot plus the tail, and a disk error while
persisting ends neither the driver nor the process (the node is rebuilt from the disk)."""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path

import anyio
import pytest

from hub.meta.group import MetaMachine
from hub.meta.state import MetaState, encode_op
from hub.raft.driver import RaftDriver, SnapshotPolicy
from hub.raft.files import OsFiles
from hub.raft.log_store import SEGMENT_SUFFIX, LogStore
from hub.raft.types import Message, MsgType, Role, Snapshot, SnapshotMeta

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

_opened: list[RaftDriver] = []


@pytest.fixture(autouse=True)
def _close_drivers():
    """Each driver's event queue closed after its test: left to the garbage collector, it warns
    (ResourceWarning) in whatever test runs next in this worker, which then fails."""
    yield
    while _opened:
        _opened.pop().close()


NODE = 7


class FailingFiles(OsFiles):
    """A real directory whose appends fail (ENOSPC) while ``failing`` is set."""

    failing = False

    def append(self, name: str, data: bytes) -> None:
        if self.failing:
            raise OSError(28, "No space left on device (injected)")
        super().append(name, data)


def _driver(d: Path, files: OsFiles | None = None, every: int = 10) -> tuple[RaftDriver, MetaMachine]:
    machine = MetaMachine(lambda: None)
    store = LogStore(files or OsFiles(d), segment_bytes=512)
    driver = RaftDriver(
        "meta",
        NODE,
        store,
        machine,
        tick_interval=0.01,
        rng=random.Random(1),
        snapshots=SnapshotPolicy(every),
    )
    assert driver.open([NODE])
    _opened.append(driver)
    return driver, machine


async def _until_leader(driver: RaftDriver) -> None:
    with anyio.fail_after(20):
        while driver.role is not Role.LEADER:
            await driver.changed()


async def _create(driver: RaftDriver, i: int) -> None:
    op = encode_op("assign", account="A", name=f"S{i}", config={"name": f"S{i}"}, created=i, servers=["n1"])
    index, term = await driver.propose([op])
    assert await driver.wait_applied(index) == term


def _segments(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(SEGMENT_SUFFIX))


async def test_snapshots_compact_the_log_and_a_restart_loads_snapshot_plus_tail(tmp_path: Path) -> None:
    driver, machine = _driver(tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(driver.run)
        await _until_leader(driver)
        await _create(driver, 0)
        first_segments = _segments(tmp_path)
        for i in range(1, 60):
            await _create(driver, i)
            if i % 3 == 0:
                op = encode_op("remove", account="A", name=f"S{i}", created=i)
                index, _ = await driver.propose([op])
                await driver.wait_applied(index)
        tg.cancel_scope.cancel()
    driver.close()
    assert driver.snapshots_taken >= 5
    assert driver.node is not None and driver.node.log.snapshot.index > 50
    assert not set(first_segments) & set(_segments(tmp_path)), "old segments were not deleted"
    want = machine.state.to_bytes()
    assert len(machine.state.streams) == 41 and len(machine.state.tombstones) == 19

    again, machine2 = _driver(tmp_path)  # a restart: the snapshot, then the tail once committed
    async with anyio.create_task_group() as tg:
        await tg.start(again.run)
        await _until_leader(again)
        with anyio.fail_after(20):
            while again.applied < driver.applied:
                await again.changed()
        tg.cancel_scope.cancel()
    again.close()
    assert machine2.state.to_bytes() == want


async def test_a_disk_error_while_persisting_is_contained_and_the_node_comes_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = FailingFiles(tmp_path)
    driver, machine = _driver(tmp_path, files)
    async with anyio.create_task_group() as tg:
        await tg.start(driver.run)
        await _until_leader(driver)
        await _create(driver, 0)
        files.failing = True
        with caplog.at_level(logging.ERROR, logger="leafjet.raft"):
            await driver.propose([encode_op("remove", account="A", name="S0", created=0)])
            with anyio.fail_after(20):
                while driver.healthy:
                    await driver.changed()
        assert "cannot write its log" in caplog.text and "No space left" in caplog.text
        assert driver.disk_failures >= 1
        files.failing = False
        await _until_leader(driver)  # reopened from disk, elected again
        assert driver.healthy
        await _create(driver, 1)
        tg.cancel_scope.cancel()
    driver.close()
    # the entry whose write failed was never acknowledged; what was is there
    assert ("A", "S0") in machine.state.streams or ("A", "S0") in machine.state.tombstones
    assert ("A", "S1") in machine.state.streams


class PickyMachine(MetaMachine):
    """A state machine that cannot read any snapshot while ``refuse`` is set."""

    refuse = False

    def read_snapshot(self, data: bytes) -> MetaState:
        if self.refuse:
            raise ValueError("unreadable (injected)")
        return super().read_snapshot(data)


async def test_a_snapshot_the_machine_cannot_read_stops_only_this_member_until_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = FailingFiles(tmp_path)
    machine = PickyMachine(lambda: None)
    driver = RaftDriver(
        "meta", NODE, LogStore(files, segment_bytes=512), machine, tick_interval=0.01, rng=random.Random(1)
    )
    assert driver.open([NODE])
    _opened.append(driver)
    async with anyio.create_task_group() as tg:
        await tg.start(driver.run)
        await _until_leader(driver)
        await _create(driver, 0)
        # a write fails, and the reopened log's snapshot cannot be read either
        files.failing = machine.refuse = True
        with caplog.at_level(logging.ERROR, logger="leafjet.raft"):
            await driver.propose([encode_op("remove", account="A", name="S0", created=0)])
            with anyio.fail_after(20):
                while driver.disk_failures < 2:
                    await anyio.sleep(0.05)
            files.failing = False
            with anyio.fail_after(20):
                while driver.disk_failures < 3:
                    await anyio.sleep(0.05)
        assert "cannot be restored: unreadable (injected)" in caplog.text
        assert not driver.healthy and driver.leader == 0
        machine.refuse = False
        await _until_leader(driver)
        await _create(driver, 1)
        tg.cancel_scope.cancel()
    driver.close()
    assert ("A", "S1") in machine.state.streams


class ThreadNotingMachine(MetaMachine):
    """Notes the thread each snapshot is read in."""

    def __init__(self) -> None:
        super().__init__(lambda: None)
        self.read_in: list[threading.Thread] = []

    def read_snapshot(self, data: bytes) -> MetaState:
        self.read_in.append(threading.current_thread())
        return super().read_snapshot(data)


async def test_a_leaders_snapshot_is_decoded_off_the_event_loop(tmp_path: Path) -> None:
    """A follower far behind gets the leader's whole state as one snapshot: decompressing and
    parsing it (thousands of streams) happens in a worker thread, never on the event loop."""
    leader_state = MetaState()
    for i in range(50):
        leader_state.apply(
            {"op": "assign", "account": "A", "name": f"S{i}", "config": {}, "created": i, "servers": ["n1"]}
        )
    machine = ThreadNotingMachine()
    driver = RaftDriver("meta", NODE, LogStore(OsFiles(tmp_path)), machine, tick_interval=0.01)
    assert driver.open([NODE, NODE + 1])
    _opened.append(driver)
    machine.read_in.clear()  # the bootstrap snapshot read by open()
    snap = Snapshot(
        SnapshotMeta(index=40, term=2, voters=frozenset({NODE, NODE + 1})), leader_state.to_snapshot()
    )
    async with anyio.create_task_group() as tg:
        await tg.start(driver.run)
        driver.step(Message(MsgType.SNAPSHOT, NODE + 1, NODE, 2, snapshot=snap))
        with anyio.fail_after(20):
            while driver.applied < 40:
                await driver.changed()
        tg.cancel_scope.cancel()
    assert machine.state.digest() == leader_state.digest()
    assert machine.read_in and threading.main_thread() not in machine.read_in


class BrokenSnapshotMachine(MetaMachine):
    """A state machine whose ``snapshot`` raises (a bug)."""

    def snapshot(self) -> bytes:
        raise RuntimeError("cannot encode (injected)")


async def test_a_state_machine_that_cannot_snapshot_leaves_the_log_uncompacted_and_the_node_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    machine = BrokenSnapshotMachine(lambda: None)
    driver = RaftDriver(
        "meta", NODE, LogStore(OsFiles(tmp_path)), machine, tick_interval=0.01, snapshots=SnapshotPolicy(3)
    )
    assert driver.open([NODE])
    _opened.append(driver)
    with caplog.at_level(logging.ERROR, logger="leafjet.raft"):
        async with anyio.create_task_group() as tg:
            await tg.start(driver.run)
            await _until_leader(driver)
            for i in range(10):
                await _create(driver, i)
            tg.cancel_scope.cancel()
    assert "cannot snapshot" in caplog.text and "cannot encode (injected)" in caplog.text
    assert driver.snapshots_taken == 0 and driver.node is not None and driver.node.log.snapshot.index == 1
    assert len(machine.state.streams) == 10


async def test_the_appended_hook_hears_of_durable_entries_and_its_failure_stops_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    driver, machine = _driver(tmp_path, every=1000)
    heard: list[tuple[int, bool]] = []  # (index, already in the log store on disk)

    def on_appended(entries: list) -> None:
        for e in entries:
            stored = max((x.index for x in driver.store.entries()), default=0)
            heard.append((e.index, stored >= e.index))
        if len(heard) == 2:
            raise RuntimeError("a broken hook")

    driver.on_appended = on_appended
    async with anyio.create_task_group() as tg:
        await tg.start(driver.run)
        await _until_leader(driver)
        with caplog.at_level(logging.ERROR, logger="leafjet.raft"):
            for i in range(3):
                await _create(driver, i)
        tg.cancel_scope.cancel()
    assert len(machine.state.streams) == 3  # the hook's failure stopped no entry
    indexes = [i for i, _ in heard]
    assert indexes == sorted(indexes) and len(indexes) >= 3  # the leader's no-op and the three
    assert all(durable for _, durable in heard)  # told only once persisted
    assert "appended-entries hook failed" in caplog.text


async def test_a_waiter_hears_of_a_lost_leadership_that_commits_nothing(tmp_path: Path) -> None:
    """A leader that a newer term's heartbeat makes a follower (no entry committed by it) wakes
    ``changed()`` waiters at once, seeing the new leader: the role changed in ``step``, before
    the Ready that carries it, and that Ready is what must be announced (a stepdown waited
    for this; before, the waiter slept until the next commit, here the re-election's)."""
    driver, _machine = _driver(tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(driver.run)
        await _until_leader(driver)
        woke: list[tuple[int, Role]] = []

        async def wait() -> None:
            await driver.changed()
            woke.append((driver.leader, driver.role))

        tg.start_soon(wait)
        await anyio.sleep(0.05)
        assert not woke  # nothing changed yet
        driver.step(Message(MsgType.HEARTBEAT, 9, NODE, driver.term + 5))
        with anyio.fail_after(5):
            while not woke:
                await anyio.sleep(0.001)
        tg.cancel_scope.cancel()
    assert woke == [(9, Role.FOLLOWER)]
