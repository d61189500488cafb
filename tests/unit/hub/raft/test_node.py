"""Scripted scenarios for the sans-IO node: each drives one rule by hand, messages in, Ready out."""

from __future__ import annotations

import random

import pytest

from hub.raft.node import ConfChangeInProgress, Config, Node, NotLeader, ProposalError, bootstrap_snapshot
from hub.raft.types import (
    ConfChange,
    ConfChangeKind,
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    Ready,
    Role,
)
from tests.unit.hub.raft.sim import Sim

VOTERS = frozenset({1, 2, 3})


def node(
    nid: int = 1, entries: tuple[Entry, ...] = (), hard: HardState | None = None, **cfg: int | bool
) -> Node:
    return Node(
        Config(nid, election_ticks=10, **cfg),  # type: ignore[arg-type]
        random.Random(nid),
        hard_state=hard,
        snapshot=bootstrap_snapshot(VOTERS),
        entries=entries,
    )


def flush(n: Node) -> list[Ready]:
    """Play the driver: take every Ready and advance (persisting and applying are implied)."""
    out = []
    while (rd := n.ready()) is not None:
        out.append(rd)
        n.advance(rd)
    return out


def sent(readies: list[Ready], kind: MsgType | None = None) -> list[Message]:
    return [m for rd in readies for m in rd.early_messages + rd.messages if kind is None or m.type is kind]


def make_leader(n: Node) -> list[Ready]:
    n.campaign()
    for m in sent(flush(n), MsgType.PRE_VOTE)[:1]:
        n.step(Message(MsgType.PRE_VOTE_RESP, m.dst, n.id, m.term))
    for m in sent(flush(n), MsgType.VOTE)[:1]:
        n.step(Message(MsgType.VOTE_RESP, m.dst, n.id, m.term))
    assert n.role is Role.LEADER
    return flush(n)


def test_a_pre_vote_that_cannot_win_leaves_the_term_alone() -> None:
    n = node()
    for _ in range(25):
        n.tick()
    readies = flush(n)
    assert n.role is Role.PRE_CANDIDATE and n.term == 1
    pre = sent(readies, MsgType.PRE_VOTE)
    assert {m.dst for m in pre} == {2, 3} and all(m.term == 2 for m in pre)
    # nobody answers; it keeps asking, and never writes a new term
    for _ in range(100):
        n.tick()
    flush(n)
    assert n.term == 1 and n.vote == 0


def test_a_follower_that_hears_from_its_leader_ignores_a_disruptive_candidate() -> None:
    n = node(2)
    n.step(Message(MsgType.HEARTBEAT, 1, 2, 5))
    flush(n)
    assert n.lead == 1 and n.term == 5
    n.step(Message(MsgType.VOTE, 3, 2, 9, index=100, log_term=9))
    assert n.term == 5 and not sent(flush(n), MsgType.VOTE_RESP)
    for _ in range(10):  # the lease runs out after an election timeout without the leader
        n.tick()
    n.step(Message(MsgType.VOTE, 3, 2, 9, index=100, log_term=9))
    readies = flush(n)
    (grant,) = sent(readies, MsgType.VOTE_RESP)
    assert not grant.reject and n.term == 9 and n.vote == 3


def test_a_vote_leaves_only_in_the_ready_that_persists_it() -> None:
    n = node(2)
    n.step(Message(MsgType.VOTE, 3, 2, 4, index=1, log_term=1))
    (rd,) = flush(n)
    assert rd.hard_state == HardState(term=4, vote=3, commit=1) and rd.must_sync
    assert [m.type for m in rd.messages] == [MsgType.VOTE_RESP]
    # and a restart from that hard state does not vote again in term 4
    again = node(2, hard=HardState(4, 3, 1))
    again.step(Message(MsgType.VOTE, 1, 2, 4, index=1, log_term=1))
    (resp,) = sent(flush(again), MsgType.VOTE_RESP)
    assert resp.reject


def test_a_candidate_with_a_stale_log_gets_no_vote() -> None:
    n = node(2, entries=(Entry(3, 2),), hard=HardState(3, 0, 1))
    n.step(Message(MsgType.VOTE, 3, 2, 5, index=9, log_term=2))  # longer log, older last term
    (resp,) = sent(flush(n), MsgType.VOTE_RESP)
    assert resp.reject and n.vote == 0


