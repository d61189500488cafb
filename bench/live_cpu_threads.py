"""Each server's CPU per message, per thread, at a live rate: a leaf and a hub as ``bench
sources-latency`` starts them (the hub's ``AGG`` sourcing the leaf's ``ORDERS``), a steady
publisher on the leaf, and /proc's CPU of every thread of both servers over the run. For a
leafjet server it also prints its stores' commits per message (``leafjet_store_commits`` from
/metrics) and the store threads' CPU per commit: at a live rate a message's cost follows how
many messages share a commit (an fsync), which moves with every shift of timing and load.

    python -m bench.live_cpu_threads [RATE] [SECONDS] [LEAF_KIND] [HUB_KIND]

(defaults 1000/s, 15 s, leafjet leafjet). It writes the two PIDs to ``$TMPDIR/live_cpu_pids.json``
one second before publishing starts, so a profiler can attach for the run (``py-spy record
--threads``, ``perf stat -p``, ``strace -c -f -p``). A diagnostic, not a benchmark of the suite:
it prints, never asserts."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import nats

from bench.procstat import cpu_seconds
from bench.sources import _api, pair_nodes
from bench.sources_latency import create_sourced_pair, publish_paced
from tests.support.leafnodes import Topology, client_url, http_port, wait_for_leaf_connected

_TICKS = os.sysconf("SC_CLK_TCK")
_COMMITS = re.compile(r'^leafjet_store_commits\{[^}]*stream_name="([^"]+)"[^}]*\} (\S+)$', re.M)


def store_commits(server: Any) -> dict[str, float]:
    """Stream name -> its store's commits so far (a leafjet server's /metrics); {} for the
    reference, or when the server does not answer."""
    if server.kind != "leafjet":
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port(server)}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {name: float(value) for name, value in _COMMITS.findall(text)}


def thread_ticks(pid: int) -> dict[str, int]:
    """``tid:name`` -> user + system ticks of each thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{tid}:{name}"] = int(fields[11]) + int(fields[12])
    return out


async def _run(hub: Any, leaf: Any, rate: float, seconds: float) -> None:
    servers = (leaf, hub)
    hub_nc = await nats.connect(client_url(hub, "app", "app-pw"))
    leaf_nc = await nats.connect(client_url(leaf, "app", "app-pw"))
    try:
        await create_sourced_pair(leaf_nc, hub_nc)
        inbox = leaf_nc.new_inbox()

        async def on_ack(_msg: Any) -> None:
            pass

        await leaf_nc.subscribe(inbox, cb=on_ack)
        pids = (leaf.pid, hub.pid)
        Path(tempfile.gettempdir(), "live_cpu_pids.json").write_text(
            json.dumps({"leaf": pids[0], "hub": pids[1]})
        )
        await asyncio.sleep(1)
        total = int(rate * seconds)
        cpu0 = [cpu_seconds(p) for p in pids]
        ticks0 = [thread_ticks(p) for p in pids]
        commits0 = [store_commits(s) for s in servers]
        await publish_paced(leaf_nc, rate, total, lambda _i: b"x" * 128, inbox)
        stored = 0
        for _ in range(300):  # until the hub holds them all (30 s at most)
            stored = (await _api(hub_nc, "$JS.API.STREAM.INFO.AGG"))["state"]["messages"]
            if stored >= total:
                break
            await asyncio.sleep(0.1)
        us = [(cpu_seconds(p) - c) / total * 1e6 for p, c in zip(pids, cpu0, strict=True)]
        print(
            f"rate={rate:g}/s msgs={total} hub stored={stored} leaf us/msg={us[0]:.1f} hub us/msg={us[1]:.1f}"
        )
        commits1 = [store_commits(s) for s in servers]
        for name, pid, before, c0, c1 in zip(("leaf", "hub"), pids, ticks0, commits0, commits1, strict=True):
            after = thread_ticks(pid)
            per = {k: (v - before.get(k, 0)) / _TICKS / total * 1e6 for k, v in after.items()}
            busy = {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0}
            print(f"  {name} us/msg by thread: {busy}")
            if c1:
                commits = {k: round((v - c0.get(k, 0)) / total, 3) for k, v in c1.items()}
                # every thread but the main one (whose id is the pid): the store pool's, mostly
                pool = sum(v for k, v in per.items() if k.partition(":")[0] != str(pid))
                per_commit = pool / sum(commits.values()) if sum(commits.values()) else 0.0
                print(f"  {name} commits/msg {commits}; other threads' CPU per commit {per_commit:.0f} us")
    finally:
        await leaf_nc.close()
        await hub_nc.close()


def main(argv: list[str]) -> None:
    rate = float(argv[0]) if argv else 1000.0
    seconds = float(argv[1]) if len(argv) > 1 else 15.0
    leaf_kind = argv[2] if len(argv) > 2 else "leafjet"
    hub_kind = argv[3] if len(argv) > 3 else "leafjet"
    topo = Topology(Path(tempfile.mkdtemp(prefix="leafjet-live-cpu-")))
    try:
        hub, leaf = pair_nodes(topo, leaf_kind, hub_kind, "default")
        wait_for_leaf_connected(hub, 1, timeout=30)
        asyncio.run(_run(hub, leaf, rate, seconds))
    finally:
        topo.close()


if __name__ == "__main__":
    main(sys.argv[1:])
