"""A cluster of N servers of one implementation, joined by routes, the config written once.

The ``cluster`` table uses the reference's names (``name``, ``listen``, ``routes``,
``authorization``), which leafjet reads too, so the same dict starts three ``leafjet hub``
processes or three ``nats-server`` processes::

    cluster = Cluster(tmp_path, "leafjet", size=3)
    cluster.start()
    cluster.wait_for_mesh()
    ... nats.connect(cluster.url(0)) ... nats.connect(cluster.url(1)) ...
    cluster.restart(1)
    cluster.close()

Monitoring is on for every node: ``wait_for_mesh`` polls ``/routez`` (the distinct peers each
server has a route to: the reference pools several connections per peer), so nothing sleeps.
Interest travels after the route is up; ``wait_for_interest`` waits for it with a request that
only the subscriber's connection answers (see its docstring).
"""

from __future__ import annotations

import json
import secrets
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.servers import (
    RunningServer,
    free_ports,
    port_is_free,
    start_leafjet,
    start_reference,
    wait_until,
)

KINDS = ["reference", "leafjet"]


@dataclass
class NodeSpec:
    """One server of the cluster: its name and fixed ports (a restart keeps them)."""

    name: str
    client_port: int
    cluster_port: int
    http_port: int
    leaf_port: int


@dataclass
class Cluster:
    workdir: Path
    kind: str  # "leafjet" or "reference"
    size: int = 3
    name: str = "C"
    authorization: dict[str, Any] | None = None  # cluster.authorization, e.g. {"user":..,"password":..}
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level fields, verbatim
    routes_to: str = "all"  # "all": each node lists every other; "first": only node 0 (gossip)
    leaf_users: list[dict[str, str]] | None = None  # a leaf listener on each node, these users
    nodes: list[NodeSpec] = field(default_factory=list)
    servers: list[RunningServer | None] = field(default_factory=list)
    _started: set[int] = field(default_factory=set)  # nodes that have run (their ports are fixed)

    def __post_init__(self) -> None:
        tag = secrets.token_hex(2)
        ports = free_ports(4 * self.size)  # distinct: a node's ports must not collide
        self.nodes = [
            NodeSpec(f"{self.kind[:2]}{tag}-n{i + 1}", *ports[4 * i : 4 * i + 4]) for i in range(self.size)
        ]
        self.servers = [None] * self.size

    # ------------------------------------------------------------------ config

    def route_url(self, i: int, *, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"nats-route://{auth}127.0.0.1:{self.nodes[i].cluster_port}"

    def config(self, i: int, **cluster_changes: Any) -> dict[str, Any]:
        node = self.nodes[i]
        if self.routes_to == "first":
            others = [0] if i != 0 else []
        else:
            others = [j for j in range(self.size) if j != i]
        cluster: dict[str, Any] = {
            "name": self.name,
            "listen": f"127.0.0.1:{node.cluster_port}",
            "routes": [self.route_url(j) for j in others],
        }
        if self.authorization is not None:
            cluster["authorization"] = dict(self.authorization)
        cluster.update(cluster_changes)
        cfg: dict[str, Any] = {
            "server_name": node.name,
            "port": node.client_port,
            "http_port": node.http_port,
            "cluster": cluster,
        }
        if self.leaf_users is not None:
            cfg["leafnodes"] = {
                "host": "127.0.0.1",
                "port": node.leaf_port,
                "authorization": {"users": [dict(u) for u in self.leaf_users]},
            }
        cfg.update(self.extra)
        return cfg

    # ------------------------------------------------------------------ processes

    def start(self) -> Cluster:
        for i in range(self.size):
            self.start_node(i)
        return self

    def start_node(
        self, i: int, config: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
    ) -> RunningServer:
        """Start node ``i``. Its ports were picked free in ``__post_init__`` and bound only now: a
        test running beside this one (pytest -n) may have taken one in between. On a node's first
        start from its own config (``self.config(i)``, or a callable ``config`` that builds on it),
        ports are then picked again (a restart keeps them: the other nodes dial its cluster port;
        a caller's ``config`` dict names its own ports)."""
        for attempt in range(4):
            cfg = self.config(i) if config is None else config() if callable(config) else config
            try:
                srv = self._start(i, cfg)
            except RuntimeError as e:
                retry = (config is None or callable(config)) and i not in self._started and attempt < 3
                if not retry or "address already in use" not in str(e).lower():
                    raise
                # only the ports something else holds now: the others (the cluster port above
                # all) may already be in the routes of the nodes started before this one
                taken = {p for j, n in enumerate(self.nodes) if j != i for p in _ports(n)}
                fresh = iter([p for p in free_ports(8) if p not in taken])
                ports = [p if port_is_free(p) else next(fresh) for p in _ports(self.nodes[i])]
                self.nodes[i] = NodeSpec(self.nodes[i].name, *ports)
                continue
            self.servers[i] = srv
            self._started.add(i)
            return srv
        raise AssertionError("unreachable")

    def _start(self, i: int, cfg: dict[str, Any]) -> RunningServer:
        workdir = self.workdir / self.nodes[i].name
        if self.kind == "leafjet":
            # `leafjet hub` as deployed; the leaf listener on a free port (the default 7422 would
            # be shared by the three servers of one machine).
            extra = () if "leafnodes" in cfg else ("--leaf-port", "0")
            return start_leafjet(workdir, cfg, role="hub", extra_args=extra)
        return start_reference(workdir, cfg)

    def stop(self, i: int, *, kill: bool = False) -> None:
        srv = self.servers[i]
        if srv is not None:
            srv.stop(signal.SIGKILL if kill else signal.SIGTERM)
            self.servers[i] = None

    def restart(self, i: int, *, kill: bool = False) -> RunningServer:
        self.stop(i, kill=kill)
        return self.start_node(i)

    def close(self) -> None:
        for i in range(self.size):
            self.stop(i)

    def server(self, i: int) -> RunningServer:
        srv = self.servers[i]
        assert srv is not None, f"node {i} is not running"
        return srv

    def url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.nodes[i].client_port}"

    def log(self, i: int) -> str:
        srv = self.servers[i]
        return srv.log() if srv is not None else ""

    # ------------------------------------------------------------------ monitoring

    def routez(self, i: int) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.nodes[i].http_port}/routez", timeout=2.0
            ) as r:
                return json.loads(r.read())
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def peers(self, i: int) -> set[str]:
        """The names of the servers node ``i`` has a route to."""
        z = self.routez(i) or {}
        return {r.get("remote_name") or r.get("remote_id") for r in z.get("routes") or []}

    def wait_for_mesh(self, timeout: float = 30.0, running: list[int] | None = None) -> None:
        """Until every running node has a route to every other running node."""
        up = running if running is not None else [i for i in range(self.size) if self.servers[i] is not None]

        def complete() -> bool:
            for i in up:
                want = {self.nodes[j].name for j in up if j != i}
                if not want <= self.peers(i):
                    return False
            return True

        try:
            wait_until(complete, timeout, interval=0.1, what=f"a full mesh of {up}")
        except TimeoutError as e:
            detail = {self.nodes[i].name: sorted(self.peers(i)) for i in up}
            tails = "\n".join(f"--- {self.nodes[i].name} ---\n{self.log(i)[-2500:]}" for i in up)
            raise AssertionError(f"{e}; peers: {detail}\n{tails}") from None


