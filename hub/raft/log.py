"""The node's view of its log: a snapshot, then contiguous entries, split into stable and unstable.

Entries up to ``stable`` are known to be durable (the driver persisted them and called advance);
entries after it are handed out by ``unstable()`` until then. ``committed`` may run ahead of
``stable`` on a follower (the leader told it so), but nothing is applied before it is durable here.
"""

from __future__ import annotations

from hub.raft.types import Entry, Snapshot


class LogInvariantError(AssertionError):
    """The log was asked to do something RAFT forbids (a bug, never a bad input)."""


class RaftLog:
    def __init__(self, snapshot: Snapshot, entries: list[Entry], committed: int = 0) -> None:
        self.snapshot = snapshot
        self._entries: list[Entry] = []  # self._entries[k].index == self.snapshot.index + 1 + k
        for e in entries:
            if e.index <= snapshot.index:
                continue
            if e.index != self.last_index() + 1:
                raise LogInvariantError(f"entries not contiguous at {e.index}")
            self._entries.append(e)
        self.stable = self.last_index()  # what we were built from is on disk
        self.committed = max(snapshot.index, min(committed, self.last_index()))
        self.applied = snapshot.index
        self.unstable_snapshot: Snapshot | None = None
        self.truncations = 0  # counts conflicts resolved by truncation (the configuration may change)

    # -- reading ---------------------------------------------------------------------------------

    def first_index(self) -> int:
        return self.snapshot.index + 1

    def last_index(self) -> int:
        return self.snapshot.index + len(self._entries)

    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snapshot.term

    def term(self, index: int) -> int | None:
        """The term at ``index``, or None when it is compacted away or not there yet."""
        if index == self.snapshot.index:
            return self.snapshot.term
        k = index - self.snapshot.index - 1
        if 0 <= k < len(self._entries):
            return self._entries[k].term
        return None

    def entry(self, index: int) -> Entry:
        return self._entries[index - self.snapshot.index - 1]

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries lo..hi-1 (lo must not be compacted), cut at ``max_bytes`` but never empty."""
        base = self.snapshot.index + 1
        out = self._entries[lo - base : hi - base]
        if max_bytes is None:
            return out
        total = 0
        for k, e in enumerate(out):
            total += e.size()
            if total > max_bytes and k > 0:
                return out[:k]
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """A candidate's log is at least as current as ours (paper §5.4.1)."""
        return (last_term, last_index) >= (self.last_term(), self.last_index())

    def matches(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def unstable(self) -> list[Entry]:
        return self.slice(self.stable + 1, self.last_index() + 1)

    def applicable(self) -> list[Entry]:
        hi = min(self.committed, self.stable)
        if hi <= self.applied:
            return []
        return self.slice(self.applied + 1, hi + 1)

    # -- writing ---------------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """The leader's own proposals: they continue the log."""
        for e in entries:
            if e.index != self.last_index() + 1:
                raise LogInvariantError(f"append at {e.index} after {self.last_index()}")
            self._entries.append(e)

    def maybe_append(self, index: int, log_term: int, commit: int, entries: tuple[Entry, ...]) -> int | None:
        """A follower's append: None when (index, log_term) does not match; otherwise the last index
        the leader's message vouches for. Truncates only at a real conflict (paper §5.3), so a stale
        or duplicated append never cuts off entries it does not contradict."""
        if not self.matches(index, log_term):
            return None
        last_new = index + len(entries)
        for k, e in enumerate(entries):
            have = self.term(e.index)
            if have == e.term:
                continue
            if e.index <= self.snapshot.index:
                continue  # compacted, hence committed, hence equal
            if have is not None:
                if e.index <= self.committed:
                    raise LogInvariantError(f"conflict at committed index {e.index}")
                del self._entries[e.index - self.snapshot.index - 1 :]
                self.truncations += 1
                self.stable = min(self.stable, e.index - 1)
            self._entries.extend(entries[k:])
            break
        self.commit_to(min(commit, last_new))
        return last_new

    def commit_to(self, index: int) -> None:
        if index > self.committed:
            if index > self.last_index():
                raise LogInvariantError(f"commit {index} beyond last index {self.last_index()}")
            self.committed = index

    def stable_to(self, index: int, term: int) -> None:
        # the log may have been truncated since the Ready was taken: only trust a still-matching entry
        if self.term(index) == term and index > self.stable:
            self.stable = index

    def restore(self, snapshot: Snapshot) -> None:
        """Replace everything with a snapshot from the leader (it is ahead of our commit)."""
        self.snapshot = snapshot
        self._entries = []
        self.stable = snapshot.index
        self.committed = snapshot.index
        self.unstable_snapshot = snapshot

    def compact(self, snapshot: Snapshot) -> None:
        """Drop the entries a local snapshot covers (it must be of applied state)."""
        if snapshot.index <= self.snapshot.index:
            return
        if snapshot.index > self.applied or self.term(snapshot.index) != snapshot.term:
            raise LogInvariantError(f"snapshot at {snapshot.index} is not of applied state")
        del self._entries[: snapshot.index - self.snapshot.index]
        self.snapshot = snapshot
