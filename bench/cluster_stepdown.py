"""``python -m bench cluster --parts stepdown``: how long a meta leader stepdown leaves the
JetStream API without a leader, on three leafjet hubs and on three nats-server processes.

Each round, on one cluster per kind kept for all rounds: a client of a server that does not
lead sends ``$JS.API.META.LEADER.STEPDOWN`` (empty body: the server picks the next leader;
the reference takes this request from its system account only, so its cluster has one, and
the client uses its user). t0 is the send. Two times from t0:
- *new leader*: every server's monitoring names the same, other, leader (leafjet ``/raftz``,
  the reference ``/jsz``), polled every 20 ms;
- *create ok*: a stream create succeeds through the same server (one attempt every 50 ms, a
  new name each, each waiting up to 5 s).
Before the next round the cluster must agree on a leader and have answered a create, and a
second passes. Medians over ``--stepdowns`` rounds.

A second figure, *stop -> new leader*: SIGTERM to the meta leader (what systemd sends on a stop
or restart), t0 the signal; until both survivors name the same new leader. The stopped server is
started again before the next round. Both hand leadership over before they exit (leafjet:
agent/app.py; the reference steps its RAFT leaders down on shutdown).

The reference hands leadership to a peer it chooses (an append that makes that peer campaign
at once); leafjet hands it to its most caught-up live follower (hub/raft, TIMEOUT_NOW). Before
leafjet had the hand-over, its leader stepped down and the group waited for an election
timeout (1.5-3 s).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

from bench.cluster_meta import (
    agreed_leader,
    create_until_ok,
    meta_leader_seen_by,
    start_cluster,
    until_new_leader,
    until_new_leader_and_create,
)
from tests.support.cluster import Cluster
from tests.support.jscluster import restart_js_node

POLL = 0.02
ATTEMPT_EVERY = 0.05
DEADLINE = 60.0
# the reference's stepdown is a system-account request: its cluster gets one, and a user each
SYS_USER = ("sys", "sys")
APP_USER = ("app", "app")


@dataclass
class StepdownFigures:
    leader_s: list[float]
    create_s: list[float]
    stop_s: list[float]


def _reference_accounts() -> dict[str, Any]:
    return {
        "accounts": {
            "SYS": {"users": [{"user": SYS_USER[0], "password": SYS_USER[1]}]},
            "APP": {"jetstream": "enabled", "users": [{"user": APP_USER[0], "password": APP_USER[1]}]},
        },
        "system_account": "SYS",
        "no_auth_user": APP_USER[0],
    }


async def _stepdown_once(c: Cluster, via: int) -> tuple[float, float]:
    old = meta_leader_seen_by(c, via)
    assert old is not None
    app = await nats.connect(c.url(via), max_reconnect_attempts=-1)
    if c.kind == "reference":
        user, password = SYS_USER
        sys_nc = await nats.connect(c.url(via), user=user, password=password)
    else:
        sys_nc = app
    try:
        t0 = time.monotonic()
        reply = await sys_nc.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=10)
        if b'"success":true' not in reply.data.replace(b" ", b""):
            raise RuntimeError(f"{c.kind}: the stepdown was refused: {reply.data[:200]!r}")
        return await until_new_leader_and_create(
            c,
            app,
            list(range(c.size)),
            old,
            t0,
            "SD",
            deadline=DEADLINE,
            attempt_every=ATTEMPT_EVERY,
            poll=POLL,
        )
    finally:
        if sys_nc is not app:
            await sys_nc.close()
        await app.close()


async def _settled(c: Cluster) -> int:
    """The index of a server that does not lead, once the cluster agrees on a leader and
    answers a create."""
    via = (await asyncio.to_thread(agreed_leader, c) + 1) % c.size
    nc = await nats.connect(c.url(via))
    try:
        await create_until_ok(nc, "PRE")
    finally:
        await nc.close()
    await asyncio.sleep(1.0)
    return via


async def _stop_once(c: Cluster) -> float:
    """SIGTERM the meta leader; seconds until both survivors name one new leader. The stopped
    server is started again (and the cluster settled) by the caller's next ``_settled``."""
    leader = await asyncio.to_thread(agreed_leader, c)
    others = [i for i in range(c.size) if i != leader]
    t0 = time.monotonic()
    stopping = asyncio.ensure_future(asyncio.to_thread(c.stop, leader))
    took = await until_new_leader(c, others, c.nodes[leader].name, t0, DEADLINE, POLL) - t0
    await stopping
    await asyncio.to_thread(restart_js_node, c, leader)
    await asyncio.to_thread(c.wait_for_mesh, 60)
    return took


def run_stepdowns(workdir: Path, kind: str, rounds: int) -> StepdownFigures:
    extra = _reference_accounts() if kind == "reference" else {}
    c = Cluster(workdir / f"{kind}-stepdown", kind, size=3, extra=extra)
    out = StepdownFigures([], [], [])
    try:
        start_cluster(c)
        for _ in range(rounds):
            via = asyncio.run(_settled(c))
            leader_s, create_s = asyncio.run(_stepdown_once(c, via))
            out.leader_s.append(leader_s)
            out.create_s.append(create_s)
        for _ in range(rounds):
            asyncio.run(_settled(c))
            out.stop_s.append(asyncio.run(_stop_once(c)))
    finally:
        c.close()
    return out


def print_stepdowns(res: dict[str, StepdownFigures], rounds: int) -> None:
    print(f"\ncluster stepdown Rounds={rounds} (3 servers each; times from the request, median)")
    print(f"{'figure':44s} {'reference':>10s} {'leafjet':>10s} {'ratio':>7s}")
    ref, lj = res["reference"], res["leafjet"]
    for label, r, v in (
        ("stepdown -> new leader shown, s", ref.leader_s, lj.leader_s),
        ("stepdown -> create ok, s", ref.create_s, lj.create_s),
        ("SIGTERM of the leader -> new leader shown, s", ref.stop_s, lj.stop_s),
    ):
        a, b = statistics.median(r), statistics.median(v)
        print(f"{label:44s} {a:>10.3f} {b:>10.3f} {b / a if a else float('nan'):7.2f}")
    for kind, f in res.items():
        runs = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(f.leader_s, f.create_s, strict=True))
        print(f"  {kind} rounds (new leader / create ok, s): {runs}")
        print(f"  {kind} SIGTERM rounds (new leader, s): {', '.join(f'{a:.2f}' for a in f.stop_s)}")
