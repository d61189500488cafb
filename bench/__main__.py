"""Run a benchmark matrix against leafjet and the reference in one invocation.

    python -m bench core [--msgs 200000] [--size 128] [--requests 5000] [--runs 3]

Figures are medians over --runs runs; each run uses a fresh server of each kind.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from bench.core import CoreFigures, run_core
from tests.support.servers import start_server

GOALS = {  # figure -> (goal text, leafjet/reference ratio that meets it, higher_is_better)
    "msgs_per_s": (">= 0.9x reference", 0.9, True),
    "cpu_us_per_msg": ("<= 5x reference", 5.0, False),
}


def _median(figs: list[CoreFigures]) -> CoreFigures:
    return CoreFigures(
        **{k: statistics.median(getattr(f, k) for f in figs) for k in CoreFigures.__dataclass_fields__}
    )


def core_matrix(args: argparse.Namespace) -> int:
    results: dict[str, CoreFigures] = {}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-") as tmp:
        runs: dict[str, list[CoreFigures]] = {"leafjet": [], "reference": []}
        for r in range(args.runs):
            for kind in ("reference", "leafjet"):
                srv = start_server(kind, Path(tmp) / f"{kind}-{r}")
                try:
                    runs[kind].append(
                        asyncio.run(run_core(srv.url, srv.pid, args.msgs, args.size, args.requests))
                    )
                finally:
                    srv.stop()
        results = {k: _median(v) for k, v in runs.items()}
    lj, ref = results["leafjet"], results["reference"]
    name = f"core N={args.msgs},MsgSz={args.size}B,Requests={args.requests},runs={args.runs}"
    print(f"\n{name}")
    rows = [
        ("pub->sub throughput (msgs/s)", "msgs_per_s", "{:,.0f}"),
        ("pub->sub throughput (MB/s)", "mb_per_s", "{:,.1f}"),
        ("server CPU per message (us)", "cpu_us_per_msg", "{:.2f}"),
        ("request/reply p50 (us)", "rr_p50_us", "{:,.0f}"),
        ("request/reply p99 (us)", "rr_p99_us", "{:,.0f}"),
        ("server CPU per request (us)", "rr_cpu_us_per_req", "{:.1f}"),
        ("server RSS after run (MiB)", "rss_mib", "{:.1f}"),
    ]
    print(f"{'figure':34s} {'leafjet':>14s} {'reference':>14s} {'ratio':>8s}  goal")
    for label, key, fmt in rows:
        a, b = getattr(lj, key), getattr(ref, key)
        ratio = a / b if b else float("nan")
        goal = ""
        if key in GOALS:
            text, bound, higher = GOALS[key]
            met = ratio >= bound if higher else ratio <= bound
            goal = f"{text}: {'met' if met else 'NOT met'}"
        print(f"{label:34s} {fmt.format(a):>14s} {fmt.format(b):>14s} {ratio:8.2f}  {goal}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    sub = p.add_subparsers(dest="matrix", required=True)
    c = sub.add_parser("core", help="core pub/sub throughput, request/reply latency, CPU per message")
    c.add_argument("--msgs", type=int, default=200_000)
    c.add_argument("--size", type=int, default=128)
    c.add_argument("--requests", type=int, default=5000)
    c.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    if args.matrix == "core":
        return core_matrix(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