def _ports(node: NodeSpec) -> tuple[int, int, int, int]:
    return (node.client_port, node.cluster_port, node.http_port, node.leaf_port)


async def wait_for_interest(publisher: nats.NATS, subject: str, timeout: float = 20.0) -> None:
    """Until ``subject`` reaches a responder through ``publisher``'s server: requests until one is
    answered. A subscriber makes its interest visible with ``answer_probes`` on the same
    connection right after its real subscriptions: interest crosses a route in the order it was
    made, so once the probe's is there, so is the rest."""

    async def answered() -> bool:
        try:
            await publisher.request(subject, b"probe", timeout=0.5)
            return True
        except (NoRespondersError, NatsTimeout):
            return False

    deadline_err = f"interest in {subject!r} to reach the publisher's server"
    await _await_true(answered, timeout, deadline_err)


async def wait_for_no_interest(publisher: nats.NATS, subject: str, timeout: float = 20.0) -> None:
    """Until a request on ``subject`` through ``publisher``'s server gets "no responders"."""

    async def gone() -> bool:
        try:
            await publisher.request(subject, b"probe", timeout=0.5)
            return False
        except NoRespondersError:
            return True
        except NatsTimeout:
            return False

    await _await_true(gone, timeout, f"interest in {subject!r} to be gone")


async def answer_probes(nc: nats.NATS, subject: str) -> Any:
    """Subscribe ``nc`` to ``subject`` answering every request (see ``wait_for_interest``)."""

    async def reply(msg: Any) -> None:
        if msg.reply:
            await nc.publish(msg.reply, b"here")

    sub = await nc.subscribe(subject, cb=reply)
    await nc.flush()
    return sub


async def _await_true(check: Any, timeout: float, what: str) -> None:
    """Until ``await check()`` is true (each check is itself bounded by a request timeout)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await anyio.sleep(0.05)


def probe_subject() -> str:
    return f"probe.{secrets.token_hex(6)}"


__all__ = [
    "KINDS",
    "Cluster",
    "answer_probes",
    "probe_subject",
    "wait_for_interest",
    "wait_for_no_interest",
]
