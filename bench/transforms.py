"""Transforms matrix: async publish throughput into a stream with no transform, with a
``subject_transform``, and with a transform and a ``republish`` (a subscriber counts what is
republished), for leafjet and the reference in one invocation. Prints figures and the ratio.

    python -m bench.transforms [--msgs 20000] [--size 128] [--window 1000] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from bench.procstat import cpu_seconds
from tests.support.servers import start_server

CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "transform": {"subject_transform": {"src": "tb.*.*", "dest": "st.$2.{{partition(8,1)}}.$1"}},
    "transform+republish": {
        "subject_transform": {"src": "tb.*.*", "dest": "st.$2.{{partition(8,1)}}.$1"},
        "republish": {"src": "st.>", "dest": "rp.>"},
    },
}


async def run_case(url: str, pid: int, case: str, n: int, size: int, window: int) -> tuple[float, float]:
    nc = await nats.connect(url, pending_size=1 << 30, flusher_queue_size=1 << 20)
    try:
        js = nc.jetstream(timeout=30, publish_async_max_pending=window)
        await js.add_stream(name="TB", subjects=["tb.>"], **_config(case))
        republished = 0
        done = asyncio.Event()

        async def count(_msg: Any) -> None:
            nonlocal republished
            republished += 1
            if republished >= n:
                done.set()

        if "republish" in CASES[case]:
            await nc.subscribe("rp.>", cb=count, pending_msgs_limit=-1, pending_bytes_limit=-1)
        else:
            done.set()
        payload = b"x" * size
        cpu0 = cpu_seconds(pid)
        t0 = time.perf_counter()
        for i in range(n):
            await js.publish_async(f"tb.d{i % 64}.k{i % 7}", payload)
        await asyncio.wait_for(js.publish_async_completed(), timeout=300)
        await asyncio.wait_for(done.wait(), timeout=300)
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0
        info = await js.stream_info("TB")
        if info.state.messages != n:
            raise RuntimeError(f"{case}: stream holds {info.state.messages}, expected {n}")
        return n / elapsed, cpu / n * 1e6
    finally:
        await nc.close()


def _config(case: str) -> dict[str, Any]:
    from nats.js.api import RePublish, SubjectTransform

    cfg: dict[str, Any] = {}
    c = CASES[case]
    if "subject_transform" in c:
        cfg["subject_transform"] = SubjectTransform(**c["subject_transform"])
    if "republish" in c:
        cfg["republish"] = RePublish(**c["republish"])
    return cfg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.transforms")
    p.add_argument("--msgs", type=int, default=20000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args(argv)
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        for r in range(args.runs):
            for kind in ("reference", "leafjet"):
                for case in CASES:
                    srv = start_server(kind, Path(tmp) / f"{kind}-{case}-{r}", jetstream=True)
                    try:
                        got = asyncio.run(run_case(srv.url, srv.pid, case, args.msgs, args.size, args.window))
                    finally:
                        srv.stop()
                    figures.setdefault((kind, case), []).append(got)
    print(f"transforms: N={args.msgs}, MsgSz={args.size}B, window={args.window}, runs={args.runs} (best run)")
    print(
        f"{'case':22} {'ref msgs/s':>11} {'lj msgs/s':>10} {'ratio':>6} {'ref cpu us':>11} {'lj cpu us':>10}"
    )
    for case in CASES:
        ref = max(figures[("reference", case)])
        lj = max(figures[("leafjet", case)])
        print(f"{case:22} {ref[0]:11.0f} {lj[0]:10.0f} {lj[0] / ref[0]:6.2f} {ref[1]:11.1f} {lj[1]:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
