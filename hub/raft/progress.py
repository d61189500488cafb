"""The leader's view of one follower: how far it matches, what to send next, and flow control.

A follower is in one of three states (etcd-io/raft's shape):
- PROBE: we do not know where its log matches; send one append, then wait for an answer or a heartbeat;
- REPLICATE: it matches; stream appends optimistically (``next`` moves on at send), at most
  ``max_inflight`` unacknowledged messages at a time;
- SNAPSHOT: the entries it needs are compacted; a snapshot is on its way.
"""

from __future__ import annotations

import collections
import enum


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    __slots__ = (
        "inflight",
        "match",
        "max_inflight",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "snapshot_wait",
        "state",
    )

    def __init__(self, next_index: int, max_inflight: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snapshot_wait = 0  # heartbeats answered while a snapshot is outstanding
        self.recent_active = True  # heard from within the current check-quorum window
        self.max_inflight = max_inflight
        self.inflight: collections.deque[int] = collections.deque()  # last index of each message sent

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= self.max_inflight
        return True

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflight.clear()

    def become_snapshot(self, index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.snapshot_wait = 0
        self.inflight.clear()

    def sent(self, last_index: int, count: int) -> None:
        """An append carrying ``count`` entries up to ``last_index`` went out."""
        if self.state is ProgressState.REPLICATE:
            if count:
                self.next = last_index + 1
                self.inflight.append(last_index)
        else:
            self.probe_sent = True

    def maybe_update(self, index: int) -> bool:
        """A successful answer up to ``index``; False when it tells us nothing new."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def maybe_decrease(self, rejected: int, hint: int) -> bool:
        """A rejection of the append after ``rejected``; False when it is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1, 1)
        self.probe_sent = False
        return True
