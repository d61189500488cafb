"""The demo (the README's main command) stops every process it started, however its run ends:
here its stdout is a pipe whose reader goes away (``scripts/demo | head``), so its next print
fails mid-run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.mosquitto import MOSQUITTO
from tests.support.servers import REPO

PID = re.compile(rb"\bpid (\d+)\b")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a child that exited but was not yet reaped by its (dying) parent is not running
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().split(b")")[-1].split()[0] != b"Z"


def _demo_with_its_servers_started(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """The demo, once it has printed the pids of the hub and the three sites. Started again
    (twice at most) if it ends before that: it picks free ports, and a test running beside
    it may take one first ("address already in use"); its stderr says why."""
    for attempt in range(3):
        err = tmp_path / f"demo-{attempt}.err"
        with open(err, "wb") as stderr:
            demo = subprocess.Popen(
                [sys.executable, "-m", "deploy.demo"],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        assert demo.stdout is not None
        pids: list[int] = []
        while len(pids) < 4:
            line = demo.stdout.readline()
            if not line:
                break
            pids += [int(p) for p in PID.findall(line)]
        if len(pids) >= 4:
            return demo, pids
        demo.stdout.close()
        demo.wait(timeout=60)
        why = err.read_text(errors="replace")[-2000:]
        if attempt == 2 or "address already in use" not in why.lower():
            raise AssertionError(f"the demo ended before it started its servers (pids {pids}): {why}")
    raise AssertionError("unreachable")


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")
def test_a_demo_whose_output_reader_goes_away_leaves_no_process_behind(tmp_path: Path) -> None:
    demo, pids = _demo_with_its_servers_started(tmp_path)
    assert demo.stdout is not None
    demo.stdout.close()  # the reader goes away: the demo's next print fails
    try:
        demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for p in left:  # never leave them to the next test
        os.kill(p, 9)
    assert not left, f"the demo left its servers running: {left}"
