"""A stream's backup and restore, as `nats stream backup` / `nats stream restore` take them.

    python -m bench backup [--msgs 200000] [--size 1024] [--runs 1]

For each kind (leafjet, the reference): one server with JetStream, one file stream of
``--msgs`` messages of ``--size`` bytes (half random bytes, half a repeated one: a payload that
compresses about 2:1), then, timed from a nats-py client on the same machine:
- *backup*: from the snapshot request until its last chunk arrived (every chunk acknowledged as
  it arrives, the window and chunk size the servers' defaults);
- *restore*: after the stream's delete, from the restore request until the answer to its last
  chunk (the stream restored and running), chunks of 128 KiB sent one after the other.
Also the backup's size. Medians of ``--runs`` runs. No goal (no issue names one); each server
restores its own backups only (the bytes are each one's own format).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import time
from pathlib import Path
from typing import Any

import nats

from bench import medians_by_kind
from bench.stats import print_kind_rows
from tests.support.backup import WHOLE, restore, take_snapshot
from tests.support.servers import start_server

KINDS = ("reference", "leafjet")


async def _fill(js: Any, n: int, size: int) -> None:
    await js.add_stream(name="BIG", subjects=["big.>"])
    half = size // 2
    acks: list[Any] = []
    for i in range(n):
        body = os.urandom(half) + b"x" * (size - half)
        acks.append(await js.publish_async(f"big.{i % 100}", body, wait_stall=10))
        if len(acks) >= 2000:
            await asyncio.gather(*acks)
            acks = []
    await asyncio.gather(*acks)


async def _once(url: str, n: int, size: int) -> dict[str, float]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=30)
        await _fill(js, n, size)
        t0 = time.monotonic()
        answer, data, status = await take_snapshot(nc, "BIG", timeout=600)
        backup_s = time.monotonic() - t0
        if status != WHOLE:
            raise RuntimeError(f"backup ended with {status}: {answer}")
        await js.delete_stream("BIG")
        t0 = time.monotonic()
        done = await restore(nc, "BIG", answer, data, chunk=128 << 10, end_timeout=600)
        restore_s = time.monotonic() - t0
        if done.get("state", {}).get("messages") != n:
            raise RuntimeError(f"restore: {done}")
        return {
            "backup_s": backup_s,
            "restore_s": restore_s,
            "backup_mb": len(data) / 1e6,
            "backup_msgs_per_s": n / backup_s,
            "restore_msgs_per_s": n / restore_s,
        }
    finally:
        await nc.close()


def _measure(kind: str, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    srv = start_server(kind, workdir, jetstream=True)
    try:
        return asyncio.run(_once(srv.url, args.msgs, args.size))
    finally:
        srv.stop()


def backup_matrix(args: argparse.Namespace) -> int:
    measure = functools.partial(_measure, args=args)
    med = medians_by_kind(KINDS, args.runs, "leafjet-bench-backup-", measure)
    print(f"\nbackup N={args.msgs},MsgSz={args.size}B,runs={args.runs} (medians)")
    labels = {
        "backup_s": "backup: s",
        "backup_msgs_per_s": "backup: msgs/s",
        "backup_mb": "backup: size MB",
        "restore_s": "restore: s",
        "restore_msgs_per_s": "restore: msgs/s",
    }
    print_kind_rows(labels, med)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("backup", help="a stream's backup and restore (STREAM.SNAPSHOT / RESTORE)")
    p.add_argument("--msgs", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--runs", type=int, default=1)
