"""CPU time of a process from /proc, for server CPU per message."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(*pids: int) -> float:
    """User + system CPU seconds consumed so far by ``pids`` together (Linux /proc)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is the state (field 3); utime and stime are fields 14 and 15
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def context_switches(pid: int | str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of all of ``pid``'s threads so far: a thread that
    blocks (waits for bytes) switches voluntarily; one preempted while runnable, involuntarily."""
    voluntary = involuntary = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def run_seconds(pid: int) -> float:
    """CPU seconds all of ``pid``'s live threads have run so far, from the scheduler's nanosecond
    counters (/proc/<pid>/task/*/schedstat): ``cpu_seconds`` counts 10 ms ticks, too coarse for a
    run of a second or two at a few microseconds per message."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9
