"""A sans-IO RAFT node: feed it ticks, messages and proposals; take Ready batches of work back.

The node never touches a socket, a file or a clock. Its driver calls ``tick()`` at a fixed interval,
``step(message)`` for every message received, ``propose(...)`` for new entries, and, whenever
``ready()`` returns a batch, persists, sends and applies it in the order ``Ready`` documents before
calling ``advance()``. Randomness (election timeouts) comes from an injected ``random.Random`` so a
simulation replays exactly.

Safety rules this file keeps (hub/raft/DESIGN.md lists them all):
- nothing leaves the node before what it promises is durable: messages ride in the same Ready as
  the hard state and entries they depend on, and the driver sends only after persisting;
- the leader counts its own entries toward the quorum only once they are durable (``log.stable``);
- only entries of the leader's current term are committed by counting replicas (paper §5.4.2),
  which is what the no-op a new leader appends is for;
- pre-vote and check-quorum: a node that cannot win does not bump terms, and a node that has heard
  from a live leader within the election timeout ignores vote requests (thesis §9.6, §4.2.3) --
  except a transfer's (thesis §3.10): the leader itself asked that candidate to campaign.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from hub.raft.log import RaftLog
from hub.raft.progress import Progress, ProgressState
from hub.raft.types import (
    NONE,
    ConfChange,
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    NodeId,
    Ready,
    Role,
    Snapshot,
    SnapshotMeta,
    SoftState,
)

logger = logging.getLogger(__name__)


class ProposalError(Exception):
    """A proposal this node cannot take; the caller may retry elsewhere or later."""


class NotLeader(ProposalError):
    def __init__(self, leader: NodeId) -> None:
        super().__init__(f"not the leader (leader: {leader or 'unknown'})")
        self.leader = leader


class ConfChangeInProgress(ProposalError):
    pass


@dataclass(frozen=True, slots=True)
class Config:
    id: NodeId
    election_ticks: int = 10  # a follower campaigns after [election_ticks, 2*election_ticks) silent ticks
    heartbeat_ticks: int = 1
    max_msg_entries: int = 4096  # entries per append message
    max_msg_bytes: int = 1 << 20  # bytes per append message (at least one entry is always sent)
    max_inflight: int = 64  # unacknowledged append messages per follower
    pre_vote: bool = True
    check_quorum: bool = True
    snapshot_retry_heartbeats: int = 5  # re-probe a follower whose snapshot seems lost

    def __post_init__(self) -> None:
        if self.id == NONE:
            raise ValueError("node id 0 is reserved for 'none'")
        if self.heartbeat_ticks < 1 or self.election_ticks <= self.heartbeat_ticks:
            raise ValueError("need 1 <= heartbeat_ticks < election_ticks")
        if self.max_inflight < 1 or self.max_msg_entries < 1:
            raise ValueError("max_inflight and max_msg_entries must be positive")


def bootstrap_snapshot(voters: Iterable[NodeId]) -> Snapshot:
    """The snapshot every founding member starts from: index 1, term 1, the initial configuration.

    Putting the first configuration in a snapshot (rather than in each node's memory) means a
    server added later learns it the way it learns everything else: from the leader.
    """
    return Snapshot(SnapshotMeta(index=1, term=1, voters=frozenset(voters)))


def malformed(m: Message) -> str | None:
    """Why a message cannot have come from a correct peer, or None. (The wire codec checks
    framing; this checks the RAFT-level shape, so a bad peer cannot trip the log's invariants.)"""
    if m.term < 0 or m.index < 0 or m.log_term < 0 or m.commit < 0 or m.src == NONE:
        return "negative field or no sender"
    if m.type is MsgType.APPEND:
        for k, e in enumerate(m.entries):
            if e.index != m.index + 1 + k or e.term > m.term or (k and e.term < m.entries[k - 1].term):
                return f"entry {k} (index {e.index}, term {e.term}) does not continue the append"
        if m.entries and m.entries[0].term < m.log_term:
            return "entries older than the entry they follow"
        for e in m.entries:
            if e.kind is EntryKind.CONF:
                try:  # decoded again whenever the configuration is recomputed: it must decode
                    ConfChange.decode(e.data)
                except ValueError as err:
                    return f"entry {e.index}: {err}"
    if m.type is MsgType.SNAPSHOT and (m.snapshot is None or m.snapshot.term > m.term):
        return "snapshot missing or from the future"
    return None


# what a leader may send before the Ready carrying it is persisted (``Node._split_early``)
_LEADER_EARLY = frozenset({MsgType.APPEND, MsgType.HEARTBEAT})


def quorum(n: int) -> int:
    return n // 2 + 1


class Node:
    def __init__(
        self,
        config: Config,
        rng: random.Random,
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        *,
        recovering: bool = False,
    ) -> None:
        """Restart (or start) from what the driver's storage holds. ``recovering``: this server
        lost its log (its store was wiped while the group went on): until it has caught up with a
        leader it neither votes nor campaigns, and tells the leader its log is short."""
        hard_state = hard_state or HardState()
        snapshot = snapshot or Snapshot()
        self.config = config
        self.id = config.id
        self._rng = rng
        self.log = RaftLog(snapshot, list(entries), hard_state.commit)
        self.term = max(hard_state.term, self.log.last_term())
        self.vote = hard_state.vote if hard_state.term == self.term else NONE
        self.lead: NodeId = NONE
        self.role = Role.FOLLOWER
        self.prs: dict[NodeId, Progress] = {}
        self.votes: dict[NodeId, bool] = {}
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = 0
        self.pending_conf_index = 0
        # (leader) the voter leadership is being handed to, and the ticks the hand-over has taken
        self.transferee: NodeId = NONE
        self._transfer_ticks = 0
        self.voters: frozenset[NodeId] = frozenset()
        self.conf_index = 0  # index of the newest configuration entry (0: the snapshot's)
        self._msgs: list[Message] = []
        self.recovering = recovering
        # what the driver has been handed; on a restart that is exactly what storage holds
        self._prev_hard = HardState(self.term, self.vote, self.log.committed)
        self._prev_soft = SoftState(self.lead, self.role)
        self._recompute_conf()
        self._reset_timeout()

    # -- driver API ------------------------------------------------------------------------------

    def tick(self) -> None:
        if self.role is Role.LEADER:
            self._tick_leader()
            return
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_timeout:
            self.campaign()

    def campaign(self) -> None:
        """Start an election now (pre-vote first when enabled)."""
        if not self.promotable() or self.role is Role.LEADER:
            return
        self.election_elapsed = 0
        if self.config.pre_vote:
            self._become_pre_candidate()
        else:
            self._become_candidate()

    def propose(self, data: Iterable[bytes]) -> int:
        """Append application entries; returns the index of the last one. Raises NotLeader, or
        ProposalError while leadership is being handed over."""
        self._require_leader()
        return self._append([(EntryKind.NORMAL, d) for d in data])

    def propose_conf_change(self, change: ConfChange) -> int:
        """One server at a time: refused while an earlier change is uncommitted, or before the
        leader's own no-op has committed (Ongaro's 2015 fix for single-server changes)."""
        self._require_leader()
        if self.pending_conf_index > self.log.committed or self.log.term(self.log.committed) != self.term:
            raise ConfChangeInProgress("a membership change is in progress")
        if change.apply(self.voters) == self.voters:
            raise ProposalError(f"conf change {change} changes nothing")
        if not change.apply(self.voters):
            raise ProposalError("cannot remove the last voter")
        index = self._append([(EntryKind.CONF, change.encode())])
        self.pending_conf_index = index
        return index

    def transfer_leadership(self, target: NodeId) -> None:
        """(Leader) Hand leadership to the voter ``target`` (thesis §3.10): no new entries are
        taken meanwhile; once its log matches ours, TIMEOUT_NOW has it campaign at once, and
        its votes pass the other voters' lease. A hand-over that has not happened within an
        election timeout is given up and this node leads on (the target may be down or slow).
        Raises NotLeader, or ProposalError for a target that is not another voter."""
        self._require_leader()
        if target == self.id or target not in self.prs:
            raise ProposalError(f"cannot hand leadership to {target}: not another voter")
        if self.transferee == target:
            return
        self.transferee = target
        self._transfer_ticks = 0
        if self.prs[target].match == self.log.last_index():
            self._send_timeout_now(target)
        else:
            self._send_all(target)

    def best_transferee(self, among: Collection[NodeId] | None = None) -> NodeId | None:
        """(Leader) The voter (of ``among``, when given) leadership could go to soonest: heard
        from within the election timeout, with the longest matching log (ties: the lowest id).
        None when there is none."""
        if self.role is not Role.LEADER:
            return None
        live = [
            (pr.match, -peer)
            for peer, pr in self.prs.items()
            if pr.recent_active and peer in self.voters and (among is None or peer in among)
        ]
        return -max(live)[1] if live else None

    def step_down(self) -> bool:
        """A leader gives up leading (an operator's stepdown): it becomes a follower of no one
        in its term and waits the longest election timeout, so another server most likely
        campaigns first. False when this node does not lead."""
        if self.role is not Role.LEADER:
            return False
        self._become_follower(self.term, NONE)
        self.randomized_timeout = 2 * self.config.election_ticks
        return True

    def step(self, m: Message) -> None:
        if m.dst != self.id:
            return
        problem = malformed(m)
        if problem is not None:
            logger.warning(
                "raft node %d: dropping a malformed %s from %d: %s", self.id, m.type.name, m.src, problem
            )
            return
        if m.term > self.term:
            if m.type in (MsgType.PRE_VOTE, MsgType.VOTE) and self._in_lease() and not m.transfer:
                return  # a live leader exists: a disruptive candidate must not unseat it
            if m.type is MsgType.PRE_VOTE or (m.type is MsgType.PRE_VOTE_RESP and not m.reject):
                pass  # pre-votes are about a future term and change nothing here
            elif m.type in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
                self._become_follower(m.term, m.src)
            else:
                self._become_follower(m.term, NONE)
        elif m.term < self.term:
            if m.type in (MsgType.APPEND, MsgType.HEARTBEAT):
                # a stale leader: tell it our term so it steps down (it may not hear otherwise,
                # because pre-vote and check-quorum keep us from sending it a vote request)
                self._send(Message(MsgType.APPEND_RESP, self.id, m.src, self.term))
            elif m.type is MsgType.PRE_VOTE:
                self._send(Message(MsgType.PRE_VOTE_RESP, self.id, m.src, self.term, reject=True))
            return

        if m.type in (MsgType.PRE_VOTE, MsgType.VOTE):
            self._handle_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            self._step_candidate(m)
        else:
            self._step_follower(m)

    def has_ready(self) -> bool:
        log, hard, soft = self.log, self._prev_hard, self._prev_soft
        return bool(
            self._msgs
            or log.stable < log.last_index()
            or min(log.committed, log.stable) > log.applied
            or log.unstable_snapshot is not None
            or self.term != hard.term
            or self.vote != hard.vote
            or self.lead != soft.leader
            or self.role is not soft.role
        )

    def ready(self) -> Ready | None:
        if not self.has_ready():
            return None
        hard = self._hard_state()
        snapshot = self.log.unstable_snapshot
        entries = tuple(self.log.unstable())
        # only a new term or vote must be written (and before anything is sent); the commit index
        # rides along but is never worth an fsync of its own: after a restart it is relearned
        term_or_vote = (hard.term, hard.vote) != (self._prev_hard.term, self._prev_hard.vote)
        early, late = self._split_early(term_or_vote)
        rd = Ready(
            hard_state=hard if term_or_vote else None,
            entries=entries,
            snapshot=snapshot,
            messages=late,
            early_messages=early,
            # a restored snapshot is applied first; the entries after it come in the next batch
            committed=tuple(self.log.applicable()) if snapshot is None else (),
            soft_state=self._soft_state(),
            must_sync=term_or_vote or bool(entries) or snapshot is not None,
        )
        self._msgs = []
        return rd

    def _split_early(self, term_or_vote: bool) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """(messages that may go out before this Ready is persisted, the others). A leader's
        appends and heartbeats may: they carry entries and a commit index, never a promise about
        this server's disk (a commit counts the leader only for ``log.stable``), so its fsync runs
        while the followers write theirs. Everything else (votes, acknowledgements) waits for the
        disk, and so does all of a Ready that writes a new term or vote."""
        if self.role is not Role.LEADER or term_or_vote:
            return (), tuple(self._msgs)
        early = tuple(m for m in self._msgs if m.type in _LEADER_EARLY and m.term == self.term)
        if not early:
            return (), tuple(self._msgs)
        return early, tuple(m for m in self._msgs if not (m.type in _LEADER_EARLY and m.term == self.term))

    def advance(self, rd: Ready) -> None:
        """The driver has persisted, sent and applied ``rd``."""
        if rd.hard_state is not None:
            self._prev_hard = rd.hard_state
        self._prev_soft = rd.soft_state
        if rd.snapshot is not None:
            if self.log.unstable_snapshot is rd.snapshot:
                self.log.unstable_snapshot = None
            self.log.applied = max(self.log.applied, rd.snapshot.index)
        if rd.entries:
            last = rd.entries[-1]
            self.log.stable_to(last.index, last.term)
        if rd.committed:
            self.log.applied = max(self.log.applied, rd.committed[-1].index)
        if self.role is Role.LEADER and self._maybe_commit():
            self._broadcast_append()

    def snapshot_meta(self, index: int) -> SnapshotMeta:
        """What a snapshot of the applied state at ``index`` must record (term, configuration)."""
        term = self.log.term(index)
        if term is None or index > self.log.applied:
            raise ValueError(f"cannot snapshot at {index} (applied {self.log.applied})")
        return SnapshotMeta(index, term, self._conf_at(index))

    def compact(self, snapshot: Snapshot) -> None:
        """The driver has durably saved ``snapshot`` (made with ``snapshot_meta``): drop the log
        entries it covers. Followers that need them from now on are sent the snapshot."""
        self.log.compact(snapshot)

    def promotable(self) -> bool:
        return self.id in self.voters and not self.recovering

    def read_index(self) -> int | None:
        """(Leader) What a read of the state must have applied to see every change acknowledged
        so far: the commit index -- known only once this leader has committed an entry of its
        own term (its no-op). Until then entries a former leader acknowledged may be committed
        without this one knowing it (paper §8): None. Not a leader: None. (Leadership itself
        is taken on check-quorum's word, as for the leader's other answers.)"""
        if self.role is not Role.LEADER:
            return None
        committed = self.log.committed
        return committed if self.log.term(committed) == self.term else None

    def soft_state(self) -> SoftState:
        return self._soft_state()

    # -- roles -----------------------------------------------------------------------------------

    def _become_follower(self, term: int, lead: NodeId) -> None:
        if term != self.term:
            self.term = term
            self.vote = NONE
        self.lead = lead
        self.role = Role.FOLLOWER
        self.prs = {}
        self.transferee = NONE
        self._reset_timeout()

    def _become_pre_candidate(self) -> None:
        # term and vote stay as they are: losing a pre-vote leaves no trace anywhere
        self.role = Role.PRE_CANDIDATE
        self.lead = NONE
        self.votes = {}
        self._reset_timeout()
        self._request_votes(MsgType.PRE_VOTE, self.term + 1)

    def _become_candidate(self, transfer: bool = False) -> None:
        self.term += 1
        self.vote = self.id
        self.lead = NONE
        self.role = Role.CANDIDATE
        self.votes = {}
        self._reset_timeout()
        self._request_votes(MsgType.VOTE, self.term, transfer)

    def _request_votes(self, kind: MsgType, term: int, transfer: bool = False) -> None:
        self.votes[self.id] = True
        if self._poll() is not None:
            return
        for peer in sorted(self.voters - {self.id}):
            last, last_term = self.log.last_index(), self.log.last_term()
            self._send(Message(kind, self.id, peer, term, index=last, log_term=last_term, transfer=transfer))

    def _poll(self) -> bool | None:
        """Count votes; act on a decided election. Returns the outcome, None while undecided."""
        need = quorum(len(self.voters))
        granted = sum(1 for v, ok in self.votes.items() if ok and v in self.voters)
        rejected = sum(1 for v, ok in self.votes.items() if not ok and v in self.voters)
        if granted >= need:
            if self.role is Role.PRE_CANDIDATE:
                self._become_candidate()
            else:
                self._become_leader()
            return True
        if rejected >= need:
            self._become_follower(self.term, NONE)
            return False
        return None

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.lead = self.id
        self.heartbeat_elapsed = 0
        self.election_elapsed = 0
        last = self.log.last_index()
        self.prs = {p: Progress(last + 1, self.config.max_inflight) for p in self.voters if p != self.id}
        # entries of earlier terms commit only once an entry of ours does (paper §5.4.2); and an
        # uncommitted configuration of an earlier term may still be in the log: no change until
        # everything up to here has committed
        self.pending_conf_index = last
        self.transferee = NONE
        self._append([(EntryKind.NOOP, b"")])

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.transferee != NONE:
            self._transfer_ticks += 1
            if self._transfer_ticks >= self.config.election_ticks:
                logger.info("raft node %d: leadership hand-over to %d timed out", self.id, self.transferee)
                self.transferee = NONE
        if self.election_elapsed >= self.config.election_ticks:
            self.election_elapsed = 0
            if self.config.check_quorum:
                active = sum(
                    1 for v in self.voters if v == self.id or (v in self.prs and self.prs[v].recent_active)
                )
                if active < quorum(len(self.voters)):
                    self._become_follower(self.term, NONE)
                    return
                for pr in self.prs.values():
                    pr.recent_active = False
        if self.heartbeat_elapsed >= self.config.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            for peer, pr in self.prs.items():
                commit = min(pr.match, self.log.committed)
                self._send(Message(MsgType.HEARTBEAT, self.id, peer, self.term, commit=commit))

    # -- votes -----------------------------------------------------------------------------------

    def _handle_vote_request(self, m: Message) -> None:
        pre = m.type is MsgType.PRE_VOTE
        can_vote = (
            self.vote == m.src or (self.vote == NONE and self.lead == NONE) or (pre and m.term > self.term)
        )
        resp = MsgType.PRE_VOTE_RESP if pre else MsgType.VOTE_RESP
        # a server that lost its log must not help elect a leader that lacks committed entries
        # it once held (NATS #7038's idea): no vote until a leader has caught it up
        if can_vote and not self.recovering and self.log.is_up_to_date(m.index, m.log_term):
            # a grant names the asked-for term; it is sent only after the vote is durable
            self._send(Message(resp, self.id, m.src, m.term))
            if not pre:
                self.election_elapsed = 0
                self.vote = m.src
        else:
            self._send(Message(resp, self.id, m.src, self.term, reject=True))

    def _step_candidate(self, m: Message) -> None:
        want = MsgType.PRE_VOTE_RESP if self.role is Role.PRE_CANDIDATE else MsgType.VOTE_RESP
        if m.type is want:
            self.votes.setdefault(m.src, not m.reject)
            self._poll()
        elif m.type in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
            self._become_follower(m.term, m.src)  # someone won this term
            self._step_follower(m)

    # -- follower --------------------------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        if m.type is MsgType.TIMEOUT_NOW:
            # only from our leader (same term: step dropped older ones): it hands over to us
            if m.src == self.lead and self.promotable():
                self._become_candidate(transfer=True)  # no pre-vote: the leader wants this
            return
        if m.type not in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
            return
        self.election_elapsed = 0
        self.lead = m.src
        if m.type is MsgType.APPEND:
            self._handle_append(m)
        elif m.type is MsgType.HEARTBEAT:
            self.log.commit_to(min(m.commit, self.log.last_index()))
            self._send(Message(MsgType.HEARTBEAT_RESP, self.id, m.src, self.term))
        else:
            self._handle_snapshot(m)
        if self.recovering and m.type is MsgType.APPEND and self.log.committed >= m.commit > 0:
            # it holds everything the leader had committed when it sent this: caught up
            self.recovering = False

    def _handle_append(self, m: Message) -> None:
        log = self.log
        if m.index < log.committed:
            self._reply_append(m.src, log.committed)
            return
        truncations = log.truncations
        last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last_new is None:
            self._send(
                Message(
                    MsgType.APPEND_RESP,
                    self.id,
                    m.src,
                    self.term,
                    index=m.index,
                    reject=True,
                    reject_hint=self._conflict_hint(m.index, m.log_term),
                )
            )
            return
        if log.truncations != truncations or any(e.kind is EntryKind.CONF for e in m.entries):
            self._recompute_conf()
        self._reply_append(m.src, last_new)

    def _conflict_hint(self, index: int, term: int) -> int:
        """The highest index that could still match: at most our last index, and skipping back
        over entries of terms newer than the leader's ``term`` there (they cannot match)."""
        i = min(index, self.log.last_index())
        while i > self.log.snapshot.index:
            t = self.log.term(i)
            if t is not None and t <= term:
                break
            i -= 1
        return i

    def _reply_append(self, to: NodeId, index: int) -> None:
        self._send(Message(MsgType.APPEND_RESP, self.id, to, self.term, index=index))

    def _handle_snapshot(self, m: Message) -> None:
        snap = m.snapshot
        if snap is None:
            return
        if snap.index <= self.log.committed:
            self._reply_append(m.src, self.log.committed)
        elif self.log.matches(snap.index, snap.term):
            self.log.commit_to(snap.index)  # we already hold it: fast-forward
            self._reply_append(m.src, self.log.committed)
        else:
            self.log.restore(snap)
            self._recompute_conf()
            self._reply_append(m.src, self.log.last_index())

    # -- leader ----------------------------------------------------------------------------------

    def _step_leader(self, m: Message) -> None:
        pr = self.prs.get(m.src)
        if pr is None:
            return
        pr.recent_active = True
        if m.lost and m.reject_hint < pr.match:
            # its log is shorter than it once acknowledged (a wiped store): start over from what
            # it has; it no longer counts toward commits beyond that
            pr.match = m.reject_hint
            pr.become_probe()
            pr.next = m.reject_hint + 1
        if m.type is MsgType.APPEND_RESP:
            if m.reject:
                if pr.maybe_decrease(m.index, m.reject_hint):
                    if pr.state is ProgressState.REPLICATE:
                        pr.become_probe()
                    self._send_append(m.src)
                return
            if m.index > self.log.last_index():
                return  # acknowledges what we never sent: a confused or lying peer; ignore it
            if not pr.maybe_update(m.index):
                return
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state is ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot:
                pr.become_probe()
                pr.become_replicate()
            if self._maybe_commit():
                self._broadcast_append()
            else:
                self._send_all(m.src)
            if m.src == self.transferee and pr.match == self.log.last_index():
                self._send_timeout_now(m.src)
        elif m.type is MsgType.HEARTBEAT_RESP:
            pr.probe_sent = False
            if pr.state is ProgressState.SNAPSHOT:
                pr.snapshot_wait += 1
                if pr.snapshot_wait >= self.config.snapshot_retry_heartbeats:
                    pr.become_probe()  # the snapshot (or its answer) was lost: find out again
            elif pr.state is ProgressState.REPLICATE and pr.is_paused():
                pr.inflight.popleft()  # let one message through: it will find a lost one
            if pr.match < self.log.last_index():
                self._send_append(m.src, send_if_empty=True)
            elif m.src == self.transferee:  # matched, and the TIMEOUT_NOW may have been lost
                self._send_timeout_now(m.src)

    def _send_timeout_now(self, to: NodeId) -> None:
        self._send(Message(MsgType.TIMEOUT_NOW, self.id, to, self.term))

    def _maybe_commit(self) -> bool:
        if not self.voters:
            return False
        matches = sorted(
            (self.log.stable if v == self.id else (self.prs[v].match if v in self.prs else 0))
            for v in self.voters
        )
        index = matches[len(matches) - quorum(len(matches))]
        if index <= self.log.committed or self.log.term(index) != self.term:
            return False
        self.log.commit_to(index)
        if self.id not in self.voters and self.log.committed >= self.conf_index:
            # our own removal has committed: hand over -- TIMEOUT_NOW to the most caught-up
            # follower when it holds our whole log (else the others elect after their timeout)
            # -- and go quiet (we cannot campaign)
            to = self.best_transferee()
            if to is not None and self.prs[to].match == self.log.last_index():
                self._send_timeout_now(to)
            self._become_follower(self.term, NONE)
            return False
        return True

    def _broadcast_append(self) -> None:
        for peer in sorted(self.prs):
            self._send_append(peer, send_if_empty=True)
            self._send_all(peer)

    def _send_all(self, peer: NodeId) -> None:
        while self._send_append(peer):
            pass

    def _send_append(self, to: NodeId, send_if_empty: bool = False) -> bool:
        pr = self.prs.get(to)
        if pr is None or pr.is_paused():  # gone from the configuration, or we stepped down
            return False
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        if prev_term is None:
            if prev < self.log.snapshot.index:
                snap = self.log.snapshot
                pr.become_snapshot(snap.index)
                self._send(Message(MsgType.SNAPSHOT, self.id, to, self.term, snapshot=snap))
                return False
            pr.next = self.log.last_index() + 1  # beyond our log: cannot happen, recover anyway
            return False
        hi = min(self.log.last_index() + 1, pr.next + self.config.max_msg_entries)
        entries = self.log.slice(pr.next, hi, self.config.max_msg_bytes)
        if not entries and not send_if_empty:
            return False
        self._send(
            Message(
                MsgType.APPEND,
                self.id,
                to,
                self.term,
                index=prev,
                log_term=prev_term,
                commit=self.log.committed,
                entries=tuple(entries),
            )
        )
        pr.sent(entries[-1].index if entries else prev, len(entries))
        return bool(entries)

    def _append(self, items: list[tuple[EntryKind, bytes]]) -> int:
        if self.transferee != NONE:
            # the target must catch up with a log that stops growing (thesis §3.10)
            raise ProposalError(f"leadership is being handed to {self.transferee}")
        start = self.log.last_index() + 1
        entries = [Entry(self.term, start + k, kind, data) for k, (kind, data) in enumerate(items)]
        self.log.append(entries)
        if any(e.kind is EntryKind.CONF for e in entries):
            self._recompute_conf()
        # a new leader and a one-node cluster commit as soon as the entries are durable (advance)
        for peer in sorted(self.prs):
            self._send_all(peer)
        return self.log.last_index()

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.lead)

    # -- configuration ---------------------------------------------------------------------------

    def _conf_at(self, index: int) -> frozenset[NodeId]:
        voters = self.log.snapshot.meta.voters
        for i in range(self.log.first_index(), min(index, self.log.last_index()) + 1):
            e = self.log.entry(i)
            if e.kind is EntryKind.CONF:
                voters = ConfChange.decode(e.data).apply(voters)
        return voters

    def _recompute_conf(self) -> None:
        """A configuration takes effect as soon as it is in the log (thesis §4.1), so it is the
        newest one there, and a truncation can take it back."""
        voters = self.log.snapshot.meta.voters
        conf_index = self.log.snapshot.index
        for i in range(self.log.first_index(), self.log.last_index() + 1):
            e = self.log.entry(i)
            if e.kind is EntryKind.CONF:
                voters = ConfChange.decode(e.data).apply(voters)
                conf_index = i
        self.voters = voters
        self.conf_index = conf_index
        if self.role is Role.LEADER:
            for v in voters - {self.id} - self.prs.keys():
                self.prs[v] = Progress(self.log.last_index() + 1, self.config.max_inflight)
            for gone in self.prs.keys() - voters:
                del self.prs[gone]

    # -- helpers ---------------------------------------------------------------------------------

    def _in_lease(self) -> bool:
        return (
            self.config.check_quorum
            and self.lead != NONE
            and self.election_elapsed < self.config.election_ticks
        )

    def _reset_timeout(self) -> None:
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        e = self.config.election_ticks
        self.randomized_timeout = self._rng.randrange(e, 2 * e)

    def _send(self, m: Message) -> None:
        if self.recovering and m.type in (MsgType.APPEND_RESP, MsgType.HEARTBEAT_RESP):
            hint = m.reject_hint if m.reject else self.log.last_index()
            m = dataclasses.replace(m, lost=True, reject_hint=hint)
        self._msgs.append(m)

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def _soft_state(self) -> SoftState:
        return SoftState(self.lead, self.role)