def test_a_leader_without_a_quorum_steps_down() -> None:
    n = node()
    make_leader(n)
    for _ in range(25):
        n.tick()
    assert n.role is Role.FOLLOWER and n.lead == 0


def test_a_leader_hearing_from_a_quorum_stays() -> None:
    n = node()
    make_leader(n)
    for _ in range(50):
        n.tick()
        n.step(Message(MsgType.HEARTBEAT_RESP, 2, 1, n.term))
    assert n.role is Role.LEADER


def test_entries_of_an_earlier_term_commit_only_with_one_of_the_current_term() -> None:
    # an entry of term 1 at index 2 that only we hold; we lead term 2 and append the no-op at 3
    n = node(entries=(Entry(1, 2, EntryKind.NORMAL, b"old"),), hard=HardState(1, 0, 1))
    make_leader(n)
    assert n.term == 2 and n.log.last_index() == 3 and n.log.entry(3).kind is EntryKind.NOOP
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=2))  # a majority holds index 2 ...
    flush(n)
    assert n.log.committed == 1  # ... but it is of term 1 (paper §5.4.2, Figure 8)
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=3))
    readies = flush(n)
    assert n.log.committed == 3
    assert [e.index for rd in readies for e in rd.committed] == [2, 3]


def test_a_new_leader_gives_a_read_index_only_once_an_entry_of_its_term_commits() -> None:
    # the entry of term 1 at index 2 may have been acknowledged by the former leader; until the
    # no-op of term 2 commits, this leader cannot tell, so it names no index to read at
    n = node(entries=(Entry(1, 2, EntryKind.NORMAL, b"old"),), hard=HardState(1, 0, 1))
    assert n.read_index() is None  # a follower
    make_leader(n)
    assert n.read_index() is None
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=2))
    flush(n)
    assert n.read_index() is None  # index 2 is of term 1: not known to be committed
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=3))
    flush(n)
    assert n.read_index() == 3


def test_the_leader_counts_its_own_entries_only_once_durable() -> None:
    n = node()
    make_leader(n)
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=2))
    flush(n)
    index = n.propose([b"x"])
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=index))  # a follower has it durable
    assert n.log.committed == index - 1 or n.log.stable < index
    rd = n.ready()
    assert rd is not None and rd.entries[-1].index == index  # still ours to persist
    assert n.log.committed < index
    n.advance(rd)
    assert n.log.committed == index


def test_appends_are_pipelined_within_the_inflight_window_and_batched() -> None:
    n = node(max_inflight=2, max_msg_entries=3)
    make_leader(n)
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=2))  # 2 now in REPLICATE
    flush(n)
    n.propose([b"%d" % i for i in range(20)])
    readies = flush(n)
    assert sum(len(rd.entries) for rd in readies) == 20  # one persist for the batch
    to2 = [m for m in sent(readies, MsgType.APPEND) if m.dst == 2]
    assert [len(m.entries) for m in to2] == [3, 3]  # two messages in flight, three entries each
    assert to2[1].index == to2[0].entries[-1].index  # the second went before the first was acked
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=to2[0].entries[-1].index))
    more = [m for m in sent(flush(n), MsgType.APPEND) if m.dst == 2]
    assert len(more) == 1 and more[0].index == to2[1].entries[-1].index


def test_a_stale_append_does_not_truncate_what_it_does_not_contradict() -> None:
    n = node(2)
    es = tuple(Entry(2, i) for i in range(2, 6))
    n.step(Message(MsgType.APPEND, 1, 2, 2, index=1, log_term=1, entries=es))
    flush(n)
    n.step(Message(MsgType.APPEND, 1, 2, 2, index=1, log_term=1, entries=es[:2]))  # late duplicate
    flush(n)
    assert n.log.last_index() == 5


