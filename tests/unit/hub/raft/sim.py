"""A deterministic simulation of a RAFT cluster: the real node and the real log store, a simulated
network, clock and disk, a fault schedule, and invariants checked after every event.

Everything random comes from one ``random.Random(seed)``, and time is a step counter, so a
(seed, schedule) pair replays exactly; ``Sim.trace_digest`` fingerprints a whole run so a test can
show that it does.

The driver loop is the one a real shell runs: for each Ready, persist (log store, one fsync per
batch), then send, then apply, then advance.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from hub.raft.log_store import LogStore
from hub.raft.node import Config, Node, ProposalError, bootstrap_snapshot
from hub.raft.types import (
    NONE,
    ConfChange,
    ConfChangeKind,
    Entry,
    Message,
    MsgType,
    NodeId,
    Ready,
    Role,
    Snapshot,
)
from tests.unit.hub.raft.simfiles import SimCrash, SimFiles


class InvariantViolation(AssertionError):
    pass


# -- fault schedule ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: int  # step
    kind: str  # one of FAULT_KINDS
    node: int = 0  # index into the current member list (taken modulo), where it applies
    arg: int = 0


FAULT_KINDS = (
    "partition",  # arg: a bit mask splitting the nodes into two sides
    "isolate",  # cut one node off
    "heal",
    "crash",  # power loss; node restarts ``arg`` steps later
    "crash_io",  # power loss part-way (after ``arg`` disk operations) through the next persist
    "lossy",  # arg: drop percentage for the following steps (0 restores)
    "duplicate",  # arg: duplicate percentage
    "slow",  # arg: max extra delay in steps
    "add",  # add a fresh server (one at a time, through the leader)
    "remove",  # remove a member (never below three)
    "burst",  # arg: a burst of proposals
    "transfer",  # the leader hands leadership to a member (to its best follower when it is the one)
)


def schedule_from_seed(seed: int, steps: int = 200, faults: int = 12) -> list[Fault]:
    """A schedule drawn from a seed alone (the soak run and command-line replays use this)."""
    rng = random.Random(seed ^ 0x5EED)
    out = [
        Fault(rng.randrange(steps), rng.choice(FAULT_KINDS), rng.randrange(8), rng.randrange(1, 40))
        for _ in range(rng.randrange(faults + 1))
    ]
    return sorted(out, key=lambda f: (f.at, f.kind, f.node, f.arg))


# -- the simulated cluster -----------------------------------------------------------------------

GENESIS = b"\x00" * 16


def _chain(digest: bytes, e: Entry) -> bytes:
    h = hashlib.blake2b(digest, digest_size=16)
    h.update(e.index.to_bytes(8, "little") + e.term.to_bytes(8, "little") + bytes([e.kind]) + e.data)
    return h.digest()


@dataclass
class SimServer:
    id: NodeId
    files: SimFiles
    node: Node | None = None
    store: LogStore | None = None
    applied_index: int = 0
    digest: bytes = GENESIS  # hash chain over every applied entry: equal chains = equal histories
    restart_at: int | None = None
    commit_seen: int = 0  # commit index while up (must never go down within one life)
    # what its disk surely holds: index -> term of entries fsynced, and the newest durable snapshot
    durable: dict[int, int] = field(default_factory=dict)
    durable_snapshot: int = 0
    commit_checked: int = 0  # commit index checked against the durable copies (or not its own)

    @property
    def up(self) -> bool:
        return self.node is not None


class Sim:
    ELECTION_TICKS = 10
    HEARTBEAT_TICKS = 3
    MAX_IN_FLIGHT = 5000

    def __init__(
        self,
        seed: int,
        schedule: Sequence[Fault] = (),
        nodes: int = 3,
        steps: int = 200,
        snapshot_every: int = 25,
        segment_bytes: int = 2048,
        max_msg_entries: int = 8,
        max_inflight: int = 4,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.schedule = sorted(schedule, key=lambda f: (f.at, f.kind, f.node, f.arg))
        self.steps = steps
        self.snapshot_every = snapshot_every
        self.segment_bytes = segment_bytes
        self.max_msg_entries = max_msg_entries
        self.max_inflight = max_inflight
        self.now = 0
        self.servers: dict[NodeId, SimServer] = {}
        self._net: list[tuple[int, int, Message]] = []  # (deliver at, sequence, message): a heap
        self._seq = 0
        self.blocked: set[tuple[NodeId, NodeId]] = set()
        self.drop_pct = 0
        self.dup_pct = 0
        self.max_delay = 2
        self.proposed = 0
        self.trace = hashlib.blake2b(digest_size=16)
        # what the checker has seen
        self.leader_of_term: dict[int, NodeId] = {}
        self.chain: dict[int, bytes] = {}  # index -> digest after applying it (first applier wins)
        self.committed_terms: dict[int, int] = {}  # index -> term of the entry applied there
        self.log_entries: dict[tuple[int, int], tuple[bytes, int, int | None]] = {}
        self.votes: dict[tuple[NodeId, int], NodeId] = {}
        self._led: dict[NodeId, int] = {}  # the term each server was last seen leading
        self.stats = {
            "elections": 0,
            "snapshots_sent": 0,
            "crashes": 0,
            "torn": 0,
            "applied": 0,
            "early_messages": 0,
            "transfers_asked": 0,
            "transfer_campaigns": 0,  # candidates made by a TIMEOUT_NOW
        }
        founders = frozenset(range(1, nodes + 1))
        for i in founders:
            self._add_server(i, bootstrap=bootstrap_snapshot(founders))

    # -- servers ---------------------------------------------------------------------------------

    def _add_server(self, sid: NodeId, bootstrap: Snapshot | None) -> None:
        srv = SimServer(sid, SimFiles())
        self.servers[sid] = srv
        if bootstrap is not None:
            store = LogStore(srv.files, self.segment_bytes)
            store.open()
            store.save_snapshot(bootstrap)
        self._start(srv)

    def _start(self, srv: SimServer) -> None:
        store = LogStore(srv.files, self.segment_bytes)
        try:
            loaded = store.open()  # recovery itself may be cut short by another power loss
        except SimCrash:
            srv.files.crash(self.rng)
            srv.restart_at = self.now + 1
            return
        self.stats["torn"] += loaded.torn_bytes > 0
        # what the store read back is on the disk now, whether or not it was synced before the
        # power loss (whole records of a torn write survive it): the quorum check counts it
        srv.durable = {e.index: e.term for e in loaded.entries}
        srv.durable_snapshot = loaded.snapshot.index
        cfg = Config(
            srv.id,
            election_ticks=self.ELECTION_TICKS,
            heartbeat_ticks=self.HEARTBEAT_TICKS,
            max_msg_entries=self.max_msg_entries,
            max_inflight=self.max_inflight,
        )
        node_rng = random.Random(self.rng.getrandbits(64))
        srv.node = Node(cfg, node_rng, loaded.hard_state, loaded.snapshot, loaded.entries)
        srv.store = store
        srv.restart_at = None
        srv.commit_seen = srv.node.log.committed
        self._restore_state(srv, loaded.snapshot)

    def _restore_state(self, srv: SimServer, snap: Snapshot) -> None:
        if snap.data:
            srv.applied_index = int.from_bytes(snap.data[:8], "little")
            srv.digest = snap.data[8:]
        else:
            srv.applied_index, srv.digest = snap.index, GENESIS
        if srv.applied_index != snap.index:
            raise InvariantViolation(f"snapshot at {snap.index} holds state of {srv.applied_index}")
        if snap.index in self.chain and self.chain[snap.index] != srv.digest:
            raise InvariantViolation(
                f"node {srv.id}: snapshot at {snap.index} differs from the applied history"
            )

    def crash(self, srv: SimServer, restart_in: int, *, torn: bool = True) -> None:
        if not srv.up:
            return
        self.stats["crashes"] += 1
        srv.node = None
        srv.store = None
        srv.files.crash(self.rng, torn=torn, flip=torn and self.rng.random() < 0.5)
        srv.restart_at = self.now + max(1, restart_in)

    # -- network ---------------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        rand = self.rng.random
        if (m.src, m.dst) in self.blocked or (self.drop_pct and rand() * 100 < self.drop_pct):
            return
        copies = 2 if self.dup_pct and rand() * 100 < self.dup_pct else 1
        for _ in range(copies):
            self._seq += 1
            delay = 1 + int(rand() * (self.max_delay + 1))
            heapq.heappush(self._net, (self.now + delay, self._seq, m))

    def _deliver_due(self) -> None:
        while self._net and self._net[0][0] <= self.now:
            m = heapq.heappop(self._net)[2]
            srv = self.servers.get(m.dst)
            if srv is None or srv.node is None or (m.src, m.dst) in self.blocked:
                continue
            self._record(f"d{m.src}>{m.dst}:{m.type.name}:{m.term}:{m.index}")
            term = srv.node.term
            srv.node.step(m)
            if m.type is MsgType.TIMEOUT_NOW and srv.node.term > term:
                self.stats["transfer_campaigns"] += 1
            self._check_commit_durable(srv)  # before anything of the new commit index goes out
            self._drain(srv)

    # -- the driver loop -------------------------------------------------------------------------

    def _drain(self, srv: SimServer) -> None:
        while srv.node is not None:
            rd = srv.node.ready()
            if rd is None:
                return
            try:
                self._handle_ready(srv, rd)
            except SimCrash:
                self.crash(srv, restart_in=self.rng.randrange(1, 30))
                return

    def _handle_ready(self, srv: SimServer, rd: Ready) -> None:
        node, store = srv.node, srv.store
        assert node is not None and store is not None
        self._check_log_matching(node, rd)
        self._check_early(node, rd)
        # 0. the leader's appends and heartbeats go out before its own write (a crash in the
        # write below then leaves followers holding entries the leader lost)
        for m in rd.early_messages:
            self._send(m)
        # 1. persist: snapshot, entries (one fsync), then term and vote
        if rd.snapshot is not None:
            srv.durable.clear()  # installing drops the entries (a crash part-way may have begun it)
            store.install_snapshot(rd.snapshot)
            srv.durable_snapshot = rd.snapshot.index
        if rd.entries:
            first = rd.entries[0].index
            for i in [i for i in srv.durable if i >= first]:  # writing at i drops what was there
                del srv.durable[i]
            store.append(rd.entries)
            srv.durable.update((e.index, e.term) for e in rd.entries)
        if rd.hard_state is not None:
            hs = rd.hard_state
            store.save_hard_state(hs)
            if hs.vote != NONE and self.votes.setdefault((srv.id, hs.term), hs.vote) != hs.vote:
                raise InvariantViolation(f"node {srv.id} voted twice in term {hs.term}")
        # 2. send
        for m in rd.messages:
            if m.snapshot is not None:
                self.stats["snapshots_sent"] += 1
            self._send(m)
        # 3. apply
        if rd.snapshot is not None:
            self._restore_state(srv, rd.snapshot)
        for e in rd.committed:
            self._apply(srv, e)
        node.advance(rd)
        self._check_commit_durable(srv)
        self._check_node(srv)
        self._maybe_snapshot(srv)

    def _apply(self, srv: SimServer, e: Entry) -> None:
        if e.index != srv.applied_index + 1:
            raise InvariantViolation(f"node {srv.id} applies {e.index} after {srv.applied_index}")
        srv.digest = _chain(srv.digest, e)
        srv.applied_index = e.index
        seen = self.chain.setdefault(e.index, srv.digest)
        if seen != srv.digest:
            raise InvariantViolation(f"node {srv.id} applied a different history at {e.index}")
        self.committed_terms.setdefault(e.index, e.term)
        self.stats["applied"] += 1
        self._record(f"a{srv.id}:{e.index}")

    def _maybe_snapshot(self, srv: SimServer) -> None:
        node, store = srv.node, srv.store
        assert node is not None and store is not None
        if srv.applied_index - node.log.snapshot.index < self.snapshot_every:
            return
        index = srv.applied_index
        data = index.to_bytes(8, "little") + srv.digest
        # persist the snapshot first, then let the node forget the entries, then delete files
        snap = Snapshot(node.snapshot_meta(index), data)
        try:
            store.save_snapshot(snap)
        except SimCrash:
            self.crash(srv, restart_in=self.rng.randrange(1, 30))
            return
        srv.durable_snapshot = max(srv.durable_snapshot, index)
        node.compact(snap)
        try:
            store.compact(index)
        except SimCrash:
            self.crash(srv, restart_in=self.rng.randrange(1, 30))

    # -- invariants ------------------------------------------------------------------------------

    def _check_log_matching(self, node: Node, rd: Ready) -> None:
        """Log matching, checked as entries are persisted: one (index, term) names one entry, and
        that entry always follows the same term; by induction, equal (index, term) means equal
        logs up to there (paper §5.3)."""
        for e in rd.entries:
            prev = (
                rd.snapshot.term
                if rd.snapshot and e.index == rd.snapshot.index + 1
                else node.log.term(e.index - 1)
            )
            key = (e.index, e.term)
            value = (e.data, int(e.kind), prev)
            seen = self.log_entries.setdefault(key, value)
            if seen[:2] != value[:2] or (seen[2] is not None and prev is not None and seen[2] != prev):
                raise InvariantViolation(f"two different entries at index {e.index} term {e.term}")

    def _check_early(self, node: Node, rd: Ready) -> None:
        """Invariant 1's one exception: what goes out before the Ready is persisted is only the
        leader's appends and heartbeats of its term, never with a new term or vote to write."""
        if rd.early_messages and (rd.hard_state is not None or node.role is not Role.LEADER):
            raise InvariantViolation(f"node {node.id} sends before persisting its term or vote")
        for m in rd.early_messages:
            if m.type not in (MsgType.APPEND, MsgType.HEARTBEAT) or m.term != node.term:
                raise InvariantViolation(f"node {node.id} sends a {m.type.name} before persisting")
        self.stats["early_messages"] += len(rd.early_messages)

    def _check_commit_durable(self, srv: SimServer) -> None:
        """Invariant 4, checked as soon as a leader's commit index moves (after a message, after
        ``advance``: with the voters it counted, and before anything of it is sent or applied):
        the entry there is on the disks of a quorum of voters. (The leader's appends go out
        before its own write, so a leader counting its unsynced copy would commit on one durable
        copy of three.)"""
        node = srv.node
        assert node is not None
        c = node.log.committed
        if node.role is not Role.LEADER:
            srv.commit_checked = c  # learned from a leader (and checked there) under its voters
            return
        if c <= srv.commit_checked or c <= node.log.snapshot.index:
            return
        srv.commit_checked = c
        term = node.log.term(c)
        holders = [
            v
            for v in node.voters
            if (o := self.servers.get(v)) is not None
            and (o.durable_snapshot >= c or o.durable.get(c) == term)
        ]
        if len(holders) < len(node.voters) // 2 + 1:
            raise InvariantViolation(
                f"leader {srv.id} commits {c} (term {term}) durable only on {sorted(holders)}"
            )

    def _check_node(self, srv: SimServer) -> None:
        node = srv.node
        assert node is not None
        if node.log.committed < srv.commit_seen:
            raise InvariantViolation(f"node {srv.id}: commit went back from {srv.commit_seen}")
        srv.commit_seen = node.log.committed
        if node.role is Role.LEADER:
            holder = self.leader_of_term.setdefault(node.term, srv.id)
            if holder != srv.id:
                raise InvariantViolation(f"two leaders in term {node.term}: {holder} and {srv.id}")
            if self._led.get(srv.id) != node.term:
                self._led[srv.id] = node.term
                self.stats["elections"] += 1
                self._check_leader_completeness(srv)

    def _check_leader_completeness(self, srv: SimServer) -> None:
        """A new leader holds every entry any server has applied (paper §5.4.1)."""
        node = srv.node
        assert node is not None
        log = node.log
        for index, term in self.committed_terms.items():
            if index > log.snapshot.index and log.term(index) != term:
                raise InvariantViolation(
                    f"leader {srv.id} (term {node.term}) lacks committed entry {index} of term {term}"
                )

    # -- faults and the client -------------------------------------------------------------------

    def members(self) -> list[NodeId]:
        return sorted(self.servers)

    def leader(self) -> SimServer | None:
        best: SimServer | None = None
        best_term = -1
        for srv in self.servers.values():
            n = srv.node
            if n is not None and n.role is Role.LEADER and n.term > best_term:
                best, best_term = srv, n.term
        return best

    def _apply_fault(self, f: Fault) -> None:
        ids = self.members()
        target = self.servers[ids[f.node % len(ids)]]
        self._record(f"f{f.kind}:{target.id}:{f.arg}")
        if f.kind == "partition":
            side = {sid for k, sid in enumerate(ids) if f.arg >> k & 1}
            self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
        elif f.kind == "isolate":
            self.blocked |= {(a, target.id) for a in ids} | {(target.id, a) for a in ids}
        elif f.kind == "heal":
            self.blocked = set()
        elif f.kind == "crash":
            self.crash(target, restart_in=f.arg)
        elif f.kind == "crash_io":
            target.files.crash_after_ops = f.arg % 6
        elif f.kind == "lossy":
            self.drop_pct = f.arg % 40
        elif f.kind == "duplicate":
            self.dup_pct = f.arg % 50
        elif f.kind == "slow":
            self.max_delay = 2 + f.arg % 12
        elif f.kind == "burst":
            self._propose(f.arg)
        elif f.kind in ("add", "remove"):
            self._change_membership(f.kind, target.id)
        elif f.kind == "transfer":
            self._transfer(target.id)

    def _change_membership(self, kind: str, target: NodeId) -> None:
        lead = self.leader()
        if lead is None or lead.node is None:
            return
        voters = lead.node.voters
        if kind == "add":
            if len(voters) >= 5:
                return
            new_id = max(self.servers) + 1
            try:
                lead.node.propose_conf_change(ConfChange(ConfChangeKind.ADD, new_id))
            except ProposalError:
                return
            self._add_server(new_id, bootstrap=None)
        else:
            if len(voters) <= 3 or target not in voters:
                return
            try:
                lead.node.propose_conf_change(ConfChange(ConfChangeKind.REMOVE, target))
            except ProposalError:
                return
        self._drain(lead)

    def _transfer(self, target: NodeId) -> None:
        lead = self.leader()
        if lead is None or lead.node is None:
            return
        to = target if target != lead.id else lead.node.best_transferee()
        if to is None:
            return
        try:
            lead.node.transfer_leadership(to)
        except ProposalError:
            return
        self.stats["transfers_asked"] += 1
        self._drain(lead)

    def _propose(self, count: int) -> None:
        lead = self.leader()
        if lead is None or lead.node is None:
            return
        batch = []
        for _ in range(count):
            self.proposed += 1
            batch.append(f"{self.seed}:{self.proposed}".encode())
        try:
            lead.node.propose(batch)
        except ProposalError:
            return
        self._drain(lead)

    # -- running ---------------------------------------------------------------------------------

    def step(self, propose: bool = True) -> None:
        self.now += 1
        for srv in list(self.servers.values()):
            if srv.node is None and srv.restart_at is not None and srv.restart_at <= self.now:
                self._start(srv)
                if srv.node is not None:
                    self._drain(srv)
        self._deliver_due()
        for srv in list(self.servers.values()):
            if srv.node is not None:
                srv.node.tick()
                self._drain(srv)
        if propose and self.rng.random() < 0.3:
            self._propose(1 + self.rng.randrange(3))
        if len(self._net) > self.MAX_IN_FLIGHT:
            # RAFT answers each message with at most a bounded few: growth without end is a bug
            raise InvariantViolation(f"{len(self._net)} messages in flight: a message storm")

    def run(self) -> None:
        """The faulty phase, then a calm one in which the cluster must converge."""
        faults = list(self.schedule)
        while self.now < self.steps:
            while faults and faults[0].at <= self.now:
                self._apply_fault(faults.pop(0))
            self.step()
        self.settle()

    def settle(self, limit: int = 3000) -> None:
        """Heal everything, bring every server back, and wait for all members to apply the same
        history, which must include everything any server ever applied (nothing committed lost)."""
        self.blocked = set()
        self.drop_pct = self.dup_pct = 0
        self.max_delay = 2
        for srv in self.servers.values():
            srv.files.crash_after_ops = None
            if srv.node is None:
                srv.restart_at = self.now
        start = self.now
        while self.now - start < limit:
            self.step(propose=False)
            if self._converged():
                self._propose_marker_and_wait(start + limit)
                return
        raise InvariantViolation(f"no convergence within {limit} steps: {self.describe()}")

    def _voting_members(self) -> list[SimServer]:
        lead = self.leader()
        if lead is None or lead.node is None:
            return []
        return [self.servers[v] for v in sorted(lead.node.voters)]

    def _converged(self) -> bool:
        lead = self.leader()
        if lead is None or lead.node is None:
            return False
        top = max(self.chain, default=0)
        members = self._voting_members()
        return all(
            s.node is not None and s.applied_index >= top and s.applied_index == lead.applied_index
            for s in members
        )

    def _propose_marker_and_wait(self, deadline: int) -> None:
        """A last entry must commit and reach every member: the cluster is live, not just quiet."""
        top = max(self.chain, default=0)
        while self.now < deadline:
            lead = self.leader()
            if lead is not None and lead.node is not None:
                try:
                    lead.node.propose([b"marker"])
                    self._drain(lead)
                    break
                except ProposalError:
                    pass
            self.step(propose=False)
        while self.now < deadline:
            self.step(propose=False)
            members = self._voting_members()
            if members and all(s.applied_index > top for s in members) and self._converged():
                digests = {s.digest for s in members}
                if len(digests) != 1:
                    raise InvariantViolation("members converged on different histories")
                return
        raise InvariantViolation(f"the final entry never reached every member: {self.describe()}")

    def describe(self) -> str:
        parts = []
        for srv in self.servers.values():
            n = srv.node
            if n is None:
                parts.append(f"{srv.id}:down")
            else:
                parts.append(
                    f"{srv.id}:{n.role.value}/t{n.term}/last{n.log.last_index()}/c{n.log.committed}"
                    f"/a{srv.applied_index}/v{sorted(n.voters)}"
                )
        return f"t={self.now} " + " ".join(parts)

    def _record(self, event: str) -> None:
        self.trace.update(event.encode() + b"\n")

    def trace_digest(self) -> str:
        return self.trace.hexdigest()


def replay(seed: int, schedule: Sequence[Fault] | None = None, **kw: int) -> Sim:
    """Run one simulation; with no schedule, the seed's own. Raises InvariantViolation."""
    sim = Sim(seed, schedule_from_seed(seed) if schedule is None else schedule, **kw)
    sim.run()
    return sim
