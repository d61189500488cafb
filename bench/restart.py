"""A server's restart with what it holds: many streams, or one large stream.

    python -m bench restart [--streams 2000] [--big-msgs 1000000] [--runs 1]

For each kind (leafjet, the reference), one server with JetStream:
- *many streams*: ``--streams`` file streams are created (every tenth with a message), the
  server is stopped (SIGTERM) and started again on the same data; the stop's time, and the time
  from the start until a client connects and a ``STREAM.INFO`` of the last stream is answered;
- *a large stream*: one stream of ``--big-msgs`` 1 KiB messages (published with async acks),
  stopped and started the same way, until its ``STREAM.INFO`` is answered.

Both include the interpreter's or process's own start. Medians of ``--runs`` runs; leafjet's
figure is also given as a ratio to the reference's (no goal: the issues name none; what a user
waits for after an upgrade or a crash).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import nats

from bench import medians_by_kind
from bench.stats import print_kind_rows
from tests.support.servers import RunningServer, start_server

KINDS = ("reference", "leafjet")


async def _many_streams(url: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        for k in range(n):
            body = {"name": f"S{k}", "subjects": [f"s.{k}.>"], "storage": "file"}
            msg = await nc.request(f"$JS.API.STREAM.CREATE.S{k}", json.dumps(body).encode(), timeout=30)
            if b'"error"' in msg.data:
                raise RuntimeError(f"create S{k}: {msg.data!r}")
            if k % 10 == 0:
                await nc.publish(f"s.{k}.x", b"hello")
        await nc.flush()
    finally:
        await nc.close()


async def _big_stream(url: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BIG", subjects=["big.>"])
        body = b"x" * 1024
        acks: list[Any] = []
        for i in range(n):
            acks.append(await js.publish_async(f"big.{i % 100}", body, wait_stall=10))
            if len(acks) >= 2000:
                await asyncio.gather(*acks)
                acks = []
        await asyncio.gather(*acks)
    finally:
        await nc.close()


async def _until_answered(url: str, stream: str, t0: float, deadline_s: float = 300.0) -> float:
    """Seconds from ``t0`` until a client connects and ``stream``'s info is answered."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            nc = await nats.connect(url, connect_timeout=1, max_reconnect_attempts=0)
            break
        except Exception:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.02)
    try:
        while True:
            try:
                msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
                if b'"error"' not in msg.data:
                    return time.monotonic() - t0
            except Exception:
                if time.monotonic() > end:
                    raise
            await asyncio.sleep(0.02)
    finally:
        await nc.close()


def _restart(srv: RunningServer, stream: str) -> tuple[float, float, RunningServer]:
    """(stop s, start -> answered s, the new server)."""
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(300)
    stopped = time.monotonic() - t0
    t0 = time.monotonic()
    fresh = srv.start_again()
    return stopped, asyncio.run(_until_answered(fresh.url, stream, t0)), fresh


def _run(workdir: Path, kind: str, streams: int, big: int) -> dict[str, float]:
    out: dict[str, float] = {}
    if streams:
        srv = start_server(kind, workdir / f"{kind}-many", jetstream=True)
        try:
            asyncio.run(_many_streams(srv.url, streams))
            out["many_stop_s"], out["many_start_s"], srv = _restart(srv, f"S{streams - 1}")
        finally:
            srv.stop()
    if big:
        srv = start_server(kind, workdir / f"{kind}-big", jetstream=True)
        try:
            asyncio.run(_big_stream(srv.url, big))
            out["big_stop_s"], out["big_start_s"], srv = _restart(srv, "BIG")
        finally:
            srv.stop()
    return out


def restart_matrix(args: argparse.Namespace) -> int:
    def measure(kind: str, workdir: Path) -> dict[str, float]:
        return _run(workdir, kind, args.streams, args.big_msgs)

    med = medians_by_kind(KINDS, args.runs, "leafjet-bench-restart-", measure)
    print(f"\nrestart Streams={args.streams},BigMsgs={args.big_msgs}x1KiB,runs={args.runs} (medians, s)")
    print("  stop: SIGTERM until the process ended; start: until a client connects and the")
    print("  last stream's STREAM.INFO is answered (the process's own start included)")
    labels = {
        "many_stop_s": f"{args.streams} streams: stop",
        "many_start_s": f"{args.streams} streams: start",
        "big_stop_s": f"{args.big_msgs} x 1 KiB in one stream: stop",
        "big_start_s": f"{args.big_msgs} x 1 KiB in one stream: start",
    }
    print_kind_rows(labels, med)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("restart", help="stop and start a server holding many streams, or a large one")
    p.add_argument("--streams", type=int, default=2000)
    p.add_argument("--big-msgs", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=1)
