"""Column blocks (core/store/colblocks.py): a bulk read's server share with and without them, and
what they cost at ingest, in one process with no server.

    python -m bench.colblocks [--msgs 200000] [--size 64] [--request 8192] [--runs 3] [--rows 0,4096]

For each block size (0: none, the aggregate statement on every read) a fresh SqliteStore
(``sync="interval"``) is filled with ``--msgs`` JSON payloads of about ``--size`` bytes in
appends of 2,000 (the Spark bench's shape), the blocks are waited for, and the stream is read
whole ``--runs`` times by ``read_columns`` in requests of ``--request`` messages, each encoded as
the bulk read's frame. Printed: the fill's CPU per message (the process's, pool threads
included: the blocks are built there), how long after the fill's last commit the last sealed
block was built (the job keeping up with ingest), the file's bytes per message after a checkpoint, and the
reads' CPU per row (each run; the first may include the OS's page cache warming). Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from core.jetstream.bulk_read import frame_of
from core.store import Append, SqliteStore


async def _fill(store: SqliteStore, msgs: int, size: int) -> None:
    pad = b"x" * max(0, size - 40)
    for i in range(0, msgs, 2000):
        await store.apply(
            [
                Append(f"bench.dev{j % 10}", None, b'{"temp": %d.5, "pad": "%s"}' % (j % 40, pad), 1000 + j)
                for j in range(i, min(msgs, i + 2000))
            ]
        )


async def _scan(store: SqliteStore, msgs: int, request: int) -> float:
    """CPU us per row to read the stream whole, frames included."""
    t = time.process_time()
    pos = 1
    while pos <= msgs:
        cols, covered = await store.read_columns(pos, msgs, request)
        frame_of(cols)
        pos = covered + 1
    return (time.process_time() - t) / msgs * 1e6


async def run(msgs: int, size: int, request: int, runs: int, rows: list[int]) -> None:
    print(f"colblocks N={msgs}, ~{size} B messages, requests of {request}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-colblocks-") as tmp:
        for block_rows in rows:
            path = Path(tmp) / f"s{block_rows}.db"
            store = await SqliteStore.open(path, block_rows=block_rows, sync="interval")
            t = time.process_time()
            await _fill(store, msgs, size)
            filled = time.perf_counter()
            sealed = (msgs // block_rows) * block_rows if block_rows else 0
            seen, moved = -1, time.perf_counter()
            while store.block_stats().through < sealed and time.perf_counter() - moved < 1.0:
                if store.block_stats().through != seen:  # large messages get none: stop waiting
                    seen, moved = store.block_stats().through, time.perf_counter()
                await asyncio.sleep(0.01)
            lag_ms = (time.perf_counter() - filled) * 1000
            fill_us = (time.process_time() - t) / msgs * 1e6
            scans = [await _scan(store, msgs, request) for _ in range(runs)]
            stats = store.block_stats()
            await store.close()  # the last close checkpoints the WAL into the file
            disk = path.stat().st_size / msgs
            print(
                f"  block_rows={block_rows:>6}: fill {fill_us:.2f} us/msg CPU (blocks done {lag_ms:.0f} ms "
                f"after it), file {disk:.0f} B/msg, "
                f"read {', '.join(f'{s:.3f}' for s in scans)} us/row CPU "
                f"(blocks {stats.built}, rows served from blocks {stats.served})"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.colblocks", description=__doc__.splitlines()[0])
    ap.add_argument("--msgs", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--request", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", default="0,4096", help="comma list of block sizes (0: no blocks)")
    args = ap.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    asyncio.run(run(args.msgs, args.size, args.request, args.runs, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
