"""The pure rules of the route mesh: URLs, which of two routes to one peer stays, dial backoff,
which subjects stay on this server.

No IO: ``manager.py`` and ``route.py`` ask these questions and act on the answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

ROUTE_SCHEME = "nats-route"
ROUTE_PROTOCOL = 1  # leafjet's own route protocol version, sent in INFO and CONNECT
SYSTEM_ACCOUNT = "$SYS"  # the system account: the meta group talks in it over the routes (hub/meta/bus.py)


@dataclass(frozen=True, slots=True)
class RouteURL:
    """A parsed route URL: where to dial, and the credentials it carries (None: the cluster's)."""

    host: str
    port: int
    user: str | None = None
    password: str | None = None

    @property
    def address(self) -> str:
        """``host:port``: what logs and gossip name (never the credentials)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def key(self) -> str:
        """One dialler per key: ``nats-route://host:port`` without credentials."""
        return f"{ROUTE_SCHEME}://{self.address}"


def parse_route_url(url: str) -> RouteURL:
    """``nats-route://[user:pass@]host:port`` (also ``nats://``, ``tls://``, no scheme); ValueError
    for anything without a host and a port (the config loader reports it first)."""
    parts = urlsplit(url if "://" in url else f"{ROUTE_SCHEME}://{url}")
    if not parts.hostname or parts.port is None:
        raise ValueError(f"route URL needs a host and a port: {redact(url)!r}")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return RouteURL(parts.hostname, parts.port, user, password)


def redact(url: str) -> str:
    """``url`` without its userinfo, for a log line."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = netloc.rsplit("@", 1)[1]
    rest = netloc + slash + path
    return f"{scheme}://{rest}" if sep else rest


class RouteEnds(NamedTuple):
    """Who dialled a route: the soliciting server's name and id (the ordering key)."""

    name: str
    server_id: str


def keeps_new(existing: RouteEnds, new: RouteEnds) -> bool:
    """Two routes join the same pair of servers: whether the newer one stays and the older one
    goes. Both servers answer the same whatever order they saw the two in: the route dialled by
    the server with the smaller (name, id) stays; two dialled by the same server keep the older
    (the dialler itself never completes a second one, ``Routes.wants``)."""
    return new < existing


def backoff(failures: int, ceiling: float, base: float = 1.0, rng: random.Random | None = None) -> float:
    """Seconds before the next dial after ``failures`` failed attempts in a row (>= 1): ``base``
    doubling up to ``ceiling``, plus up to half as much again of jitter, so servers restarted
    together do not dial in lockstep."""
    delay = min(ceiling, base * (2 ** min(max(failures, 1) - 1, 16)))
    return delay + (rng or random).uniform(0, delay / 2)


def local_prefixes(domain: str | None) -> tuple[str, ...]:
    """The subject prefixes that never cross a route: this server's own JetStream API
    (``$JS.API.>`` and ``$JS.<domain>.API.>``). JetStream is per server until the cluster
    replicates it (hub/raft/): every server would answer an API request that reached it, so each
    answers its own clients only. A leaf's domain API (another domain) crosses like any subject.
    Wildcard interest (``>``) still crosses: each message is checked by its literal subject."""
    return ("$JS.API.",) if domain is None else ("$JS.API.", f"$JS.{domain}.API.")


def stays_local(subject: str, domain: str | None) -> bool:
    """``subject`` never crosses a route (``local_prefixes``). A route keeps the prefixes and
    checks ``subject.startswith(prefixes)`` per message instead."""
    return subject.startswith(local_prefixes(domain))
