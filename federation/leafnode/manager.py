"""The leaf-node subsystem of one server: the accept side (a listener on the leaf port), the
solicit side (one dialler per ``leafnodes.remotes`` entry) and the registry of live links.

Supervision: each link runs under ``_run_link``, which contains whatever ends it -- the peer, a
protocol error, a bug -- to that link, with one log line. A dialler never gives up and never
storms: it goes through the remote's URLs in turn, waits ``reconnect`` plus up to as much again
of random jitter between attempts (30 s after the hub reported a loop), and logs a failure once
per change of its reason, not once per attempt.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from core.config import RemoteLeafConfig
from core.errors import StartupError
from core.server import tcp
from core.server.accounts import Account
from core.server.auth import Authenticator
from core.server.failures import describe_failure
from core.server.interest import LinkKind
from core.tls import server_ssl_context
from federation.leafnode.credentials import host_port, redact_url
from federation.leafnode.link import LEAFJET_COMPRESSION, LeafLink, LinkClosed

if TYPE_CHECKING:
    from core.server.server import Server

log = logging.getLogger("leafjet.leafnode")

LEAF_VERSION = "2.12.0"  # the nats-server version a leafjet leaf reports (hubs may set min_version)


@dataclass(slots=True)
class RemoteState:
    """What /leafz shows of one configured remote."""

    index: int
    urls: tuple[str, ...]  # redacted
    account: str
    connected: bool = False
    url: str = ""
    attempts: int = 0
    connects: int = 0
    last_error: str = ""
    last_error_at: float = 0.0
    link: LeafLink | None = field(default=None, repr=False)

    def describe(self) -> dict[str, Any]:
        return {
            "urls": list(self.urls),
            "account": self.account,
            "connected": self.connected,
            "url": self.url,
            "connect_attempts": self.attempts,
            "reconnects": max(0, self.connects - 1),
            "last_error": self.last_error,
        }


class LeafNodes:
    def __init__(self, server: Server) -> None:
        self.server = server
        cfg = server.config.leafnodes
        self.config = cfg
        self.version = LEAF_VERSION
        # ``leafnodes.authorization`` without users (only a timeout) leaves leafs to the server's
        # own users, as the reference: never "anyone may connect".
        auth = cfg.auth
        self.authenticator = Authenticator(auth) if auth is not None and auth.users else server.authenticator
        self.auth_timeout = auth.auth_timeout if auth is not None else self.authenticator.config.auth_timeout
        self.ssl_context: ssl.SSLContext | None = server_ssl_context(cfg.tls) if cfg.tls else None
        self.links: dict[int, LeafLink] = {}
        self.remotes = [
            RemoteState(i, tuple(redact_url(u) for u in r.urls), r.account) for i, r in enumerate(cfg.remotes)
        ]
        self.port: int | None = None
        self._info_base: dict[str, Any] = {}
        server.leafz_source = self.describe
        server.shutdown_hooks.append(self.close_all)
        for name in {r.account for r in cfg.remotes} | {
            u.account for u in (cfg.auth.users if cfg.auth else ())
        }:
            server.accounts.get(name)

    @staticmethod
    def configured(cfg: Any) -> bool:
        """Does ``cfg`` (a ServerConfig) ask for a leaf listener or any remote?"""
        return cfg.leafnodes.port is not None or bool(cfg.leafnodes.remotes)

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: TaskStatus[int | None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The listener (when a leaf port is configured) and one dialler per remote, until
        cancelled. Reports the bound leaf port (None without a listener)."""
        async with anyio.create_task_group() as tg:
            listener = None
            if self.config.port is not None:

                def accept(stream: Any) -> None:
                    tg.start_soon(self._accepted, stream)

                try:
                    listener = await tcp.listen(self.config.host, self.config.port, accept)
                except OSError as e:
                    raise StartupError(
                        f"cannot listen for leaf nodes on {self.config.host}:{self.config.port}:"
                        f" {e.strerror or e}"
                    ) from None
                self.port = listener.sockets[0].getsockname()[1]
                log.info("listening for leafnode connections on %s:%d", self.config.host, self.port)
                if not self.authenticator.required and self.config.host not in (
                    "127.0.0.1",
                    "::1",
                    "localhost",
                ):
                    log.warning(
                        "no authentication is configured for leaf nodes and the leaf port listens"
                        " on %s:%d: any server that reaches it can join the global account; add"
                        " leafnodes.authorization users (see deploy/hub.example.toml) or set"
                        " leafnodes.host",
                        self.config.host,
                        self.port,
                    )
            try:
                for state, remote in zip(self.remotes, self.config.remotes, strict=True):
                    tg.start_soon(self._solicit, remote, state)
                task_status.started(self.port)
                await anyio.sleep_forever()
            finally:
                if listener is not None:
                    listener.close()

    def close_all(self) -> None:
        for link in list(self.links.values()):
            link.close("server shutdown")

    # ------------------------------------------------------------------ accept side

    async def _accepted(self, stream: Any) -> None:
        cid = self.server.allocate_cid()
        address = tcp.peer_address(stream)
        link = LeafLink(
            self, self.server, stream, LinkKind.LEAF_ACCEPTED, cid, address, authenticator=self.authenticator
        )
        await self._run_link(link)

    def info(self, cid: int, nonce: str | None) -> dict[str, Any]:
        """The INFO a leaf gets on our leaf port (and, with connect_info, after its CONNECT)."""
        server = self.server
        js = server.config.jetstream
        advertise = self.config.advertise or f"{_advertised_host(self.config.host)}:{self.port}"
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "server_name": server.name,
            "version": server.info_fields.get("version"),
            "proto": 1,
            "go": server.info_fields.get("go"),
            "host": self.config.host,
            "port": self.port,
            "headers": True,
            "auth_required": True,
            "max_payload": server.config.max_payload,
            "jetstream": js.enabled,
            "client_id": cid,
            "leafnode_urls": [advertise],
            "info_on_connect": True,
            # No S2 here: a nats-server leaf reads "off" and sends plain bytes. A leafjet leaf
            # may take zstd instead (our own field, ignored by nats-server).
            "compression": "off",
        }
        if js.enabled and js.domain:
            info["domain"] = js.domain
        if self.ssl_context is not None:
            info["tls_required"] = True
            if self.config.tls is not None and self.config.tls.verify:
                info["tls_verify"] = True
        if self.config.compression == "zstd":
            info[LEAFJET_COMPRESSION] = ["zstd"]
        if nonce is not None:
            info["nonce"] = nonce
        return info

    def replace_duplicate(self, link: LeafLink, account: Account) -> None:
        """A leaf that connects again while its old link still looks alive replaces it (the
        reference's "Duplicate Remote LeafNode Connection": the old one is told and closed)."""
        for other in list(self.links.values()):
            if (
                other is not link
                and other.kind is LinkKind.LEAF_ACCEPTED
                and other.account is account
                and other.peer_name == link.peer_name
                and other.remote_account == link.remote_account
            ):
                log.warning("%s: replacing the connection from the same server (%s)", link.name, other.name)
                other.close(
                    "replaced by a new connection from the same server",
                    "Duplicate Remote LeafNode Connection",
                )

    # ------------------------------------------------------------------ solicit side

    async def _solicit(self, remote: RemoteLeafConfig, state: RemoteState) -> None:
        """Dial ``remote`` for ever: each URL in turn, a jittered pause between attempts."""
        turn = 0
        while True:
            raw_url = remote.urls[turn % len(remote.urls)]
            turn += 1
            state.attempts += 1
            link = await self._dial(remote, state, raw_url)
            delay = remote.reconnect
            if link is not None:
                await self._run_link(link)
                state.connected = False
                state.link = None
                if link.reconnect_delay is not None:
                    delay = link.reconnect_delay
                if link.close_reason:
                    self._remote_error(state, link.close_reason)
            await anyio.sleep(delay + random.uniform(0, remote.reconnect))

    async def _dial(self, remote: RemoteLeafConfig, state: RemoteState, raw_url: str) -> LeafLink | None:
        host, port = host_port(raw_url)
        try:
            with anyio.fail_after(remote.dial_timeout):
                # the server's own stream, as an accepted link's and a route's: its send writes
                # at once, where anyio's yields to the loop first (a turn of a busy loop per frame)
                stream = await tcp.connect(host, port)
        except TimeoutError:
            self._remote_error(
                state, f"cannot reach {redact_url(raw_url)}: timed out after {remote.dial_timeout:g}s"
            )
            return None
        except OSError as e:
            self._remote_error(state, f"cannot reach {redact_url(raw_url)}: {e.strerror or e}")
            return None
        cid = self.server.allocate_cid()
        address = f"{host}:{port}"
        link = LeafLink(
            self, self.server, stream, LinkKind.LEAF_SOLICITED, cid, address, remote=remote, url=raw_url
        )
        state.link = link
        state.url = link.url
        return link

    def _remote_error(self, state: RemoteState, error: str) -> None:
        if error != state.last_error:
            log.warning("leafnode remote %d (%s): %s", state.index, ", ".join(state.urls), error)
        else:
            log.debug("leafnode remote %d: %s", state.index, error)
        state.last_error = error
        state.last_error_at = time.time()

    # ------------------------------------------------------------------ registry

    async def _run_link(self, link: LeafLink) -> None:
        """Serve one link; the supervision point for links (see the module docstring)."""
        try:
            await link.run()
        except LinkClosed as e:
            link.close_reason = link.close_reason or str(e)
        except Exception as e:
            link.close_reason = f"internal error: {describe_failure(e)}"
            log.error("%s closed: internal error: %s", link.name, describe_failure(e))
            log.debug("%s: internal error", link.name, exc_info=e)
        finally:
            self.links.pop(link.cid, None)
            if link.was_connected:
                log.info("%s disconnected: %s", link.name, link.close_reason or "closed")
            elif link.close_reason:
                log.info("%s handshake failed: %s", link.name, link.close_reason)

    def connected(self, link: LeafLink) -> None:
        self.links[link.cid] = link
        link.was_connected = True
        role = "to hub" if link.kind is LinkKind.LEAF_SOLICITED else "from leaf"
        log.info(
            "leafnode connection %s %s created for account %s (remote account %s, domain %s, compression %s)",
            role,
            link.name,
            link.account.name if link.account else "?",
            link.remote_account or "?",
            link.peer_domain or "none",
            link.compression,
        )
        if link.kind is LinkKind.LEAF_SOLICITED and link.remote is not None:
            for state in self.remotes:
                if state.link is link:
                    state.connected = True
                    state.connects += 1
                    state.last_error = ""

    def disconnected(self, link: LeafLink) -> None:
        self.links.pop(link.cid, None)

    def describe(self, subs: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """/leafz: each live link (with its peer's interest when ``subs``), each remote's state."""
        return [link.describe(subs) for link in self.links.values()], [s.describe() for s in self.remotes]


def _advertised_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
