"""The data a RAFT node exchanges with its driver: entries, hard state, snapshots, messages, Ready.

Everything here is a frozen, slotted dataclass: a value handed to the driver can be persisted or
sent while the node moves on, and nothing the node keeps can be changed behind its back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NodeId = int
NONE: NodeId = 0  # "no node": no vote cast, no leader known (node ids start at 1)


class EntryKind(enum.IntEnum):
    NORMAL = 0  # application data
    NOOP = 1  # appended by a new leader so that it can commit entries of earlier terms (paper §5.4.2)
    CONF = 2  # a single-server membership change (data = encoded ConfChange)


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""

    def size(self) -> int:
        return len(self.data) + 24  # payload plus the fixed header it costs on the wire and on disk


class ConfChangeKind(enum.IntEnum):
    ADD = 0
    REMOVE = 1


@dataclass(frozen=True, slots=True)
class ConfChange:
    kind: ConfChangeKind
    node: NodeId

    def encode(self) -> bytes:
        return bytes([self.kind]) + self.node.to_bytes(8, "little")

    @classmethod
    def decode(cls, data: bytes) -> ConfChange:
        if len(data) != 9 or data[0] not in (ConfChangeKind.ADD, ConfChangeKind.REMOVE):
            raise ValueError(f"malformed conf change entry ({len(data)} bytes)")
        node = int.from_bytes(data[1:], "little")
        if node == NONE:
            raise ValueError("conf change names node 0 ('none')")
        return cls(ConfChangeKind(data[0]), node)

    def apply(self, voters: frozenset[NodeId]) -> frozenset[NodeId]:
        if self.kind is ConfChangeKind.ADD:
            return voters | {self.node}
        return voters - {self.node}


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on stable storage before the node says anything (paper Figure 2)."""

    term: int = 0
    vote: NodeId = NONE
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int = 0
    term: int = 0
    voters: frozenset[NodeId] = frozenset()  # the configuration as of ``index``


@dataclass(frozen=True, slots=True)
class Snapshot:
    meta: SnapshotMeta = SnapshotMeta()
    data: bytes = b""  # the application's state after applying ``meta.index``

    @property
    def index(self) -> int:
        return self.meta.index

    @property
    def term(self) -> int:
        return self.meta.term


class MsgType(enum.IntEnum):
    PRE_VOTE = 0
    PRE_VOTE_RESP = 1
    VOTE = 2
    VOTE_RESP = 3
    APPEND = 4
    APPEND_RESP = 5
    HEARTBEAT = 6
    HEARTBEAT_RESP = 7
    SNAPSHOT = 8  # install snapshot; answered by APPEND_RESP
    TIMEOUT_NOW = 9  # a leader handing over: campaign now (thesis §3.10); no answer


@dataclass(frozen=True, slots=True)
class Message:
    """One RAFT message. Fields a type does not use keep their defaults.

    - votes: ``index``/``log_term`` are the candidate's last entry;
    - APPEND: ``index``/``log_term`` name the entry preceding ``entries``; ``commit`` is the leader's;
    - APPEND_RESP: ``index`` is the last index now matching (success) or the rejected ``index``, with
      ``reject_hint`` the follower's last index so the leader can skip back in one step;
    - ``lost`` (APPEND_RESP, HEARTBEAT_RESP): the sender lost its log (a wiped store) and is catching
      up; ``reject_hint`` is then its last index even on success, so a leader that believed it
      matched further finds out (RAFT assumes a disk that never forgets; this is the exception);
    - ``transfer`` (VOTE): the candidate campaigns because the leader handed over to it
      (TIMEOUT_NOW), so a voter that heard from that leader lately grants it all the same.
    """

    type: MsgType
    src: NodeId
    dst: NodeId
    term: int
    index: int = 0
    log_term: int = 0
    commit: int = 0
    entries: tuple[Entry, ...] = ()
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    lost: bool = False
    transfer: bool = False


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile facts the driver may want to surface (monitoring, routing proposals)."""

    leader: NodeId
    role: Role


@dataclass(frozen=True, slots=True)
class Ready:
    """One batch of work for the driver, to be done in this order:

    1. persist ``snapshot`` (when not None), then ``entries`` (writing an entry at index i first drops
       every stored entry at i or above) with one fsync for the batch, then ``hard_state`` (set only
       when the term or vote changed). Entries go first so that a persisted commit index never
       names an entry the disk could still lose; the commit index is never worth a write of its
       own (a restart relearns it and re-applies from the snapshot);
    2. send ``messages`` (only now: they may promise what step 1 wrote);
    3. apply ``snapshot`` then ``committed`` to the state machine, in order;
    4. call ``Node.advance(ready)``.

    ``early_messages`` may be sent before step 1, while it runs (the leader's appends and
    heartbeats: they promise nothing about this server's disk, and the leader counts its own
    entries toward a commit only once ``advance`` says they are durable; thesis §10.2.1), so the
    followers' fsyncs overlap the leader's.
    """

    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None
    messages: tuple[Message, ...]
    committed: tuple[Entry, ...]
    soft_state: SoftState
    must_sync: bool = field(default=False)
    early_messages: tuple[Message, ...] = field(default=())
