"""Where a sequential KV put's time goes: the reference, leafjet, and a bare responder.

    python -m bench putfloor [--ops 5000] [--runs 3]

nats-py's ``kv.put`` is ``await js.publish("$KV.<bucket>.<key>", value)``: one request, one
PubAck, and the next put waits for it. Each server here gets the same loop of sequential
publishes (128 B values over 100 keys, after a warm-up), from the stock client:

- the reference and leafjet (``sync`` interval and always) with a file-storage bucket;
- leafjet with a memory-storage bucket: the same path without SQLite;
- ``bench.responder``: a Python process (on uvloop, as the agent) that answers each publish from
  its socket callback and does nothing else. Its round trip is the floor of the client, the
  loopback, one read and one write: any Python server's round trip is above it.

A server's *work per put* is its round trip less the responder's. The goal ">= 0.9x the
reference" allows a round trip of the reference's / 0.9, so a server may spend that less the
floor: the *budget*. The table prints both, with the server CPU per put (/proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.js.api import StorageType

from bench import median_figures
from bench.procstat import cpu_seconds
from tests.support.servers import READY, REPO, start_server, wait_for_output

BUCKET = "PFLOOR"
KEYS, SIZE, WARMUP = 100, 128, 300
GOAL = 0.9


@dataclass
class PutFigures:
    ops_per_s: float
    us_per_op: float
    cpu_us_per_op: float


class _Responder:
    """``bench.responder`` in its own process, ready when it says where it listens."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.responder"], stdout=subprocess.PIPE, cwd=REPO, env=env
        )
        try:
            ready = wait_for_output(
                self.proc, READY, 15.0, "the responder to listen", lambda: "the responder exited"
            )
        except BaseException:
            self.proc.kill()
            raise
        self.url = f"nats://127.0.0.1:{ready.group(1)}"
        self.pid = self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def sequential_puts(url: str, pid: int, ops: int, storage: StorageType | None) -> PutFigures:
    """``ops`` sequential publishes to a KV bucket's subjects; ``storage`` None: no bucket is made
    (the responder has none)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=30)
        if storage is not None:
            await js.create_key_value(bucket=BUCKET, storage=storage)
        value = b"v" * SIZE
        subjects = [f"$KV.{BUCKET}.k{i}" for i in range(KEYS)]
        for i in range(WARMUP):
            await js.publish(subjects[i % KEYS], value)
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        for i in range(ops):
            await js.publish(subjects[i % KEYS], value)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    finally:
        await nc.close()
    return PutFigures(ops / elapsed, elapsed / ops * 1e6, cpu / ops * 1e6)


# column -> (kind, config, bucket storage)
SERVERS: tuple[tuple[str, str, dict[str, Any], StorageType | None], ...] = (
    ("reference", "reference", {}, StorageType.FILE),
    ("leafjet interval", "leafjet", {"jetstream": {"sync": "interval"}}, StorageType.FILE),
    ("leafjet always", "leafjet", {"jetstream": {"sync": "always"}}, StorageType.FILE),
    ("leafjet interval, memory bucket", "leafjet", {"jetstream": {"sync": "interval"}}, StorageType.MEMORY),
    ("responder (answers, stores nothing)", "responder", {}, None),
)


def _one(
    kind: str, config: dict[str, Any], storage: StorageType | None, workdir: Path, ops: int
) -> PutFigures:
    if kind == "responder":
        responder = _Responder()
        try:
            return asyncio.run(sequential_puts(responder.url, responder.pid, ops, None))
        finally:
            responder.stop()
    srv = start_server(kind, workdir, config, jetstream=True)
    try:
        return asyncio.run(sequential_puts(srv.url, srv.pid, ops, storage))
    finally:
        srv.stop()


def putfloor_matrix(args: argparse.Namespace) -> int:
    runs: dict[str, list[PutFigures]] = {col: [] for col, *_ in SERVERS}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        for r in range(args.runs):
            for i, (col, kind, config, storage) in enumerate(SERVERS):
                runs[col].append(_one(kind, config, storage, Path(tmp) / f"{i}-{r}", args.ops))
    med: dict[str, PutFigures] = {col: median_figures(figs) for col, figs in runs.items()}
    ref, floor = med["reference"], med[SERVERS[-1][0]]
    budget = ref.us_per_op / GOAL - floor.us_per_op
    print(f"\nputfloor Ops={args.ops},Keys={KEYS},ValueSz={SIZE}B,runs={args.runs} (medians)")
    print(
        "  sequential js.publish to $KV.<bucket>.<key> from nats-py (what kv.put sends). work/put is the\n"
        "  round trip less the responder's; the budget is what a server may spend beyond the responder\n"
        f"  and still reach {GOAL}x the reference's ops/s:"
        f" {ref.us_per_op:.0f} / {GOAL} - {floor.us_per_op:.0f} = {budget:.0f} us."
    )
    print(f"{'server':38s} {'ops/s':>8s} {'us/put':>8s} {'work/put':>9s} {'CPU/put':>8s} {'ops ratio':>10s}")
    for col, *_ in SERVERS:
        f = med[col]
        work = f.us_per_op - floor.us_per_op
        print(
            f"{col:38s} {f.ops_per_s:8,.0f} {f.us_per_op:8.0f} {work:9.0f} {f.cpu_us_per_op:8.0f}"
            f" {f.ops_per_s / ref.ops_per_s:10.2f}"
        )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("putfloor", help="sequential KV puts beside a bare Python responder's round trip")
    p.add_argument("--ops", type=int, default=5000)
    p.add_argument("--runs", type=int, default=3)
