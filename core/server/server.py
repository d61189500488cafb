"""The server runtime: listener, connections, accounts; one ordered shutdown.

``Server.run`` is started with ``task_group.start`` and reports readiness with the bound
port. Shutdown goes in one order: stop accepting, ask every client to close (their final
bytes are flushed within ``write_deadline``), wait for them with ``shutdown_timeout``, then
cancel what is left.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import logging
import platform
import secrets
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute, TaskStatus

from core.config import GLOBAL_ACCOUNT, ServerConfig
from core.errors import AuthError, StartupError
from core.protocol import encoder
from core.server import tcp
from core.server.accounts import AccountRegistry
from core.server.auth import AuthConfig, Authenticator, PermissionChecker, Permissions
from core.server.connection import AuthWorkers, ClientConnection, State, aclose_quietly
from core.server.failures import describe_failure
from core.server.mailbox import Drains
from core.server.reload import ReloadPlan, plan_reload
from core.server.tcp import TcpStream
from core.store.crypto import CipherSpec
from core.tls import server_ssl_context

if TYPE_CHECKING:
    from core.jetstream.monitoring import JetStreamMonitor
    from core.server.monitor import Monitor

log = logging.getLogger("leafjet.server")

VERSION = "2.15.1"  # the reference protocol level we follow; see also LEAFJET_VERSION
LEAFJET_VERSION = "0.1.0"


@dataclass(slots=True)
class ServerStats:
    connections_total: int = 0
    slow_consumers: int = 0
    stale_connections: int = 0
    # the counters of connections that have closed; a live one's are read from it (monitor.py)
    closed_in_msgs: int = 0
    closed_in_bytes: int = 0
    closed_out_msgs: int = 0
    closed_out_bytes: int = 0

    def fold(self, client: ClientConnection) -> None:
        self.closed_in_msgs += client.in_msgs
        self.closed_in_bytes += client.in_bytes
        self.closed_out_msgs += client.out_msgs
        self.closed_out_bytes += client.out_bytes


def _server_id() -> str:
    # The reference's ids are 56 base32 characters starting with N (a server nkey); ours look alike.
    return "N" + base64.b32encode(secrets.token_bytes(35)).decode().rstrip("=")[:55]


class Server:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.server_id = _server_id()
        self.name = config.server_name or self.server_id
        self.accounts = AccountRegistry((GLOBAL_ACCOUNT, *config.auth.accounts))
        self.default_account = GLOBAL_ACCOUNT
        self.authenticator = Authenticator(config.auth)
        self.auth_workers = AuthWorkers()  # password checks off the loop, bounded
        self.ssl_context: ssl.SSLContext | None = server_ssl_context(config.tls) if config.tls else None
        self.clients: dict[int, ClientConnection] = {}
        self.stats = ServerStats()
        self.stalled: set[Drains] = set()  # receivers past their high-water mark (back-pressure)
        self.port = config.port
        self._next_cid = 0
        self._checkers: dict[Permissions, PermissionChecker] = {}
        self._stop = anyio.Event()
        self._info_base: dict[str, Any] = {}
        self.extra_info: dict[str, Any] = {}  # fields other subsystems add to INFO (jetstream, domain)
        # Called once a shutdown begins, before the clients are drained: what a subsystem must
        # still tell its clients (JetStream: "409 Server Shutdown" to waiting pull requests).
        self.shutdown_hooks: list[Callable[[], None]] = []
        self.store_cipher = _cipher_spec(config)
        self.jetstream_monitor: JetStreamMonitor | None = None  # set by JetStream, read by /jsz
        self.monitor: Monitor | None = None  # the monitoring HTTP server, when http_port is set
        # /leafz's rows: (live links, configured remotes' states); set by the leaf-node subsystem
        self.leafz_source: Callable[[bool], tuple[list[dict[str, Any]], list[dict[str, Any]]]] | None = None
        # /routez's body (num_routes, routes, ...); set by the routes subsystem (hub/routes/)
        self.routez_source: Callable[[], dict[str, Any]] | None = None
        # /raftz's body (the RAFT groups: leader, term, peers); set by the meta group (hub/meta/)
        self.raftz_source: Callable[[], dict[str, Any]] | None = None
        # a hub's meta group: why this server's JetStream is not healthy in the cluster (no
        # leader known, behind it...), or None (/healthz; core/server/health.py)
        self.meta_health: Callable[[], str | None] | None = None

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as clients_tg:

            def accept(stream: TcpStream) -> None:
                # Called by the listener on the loop; the client's task belongs to clients_tg.
                clients_tg.start_soon(self._handle_client, stream)

            try:
                listener = await tcp.listen(self.config.host, self.config.port, accept)
            except OSError as e:
                raise StartupError(
                    f"cannot listen on {self.config.host}:{self.config.port}: {e.strerror or e}"
                ) from None
            try:
                self.port = listener.sockets[0].getsockname()[1]
                self._info_base = self._build_info()
                log.info("listening for client connections on %s:%d", self.config.host, self.port)
                if not self.authenticator.required and not _is_loopback(self.config.host):
                    log.warning(
                        "no authentication is configured and clients can connect from other hosts"
                        " (%s:%d): anyone who reaches this port can publish, subscribe and manage"
                        " JetStream; configure users (see deploy/agent.example.toml) or listen on"
                        " 127.0.0.1",
                        self.config.host,
                        self.port,
                    )
                if self.config.http_port is not None and self.monitor is None:
                    await clients_tg.start(self.run_monitor)
                task_status.started(self.port)
                await self._stop.wait()
            finally:
                listener.close()
            for hook in self.shutdown_hooks:
                try:
                    hook()
                except Exception:
                    log.exception("shutdown hook %r failed", hook)
            await self._drain_clients()
            clients_tg.cancel_scope.cancel()

    async def run_monitor(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """The monitoring HTTP server (core/server/monitor.py) until cancelled; reports its port."""
        from core.server.http import HttpServer
        from core.server.monitor import Monitor

        monitor = self.monitor = Monitor(self)
        host = self.config.http_host or self.config.host
        port = self.config.http_port or 0
        http = monitor.http = HttpServer(host, port, monitor.handle)
        try:
            bound = await http.serve_until_ready()
        except OSError as e:
            raise StartupError(f"cannot listen for monitoring on {host}:{port}: {e.strerror or e}") from None
        log.info("listening for monitoring clients on http://%s:%d", host, bound)
        task_status.started(bound)
        await http.serve_forever()

    @property
    def info_fields(self) -> dict[str, Any]:
        """The INFO fields every client gets (read-only, for /varz)."""
        return self._info_base or self._build_info()

    def request_shutdown(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ reload

    async def reload(self, new: ServerConfig) -> ReloadPlan:
        """Apply a reloaded config, or refuse it whole (``ConfigError``; the old one stays).

        Everything that can fail is built first: the new users' authenticator (its construction
        hashes secrets: off the loop) and the TLS context (the certificate files are read again,
        so renewed certificates take effect). Then the config is swapped in one step on the loop,
        live connections get the new limits, and, when the users changed, each client is checked
        again with the credentials it connected with (the reference's ``reloadAuthorization``):
        closed if they no longer pass, else given its new permissions, losing the subscriptions
        they no longer allow. A connection is never closed for a change that does not concern it.
        """
        plan = plan_reload(self.config, new)
        old = self.config
        auth = self.authenticator
        if plan.auth_changed:
            auth = await anyio.to_thread.run_sync(Authenticator, new.auth)
        ssl_context = self.ssl_context
        if "tls" in plan.changed:
            ssl_context = server_ssl_context(new.tls) if new.tls is not None else None
        self.config = new
        self.authenticator = auth
        self.ssl_context = ssl_context
        for name in new.auth.accounts:
            self.accounts.get(name)
        self._checkers.clear()  # permission sets are compared by value: old ones may be gone
        self._info_base = self._build_info()
        clients = list(self.clients.values())
        for client in clients:
            client.apply_limits(new)
        if plan.auth_changed:
            await self._reauthorize(clients, old.auth, auth)
        return plan

    async def _reauthorize(
        self, clients: list[ClientConnection], old: AuthConfig, auth: Authenticator
    ) -> None:
        for client in clients:
            verification = client.reauthorize(old, auth)
            if verification is None:
                continue
            # A changed password: one scrypt, on the auth workers' threads (one at a time: a
            # reload is rare and must not crowd out the CONNECTs being verified meanwhile).
            try:
                principal = await anyio.to_thread.run_sync(
                    verification.run, limiter=self.auth_workers.limiter
                )
            except AuthError as e:
                client.reauthorized(e)
            else:
                client.reauthorized(principal)

    async def _drain_clients(self) -> None:
        for client in list(self.clients.values()):
            client.close("server shutdown")
        with anyio.move_on_after(self.config.shutdown_timeout):
            while self.clients:
                await anyio.sleep(0.01)

    def allocate_cid(self) -> int:
        """A connection id, unique across clients and links (INFO's ``client_id``)."""
        self._next_cid += 1
        return self._next_cid

    async def _handle_client(self, stream: TcpStream) -> None:
        """Serve one client. The supervision point for connections: whatever ends the client --
        the peer, a protocol error, or a bug in handling what it sent -- ends it alone, closed and
        logged once; nothing propagates into the listener's task group (see DESIGN.md)."""
        cid = self.allocate_cid()
        ip = _peer_ip(stream)
        if len(self.clients) >= self.config.max_connections:
            with anyio.move_on_after(1), contextlib.suppress(Exception):
                await stream.send(encoder.encode_err("maximum connections exceeded"))
            await aclose_quietly(stream)
            return
        _set_nodelay(stream)
        client = ClientConnection(self, stream, cid, ip)
        log.debug("client %d %s connected", cid, ip)
        self.clients[cid] = client
        self.stats.connections_total += 1
        try:
            await client.run()
        except Exception as e:
            # A failure the connection did not expect is a bug, but a bug of this client's
            # handling: it must not take the server down. One line, with where it happened.
            log.error("client %d %s closed: internal error: %s", cid, ip, describe_failure(e))
            log.debug("client %d: internal error", cid, exc_info=e)
        finally:
            if self.clients.pop(cid, None) is not None:
                self.stats.fold(client)
            client.state = State.CLOSED

    # ------------------------------------------------------------------ helpers

    def permission_checker(self, perms: Permissions) -> PermissionChecker:
        """One checker (and so one decision cache) per distinct permission set."""
        checker = self._checkers.get(perms)
        if checker is None:
            checker = self._checkers[perms] = PermissionChecker(perms)
        return checker

    def _build_info(self) -> dict[str, Any]:
        cfg = self.config
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.name,
            "version": VERSION,
            "proto": 1,
            "go": f"python{platform.python_version()} leafjet/{LEAFJET_VERSION}",
            "host": cfg.host,
            "port": self.port,
            "headers": True,
            "max_payload": cfg.max_payload,
        }
        if self.authenticator.required:
            info["auth_required"] = True
        if cfg.tls is not None:
            info["tls_required"] = True
            if cfg.tls.verify:
                info["tls_verify"] = True
        info.update(self.extra_info)
        return info

    def info_for(self, client: ClientConnection) -> bytes:
        info = dict(self._info_base)
        info["client_id"] = client.cid
        info["client_ip"] = client.client_ip
        if client.nonce is not None:
            info["nonce"] = client.nonce
        return encoder.encode_info(info)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"  # a name: only this one is known to stay on the machine


def _peer_ip(stream: TcpStream) -> str:
    try:
        return str(stream.extra(SocketAttribute.remote_address)[0])
    except Exception:  # the peer may already be gone (no address, no socket)
        return "?"


def _set_nodelay(stream: TcpStream) -> None:
    try:
        sock = stream.extra(SocketAttribute.raw_socket)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except Exception:  # a socket closed before we got to it: the connection ends on its first read
        pass


def _cipher_spec(config: ServerConfig) -> CipherSpec | None:
    js = config.jetstream
    if js.key is None:
        return None
    return CipherSpec(secret=js.key, algorithm="aes-256-gcm" if js.cipher == "aes" else "chacha20-poly1305")
