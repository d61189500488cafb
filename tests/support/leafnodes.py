"""Leaf-node topologies of either implementation, the leaf config written once.

A ``Node`` says what a server is in a topology (its accounts and client users, its JetStream
domain, whether it accepts leafs and from whom, which hubs it solicits); ``Node.config`` renders
it to the one config dict that ``tests.support.servers`` writes as nats-server JSON or as leafjet
TOML, with the reference's field names and the same meaning for both::

    topo = Topology(tmp_path)
    hub = topo.start("hub", "reference", Node(accounts={"A": [("a", "a-pw")]}, domain="HUB",
                                               leaf_users=[LeafUser("leaf-a", "leaf-a-pw", "A")]))
    leaf = topo.start("leaf", "leafjet", Node(accounts={"A": [("a", "a-pw")]}, domain="EDGE",
                                               remotes=[Remote(hub, "leaf-a", "leaf-a-pw", "A")]))
    wait_for_leaf_connected(hub, 1)
    ... nats.connect(client_url(leaf, "a", "a-pw")) ...
    topo.close()

Monitoring (``http_port``) is on for every node: ``leafz(server)`` reads ``/leafz``, and
``wait_for_leaf_connected`` polls it, so tests never sleep waiting for a link.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.proxy import Proxy
from tests.support.servers import (
    REPO,
    RunningServer,
    free_ports,
    start_server,
    to_toml,
    wait_until,
)

NOT_BUILT = "leafjet leaf links not built yet"


@dataclass(frozen=True)
class LeafUser:
    """A user that a soliciting leaf authenticates as on the accept side, bound to an account."""

    user: str
    password: str
    account: str


@dataclass
class Remote:
    """One ``[[leafnodes.remotes]]`` entry: dial ``hub`` (its leaf port, or ``via`` a proxy)."""

    hub: RunningServer
    user: str
    password: str
    account: str  # the local account this link binds
    deny_imports: list[str] = field(default_factory=list)
    deny_exports: list[str] = field(default_factory=list)
    via: Proxy | None = None
    reconnect: float | None = None  # seconds between dials (the reference's default is 1 s)
    urls_before: list[str] = field(default_factory=list)  # listed before the hub's (a dead port)

    def url(self) -> str:
        where = self.via.address if self.via is not None else f"127.0.0.1:{leaf_port(self.hub)}"
        return f"nats-leaf://{self.user}:{self.password}@{where}"

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"urls": [*self.urls_before, self.url()], "account": self.account}
        if self.deny_imports:
            out["deny_imports"] = list(self.deny_imports)
        if self.deny_exports:
            out["deny_exports"] = list(self.deny_exports)
        if self.reconnect is not None:
            out["reconnect"] = self.reconnect
        return out


@dataclass
class Node:
    """What one server is in a topology; rendered by ``config`` for either implementation."""

    accounts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # name -> (user, pw)
    domain: str | None = None  # JetStream domain; JetStream is on for every node
    accept: bool = False  # a [leafnodes] listener (implied by leaf_users)
    advertise: str | None = None  # the leaf address told to leafs (leafnode_urls), e.g. a proxy's
    leaf_users: list[LeafUser] = field(default_factory=list)
    remotes: list[Remote] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level fields, verbatim
    leaf_compression: str | None = None  # leafnodes.compression of an accepting node ("off": none)
    js_options: dict[str, Any] = field(default_factory=dict)  # more [jetstream] fields, verbatim

    @property
    def accepts(self) -> bool:
        return self.accept or bool(self.leaf_users)

    def config(self, name: str, leaf_listen_port: int | None, http: int) -> dict[str, Any]:
        cfg: dict[str, Any] = {"server_name": name, "http_port": http}
        if self.accounts:
            cfg["accounts"] = {
                acc: {
                    "users": [{"user": u, "password": p} for u, p in users],
                    "jetstream": "enabled",
                }
                for acc, users in self.accounts.items()
            }
        cfg["jetstream"] = {"domain": self.domain} if self.domain else {}
        cfg["jetstream"].update(self.js_options)
        leafnodes: dict[str, Any] = {}
        if self.accepts:
            assert leaf_listen_port is not None
            leafnodes.update(host="127.0.0.1", port=leaf_listen_port)
            if self.advertise:
                leafnodes["advertise"] = self.advertise
            if self.leaf_compression is not None:
                leafnodes["compression"] = self.leaf_compression
            if self.leaf_users:
                leafnodes["authorization"] = {
                    "users": [
                        {"user": u.user, "password": u.password, "account": u.account}
                        for u in self.leaf_users
                    ]
                }
        if self.remotes:
            leafnodes["remotes"] = [r.config() for r in self.remotes]
        if leafnodes:
            cfg["leafnodes"] = leafnodes
        cfg.update(self.extra)
        return cfg


def leaf_port(server: RunningServer) -> int:
    return int(server.config["leafnodes"]["port"])


def http_port(server: RunningServer) -> int:
    return int(server.config["http_port"])


def client_url(server: RunningServer, user: str, password: str) -> str:
    return f"nats://{user}:{password}@127.0.0.1:{server.port}"


def start_node(kind: str, workdir: Path, name: str, node: Node, *, timeout: float = 60.0) -> RunningServer:
    """Start ``node`` as a ``kind`` server; free ports are picked here, and picked again if a
    test running beside this one (pytest -n) took one in between."""
    for attempt in range(4):
        leaf_port, http_port = free_ports(2)
        cfg = node.config(name, leaf_port if node.accepts else None, http_port)
        try:
            return start_server(kind, workdir / f"{name}-{attempt}", cfg, jetstream=True, timeout=timeout)
        except RuntimeError as e:
            text = str(e).lower()
            if attempt == 3 or not ("address already in use" in text or "in use" in text):
                raise
    raise AssertionError("unreachable")


class Topology:
    """The servers and proxies of one test (or module); ``close`` stops them all."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, RunningServer] = {}
        self.proxies: list[Proxy] = []

    def start(self, name: str, kind: str, node: Node) -> RunningServer:
        srv = start_node(kind, self.workdir, name, node)
        self.servers[name] = srv
        return srv

    def proxy_to_leaf_port(self, hub: RunningServer) -> Proxy:
        """A proxy to ``hub``'s leaf port. A leaf that dials it learns the hub's own address from
        INFO (``leafnode_urls``) and may reconnect there, around the proxy: for a link that
        must stay behind the proxy, start the hub with ``start_behind_proxy``."""
        p = Proxy(("127.0.0.1", leaf_port(hub)))
        self.proxies.append(p)
        return p

    def start_behind_proxy(self, name: str, kind: str, node: Node) -> tuple[RunningServer, Proxy]:
        """Start an accepting node that advertises a proxy's address as its leaf URL (as a hub
        behind a load balancer does), so its leafs dial only the proxy, reconnects included."""
        p = Proxy(None)
        self.proxies.append(p)
        node.advertise = p.address
        srv = self.start(name, kind, node)
        p.target = ("127.0.0.1", leaf_port(srv))
        return srv, p

    def close(self) -> None:
        for srv in reversed(list(self.servers.values())):
            srv.stop()
        for p in self.proxies:
            p.close()

    def __getitem__(self, name: str) -> RunningServer:
        return self.servers[name]


