"""The routes of one server: the listener on the cluster port, one dialler per known route URL,
the registry of live routes (one per peer) and the gossip that completes the mesh.

- **One route per peer.** Two servers that dial each other at once get two routes; both keep
  the one dialled by the server with the smaller (name, id) (``mesh.keeps_new``), so they agree
  whatever order they saw the two in. A dialler that finds its peer already connected waits
  until that route ends before dialling again.
- **Gossip.** Every INFO a route sends lists the routes its sender has (``leafjet_peers``: id,
  name, advertised URL), and a new route makes every server send its routes that list again.
  A server that reads a peer it has no route to starts a dialler for its URL: a server that
  knows one member of the cluster learns all of them.
- **Reconnect forever.** A dialler never gives up: 1 s doubling up to
  ``cluster.connect_retry_max`` with jitter while it fails, at once (plus jitter) after a route
  it had ends. It logs a failure once per change of its reason, not once per attempt. A URL that
  turns out to be this server itself is dropped with one line.
- **Supervision.** Each route runs under ``_run_route``: whatever ends it (the peer, a protocol
  error, a bug) ends that route only, with one log line.
"""

from __future__ import annotations

import logging
import random
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute, TaskGroup, TaskStatus

from core.config import ClusterConfig
from core.errors import StartupError
from core.lograte import worth_logging
from core.server import tcp
from core.server.accounts import Account
from core.server.failures import describe_failure
from core.tls import client_ssl_context, server_ssl_context
from hub.routes.mesh import (
    ROUTE_PROTOCOL,
    SYSTEM_ACCOUNT,
    RouteURL,
    backoff,
    keeps_new,
    parse_route_url,
    redact,
)
from hub.routes.route import PEERS_FIELD, ROUTE_FIELD, Route, RouteClosed

if TYPE_CHECKING:
    from core.server.server import Server

log = logging.getLogger("leafjet.route")

_WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# URLs learned by gossip this server dials at most (each is a task dialling until it joins): a
# cluster has far fewer servers, and a peer's INFOs must not add dialling tasks without end.
MAX_GOSSIPED = 1024


@dataclass(slots=True)
class Dialler:
    """One URL this server dials (configured, or learned by gossip); /routez shows it."""

    url: RouteURL
    configured: bool
    attempts: int = 0
    last_error: str = ""
    peer_id: str = ""  # the server that answered there last


