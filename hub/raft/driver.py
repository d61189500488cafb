"""The anyio shell around one sans-IO RAFT ``Node``: ticks from a clock, messages and proposals
in, and each ``Ready`` done in the contract's order (hub/raft/DESIGN.md "The driver contract").

One task owns the node: every tick, received message and proposal is an event on one bounded
queue, so nothing touches the node between ``ready()`` and ``advance()``. For each Ready:
persist (the snapshot, the entries with one fsync, the hard state; on the group's own disk
thread, core/threads.py, so the event loop never waits on a disk), then send, apply, advance.

A proposal returns the (index, term) the leader gave it; ``wait_applied(index)`` returns the term
of the entry applied at that index, so the proposer can tell its entry from another leader's
that replaced it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

from core import trace
from core.lograte import worth_logging
from core.threads import SerialThread
from hub.raft.log_store import CorruptLog, Loaded, LogStore
from hub.raft.node import Config, Node, NotLeader, ProposalError, bootstrap_snapshot
from hub.raft.types import NONE, ConfChange, Entry, EntryKind, Message, NodeId, Ready, Role, Snapshot

log = logging.getLogger("leafjet.raft")

KEEP_TERMS = 4096  # terms of the newest applied entries, for proposers reading theirs
EVENT_QUEUE = 4096  # events waiting for the node's task (messages beyond it are dropped: RAFT retries)


class StateMachine(Protocol):
    def read_snapshot(self, data: bytes) -> Any:
        """``data`` of a snapshot (b"": the empty state) decoded into what ``restore`` installs.
        Called in a worker thread (a large state takes a while to decode); it must not touch the
        current state. Raises for bytes it cannot read."""

    def restore(self, snapshot: Snapshot, state: Any) -> None:
        """Replace the whole state with ``state`` (``read_snapshot(snapshot.data)``)."""

    def snapshot(self) -> bytes:
        """The whole state as it is now (everything applied so far), for ``restore``. Called in
        a worker thread while no entry is applied; it must only read."""

    def apply(self, entry: Entry) -> None:
        """Apply one committed NORMAL entry. Must not raise for a bad entry: log it and skip it
        (every server skips it alike)."""


Send = Callable[[Message], None]


@dataclass
class _Proposal:
    data: list[bytes]
    done: anyio.Event
    conf: ConfChange | None = None  # a membership change instead of data
    stepdown: bool = False  # give up leading instead
    transfer_to: NodeId = NONE  # hand leadership to this voter instead
    result: tuple[int, int] | None = None
    error: ProposalError | None = None

    def is_data(self) -> bool:
        return self.conf is None and not self.stepdown and self.transfer_to == NONE


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When the driver takes a local snapshot and compacts the log behind it: once this many
    entries, or this many bytes of entries, were applied since the last snapshot (whichever comes
    first). The reference snapshots its meta group past 8 MiB of log, at most every 30 s."""

    entries: int = 4096
    bytes: int = 4 << 20


class RestoreFailed(Exception):
    """The state machine could not take a snapshot (its bytes are not a state it can read)."""


PERSIST_RETRY = (0.1, 5.0)  # first and longest pause before reopening the log after a disk error


