"""Named timestamps across processes, for finding where a request's time goes (off by default).

With ``LEAFJET_TRACE=1`` in a server's environment, ``point(name, key)`` writes one line to
its log (stderr): ``TRACE <monotonic ns> <thread CPU ns> <name> <key>``. CLOCK_MONOTONIC is one
clock for all the processes of a machine, so the lines of several servers merge into one
timeline; the thread CPU between two lines of one server says whether the loop was working or
waiting. ``bench/create_trace.py`` reads them for a hub cluster's stream create. Points sit on
the create's path only (the meta API, the RAFT driver, the placed server's create); each is a
call and a test of ``ENABLED`` when tracing is off.
"""

from __future__ import annotations

import os
import sys
import time

ENABLED = os.environ.get("LEAFJET_TRACE") == "1"


def point(name: str, key: object = "") -> None:
    if ENABLED:
        sys.stderr.write(f"TRACE {time.monotonic_ns()} {time.thread_time_ns()} {name} {key}\n")