def test_membership_changes_one_server_at_a_time() -> None:
    n = node()
    make_leader(n)
    with pytest.raises(ConfChangeInProgress):  # our no-op has not committed yet
        n.propose_conf_change(ConfChange(ConfChangeKind.ADD, 4))
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=2))
    flush(n)
    index = n.propose_conf_change(ConfChange(ConfChangeKind.ADD, 4))
    assert n.voters == {1, 2, 3, 4}  # in effect once in the log
    with pytest.raises(ConfChangeInProgress):
        n.propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 2))
    n.step(Message(MsgType.APPEND_RESP, 2, 1, n.term, index=index))
    n.step(Message(MsgType.APPEND_RESP, 3, 1, n.term, index=index))
    flush(n)
    assert n.log.committed == index
    n.propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 2))
    with pytest.raises(NotLeader):
        node(3).propose([b"x"])


def _run_until(sim: Sim, done: object, limit: int = 2000) -> None:
    for _ in range(limit):
        if callable(done) and done():
            return
        sim.step(propose=False)
    raise AssertionError(f"not reached in {limit} steps: {sim.describe()}")


def test_a_far_behind_follower_catches_up_from_a_snapshot() -> None:
    sim = Sim(7, snapshot_every=10)
    _run_until(sim, lambda: sim.leader() is not None)
    lagging = next(s for s in sim.servers.values() if s is not sim.leader())
    sim.blocked = {(a, lagging.id) for a in sim.servers} | {(lagging.id, a) for a in sim.servers}
    lead = sim.leader()
    assert lead is not None and lead.node is not None
    sim._propose(100)
    # what it lacks gets compacted away
    _run_until(
        sim, lambda: lead.node is not None and lead.node.log.snapshot.index > lagging.applied_index + 50
    )
    assert sim.leader() is lead
    sent_before = sim.stats["snapshots_sent"]
    sim.blocked = set()
    _run_until(sim, lambda: lagging.applied_index == lead.applied_index)
    assert sim.stats["snapshots_sent"] > sent_before
    assert lagging.digest == lead.digest


def test_a_removed_leader_hands_over_and_an_added_server_joins() -> None:
    sim = Sim(11)

    def settled_leader() -> bool:
        lead = sim.leader()
        return (
            lead is not None
            and lead.node is not None
            and lead.node.log.committed >= lead.node.pending_conf_index
            and lead.node.log.term(lead.node.log.committed) == lead.node.term
        )

    _run_until(sim, settled_leader)
    sim._change_membership("add", 0)
    _run_until(sim, lambda: sim.servers[4].node is not None and sim.servers[4].applied_index > 2)
    old = sim.leader()
    assert old is not None and old.node is not None and old.node.voters == {1, 2, 3, 4}
    _run_until(sim, settled_leader)
    campaigns = sim.stats["transfer_campaigns"]
    sim._change_membership("remove", old.id)
    _run_until(sim, lambda: (lead := sim.leader()) is not None and lead is not old)
    # handed over (TIMEOUT_NOW once the removal committed), not left to an election timeout
    assert sim.stats["transfer_campaigns"] == campaigns + 1
    new = sim.leader()
    assert new is not None and new.node is not None and new.node.voters == {1, 2, 3, 4} - {old.id}
    assert old.node is not None and old.node.role is Role.FOLLOWER and not old.node.promotable()
    sim.settle()


@pytest.mark.parametrize(
    "bad",
    [
        Message(MsgType.APPEND, 1, 2, 3, index=1, log_term=1, entries=(Entry(3, 5),)),  # a gap
        Message(MsgType.APPEND, 1, 2, 3, index=1, log_term=1, entries=(Entry(4, 2),)),  # future term
        Message(MsgType.APPEND, 1, 2, 3, index=1, log_term=2, entries=(Entry(1, 2),)),  # terms go back
        Message(MsgType.SNAPSHOT, 1, 2, 3),  # no snapshot
        # a membership change that does not decode (it would raise wherever the node reads it)
        Message(
            MsgType.APPEND, 1, 2, 3, index=1, log_term=1, entries=(Entry(3, 2, EntryKind.CONF, b"\x07"),)
        ),
        Message(
            MsgType.APPEND,
            1,
            2,
            3,
            index=1,
            log_term=1,
            entries=(Entry(3, 2, EntryKind.CONF, ConfChange(ConfChangeKind.ADD, 0).encode()),),
        ),  # adds node 0, which means "none"
        Message(MsgType.HEARTBEAT, 1, 2, 3, commit=-1),
    ],
)
def test_a_malformed_message_is_dropped_without_harm(bad: Message) -> None:
    n = node(2)
    n.step(bad)
    assert n.term == 1 and n.log.last_index() == 1 and flush(n) == []