class RaftDriver:
    def __init__(
        self,
        group: str,
        node_id: NodeId,
        store: LogStore,
        machine: StateMachine,
        *,
        tick_interval: float = 0.1,
        election_ticks: int = 15,
        heartbeat_ticks: int = 2,
        rng: random.Random | None = None,
        snapshots: SnapshotPolicy | None = None,
    ) -> None:
        self.group = group
        self.id = node_id
        self.store = store
        self.machine = machine
        self._disk = SerialThread(f"leafjet-raft-{group}")  # the log's writes, in order
        self.tick_interval = tick_interval
        self._config = Config(id=node_id, election_ticks=election_ticks, heartbeat_ticks=heartbeat_ticks)
        self._rng = rng or random.Random()
        self.node: Node | None = None
        self.send: Send = lambda m: None
        # told of the entries this node appended to its log, once they are durable and before
        # they are committed (a hint: they may never commit); must not block
        self.on_appended: Callable[[Sequence[Entry]], None] | None = None
        self.applied = 0
        self._applied_terms: dict[int, int] = {}  # index -> term, for waiters (pruned as they go)
        self._waiters: dict[int, list[anyio.Event]] = {}
        self._changed = anyio.Event()  # set (and replaced) on every leader or applied change
        self._announced: tuple[NodeId, Role] = (NONE, Role.FOLLOWER)  # the leader and role last told
        self._queued: list[_Proposal] = []  # data proposals taken since the last node.propose
        self._send_events, self._events = anyio.create_memory_object_stream[Message | _Proposal | _Tick](
            EVENT_QUEUE
        )
        self.dropped = 0
        self.snapshots = snapshots or SnapshotPolicy()
        self._applied_bytes = 0  # bytes of entries applied since the last snapshot
        self._snapshot_base = 0  # index of the last snapshot (or of the last try)
        self.snapshots_taken = 0
        self.disk_failures = 0  # Readys whose persisting failed (each one reopened the log)
        self.healthy = True  # False from a disk failure until the log is open again

    # ------------------------------------------------------------------ set-up

    def open(self, founders: Iterable[NodeId] | None, *, recovering: bool = False) -> bool:
        """Load the log; a store never written takes the bootstrap snapshot of ``founders`` (when
        given). Returns False when the store is empty and no founders are known yet.
        ``recovering``: the store is empty because this server lost it while the group went on
        (hub/raft/DESIGN.md "Lost logs"); noted durably before anything else is written."""
        loaded = self.store.open()
        snapshot = loaded.snapshot
        if snapshot.index == 0 and not loaded.entries:
            if founders is None:
                return False
            if recovering:
                self.store.mark_recovering(True)
                loaded = dataclasses.replace(loaded, recovering=True)
            snapshot = bootstrap_snapshot(founders)
            self.store.save_snapshot(snapshot)
        self._start_node(loaded, snapshot, self._read_snapshot(snapshot))
        return True

    def _start_node(self, loaded: Loaded, snapshot: Snapshot, state: Any) -> None:
        """A node from what the store holds: the snapshot restored (``state``: its data read by
        ``_read_snapshot``), the entries after it applied as the node reports them committed (a
        restart replays the tail)."""
        self._restore(snapshot, state)
        self.applied = snapshot.index
        self._applied_terms.clear()
        self._snapshot_base = snapshot.index
        self._applied_bytes = 0
        self.node = Node(
            self._config, self._rng, loaded.hard_state, snapshot, loaded.entries, recovering=loaded.recovering
        )
        if loaded.recovering:
            log.warning(
                "raft %s: this server lost its log: it neither votes nor campaigns until a leader "
                "has caught it up",
                self.group,
            )

    def close(self) -> None:
        """After ``run`` has ended: release the event queue, the disk thread and the log's open
        files."""
        self._disk.close()
        self._send_events.close()
        self._events.close()
        close_files = getattr(self.store.files, "close", None)
        if close_files is not None:
            close_files()

    # ------------------------------------------------------------------ state for others

    # a node whose disk failed knows no leader and leads nothing until its log is reopened

    @property
    def leader(self) -> NodeId:
        return self.node.lead if self.node is not None and self.healthy else NONE

    @property
    def role(self) -> Role:
        return self.node.role if self.node is not None and self.healthy else Role.FOLLOWER

    @property
    def term(self) -> int:
        return self.node.term if self.node is not None else 0

    @property
    def voters(self) -> frozenset[NodeId]:
        return self.node.voters if self.node is not None else frozenset()

    @property
    def recovering(self) -> bool:
        return self.node.recovering if self.node is not None else False

    @property
    def committed(self) -> int:
        return self.node.log.committed if self.node is not None else 0

    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def read_index(self) -> int | None:
        """``Node.read_index`` (None while the disk failed, as for ``leader``)."""
        return self.node.read_index() if self.node is not None and self.healthy else None

    async def changed(self) -> None:
        """Wait for the next change of leader, role or applied index."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # ------------------------------------------------------------------ inputs

    def step(self, m: Message) -> None:
        """A message from a peer (the transport calls this; never blocks)."""
        if trace.ENABLED:
            trace.point("raft.received", f"{m.type.name} from {m.src:x}")
        try:
            self._send_events.send_nowait(m)
        except anyio.WouldBlock:
            self.dropped += 1

    async def propose(self, data: list[bytes]) -> tuple[int, int]:
        """Append entries through this node, which must lead: (index of the last, term)."""
        return await self._submit(_Proposal(data, anyio.Event()))

    async def propose_conf_change(self, change: ConfChange) -> tuple[int, int]:
        return await self._submit(_Proposal([], anyio.Event(), conf=change))

    async def step_down(self) -> bool:
        """This node stops leading (``Node.step_down``); False when it did not lead."""
        try:
            await self._submit(_Proposal([], anyio.Event(), stepdown=True))
        except ProposalError:
            return False
        return True

    async def transfer_leadership(self, target: NodeId) -> None:
        """Start handing leadership to ``target`` (``Node.transfer_leadership``); raises
        ProposalError (NotLeader, or a target that is not another voter). Whether it happened
        shows in ``leader``: the caller waits for that, bounded (``election_timeout``)."""
        await self._submit(_Proposal([], anyio.Event(), transfer_to=target))

    def best_transferee(self, among: Collection[NodeId] | None = None) -> NodeId | None:
        """``Node.best_transferee``: the follower leadership could go to soonest, if any."""
        return self.node.best_transferee(among) if self.node is not None and self.healthy else None

    @property
    def election_timeout(self) -> float:
        """The shortest time a follower waits for a leader before it campaigns, in seconds."""
        return self._config.election_ticks * self.tick_interval

    async def _submit(self, p: _Proposal) -> tuple[int, int]:
        """Hand ``p`` to the node's task and wait for its outcome (raises its ProposalError)."""
        await self._send_events.send(p)
        await p.done.wait()
        if p.error is not None:
            raise p.error
        assert p.result is not None
        return p.result

    async def wait_applied(self, index: int) -> int | None:
        """Until the entry at ``index`` is applied here: its term (None: applied from a snapshot,
        term unknown). The caller bounds the wait."""
        while self.applied < index:
            ev = anyio.Event()
            self._waiters.setdefault(index, []).append(ev)
            await ev.wait()
        return self._applied_terms.get(index)

    # ------------------------------------------------------------------ the node's task

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        assert self.node is not None, "open() first"
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._clock)
            task_status.started()
            await self._process_ready_contained()
            async for event in self._events:
                self._handle(event)
                # take whatever else is queued before doing the work: one fsync for all of it
                while True:
                    try:
                        self._handle(self._events.receive_nowait())
                    except anyio.WouldBlock:
                        break
                await self._process_ready_contained()

    async def _process_ready_contained(self) -> None:
        """``_process_ready``, surviving a disk error (or a snapshot the state machine cannot
        read, handled alike). A Ready whose persisting failed was never applied or advanced,
        and only its early messages were sent (a leader's appends, which promise nothing about
        this server's disk: hub/raft/DESIGN.md, invariant 1); the node's memory may now be
        ahead of its disk, so the node is dropped and rebuilt from what the disk holds (what a
        restart of the process would do: RAFT's own recovery; nothing unpersisted was ever
        promised). Meanwhile this server takes no part in the group; the other members keep
        their quorum without it. The server and its other work go on."""
        delay = PERSIST_RETRY[0]
        reopen = False
        while True:
            try:
                if reopen:
                    loaded = await anyio.to_thread.run_sync(self.store.open)
                    state = await anyio.to_thread.run_sync(self._read_snapshot, loaded.snapshot)
                    self._start_node(loaded, loaded.snapshot, state)
                    self.healthy = True
                    self._notify()
                    log.warning(
                        "raft %s: log reopened after the disk error (applied %d); taking part again",
                        self.group,
                        self.applied,
                    )
                    reopen = False
                await self._process_ready()
                return
            except (OSError, CorruptLog, RestoreFailed) as e:
                self.disk_failures += 1
                if self.healthy:
                    self.healthy = False
                    self._notify()
                if worth_logging(self.disk_failures):
                    what = (
                        str(e)
                        if isinstance(e, RestoreFailed)
                        else f"cannot {'reopen' if reopen else 'write'} its log: {e}"
                    )
                    log.error(
                        "raft %s: %s; this server stops taking part in the group and reopens the "
                        "log from disk in %.1fs (failure %d)",
                        self.group,
                        what,
                        delay,
                        self.disk_failures,
                    )
                await anyio.sleep(delay)
                delay = min(2 * delay, PERSIST_RETRY[1])
                reopen = True

    async def _clock(self) -> None:
        while True:
            await anyio.sleep(self.tick_interval)
            with contextlib.suppress(anyio.WouldBlock):  # behind: a missed tick only delays a timeout
                self._send_events.send_nowait(_Tick())

    def _handle(self, event: Message | _Proposal | _Tick) -> None:
        node = self.node
        assert node is not None
        if isinstance(event, _Proposal) and event.is_data():
            self._queued.append(event)  # proposed with the others queued now: one append message
            return
        self._propose_queued()  # in order: before anything else reaches the node
        if isinstance(event, _Tick):
            node.tick()
        elif isinstance(event, Message):
            node.step(event)
        else:
            try:
                if event.stepdown:
                    if not node.step_down():
                        raise NotLeader(node.lead)
                    event.result = (0, node.term)
                elif event.transfer_to:
                    node.transfer_leadership(event.transfer_to)
                    event.result = (0, node.term)
                elif event.conf is not None:
                    event.result = (node.propose_conf_change(event.conf), node.term)
            except ProposalError as e:
                event.error = e
            event.done.set()

    def _propose_queued(self) -> None:
        """The data proposals taken since the last call, as one ``node.propose``: the leader then
        sends each follower one append for all of them instead of one per proposal. Each proposer
        gets the index of its own last entry (or all the same error)."""
        if not self._queued:
            return
        batch, self._queued = self._queued, []
        node = self.node
        assert node is not None
        try:
            last = node.propose([d for p in batch for d in p.data])
        except ProposalError as e:
            for p in batch:
                p.error = e
                p.done.set()
            return
        index = last - sum(len(p.data) for p in batch)
        for p in batch:
            index += len(p.data)
            p.result = (index, node.term)
            p.done.set()

    async def _process_ready(self) -> None:
        node = self.node
        assert node is not None
        self._propose_queued()
        while (rd := node.ready()) is not None:
            if trace.ENABLED:
                trace.point("raft.ready", f"{len(rd.entries)} new, {len(rd.committed)} committed")
            self._send_all(rd.early_messages)  # the leader's appends: the followers write meanwhile
            if rd.must_sync:
                await self._disk.run(functools.partial(self._persist, rd))
                trace.point("raft.persisted")
            self._send_all(rd.messages)
            if rd.entries and self.on_appended is not None:  # durable now, acknowledged first
                self._tell_appended(rd.entries)
            # a leader's snapshot is decoded in a worker thread: only this task applies, and it
            # waits here, so nothing is applied meanwhile
            state = (
                None
                if rd.snapshot is None
                else await anyio.to_thread.run_sync(self._read_snapshot, rd.snapshot)
            )
            self._apply(rd, state)
            trace.point("raft.applied", self.applied)
            node.advance(rd)
            if self.store.recovering and not node.recovering:
                await anyio.to_thread.run_sync(self.store.mark_recovering, False)
                log.info("raft %s: caught up with the leader at %d; voting again", self.group, self.applied)
            await self._maybe_snapshot()
            # against what was last announced, not the node's state before this Ready: the
            # change (a vote, an append of a new term) happened in step(), before ready()
            soft = rd.soft_state
            if (soft.leader, soft.role) != self._announced or rd.committed or rd.snapshot is not None:
                self._notify()
            if soft.leader != NONE and soft.role is Role.LEADER and self._announced[1] is not Role.LEADER:
                log.info("raft %s: this server leads, term %d", self.group, node.term)
            self._announced = (soft.leader, soft.role)

    def _tell_appended(self, entries: Sequence[Entry]) -> None:
        assert self.on_appended is not None
        try:
            self.on_appended(entries)
        except Exception:  # a hint's bug must not stop the log
            log.exception("raft %s: the appended-entries hook failed", self.group)

    def _send_all(self, messages: Iterable[Message]) -> None:
        for m in messages:
            try:
                self.send(m)
            except Exception as e:  # one lost message: RAFT resends; the node goes on
                log.warning("raft %s: sending %s to %d failed: %s", self.group, m.type.name, m.dst, e)

    async def _maybe_snapshot(self) -> None:
        """Local compaction, in the order hub/raft/DESIGN.md gives: ``snapshot_meta`` -> the
        snapshot saved durably -> ``node.compact`` -> ``store.compact`` (whole segments go).
        A failure to encode or save leaves the log as it was (only longer); it is tried again
        after as many entries again."""
        node = self.node
        assert node is not None
        policy = self.snapshots
        due = self.applied - self._snapshot_base
        if due <= 0 or (due < policy.entries and self._applied_bytes < policy.bytes):
            return
        index = self.applied
        self._snapshot_base = index
        self._applied_bytes = 0
        meta = node.snapshot_meta(index)
        # in a worker thread (a large state takes a while to encode): only this task applies
        # entries, and it waits here, so the state does not change meanwhile
        try:
            data = await anyio.to_thread.run_sync(self.machine.snapshot)
        except Exception:  # a bug in the state machine: the log stays uncompacted, the node goes on
            log.exception(
                "raft %s: the state machine cannot snapshot at %d (the log is not compacted)",
                self.group,
                index,
            )
            return
        snap = Snapshot(meta, data)
        try:
            await anyio.to_thread.run_sync(self.store.save_snapshot, snap)
        except OSError as e:
            log.error(
                "raft %s: cannot save a snapshot at %d (the log is not compacted): %s", self.group, index, e
            )
            return
        node.compact(snap)
        try:
            await anyio.to_thread.run_sync(self.store.compact, index)
        except OSError as e:  # the snapshot is saved: old segments left behind are dropped on open
            log.error("raft %s: cannot delete log segments up to %d: %s", self.group, index, e)
        self.snapshots_taken += 1
        log.debug("raft %s: snapshot at %d, log compacted", self.group, index)

    def _persist(self, rd: Ready) -> None:
        if rd.snapshot is not None:
            self.store.install_snapshot(rd.snapshot)
        if rd.entries:
            self.store.append(rd.entries)
        if rd.hard_state is not None:
            self.store.save_hard_state(rd.hard_state)

    def _read_snapshot(self, snapshot: Snapshot) -> Any:
        """``machine.read_snapshot`` (in a worker thread, but while opening the store)."""
        try:
            return self.machine.read_snapshot(snapshot.data)
        except Exception as e:  # a snapshot this state machine cannot read: this member stops
            raise RestoreFailed(f"snapshot at {snapshot.index} cannot be restored: {e}") from e

    def _restore(self, snapshot: Snapshot, state: Any) -> None:
        try:
            self.machine.restore(snapshot, state)
        except Exception as e:
            raise RestoreFailed(f"snapshot at {snapshot.index} cannot be restored: {e}") from e

    def _apply(self, rd: Ready, state: Any = None) -> None:
        """Apply ``rd``: its snapshot (``state``: its data as ``_read_snapshot`` read it), then
        its committed entries."""
        if rd.snapshot is not None:
            self._restore(rd.snapshot, state)
            self.applied = rd.snapshot.index
            self._applied_terms.clear()
            self._snapshot_base = rd.snapshot.index
            self._applied_bytes = 0
        for e in rd.committed:
            self._applied_bytes += e.size()
            if e.kind is EntryKind.NORMAL:
                try:
                    self.machine.apply(e)
                except Exception:  # a bug in the state machine must not stop the log
                    log.exception("raft %s: applying entry %d failed", self.group, e.index)
            self.applied = e.index
            self._applied_terms[e.index] = e.term
        for index in [i for i in self._waiters if i <= self.applied]:
            for ev in self._waiters.pop(index):
                ev.set()
        if len(self._applied_terms) > 2 * KEEP_TERMS:
            floor = self.applied - KEEP_TERMS  # a waiter reads its term as soon as it wakes
            self._applied_terms = {i: t for i, t in self._applied_terms.items() if i > floor}


__all__ = ["NotLeader", "ProposalError", "RaftDriver", "SnapshotPolicy", "StateMachine"]