class Routes:
    def __init__(self, server: Server) -> None:
        self.server = server
        cfg: ClusterConfig = server.config.cluster
        self.config = cfg
        self.ssl_context: ssl.SSLContext | None = server_ssl_context(cfg.tls) if cfg.tls else None
        self.client_ssl_context: ssl.SSLContext | None = (
            client_ssl_context(cfg.tls.ca_file, cfg.tls.cert_file, cfg.tls.key_file) if cfg.tls else None
        )
        self.routes: dict[str, Route] = {}  # peer server id -> its one route
        self.diallers: dict[str, Dialler] = {}  # RouteURL.key -> its dialler
        self.gossip_refused = 0  # gossiped URLs not dialled: MAX_GOSSIPED were already
        self.port: int | None = None
        self._tg: TaskGroup | None = None
        self._pending: list[Dialler] = []  # diallers made before the task group runs
        server.shutdown_hooks.append(self.close_all)
        server.accounts.watchers.append(self._account_made)
        # The system account's traffic (the meta group's RAFT and RPCs) crosses every route, and
        # a route ignores interest for accounts this server does not have: make it before any
        # route is up, or a peer's $SYS interest sent first would be dropped for good.
        server.accounts.get(SYSTEM_ACCOUNT)
        server.routez_source = self.describe
        for url in cfg.routes:
            self._add_dialler(parse_route_url(url), configured=True)

    @staticmethod
    def configured(cfg: Any) -> bool:
        """Does ``cfg`` (a ServerConfig) ask for a cluster?"""
        return bool(cfg.cluster.enabled)

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """The listener and the diallers until cancelled; reports the bound cluster port."""
        async with anyio.create_task_group() as tg:
            self._tg = tg

            def accept(stream: Any) -> None:
                tg.start_soon(self._accepted, stream)

            assert self.config.port is not None
            try:
                listener = await tcp.listen(self.config.host, self.config.port, accept)
            except OSError as e:
                raise StartupError(
                    f"cannot listen for routes on {self.config.host}:{self.config.port}: {e.strerror or e}"
                ) from None
            self.port = listener.sockets[0].getsockname()[1]
            log.info(
                "cluster %s: listening for route connections on %s:%d",
                self.config.name,
                self.config.host,
                self.port,
            )
            if self.config.user is None and self.config.host not in ("127.0.0.1", "::1", "localhost"):
                log.warning(
                    "no cluster.authorization is configured and the route port listens on %s:%d:"
                    " any server that reaches it can join cluster %s and see every account",
                    self.config.host,
                    self.port,
                    self.config.name,
                )
            try:
                pending, self._pending = self._pending, []
                for dialler in pending:
                    tg.start_soon(self._dial_forever, dialler)
                task_status.started(self.port)
                await anyio.sleep_forever()
            finally:
                listener.close()

    def close_all(self) -> None:
        for route in list(self.routes.values()):
            route.close("server shutdown")

    # ------------------------------------------------------------------ accept side

    async def _accepted(self, stream: Any) -> None:
        route = Route(
            self,
            self.server,
            stream,
            solicited=False,
            cid=self.server.allocate_cid(),
            address=tcp.peer_address(stream),
        )
        await self._run_route(route)

    # ------------------------------------------------------------------ dial side

    def _add_dialler(self, url: RouteURL, *, configured: bool) -> None:
        if url.key in self.diallers:
            return
        dialler = self.diallers[url.key] = Dialler(url, configured)
        if self._tg is None:
            self._pending.append(dialler)
        else:
            self._tg.start_soon(self._dial_forever, dialler)

    def is_configured(self, url: RouteURL) -> bool:
        dialler = self.diallers.get(url.key)
        return dialler is not None and dialler.configured

    async def _dial_forever(self, dialler: Dialler) -> None:
        failures = 0
        while True:
            peer = self.routes.get(dialler.peer_id) if dialler.peer_id else None
            if peer is not None:  # already joined to the server there (it dialled us)
                await peer.closed.wait()
                await anyio.sleep(random.uniform(0, 0.5))
                continue
            dialler.attempts += 1
            route = await self._dial(dialler)
            if route is None:
                failures += 1
            else:
                await self._run_route(route)
                if route.peer_id:
                    dialler.peer_id = route.peer_id
                if route.is_self:
                    log.warning(
                        "route %s leads to this server itself: not dialling it again", dialler.url.key
                    )
                    return
                if route.was_connected:
                    failures = 0
                    self._note(dialler, "")
                elif route.duplicate:
                    continue  # the loop's top waits for the route that stays
                else:
                    failures += 1
                    self._note(dialler, route.close_reason or "handshake failed")
            await anyio.sleep(
                backoff(failures, self.config.connect_retry_max) if failures else random.uniform(0, 1)
            )

    async def _dial(self, dialler: Dialler) -> Route | None:
        url = dialler.url
        try:
            with anyio.fail_after(max(self.config.auth_timeout, 1.0)):
                stream = await tcp.connect(url.host, url.port)
        except TimeoutError:
            self._note(dialler, f"cannot reach {url.address}: timed out")
            return None
        except OSError as e:
            self._note(dialler, f"cannot reach {url.address}: {e.strerror or e}")
            return None
        return Route(
            self,
            self.server,
            stream,
            solicited=True,
            cid=self.server.allocate_cid(),
            address=url.address,
            url=url,
        )

    def _note(self, dialler: Dialler, error: str) -> None:
        """One log line per change of a dialler's failure reason, not one per attempt."""
        if error and error != dialler.last_error:
            log.warning("route %s: %s", redact(dialler.url.key), error)
        dialler.last_error = error

    # ------------------------------------------------------------------ registry

    async def _run_route(self, route: Route) -> None:
        """Serve one route; the supervision point for routes (see the module docstring)."""
        try:
            await route.run()
        except RouteClosed as e:
            route.close_reason = route.close_reason or str(e)
        except Exception as e:
            route.close_reason = f"internal error: {describe_failure(e)}"
            log.error("%s closed: internal error: %s", route.name, describe_failure(e))
            log.debug("%s: internal error", route.name, exc_info=e)
        finally:
            self.unregister(route)
            if route.was_connected:
                log.info("%s disconnected: %s", route.name, route.close_reason or "closed")
            elif route.close_reason and not route.duplicate and not route.is_self:
                log.info("%s handshake failed: %s", route.name, route.close_reason)

    def wants(self, route: Route) -> bool:
        """Whether ``route`` (its handshake done) should stay, given the route we may already
        have to the same peer (``mesh.keeps_new``)."""
        existing = self.routes.get(route.peer_id)
        return existing is None or existing is route or keeps_new(existing.ends, route.ends)

    def register(self, route: Route) -> None:
        """``route`` is up: it replaces the route to the same peer it won over (``wants``), and
        every other route hears the new member (gossip)."""
        existing = self.routes.get(route.peer_id)
        self.routes[route.peer_id] = route
        if existing is not None and existing is not route:
            log.info("%s replaces %s (one route per server)", route.name, existing.name)
            existing.duplicate = True
            existing.close("replaced by another route to the same server")
        if route.peer_url:
            for dialler in self.diallers.values():
                if dialler.url.key == _key(route.peer_url):
                    dialler.peer_id = route.peer_id
        # the URL this route was dialled at leads to that peer too, even when the peer advertises
        # another (behind a proxy or NAT); the meta group's founding waits on it
        dialled = self.diallers.get(route.url.key) if route.url is not None else None
        if dialled is not None:
            dialled.peer_id = route.peer_id
        for other in list(self.routes.values()):
            if other is not route:
                other.send_info(self.info(other, None))

    def unregister(self, route: Route) -> None:
        if route.peer_id and self.routes.get(route.peer_id) is route:
            del self.routes[route.peer_id]

    def learn(self, route: Route, info: dict[str, Any]) -> None:
        """A peer's INFO after the handshake: the routes it has. Dial each server we have no
        route to (gossip)."""
        peers = info.get(PEERS_FIELD)
        if not isinstance(peers, list):
            return
        gossiped = sum(1 for d in self.diallers.values() if not d.configured)  # never removed
        for peer in peers[:MAX_GOSSIPED]:
            if not isinstance(peer, dict):
                continue
            pid, url = peer.get("id"), peer.get("url")
            if not isinstance(pid, str) or not isinstance(url, str) or not url:
                continue
            if pid == self.server.server_id or pid in self.routes:
                continue
            try:
                parsed = parse_route_url(url)
            except ValueError:
                log.debug("%s: ignoring a gossiped route URL %r", route.name, url)
                continue
            if parsed.key not in self.diallers:
                if gossiped >= MAX_GOSSIPED:
                    self.gossip_refused += 1
                    if worth_logging(self.gossip_refused):
                        log.warning(
                            "%s: not dialling %s learned by gossip: %d gossiped URLs already (%d refused)",
                            route.name,
                            parsed.key,
                            MAX_GOSSIPED,
                            self.gossip_refused,
                        )
                    continue
                gossiped += 1
                log.info("%s: learned of %s at %s", route.name, peer.get("name") or pid, parsed.key)
                self._add_dialler(parsed, configured=False)
                self.diallers[parsed.key].peer_id = pid

    def _account_made(self, account: Account) -> None:
        for route in list(self.routes.values()):
            route.attach(account)

    # ------------------------------------------------------------------ handshake data

    def advertised_url(self, route: Route) -> str:
        """The URL peers should dial for this server: ``cluster.advertise``, else the cluster
        host, else (a wildcard host) the local address of this route's socket, which the peer
        reached."""
        if self.config.advertise:
            return _key(self.config.advertise)
        host = self.config.host
        if host in _WILDCARD_HOSTS:
            try:
                host = route.stream.extra(SocketAttribute.local_address)[0]
            except Exception:  # the socket may be gone already; no URL is better than a wrong one
                return ""
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"nats-route://{host}:{self.port}"

    def info(self, route: Route, nonce: str | None, *, peers: bool = True) -> dict[str, Any]:
        """The INFO a route peer gets: who we are, and (``peers``: once it has authenticated)
        the routes we have (gossip)."""
        server = self.server
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "server_name": server.name,
            "version": server.info_fields.get("version"),
            "cluster": self.config.name,
            "host": self.config.host,
            "port": self.port,
            "ip": self.advertised_url(route),
            "headers": True,
            "max_payload": server.config.max_payload,
            "auth_required": self.config.user is not None,
            "tls_required": self.ssl_context is not None,
            "jetstream": server.config.jetstream.enabled,
            ROUTE_FIELD: ROUTE_PROTOCOL,
        }
        if peers:
            info[PEERS_FIELD] = [
                {"id": r.peer_id, "name": r.peer_name, "url": r.peer_url}
                for r in self.routes.values()
                if r is not route and r.peer_url
            ]
        if nonce is not None:
            info["nonce"] = nonce
        return info

    def connect_options(self, route: Route) -> dict[str, Any]:
        """The CONNECT of a route we dialled: our identity and credentials (the URL's, else
        ``cluster.authorization``'s, as the reference does)."""
        opts: dict[str, Any] = {
            "echo": True,
            "verbose": False,
            "pedantic": False,
            "headers": True,
            "tls_required": self.ssl_context is not None,
            "server_id": self.server.server_id,
            "server_name": self.server.name,
            "name": self.server.server_id,
            "cluster": self.config.name,
            "ip": self.advertised_url(route),
            ROUTE_FIELD: ROUTE_PROTOCOL,
        }
        url = route.url
        user = url.user if url is not None and url.user is not None else self.config.user
        password = url.password if url is not None and url.user is not None else self.config.password
        if user is not None:
            opts["user"] = user
            opts["pass"] = password or ""
        return opts

    # ------------------------------------------------------------------ monitoring

    def describe(self) -> dict[str, Any]:
        """/routez: each live route, and each dialler's state."""
        return {
            "cluster": self.config.name,
            "num_routes": len(self.routes),
            "routes": [r.describe() for r in self.routes.values()],
            "diallers": [
                {
                    "url": d.url.key,
                    "configured": d.configured,
                    "attempts": d.attempts,
                    "last_error": d.last_error,
                }
                for d in self.diallers.values()
            ],
        }


def _key(url: str) -> str:
    try:
        return parse_route_url(url).key
    except ValueError:
        return url
