"""The process-wide resources every SqliteStore shares: a few worker threads, and a cap on open stores.

* ``StorePool``: ``WORKERS`` daemon threads and a timer thread, started on first use, run the
  stores' jobs (a store's batch of queued calls, an off-loop read, a checkpoint or interval fsync
  due on a timer). A store with nothing to do has no job queued and costs no thread; the thread
  count does not grow with the number of stores. Jobs are plain callables; a store keeps its own
  invariants (one writer at a time, calls in order) with its own locks and its "scheduled" flag --
  the pool only runs what it is given.
* ``OpenSlots``: at most ``cap`` stores hold connections (file descriptors) at once. A store that
  needs its connections while the cap is reached closes the least recently used *idle* store (no
  call queued or running, no read running, no snapshot) and takes its slot; when none is idle, its
  job is parked and retried when a store goes idle (and on a short timer), until its deadline.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("leafjet.store")

WORKERS = 4
"""Threads shared by all stores of the process. More than the cores: a job can wait on the disk (an
fsync of tens of milliseconds on flash) and the others should go on meanwhile."""
FDS_PER_OPEN_STORE = 5
"""An open store: the writing connection (database + WAL), the reading connection (database + WAL),
and the shared-memory index (one per file in the process)."""
FD_SHARE = 0.5
"""The default cap leaves this share of RLIMIT_NOFILE's soft limit to the stores; the rest is for
client connections, leaf links and everything else."""
PARK_RETRY = 0.02
"""How often parked jobs (waiting for a slot) are retried besides when a store goes idle."""


def default_max_open_stores() -> int:
    """The default cap: ``FD_SHARE`` of the soft limit on open files, ``FDS_PER_OPEN_STORE`` each
    (102 stores under the usual soft limit of 1,024); at least 4."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 16
    return max(4, int(soft * FD_SHARE) // FDS_PER_OPEN_STORE)


class StorePool:
    """``WORKERS`` daemon threads running jobs in FIFO order, and one timer thread that hands
    jobs due at a time to them; all started on first use.

    The job queue is a ``queue.SimpleQueue`` (its blocking ``get`` is C code): a sync publish is a
    job hand-over there and back. With a ``threading.Condition`` guarding a list instead, the
    server's CPU per sync publish (``bench jetstream``, sync="always") was 375-480 us against
    285-315 us with a writer thread per store; with the SimpleQueue, 355 us against 285-340 us."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._cond = threading.Condition()  # guards _timers
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._started = False
        self._max = workers

    @property
    def threads(self) -> int:
        return len(self._threads)

    def submit(self, job: Callable[[], None]) -> None:
        if not self._started:
            self._start()
        self._jobs.put(job)

    def call_at(self, when: float, job: Callable[[], None]) -> None:
        """Run ``job`` at ``when`` (``time.monotonic()``), or soon after."""
        if not self._started:
            self._start()
        with self._cond:
            heapq.heappush(self._timers, (when, next(self._seq), job))
            if self._timers[0][2] is job:  # a new earliest: the timer thread sleeps too long
                self._cond.notify()

    def _start(self) -> None:
        with self._start_lock:
            if self._started:
                return
            targets = [(f"leafjet-store-{i}", self._work) for i in range(self._max)]
            for name, target in [*targets, ("leafjet-store-timer", self._time)]:
                t = threading.Thread(target=target, name=name, daemon=True)
                t.start()
                self._threads.append(t)
            self._started = True

    def _work(self) -> None:
        get = self._jobs.get
        while True:
            job = get()
            try:
                job()
            except BaseException:  # a job owns its errors; one that escapes is a bug
                log.exception("store job failed")
            del job

    def _time(self) -> None:
        with self._cond:
            timers = self._timers
            while True:
                now = time.monotonic()
                while timers and timers[0][0] <= now:
                    self._jobs.put(heapq.heappop(timers)[2])
                self._cond.wait(timers[0][0] - now if timers else None)


class Evictable(Protocol):
    def _try_evict(self) -> bool: ...


class OpenSlots:
    """At most ``cap`` stores hold their connections; least recently used first out."""

    def __init__(self, cap: int | None = None) -> None:
        self._lock = threading.Lock()
        self._lru: OrderedDict[Evictable, None] = OrderedDict()
        self.cap = cap or default_max_open_stores()
        self._parked: list[Callable[[], None]] = []
        self._retry_armed = False
        self.evictions = 0

    def set_cap(self, cap: int | None) -> int:
        """Set the cap (``None``: the default from RLIMIT_NOFILE); the previous one. Stores over a
        lowered cap close as others need slots."""
        with self._lock:
            old, self.cap = self.cap, (cap or default_max_open_stores())
        if self.cap < 1:
            raise ValueError("the cap on open stores must be >= 1")
        return old

    @property
    def open(self) -> int:
        return len(self._lru)

    def touch(self, store: Evictable) -> None:
        """``store`` was used: it is the last to be closed for idleness."""
        with self._lock:
            if store in self._lru:
                self._lru.move_to_end(store)

    def acquire(self, store: Evictable) -> bool:
        """Give ``store`` a slot, closing idle stores if the cap is reached; False if none is idle.
        Called on a pool thread (closing a store is I/O) holding ``store``'s locks."""
        with self._lock:
            if store in self._lru:
                self._lru.move_to_end(store)
                return True
            if len(self._lru) < self.cap:
                self._lru[store] = None
                return True
            victims = [v for v in self._lru if v is not store]
        for v in victims:
            # _try_evict takes v's locks without waiting and calls forget(v) once it is closed
            if v._try_evict():
                self.evictions += 1
                with self._lock:
                    if len(self._lru) < self.cap:
                        self._lru[store] = None
                        return True
        return False

    def forget(self, store: Evictable) -> None:
        """``store`` closed its connections: its slot is free."""
        with self._lock:
            self._lru.pop(store, None)
        self.idle()

    def drop(self, store: Evictable) -> None:
        """``store`` was closed for idleness by ``acquire``: its slot is free (for the caller)."""
        with self._lock:
            self._lru.pop(store, None)

    def park(self, job: Callable[[], None]) -> None:
        """Retry ``job`` (which failed to ``acquire``) when a store goes idle or after PARK_RETRY."""
        with self._lock:
            self._parked.append(job)
            arm = not self._retry_armed
            self._retry_armed = True
        if arm:
            POOL.call_at(time.monotonic() + PARK_RETRY, self._retry)

    def _retry(self) -> None:
        with self._lock:
            self._retry_armed = False
        self.idle()

    def idle(self) -> None:
        """A store went idle (or closed): parked jobs try again."""
        if not self._parked:
            return
        with self._lock:
            jobs, self._parked = self._parked, []
        for job in jobs:
            POOL.submit(job)


POOL = StorePool()
SLOTS = OpenSlots()


def set_max_open_stores(cap: int | None) -> int:
    """Cap the stores of this process holding open files (``None``: ``default_max_open_stores()``);
    returns the previous cap. The agent sets it from ``jetstream.max_open_stores``."""
    return SLOTS.set_cap(cap)
