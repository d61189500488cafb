"""One RAFT member for ``python -m bench raft``: the hub's own ``RaftDriver`` and ``LogStore``
(one fsync per persisted batch, as in the meta group) with plain TCP between three processes.

    python -m bench.raft_node --id 1 --dir D --raft-port P --control-port C --peer 2=127.0.0.1:P2 ...

No server around it: this measures the RAFT layer alone (driver, node, log store, wire codec),
not the routes the meta group's messages cross in a hub. Frames are ``u32 length | wire bytes``
(hub/raft/wire.py). The meta group's timers are kept (tick 100 ms, election 15-30 ticks,
heartbeat 2 ticks), so a kill -9 of the leader shows the same election delay.

Control: one JSON request per line on the control port, one JSON answer per line:
``{"cmd": "status"}``; on the leader ``{"cmd": "window", "n", "window", "size"}`` (entries/s with
``window`` proposals in flight) and ``{"cmd": "sequential", "n", "size"}`` (commit latencies of
one proposal at a time, in seconds). A commit here = proposed on the leader and applied there,
which needs a quorum to have fsynced it and the leader's own fsync (hub/raft/DESIGN.md inv. 4).
"""

from __future__ import annotations

import argparse
import json
import logging
import struct
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from hub.raft.driver import RaftDriver
from hub.raft.files import OsFiles
from hub.raft.log_store import LogStore
from hub.raft.types import Entry, Message, Snapshot
from hub.raft.wire import WireError, decode_message, encode_message

log = logging.getLogger("leafjet.bench.raft")
_LEN = struct.Struct("<I")
MAX_FRAME = 64 << 20
MAX_QUEUED = 100_000  # frames waiting for a peer that is down (beyond: dropped, RAFT resends)


class CountingMachine:
    """The state machine: counts what it applies (the bench measures the log, not a machine)."""

    def __init__(self) -> None:
        self.applied = 0

    def read_snapshot(self, data: bytes) -> None:
        return None

    def restore(self, snapshot: Snapshot, state: None) -> None:
        self.applied = 0

    def snapshot(self) -> bytes:
        return b""  # nothing worth keeping (a driver that compacts its log asks for it)

    def apply(self, entry: Entry) -> None:
        self.applied += 1


class PeerLink:
    """Frames to one peer over one TCP connection, redialled when it drops (frames lost then:
    RAFT resends what matters)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.queue: deque[bytes] = deque()
        self.ready = anyio.Event()
        self.dropped = 0

    def send(self, frame: bytes) -> None:
        if len(self.queue) >= MAX_QUEUED:
            self.dropped += 1
            return
        self.queue.append(_LEN.pack(len(frame)) + frame)
        self.ready.set()

    async def run(self) -> None:
        while True:
            try:
                stream = await anyio.connect_tcp(self.host, self.port)
            except OSError:
                self.queue.clear()
                await anyio.sleep(0.05)
                continue
            try:
                while True:
                    await self.ready.wait()
                    self.ready = anyio.Event()
                    frames, self.queue = self.queue, deque()
                    if frames:
                        await stream.send(b"".join(frames))
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()


async def _serve_raft(driver: RaftDriver, stream: SocketStream) -> None:
    reader = BufferedByteReceiveStream(stream)
    try:
        while True:
            (length,) = _LEN.unpack(await reader.receive_exactly(4))
            if length > MAX_FRAME:
                log.error("a frame of %d bytes: closing that connection", length)
                return
            try:
                driver.step(decode_message(await reader.receive_exactly(length)))
            except WireError as e:
                log.error("bad RAFT frame: %s", e)
    except (anyio.EndOfStream, anyio.IncompleteRead, OSError, anyio.BrokenResourceError):
        pass
    finally:
        await stream.aclose()


async def _window(driver: RaftDriver, n: int, window: int, size: int) -> dict[str, Any]:
    """``n`` single-entry proposals, ``window`` of them waiting for their commit at any time."""
    payload = b"w" * size
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            index, _term = await driver.propose([payload])
            await driver.wait_applied(index)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(min(window, n)):
            tg.start_soon(worker)
    return {"seconds": time.perf_counter() - t0}


async def _sequential(driver: RaftDriver, n: int, size: int) -> dict[str, Any]:
    payload = b"s" * size
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        index, _term = await driver.propose([payload])
        await driver.wait_applied(index)
        lat.append(time.perf_counter() - t0)
    return {"latencies": lat}


async def _serve_control(driver: RaftDriver, stream: SocketStream) -> None:
    reader = BufferedByteReceiveStream(stream)
    try:
        while True:
            req = json.loads(await reader.receive_until(b"\n", 1 << 16))
            cmd = req.get("cmd")
            try:
                if cmd == "status":
                    out: dict[str, Any] = {"leader": driver.leader, "term": driver.term}
                elif cmd == "window":
                    out = await _window(driver, int(req["n"]), int(req["window"]), int(req["size"]))
                elif cmd == "sequential":
                    out = await _sequential(driver, int(req["n"]), int(req["size"]))
                else:
                    out = {"error": f"unknown command {cmd!r}"}
            except Exception as e:  # a proposal refused (not the leader): the caller retries
                out = {"error": f"{type(e).__name__}: {e}"}
            await stream.send(json.dumps(out).encode() + b"\n")
    except (anyio.EndOfStream, anyio.IncompleteRead, OSError, anyio.BrokenResourceError, ValueError):
        pass
    finally:
        await stream.aclose()


async def run(args: argparse.Namespace) -> None:
    peers = {int(k): v.rsplit(":", 1) for k, v in (p.split("=", 1) for p in args.peer)}
    links = {pid: PeerLink(host, int(port)) for pid, (host, port) in peers.items()}
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    driver = RaftDriver("bench", args.id, LogStore(OsFiles(args.dir)), CountingMachine())
    driver.open([args.id, *links])

    def send(m: Message) -> None:
        links[m.dst].send(encode_message(m))

    driver.send = send
    raft_listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=args.raft_port)
    control_listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=args.control_port)
    async with anyio.create_task_group() as tg:
        for link in links.values():
            tg.start_soon(link.run)
        tg.start_soon(raft_listener.serve, lambda s: _serve_raft(driver, s))
        tg.start_soon(control_listener.serve, lambda s: _serve_control(driver, s))
        await tg.start(driver.run)
        print("READY", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.raft_node")
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--raft-port", type=int, required=True)
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--peer", action="append", default=[], help="ID=HOST:PORT of another member")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    anyio.run(run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