# -- monitoring --------------------------------------------------------------------------------


def monitor(server: RunningServer, path: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """GET ``path`` on the server's monitoring port as JSON; None if it cannot answer (yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port(server)}{path}", timeout=timeout) as r:
            return json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def leafz(server: RunningServer, *, subs: bool = False) -> dict[str, Any] | None:
    return monitor(server, "/leafz?subs=1" if subs else "/leafz")


def leaf_count(server: RunningServer) -> int:
    z = leafz(server)
    return int(z.get("leafnodes", 0)) if z else 0


def wait_for_leaf_connected(server: RunningServer, n: int = 1, timeout: float = 30.0) -> dict[str, Any]:
    """Poll ``/leafz`` until the server reports exactly ``n`` leaf connections; the leafz."""

    def ready() -> dict[str, Any] | None:
        z = leafz(server)
        return z if z and z.get("leafnodes", 0) == n else None

    try:
        return wait_until(ready, timeout, interval=0.05, what=f"{server.kind} to report {n} leaf links")
    except TimeoutError as e:
        raise AssertionError(
            f"{e}; /leafz: {leafz(server)}\n--- log tail ---\n{server.log()[-3000:]}"
        ) from None


def leaf_subscriptions(server: RunningServer, account: str | None = None) -> list[set[str]]:
    """The interest each leaf link announced to ``server`` (``/leafz?subs=1``), one set per link."""
    z = leafz(server, subs=True) or {}
    return [
        set(link.get("subscriptions_list") or [])
        for link in z.get("leafs") or []
        if account is None or link.get("account") == account
    ]


def wait_for_log(server: RunningServer, text: str, timeout: float = 15.0) -> str:
    """Poll the server's log until ``text`` appears in it; the log."""
    return wait_until(lambda: text in (log := server.log()) and log, timeout, what=f"{text!r} in the log")


# -- does leafjet have leaf links yet? ---------------------------------------------------------


@cache
def leafjet_supports(role: str) -> bool:
    """Whether ``leafjet agent --check-config`` accepts a leafnodes table for ``role``: "accept"
    (a ``[leafnodes]`` listener) or "solicit" (``[[leafnodes.remotes]]``). Tests of topologies
    with a leafjet node in an unsupported role skip, and run by themselves once it lands."""
    if role == "accept":
        leafnodes: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": 7422,
            "authorization": {"users": [{"user": "leaf", "password": "pw", "account": "APP"}]},
        }
    elif role == "solicit":
        leafnodes = {"remotes": [{"urls": ["nats-leaf://leaf:pw@127.0.0.1:7422"], "account": "APP"}]}
    else:
        raise ValueError(role)
    cfg = {"accounts": {"APP": {"users": [{"user": "app", "password": "pw"}]}}, "leafnodes": leafnodes}
    with tempfile.TemporaryDirectory(prefix="leafjet-check-") as tmp:
        path = Path(tmp) / "leaf.toml"
        path.write_text(to_toml(cfg))
        done = subprocess.run(
            [sys.executable, "-m", "agent.cli", "agent", "--check-config", str(path)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            timeout=60,
        )
    return done.returncode == 0


def missing_leafjet_roles(kinds_and_roles: list[tuple[str, str]]) -> bool:
    """True if a leafjet node of the topology needs a role leafjet does not have yet."""
    return any(kind == "leafjet" and not leafjet_supports(role) for kind, role in kinds_and_roles)


# -- the combinations a differential leaf test runs ------------------------------------------

ALL_PAIRS = [  # (hub kind, leaf kind): the reference at both ends first, as the baseline
    ("reference", "reference"),
    ("reference", "leafjet"),
    ("leafjet", "reference"),
    ("leafjet", "leafjet"),
]


def pair_ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"hub={h},leaf={lf}" for h, lf in pairs]
