"""What monitoring costs: the core and JetStream benchmarks on leafjet, each run without and with a
scraper that fetches ``/metrics`` and ``/jsz`` every ``--interval`` seconds beside it.

    python -m bench monitoring [--msgs 100000] [--js-msgs 20000] [--runs 3] [--interval 1.0]

Runs alternate (without, with, without, with...) on a fresh server each, so a drift of the machine's
load falls on both columns; figures are medians. The scraper is a thread of the benchmark process.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import median_figures
from bench.core import CoreFigures, run_core
from bench.jetstream import JsFigures, run_jetstream
from bench.procstat import cpu_seconds
from tests.support.servers import free_port, start_server

SCRAPED = ("/metrics", "/jsz?accounts=1&streams=1&consumers=1")


@dataclass
class ScrapeFigures:
    scrapes: int = 0
    errors: int = 0
    total_s: float = 0.0

    @property
    def mean_ms(self) -> float:
        return 1000 * self.total_s / self.scrapes if self.scrapes else float("nan")


class Scraper:
    """A separate process (as Prometheus would be: it takes no CPU from the benchmark's client
    process's GIL) fetching each of SCRAPED every ``interval`` seconds until stopped."""

    def __init__(self, port: int, interval: float) -> None:
        self.port = port
        self.interval = interval
        self.figures = ScrapeFigures()
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Scraper:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.monitoring", str(self.port), str(self.interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("stop\n", timeout=30)
        scrapes, errors, total = out.split()
        self.figures = ScrapeFigures(int(scrapes), int(errors), float(total))


def _scrape_until_stdin_closes(port: int, interval: float) -> None:
    figures = ScrapeFigures()
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    while not stop.is_set():
        for path in SCRAPED:
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                conn.close()
                if resp.status != 200:
                    figures.errors += 1
            except OSError:
                figures.errors += 1
            figures.total_s += time.perf_counter() - t0
            figures.scrapes += 1
        stop.wait(interval)
    print(figures.scrapes, figures.errors, figures.total_s)


def scrape_cpu_ms(pid: int, port: int, n: int = 20) -> float:
    """Server CPU (ms, /proc utime+stime) per scrape of every SCRAPED path, over ``n`` rounds:
    unlike throughput, hardly moved by what else the machine runs."""
    c0 = cpu_seconds(pid)
    for _ in range(n):
        for path in SCRAPED:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path)
            conn.getresponse().read()
            conn.close()
    return (cpu_seconds(pid) - c0) * 1000 / n


def _one(
    tmp: Path, scrape: bool, interval: float, work: Any, costs: list[float]
) -> tuple[Any, ScrapeFigures | None]:
    port = free_port()
    srv = start_server("leafjet", tmp, {"http_port": port}, jetstream=True)
    try:
        if not scrape:
            return asyncio.run(work(srv)), None
        with Scraper(port, interval) as sc:
            figs = asyncio.run(work(srv))
        costs.append(scrape_cpu_ms(srv.pid, port))  # with what the run left: its stream, its clients gone
        return figs, sc.figures
    finally:
        srv.stop()


def monitoring_matrix(args: argparse.Namespace) -> int:
    core: dict[bool, list[CoreFigures]] = {False: [], True: []}
    js: dict[bool, list[JsFigures]] = {False: [], True: []}
    scrapes: list[ScrapeFigures] = []
    costs: list[float] = []

    async def core_work(srv: Any) -> CoreFigures:
        return await run_core(srv.url, srv.pid, args.msgs, args.size, args.requests)

    async def js_work(srv: Any) -> JsFigures:
        return await run_jetstream(srv.url, srv.pid, args.js_msgs, args.size, 1000, args.sync_requests)

    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        for r in range(args.runs):
            for name, work, out in (("core", core_work, core), ("js", js_work, js)):
                # each pair back to back, the order alternating: a drift of the load hits both
                for scrape in (False, True) if r % 2 == 0 else (True, False):
                    figs, sc = _one(Path(tmp) / f"{name}-{r}-{scrape}", scrape, args.interval, work, costs)
                    out[scrape].append(figs)
                    if sc is not None:
                        scrapes.append(sc)
    c0, c1 = median_figures(core[False]), median_figures(core[True])
    j0, j1 = median_figures(js[False]), median_figures(js[True])
    print(
        f"\nmonitoring core N={args.msgs},js N={args.js_msgs},MsgSz={args.size}B,"
        f"scrape {' + '.join(SCRAPED)} every {args.interval}s,runs={args.runs} (leafjet only)"
    )
    total = sum(s.scrapes for s in scrapes)
    errors = sum(s.errors for s in scrapes)
    mean = 1000 * sum(s.total_s for s in scrapes) / total if total else float("nan")
    print(f"  {total} scrapes, {errors} failed, mean {mean:.1f} ms each (seen by the scraper)")
    cost = statistics.median(costs)
    print(
        f"  server CPU per scrape of both paths: {cost:.2f} ms (median of {len(costs)}) ="
        f" {cost / args.interval / 10:.2f}% of one core at one scrape per {args.interval}s"
    )
    print(f"{'figure':38s} {'no scrape':>12s} {'scraped':>12s} {'change':>8s}  goal")
    rows = [
        (c0, c1, "core pub->sub (msgs/s)", "msgs_per_s", True),
        (c0, c1, "core server CPU/msg (us)", "cpu_us_per_msg", False),
        (c0, c1, "core request/reply p50 (us)", "rr_p50_us", False),
        (j0, j1, "js async publish (msgs/s)", "msgs_per_s", True),
        (j0, j1, "js server CPU/msg (us)", "cpu_us_per_msg", False),
        (j0, j1, "js sync publish p50 (us)", "sync_p50_us", False),
    ]
    for a, b, label, key, throughput in rows:
        x, y = getattr(a, key), getattr(b, key)
        change = (y - x) / x * 100 if x else float("nan")
        goal = ""
        if throughput:
            goal = f"<= 5% lower: {'met' if change >= -5 else 'NOT met'}"
        print(f"{label:38s} {x:>12,.1f} {y:>12,.1f} {change:>7.1f}%  {goal}")
    return 0


def add_parser(sub: Any) -> None:
    m = sub.add_parser(
        "monitoring", help="core and JetStream figures without and with a /metrics+/jsz scraper"
    )
    m.add_argument("--msgs", type=int, default=100_000, help="core pub/sub messages")
    m.add_argument("--js-msgs", type=int, default=20_000, help="JetStream async publishes")
    m.add_argument("--size", type=int, default=128)
    m.add_argument("--requests", type=int, default=2000)
    m.add_argument("--sync-requests", type=int, default=500)
    m.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    m.add_argument("--runs", type=int, default=3)


if __name__ == "__main__":
    _scrape_until_stdin_closes(int(sys.argv[1]), float(sys.argv[2]))