# -- a server that lost its log (a wiped store; hub/raft/DESIGN.md "Lost logs") -------------------


def test_a_server_that_lost_its_log_gives_no_vote_to_a_stale_candidate() -> None:
    """A and B hold a committed entry 2 that C lacks; B is wiped and rejoins empty. Granting C's
    vote would elect a leader without entry 2 (C and B are a quorum): B must refuse."""
    wiped = Node(
        Config(2, election_ticks=10), random.Random(2), snapshot=bootstrap_snapshot(VOTERS), recovering=True
    )
    for kind in (MsgType.PRE_VOTE, MsgType.VOTE):
        wiped.step(Message(kind, 3, 2, 2, index=1, log_term=1))
    resps = sent(flush(wiped))
    assert [m.type for m in resps] == [MsgType.PRE_VOTE_RESP, MsgType.VOTE_RESP]
    assert all(m.reject for m in resps) and wiped.vote in (0, 3) and wiped.vote != 3
    for _ in range(100):  # nor does it campaign itself
        wiped.tick()
    assert wiped.role is Role.FOLLOWER and not sent(flush(wiped), MsgType.PRE_VOTE)


def test_a_lost_log_is_caught_up_by_the_leader_and_then_votes_again() -> None:
    lead = node(1)
    make_leader(lead)
    lead.propose([b"a", b"b"])
    flush(lead)
    lead.step(Message(MsgType.APPEND_RESP, 2, 1, lead.term, index=lead.log.last_index()))
    flush(lead)
    assert lead.prs[2].match == lead.log.last_index() == 4 and lead.log.committed == 4
    # node 2 is wiped: it answers a heartbeat from its (bootstrap-only) log, flagged as lost
    wiped = Node(
        Config(2, election_ticks=10), random.Random(2), snapshot=bootstrap_snapshot(VOTERS), recovering=True
    )
    wiped.step(Message(MsgType.HEARTBEAT, 1, 2, lead.term, commit=4))
    (hb,) = sent(flush(wiped), MsgType.HEARTBEAT_RESP)
    assert hb.lost and hb.reject_hint == 1
    lead.step(hb)
    assert lead.prs[2].match == 1  # no longer counted for what it lost
    appends = sent(flush(lead), MsgType.APPEND)
    to_wiped = [m for m in appends if m.dst == 2]
    assert to_wiped and to_wiped[0].index == 1 and len(to_wiped[0].entries) == 3
    wiped.step(to_wiped[0])
    (ack,) = sent(flush(wiped), MsgType.APPEND_RESP)
    assert not ack.reject and ack.index == 4
    assert not wiped.recovering and wiped.log.committed == 4
    lead.step(ack)
    assert lead.prs[2].match == 4
    # caught up: a voter again, which campaigns when its leader goes quiet
    assert wiped.promotable()
    for _ in range(30):
        wiped.tick()
    assert sent(flush(wiped), MsgType.PRE_VOTE)


# -- leadership hand-over (thesis §3.10) ---------------------------------------------------------


def acked_leader() -> Node:
    """Node 1 leading term 2 with its no-op durable and matched by 2 and 3 (heard from both)."""
    n = node()
    make_leader(n)
    last = n.log.last_index()
    for peer in (2, 3):
        n.step(Message(MsgType.APPEND_RESP, peer, 1, n.term, index=last))
    flush(n)
    return n


