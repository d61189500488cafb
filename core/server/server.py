"""The server runtime: listener, connections, accounts; one ordered shutdown.

``Server.run`` is started with ``task_group.start`` and reports readiness with the bound
port. Shutdown goes in one order: stop accepting, ask every client to close (their final
bytes are flushed within ``write_deadline``), wait for them with ``shutdown_timeout``, then
cancel what is left.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import platform
import secrets
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import SocketAttribute, TaskStatus

from core.config import GLOBAL_ACCOUNT, ServerConfig
from core.errors import StartupError
from core.protocol import encoder
from core.server import tcp
from core.server.accounts import AccountRegistry
from core.server.auth import Authenticator, PermissionChecker, Permissions
from core.server.connection import ClientConnection, State
from core.server.mailbox import Drains
from core.server.tcp import TcpStream
from core.store.crypto import CipherSpec
from core.tls import server_ssl_context

log = logging.getLogger("leafjet.server")

VERSION = "2.15.1"  # the reference protocol level we follow; see also LEAFJET_VERSION
LEAFJET_VERSION = "0.1.0"


@dataclass(slots=True)
class ServerStats:
    connections_total: int = 0
    slow_consumers: int = 0


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

    def request_shutdown(self) -> None:
        self._stop.set()

    async def _drain_clients(self) -> None:
        for client in list(self.clients.values()):
            client.close("server shutdown")
        with anyio.move_on_after(self.config.shutdown_timeout):
            while self.clients:
                await anyio.sleep(0.01)

    async def _handle_client(self, stream: TcpStream) -> None:
        self._next_cid += 1
        cid = self._next_cid
        try:
            ip = stream.extra(SocketAttribute.remote_address)[0]
        except Exception:
            ip = "?"
        if len(self.clients) >= self.config.max_connections:
            with anyio.move_on_after(1):
                await stream.send(encoder.encode_err("maximum connections exceeded"))
            await stream.aclose()
            return
        sock = stream.extra(SocketAttribute.raw_socket)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = ClientConnection(self, stream, cid, str(ip))
        self.clients[cid] = client
        self.stats.connections_total += 1
        try:
            await client.run()
        finally:
            self.clients.pop(cid, None)
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


def _cipher_spec(config: ServerConfig) -> CipherSpec | None:
    js = config.jetstream
    if js.key is None:
        return None
    return CipherSpec(secret=js.key, algorithm="aes-256-gcm" if js.cipher == "aes" else "chacha20-poly1305")
