"""A hub stream sourcing two leaf streams while everything fails: the links flap every 1-5 s
(each leaf dials through its own proxy, cut by the test), the hub and a leaf are SIGKILLed and
started again, and a publisher on each leaf goes on throughout, retrying (same Nats-Msg-Id)
until each message is acknowledged. At the end every acknowledged leaf message is on the hub
exactly once, in its leaf's order (``tests.support.sourced`` checks it by the leaf sequence in
``Nats-Stream-Source``).

The schedule comes from a seeded RNG, printed with the run: ``LEAF_SRC_CHAOS_SEED=<seed>``
replays it (timing on a loaded machine still varies). The default run has a short version (a
few seconds of faults, one kill of each); ``-m chaos`` runs the long one (``LEAF_SRC_CHAOS_SECONDS``,
default 90, a kill of each every ~20 s).

Every pair of implementations runs the same script. A leafjet hub (the side that sources, so the
side that owns exactly-once) and the mixed pairs must pass. With the reference at both ends the
run is the baseline we report, not a requirement on leafjet: if the reference loses or duplicates,
that case is an xfail whose reason is the checker's report.

Each hub stream's source resumes from what it stored, so duplicates would come from a source
that restarts from a stale position, losses from one that skips; both would show as a wrong set of
leaf sequences, whatever the timing.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Any

import anyio
import nats
import pytest

from core.jetstream.sourcing import get_hash
from tests.integration.test_leafnodes import skip_unless_built
from tests.support.acked import AckedPublisher
from tests.support.leafnodes import (
    ALL_PAIRS,
    LeafUser,
    Node,
    Remote,
    Topology,
    client_url,
    pair_ids,
    wait_for_leaf_connected,
)
from tests.support.proxy import Proxy
from tests.support.servers import RunningServer
from tests.support.sourced import check_acks, check_sourced, read_stream
from tests.support.streams import create_stream, stream_info
from tests.support.tiers import only_when_selected

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

ACCOUNTS = {"A": [("a", "a-pw")]}
LEAVES = ("E1", "E2")  # each leaf's name and JetStream domain
LEAF_USERS = {name: LeafUser(f"leaf-{name.lower()}", f"{name.lower()}-pw", "A") for name in LEAVES}
PAIR_IDS = pair_ids(ALL_PAIRS)
# The default run leaves out a reference hub: after the faults it takes 35-46 s to resume its
# sources (its retry backoff, 10 s per failed consumer create), too long for the default tier; the
# chaos tier runs both reference-hub pairs (the reference at both ends is the baseline).
SHORT_PAIRS = [pair for pair in ALL_PAIRS if pair[0] != "reference"]
# Longer than the reference's (and leafjet's) longest source retry backoff, 2 min: a source that
# failed a few times during the faults resumes within it.
CATCH_UP_S = 150.0


def api_of(leaf: str) -> str:
    return f"$JS.{leaf}.API"


def url_a(server: RunningServer) -> str:
    return client_url(server, "a", "a-pw")


# -- the schedule --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the publishers start
    action: str  # "flap": cut a leaf's link; "kill": SIGKILL a server
    target: str  # a leaf's name, or "hub"
    down_for: float  # seconds before the link is restored / the server started again

    def __str__(self) -> str:
        return f"{self.at:5.1f}s {self.action} {self.target} for {self.down_for:.1f}s"


def schedule(rng: random.Random, seconds: float, kills: int) -> list[Fault]:
    """Flaps every 1-5 s, each of one leaf's link or of both; ``kills`` SIGKILLs of the hub and of
    a leaf, the hub's in the first half of each ``seconds / kills`` slice, the leaf's in the second."""
    faults: list[Fault] = []
    at = rng.uniform(0.5, 2.0)
    while at < seconds:
        for target in rng.choice([[LEAVES[0]], [LEAVES[1]], list(LEAVES)]):
            faults.append(Fault(round(at, 2), "flap", target, round(rng.uniform(0.2, 2.0), 2)))
        at += rng.uniform(1.0, 5.0)
    for k in range(kills):
        hub_at = seconds * (k + rng.uniform(0.1, 0.4)) / kills
        leaf_at = seconds * (k + rng.uniform(0.55, 0.85)) / kills
        faults.append(Fault(round(hub_at, 2), "kill", "hub", round(rng.uniform(0.2, 2.0), 2)))
        faults.append(Fault(round(leaf_at, 2), "kill", rng.choice(LEAVES), round(rng.uniform(0.2, 2.0), 2)))
    return sorted(faults, key=lambda f: f.at)


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class ChaosSetup:
    hub: RunningServer
    leaves: dict[str, RunningServer]
    proxies: dict[str, Proxy]


def start_topology(topo: Topology, hub_kind: str, leaf_kind: str) -> ChaosSetup:
    # The hub advertises a dead address (a proxy that resets every connection): a leaf that
    # learns it from INFO can never reach the hub around its own proxy, so a cut is a cut.
    nowhere = Proxy(None)
    topo.proxies.append(nowhere)
    hub = topo.start(
        "hub",
        hub_kind,
        Node(
            accounts=ACCOUNTS, domain="HUB", leaf_users=list(LEAF_USERS.values()), advertise=nowhere.address
        ),
    )
    reconnect = 0.2 if leaf_kind == "leafjet" else None  # the reference's is fixed at 1 s
    leaves, proxies = {}, {}
    for name in LEAVES:
        proxies[name] = topo.proxy_to_leaf_port(hub)
        user = LEAF_USERS[name]
        remote = Remote(hub, user.user, user.password, "A", via=proxies[name], reconnect=reconnect)
        leaves[name] = topo.start(name, leaf_kind, Node(accounts=ACCOUNTS, domain=name, remotes=[remote]))
    wait_for_leaf_connected(hub, len(LEAVES), timeout=30)
    return ChaosSetup(hub, leaves, proxies)


async def in_thread(fn: Any) -> Any:
    return await anyio.to_thread.run_sync(fn)


async def apply(
    fault: Fault, setup: ChaosSetup, locks: dict[str, anyio.Lock], log: list[str], t0: float
) -> None:
    await anyio.sleep(max(0.0, t0 + fault.at - time.monotonic()))
    async with locks[fault.target]:  # one fault at a time per link or server
        log.append(f"{time.monotonic() - t0:5.1f}s {fault}")
        if fault.action == "flap":
            proxy = setup.proxies[fault.target]
            proxy.cut()
            await anyio.sleep(fault.down_for)
            proxy.restore()
            return
        server = setup.hub if fault.target == "hub" else setup.leaves[fault.target]
        server.stop(signal.SIGKILL)
        await anyio.sleep(fault.down_for)
        await in_thread(lambda: server.restart(kill=True))


async def wait_caught_up(hub_nc: Any, setup: ChaosSetup, timeout: float) -> int:
    """Wait until the hub stream holds at least as many messages as the leaf streams together;
    the leafs' total. Returns at the deadline either way: the checker says what is missing."""
    totals = {}
    for name, leaf in setup.leaves.items():
        async with await nats.connect(url_a(leaf)) as nc:
            totals[name] = (await stream_info(nc, "ORDERS"))["state"]["last_seq"]
    want = sum(totals.values())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await stream_info(hub_nc, "AGG"))["state"]["messages"] >= want:
            break
        await anyio.sleep(0.1)
    return want