def test_a_leader_hands_over_to_a_caught_up_follower_at_once() -> None:
    n = acked_leader()
    n.transfer_leadership(2)
    (now,) = sent(flush(n), MsgType.TIMEOUT_NOW)
    assert (now.dst, now.term) == (2, n.term)
    with pytest.raises(ProposalError, match="handed"):
        n.propose([b"x"])  # the target must catch up with a log that stops growing
    # the target (holding the leader's log, as its match says) campaigns at once, no pre-vote
    log = tuple(n.log.entry(i) for i in range(2, n.log.last_index() + 1))
    f = node(2, entries=log)
    f.step(Message(MsgType.HEARTBEAT, 1, 2, n.term))
    flush(f)
    f.step(now)
    votes = sent(flush(f), MsgType.VOTE)
    assert f.role is Role.CANDIDATE and f.term == n.term + 1
    assert {m.dst for m in votes} == {1, 3} and all(m.transfer for m in votes)
    # a voter that heard from the leader lately grants it all the same; so does the old leader
    v = node(3, entries=log)
    v.step(Message(MsgType.HEARTBEAT, 1, 3, n.term))
    flush(v)
    for voter in (v, n):
        voter.step(next(m for m in votes if m.dst == voter.id))
        (grant,) = sent(flush(voter), MsgType.VOTE_RESP)
        assert not grant.reject and voter.vote == 2 and voter.role is Role.FOLLOWER


def test_a_hand_over_to_a_lagging_follower_waits_until_it_has_caught_up() -> None:
    n = acked_leader()
    n.propose([b"a", b"b"])
    flush(n)
    n.transfer_leadership(3)
    readies = flush(n)
    assert not sent(readies, MsgType.TIMEOUT_NOW)
    n.step(Message(MsgType.APPEND_RESP, 3, 1, n.term, index=n.log.last_index() - 1))
    assert not sent(flush(n), MsgType.TIMEOUT_NOW)
    n.step(Message(MsgType.APPEND_RESP, 3, 1, n.term, index=n.log.last_index()))
    (now,) = sent(flush(n), MsgType.TIMEOUT_NOW)
    assert now.dst == 3


def test_a_hand_over_that_does_not_happen_is_given_up_after_an_election_timeout() -> None:
    n = acked_leader()
    n.transfer_leadership(2)  # the TIMEOUT_NOW is lost; 2 and 3 keep answering heartbeats
    flush(n)
    for _ in range(9):
        n.tick()
        n.step(Message(MsgType.HEARTBEAT_RESP, 3, 1, n.term))
        flush(n)
        with pytest.raises(ProposalError):
            n.propose([b"x"])
    n.tick()
    assert n.role is Role.LEADER and n.transferee == 0
    n.propose([b"x"])


def test_a_voter_in_its_lease_ignores_a_vote_that_is_no_hand_over() -> None:
    v = node(3)
    v.step(Message(MsgType.HEARTBEAT, 1, 3, 2))
    flush(v)
    v.step(Message(MsgType.VOTE, 2, 3, 3, index=9, log_term=2))
    assert v.term == 2 and not sent(flush(v), MsgType.VOTE_RESP)


def test_only_the_leader_can_make_a_follower_campaign_with_timeout_now() -> None:
    f = node(2)
    f.step(Message(MsgType.HEARTBEAT, 1, 2, 2))
    flush(f)
    f.step(Message(MsgType.TIMEOUT_NOW, 3, 2, 2))  # not its leader
    assert f.role is Role.FOLLOWER and f.term == 2 and not sent(flush(f))


def test_only_another_voter_can_be_handed_leadership() -> None:
    n = acked_leader()
    for bad in (1, 7):
        with pytest.raises(ProposalError, match="not another voter"):
            n.transfer_leadership(bad)
    with pytest.raises(NotLeader):
        node(2).transfer_leadership(3)


def test_in_a_cluster_the_hand_over_elects_the_target_without_an_election_timeout() -> None:
    sim = Sim(21)
    _run_until(sim, lambda: (lead := sim.leader()) is not None and lead.applied_index > 1)
    old = sim.leader()
    assert old is not None and old.node is not None
    target = min(sid for sid in sim.servers if sid != old.id)
    old.node.transfer_leadership(target)
    sim._drain(old)
    start = sim.now
    _run_until(sim, lambda: (lead := sim.leader()) is not None and lead.id == target, limit=50)
    assert sim.now - start < Sim.ELECTION_TICKS  # messages' delays only: no timeout waited for
    assert sim.stats["transfer_campaigns"] == 1
    sim.settle()
