"""Single-server stream create latency and server CPU per create, leafjet against the reference.

    python -m bench.stream_create [--creates 60] [--existing 0]

One fresh server of each kind (each with its default durability), ``--existing`` streams created
first (not timed: a create in an account that holds many streams must not cost more for them),
then ``--creates`` sequential R1 file-stream creates (a new name each, the raw
``$JS.API.STREAM.CREATE`` request of a stock nats-py client); p50 of the round trip and the
server process's CPU (user + system) per create. The clustered create (``python -m bench
cluster --parts meta``) contains this step once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from tests.support.servers import RunningServer, start_server


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed_creates(
    url: str, n: int, prefix: str = "S", tag: str | None = None
) -> list[tuple[str, int, int]]:
    """``n`` sequential R1 file-stream creates named ``<prefix><k>`` (placed by ``tag`` when
    given), the raw API request a stock client sends: (name, send, answer) per create, in
    ``time.monotonic_ns`` (one clock for every process of the machine). RuntimeError on an
    error answer."""
    nc = await nats.connect(url)
    try:
        out = []
        for k in range(n):
            name = f"{prefix}{k}"
            body: dict[str, Any] = {
                "name": name,
                "subjects": [f"bench.create.{name}"],
                "storage": "file",
                "num_replicas": 1,
            }
            if tag is not None:
                body["placement"] = {"tags": [tag]}
            t0 = time.monotonic_ns()
            msg = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), timeout=30)
            out.append((name, t0, time.monotonic_ns()))
            if "error" in json.loads(msg.data):
                raise RuntimeError(f"create {name}: {msg.data!r}")
        return out
    finally:
        await nc.close()


def seconds(creates: list[tuple[str, int, int]]) -> list[float]:
    """Each create's round trip in seconds."""
    return [(t1 - t0) / 1e9 for _name, t0, t1 in creates]


def run(kind: str, workdir: Path, n: int, existing: int = 0) -> tuple[float, float]:
    """(p50 ms, server CPU ms per create)."""
    cfg = {"jetstream": {"store_dir": str(workdir / "js")}} if kind == "reference" else {}
    srv: RunningServer = start_server(kind, workdir, cfg, jetstream=True)
    try:
        if existing:
            asyncio.run(timed_creates(srv.url, existing, "X"))
        before = _cpu_seconds(srv.pid)
        lat = seconds(asyncio.run(timed_creates(srv.url, n)))
        cpu = _cpu_seconds(srv.pid) - before
    finally:
        srv.stop()
    return statistics.median(lat) * 1e3, cpu / n * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--creates", type=int, default=60)
    p.add_argument("--existing", type=int, default=0, help="streams created first, not timed")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-create-") as tmp:
        kinds = ("reference", "leafjet")
        res = {kind: run(kind, Path(tmp) / kind, args.creates, args.existing) for kind in kinds}
    ref, lj = res["reference"], res["leafjet"]
    print(
        f"single-server stream create, {args.creates} sequential R1 file streams"
        f" after {args.existing} untimed ones"
    )
    print(f"{'figure':<28}{'reference':>11}{'leafjet':>10}{'ratio':>8}")
    print(f"{'create p50 ms':<28}{ref[0]:>11.2f}{lj[0]:>10.2f}{lj[0] / ref[0]:>8.2f}")
    print(f"{'server CPU ms per create':<28}{ref[1]:>11.2f}{lj[1]:>10.2f}{lj[1] / ref[1]:>8.2f}")


if __name__ == "__main__":
    main()