async def run_chaos(topo: Topology, hub_kind: str, leaf_kind: str, seconds: float, kills: int) -> None:
    skip_unless_built((hub_kind, "accept"), (leaf_kind, "solicit"))
    seed = int(os.environ.get("LEAF_SRC_CHAOS_SEED", str(random.randrange(1 << 30))))
    faults = schedule(random.Random(seed), seconds, kills)
    print(f"\nseed {seed} (LEAF_SRC_CHAOS_SEED={seed} replays it); {seconds:g}s of faults:")
    for f in faults:
        print(f"  {f}")
    setup = start_topology(topo, hub_kind, leaf_kind)
    for name, leaf in setup.leaves.items():
        async with await nats.connect(url_a(leaf)) as nc:
            # a subject of its own: a leaf's publishes cross the links to the other leaf too
            await create_stream(nc, {"name": "ORDERS", "subjects": [f"{name.lower()}.orders.>"]})
    sources = [{"name": "ORDERS", "external": {"api": api_of(name), "deliver": ""}} for name in LEAVES]
    async with await nats.connect(url_a(setup.hub)) as nc:
        await create_stream(nc, {"name": "AGG", "sources": sources})

    publishers = {
        name: AckedPublisher(url_a(leaf), f"{name.lower()}.orders.x", name)
        for name, leaf in setup.leaves.items()
    }
    locks = {target: anyio.Lock() for target in ("hub", *LEAVES)}
    log: list[str] = []
    async with anyio.create_task_group() as pubs:
        for p in publishers.values():
            pubs.start_soon(p.run)
        t0 = time.monotonic()
        async with anyio.create_task_group() as chaos:
            for fault in faults:
                chaos.start_soon(apply, fault, setup, locks, log, t0)
        for p in publishers.values():
            p.stop()
    print("as applied:\n  " + "\n  ".join(log))
    for name, p in publishers.items():
        print(
            f"{name}: {len(p.acks)} acked, {p.duplicates} acks of a retry, retries {p.retries}, "
            f"{p.connection_errors} connection errors"
        )

    # every link back (each side says so) before the end is read
    t_end = time.monotonic()
    await in_thread(lambda: wait_for_leaf_connected(setup.hub, len(LEAVES), timeout=30))
    for leaf in setup.leaves.values():
        await in_thread(lambda leaf=leaf: wait_for_leaf_connected(leaf, 1, timeout=30))
    relinked_s = time.monotonic() - t_end
    leaf_problems: dict[str, list[str]] = {}
    for name, leaf in setup.leaves.items():
        async with await nats.connect(url_a(leaf)) as nc:
            leaf_problems[name] = check_acks(await read_stream(nc, "ORDERS"), publishers[name].acks)
    async with await nats.connect(url_a(setup.hub), max_reconnect_attempts=-1) as hub_nc:
        stored = await wait_caught_up(hub_nc, setup, timeout=CATCH_UP_S)
        caught_up_s = time.monotonic() - t_end
        await anyio.sleep(1.0)  # a duplicate that is on its way has time to land
        hub_msgs = await read_stream(hub_nc, "AGG")
    names = {f"ORDERS:{get_hash(api_of(name))}": name for name in LEAVES}
    report = check_sourced([m.source for m in hub_msgs], {n: p.acked for n, p in publishers.items()}, names)
    print(
        f"after the faults: links back in {relinked_s:.1f}s, the hub caught up in {caught_up_s:.1f}s; "
        f"leaf streams hold {stored} messages, the hub {len(hub_msgs)}\n{report.summary()}"
    )
    for name, problems in leaf_problems.items():
        print(f"{name} (the leaf's own stream): {len(problems)} problems {problems[:5]}")
    reference_only = hub_kind == leaf_kind == "reference"
    if reference_only and not (report.ok and not any(leaf_problems.values())):
        pytest.xfail(f"the reference (seed {seed}) does not keep exactly-once here:\n{report.summary()}")
    assert report.ok, f"seed {seed}:\n{report.summary()}"
    if leaf_kind == "leafjet":
        assert not any(leaf_problems.values()), f"seed {seed}: {leaf_problems}"
    assert all(p.acks for p in publishers.values())


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), SHORT_PAIRS, ids=pair_ids(SHORT_PAIRS))
async def test_flapping_links_and_killed_servers_keep_every_acked_message_once(
    topo: Topology, hub_kind: str, leaf_kind: str
) -> None:
    await run_chaos(topo, hub_kind, leaf_kind, seconds=6.0, kills=1)


@pytest.mark.chaos
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), ALL_PAIRS, ids=PAIR_IDS)
async def test_long_chaos_keeps_every_acked_message_once(
    topo: Topology, hub_kind: str, leaf_kind: str, request: pytest.FixtureRequest
) -> None:
    only_when_selected(request, "chaos")
    seconds = float(os.environ.get("LEAF_SRC_CHAOS_SECONDS", "90"))
    await run_chaos(topo, hub_kind, leaf_kind, seconds=seconds, kills=max(1, round(seconds / 20)))
