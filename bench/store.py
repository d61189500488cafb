"""Store matrix: append throughput of SqliteStore against raw sqlite3 (never asserts).

    python -m bench store [--msgs 100000] [--size 128] [--window 1000] [--runs 3] [--modes apply,...]

Matrix: sync = always | interval; issuing =
  apply      one ``apply`` of ``window`` Appends per call (the bulk path)
  gather     ``window`` concurrent ``append`` calls per window, awaited with asyncio.gather (lock-step)
  taskgroup  the same through an anyio task group
  workers    ``window`` long-lived tasks appending in a loop (closer to a server: calls keep arriving
             while a batch commits)
The baseline is raw sqlite3 measured in the same run: same schema, WAL, ``executemany`` of ``window`` rows per
transaction, synchronous FULL for "always" and NORMAL for "interval". "harness" is the same gather loop
over futures resolved in bulk with no store at all: the ceiling for one-call-per-message issuing in asyncio.
Each figure is the best of ``--runs`` runs (the machines we run on are noisy).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from core.store import Append, SqliteStore, schema

SUBJECT = "bench.orders.eu"
SYNCS = ("always", "interval")
MODES = ("apply", "gather", "taskgroup", "workers")


def raw(path: Path, n: int, size: int, window: int, sync: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if sync == 'always' else 'NORMAL'}")
    conn.execute("BEGIN")
    for stmt in schema.CREATE:
        conn.execute(stmt)
    conn.execute("COMMIT")
    data = os.urandom(size)
    seq = 0
    t0 = time.perf_counter()
    for _ in range(n // window):
        rows = []
        for _ in range(window):
            seq += 1
            rows.append((seq, SUBJECT, None, data, time.time_ns(), size + 31, 0))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(schema.INSERT_MSG, rows)
        conn.execute(schema.UPDATE_STATE, (1, seq, 0, seq, seq * (size + 31)))
        conn.execute("COMMIT")
    dt = time.perf_counter() - t0
    conn.close()
    return n / dt


async def harness(n: int, window: int) -> float:
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[int]] = []

    async def call() -> int:
        fut = loop.create_future()
        pending.append(fut)
        return await fut

    t0 = time.perf_counter()
    for _ in range(n // window):
        tasks = asyncio.gather(*[call() for _ in range(window)])
        await asyncio.sleep(0)
        for f in pending:
            f.set_result(1)
        pending.clear()
        await tasks
    return n / (time.perf_counter() - t0)


async def store_run(path: Path, n: int, size: int, window: int, sync: str, mode: str) -> tuple[float, int]:
    store = await SqliteStore.open(path, sync=sync)  # type: ignore[arg-type]
    data = os.urandom(size)
    try:
        t0 = time.perf_counter()
        if mode == "workers":
            per = n // window

            async def worker() -> None:
                for _ in range(per):
                    await store.append(SUBJECT, None, data)

            async with anyio.create_task_group() as tg:
                for _ in range(window):
                    tg.start_soon(worker)
        for _ in range(n // window if mode != "workers" else 0):
            if mode == "gather":
                await asyncio.gather(*[store.append(SUBJECT, None, data) for _ in range(window)])
            elif mode == "taskgroup":
                async with anyio.create_task_group() as tg:
                    for _ in range(window):
                        tg.start_soon(store.append, SUBJECT, None, data)
            else:
                ts = time.time_ns()
                await store.apply([Append(SUBJECT, None, data, ts) for _ in range(window)])
        dt = time.perf_counter() - t0
        commits = store.stats().commits
    finally:
        await store.close()
    return n / dt, commits


@dataclass
class StoreFigures:
    harness: float = 0.0
    raw: dict[str, float] = field(default_factory=dict)  # sync -> msgs/s
    store: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # (sync, mode) -> best


async def run_store(n: int, size: int, window: int, runs: int, modes: list[str]) -> StoreFigures:
    figs = StoreFigures(harness=max([await harness(n, window) for _ in range(runs)]))
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-", dir=os.environ.get("BENCH_DIR")) as d:
        seq = iter(range(1_000_000))
        for sync in SYNCS:
            figs.raw[sync] = max(
                raw(Path(d) / f"raw-{next(seq)}.db", n, size, window, sync) for _ in range(runs)
            )
            for mode in modes:
                figs.store[sync, mode] = max(
                    [
                        await store_run(Path(d) / f"s-{next(seq)}.db", n, size, window, sync, mode)
                        for _ in range(runs)
                    ]
                )
    return figs
