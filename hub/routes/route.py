"""One route: the IO shell around the sans-IO route protocol (core/protocol/route.py).

A route joins this server to one other server of its cluster and carries every account. Each
account sees it as one link (``AccountLink``, ``LinkKind.ROUTE``) in its interest graph, so
local interest goes out as ``RS+``/``RS-`` and messages as ``RMSG``/``HMSG`` through the same
ledger and routing rules as a leaf link (core/server/interest.py, federation/DESIGN.md).

Handshake (our own, modelled on nats-server's): TLS first when ``cluster.tls`` is set (both sides
of a cluster share that setting); the accepting side sends its INFO (who it is, no peers); the
dialling side checks it (same cluster, not itself, not a route it already has) and answers
CONNECT (its name, id, cluster, credentials); the accepting side checks the CONNECT the same way,
credentials first. Each side then registers the route with ``Routes`` (which resolves two routes
to one peer), sends an INFO listing the routes it has (gossip), and only then attaches the route
to the accounts: its ``RS+`` burst follows on the wire.

Like a client connection, a route owns its tasks (reader, writer, pinger) in one task group;
whatever ends it ends it alone (the supervisor is ``Routes._run_route``).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from core.errors import ProtocolError
from core.lograte import worth_logging
from core.protocol import encoder
from core.protocol.encoder import encode_run
from core.protocol.events import Connect, Err, Info, Ping, Pong, payload_bytes
from core.protocol.route import (
    RouteMsg,
    RouteMsgRun,
    RouteParser,
    RouteSub,
    RouteUnsub,
    encode_rmsg,
    encode_rs_minus,
    encode_rs_plus,
    rmsg_head,
)
from core.server.accounts import Account
from core.server.connection import aclose_quietly
from core.server.interest import LinkDelivery, LinkKind, split_ack_subject
from core.server.output import BufferedOutput
from core.server.peer import PeerPinger, read_first_info
from core.server.tcp import READ_SIZE
from hub.routes.mesh import ROUTE_PROTOCOL, RouteEnds, RouteURL, local_prefixes

if TYPE_CHECKING:
    from core.server.interest import LeafInterestFrame
    from core.server.server import Server
    from hub.routes.manager import Routes

log = logging.getLogger("leafjet.route")

_HEADS_MAX = 4096  # encoded RMSG heads kept per route and account
ROUTE_FIELD = "leafjet_route"  # INFO/CONNECT: the route protocol version (a leafjet peer)
PEERS_FIELD = "leafjet_peers"  # INFO: the routes the sender has, for gossip
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_$-]+")


class RouteState(Enum):
    """A route's life: transitions only ever move down this list."""

    HANDSHAKE = "handshake"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"


class RouteClosed(Exception):
    """The route ended for a reason worth a log line (its text)."""


class AccountLink(LinkDelivery):
    """A route as one account's link: what the account announces and forwards goes out on the
    route with the account's name in the frame."""

    __slots__ = ("_heads", "account", "route")

    kind = LinkKind.ROUTE
    echo = True

    def __init__(self, route: Route, account: Account) -> None:
        self.route = route
        self.account = account
        # subject -> b"RMSG <account> <subject> ": the part of a plain RMSG that does not change
        # from one message to the next on a subject, encoded once (bounded: cleared when full)
        self._heads: dict[str, bytes] = {}

    @property
    def name(self) -> str:
        return f"{self.route.name} account {self.account.name}"

    def announce(self, frame: LeafInterestFrame) -> None:
        self.route.announce(self.account.name, frame)

    def forward(
        self,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        queues: tuple[str, ...] = (),
    ) -> None:
        if reply is None and headers is None and not queues:  # the hot path: a plain message
            head = self._heads.get(subject)
            if head is None:
                if len(self._heads) >= _HEADS_MAX:
                    self._heads.clear()
                head = self._heads[subject] = rmsg_head(self.account.name, subject)
            self.route.forward_frame(subject, b"%b%d\r\n%b\r\n" % (head, len(payload), payload), len(payload))
        else:
            self.route.forward(self.account.name, subject, reply, headers, payload, queues)

    def forward_run(self, subject: str, payloads: Sequence[bytes]) -> None:
        """``forward(subject, None, None, p)`` for each of ``payloads``: one buffer entry."""
        head = self._heads.get(subject)
        if head is None:
            if len(self._heads) >= _HEADS_MAX:
                self._heads.clear()
            head = self._heads[subject] = rmsg_head(self.account.name, subject)
        self.route.forward_run_frame(subject, encode_run(head, payloads), payloads)


class Route(PeerPinger, BufferedOutput):
    """One route of either side; see the module docstring."""

    def __init__(
        self,
        manager: Routes,
        server: Server,
        stream: ByteStream,
        *,
        solicited: bool,
        cid: int,
        address: str,
        url: RouteURL | None = None,
    ) -> None:
        self.manager = manager
        self.server = server
        self.cfg = server.config
        self.cluster = server.config.cluster
        self.stream = stream
        self.solicited = solicited
        self.cid = cid
        self.address = address
        self.url = url  # what we dialled (solicited)
        self.state = RouteState.HANDSHAKE
        self.parser = RouteParser(
            max_control_line=self.cfg.max_control_line * 16, max_payload=self.cfg.max_payload
        )
        self.parser.runs = True  # a run of RMSGs of one subject is routed in one go
        self.peer_id = ""
        self.peer_name = ""
        self.peer_url = ""  # the route URL the peer advertises (gossip)
        self.peer_info: dict[str, Any] = {}
        self.links: dict[str, AccountLink] = {}  # account name -> its link
        self.close_reason = ""
        self.was_connected = False
        self.duplicate = False  # refused or replaced: another route to the same peer stays
        self.is_self = False  # the URL dialled reaches this very server
        self.closed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._connected = anyio.Event()
        self._init_pings()
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self.unknown_account_interest = 0  # RS+ for accounts this server does not have (ignored)
        self.start_ns = time.time_ns()
        js = server.config.jetstream
        self._local = local_prefixes(js.domain if js.enabled else None)  # mesh.local_prefixes
        self._init_output()

    @property
    def name(self) -> str:
        return f"route {self.cid} {self.peer_name or '?'} ({self.address})"

    @property
    def ends(self) -> RouteEnds:
        """The soliciting server of this route (``mesh.keeps_new``)."""
        if self.solicited:
            return RouteEnds(self.server.name, self.server.server_id)
        return RouteEnds(self.peer_name, self.peer_id)

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        """Serve the route until either side ends it; the supervisor logs the reason."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.manager.ssl_context is not None:
                    await self._start_tls()
                if self.solicited:
                    await self._serve_solicited()
                else:
                    await self._serve_accepted()
        finally:
            self._detach()
            self.state = RouteState.CLOSED
            self.closed.set()
            with anyio.CancelScope(shield=True):
                await aclose_quietly(self.stream)

    async def _serve_accepted(self) -> None:
        try:
            hello = self.manager.info(self, secrets.token_urlsafe(11), peers=False)
            await self.stream.send(encoder.encode_info(hello))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self.close_reason = "closed by the peer before INFO"
            return
        await self._run_io(self._reader, self._pinger, self._handshake_timer)

    async def _serve_solicited(self) -> None:
        info = await read_first_info(
            self.stream, self.parser, self.cluster.auth_timeout, RouteClosed, peer="peer", port="route"
        )
        try:
            self._check_peer(info, info.get("server_id"), info.get("server_name"))
        except RouteClosed:
            await self._flush_refusal()
            raise
        self.peer_info = info
        self.peer_url = _text_field(info, "ip")
        if not self.manager.wants(self):
            self.duplicate = True
            raise RouteClosed(f"already connected to {self.peer_name}")
        self._send(encoder.encode_connect(self.manager.connect_options(self)))
        self._establish()
        await self._run_io(self._reader, self._pinger)

    async def _start_tls(self) -> None:
        ctx = self.manager.client_ssl_context if self.solicited else self.manager.ssl_context
        assert ctx is not None
        tls = self.cluster.tls
        timeout = tls.timeout if tls is not None else 2.0
        host = self.url.host if self.url is not None else None
        try:
            with anyio.fail_after(timeout):
                self.stream = await TLSStream.wrap(
                    self.stream,
                    server_side=not self.solicited,
                    hostname=host,
                    ssl_context=ctx,
                    standard_compatible=False,
                )
        except Exception as e:  # any failure of the peer's handshake ends this route only
            raise RouteClosed(f"TLS handshake failed: {e.__class__.__name__}: {e}") from None

    def _check_peer(self, opts: dict[str, Any], server_id: Any, server_name: Any) -> None:
        """What both sides check of the other's INFO (dialling) or CONNECT (accepting): a
        leafjet route of our cluster, and not ourselves."""
        if opts.get(ROUTE_FIELD) != ROUTE_PROTOCOL:
            if "lang" in opts:
                raise self._refuse(
                    "attempted to connect to route port", "a client connected to the route port"
                )
            raise self._refuse(
                "route protocol not supported: not a leafjet route",
                "the peer does not speak leafjet's route protocol",
            )
        if not isinstance(server_id, str) or not server_id:
            raise self._refuse("route without a server id", "the peer gave no server id")
        cluster = opts.get("cluster")
        if cluster != self.cluster.name:
            raise self._refuse(
                f'Rejecting connection, cluster name "{cluster}" does not match "{self.cluster.name}"',
                f"the peer is in cluster {cluster!r}, not {self.cluster.name!r}",
            )
        self.peer_id = server_id
        self.peer_name = server_name if isinstance(server_name, str) and server_name else server_id
        if server_id == self.server.server_id:
            self.is_self = True
            raise RouteClosed("route to self")

    async def _flush_refusal(self) -> None:
        """Before the route's tasks run (the dialling side's checks): send the -ERR queued by
        ``_refuse`` ourselves, so the peer logs why too."""
        if not self._out:
            return
        data, self._out = b"".join(self._out), []
        with anyio.move_on_after(self.cfg.write_deadline):
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self.stream.send(data)

    def _refuse(self, err: str, reason: str) -> RouteClosed:
        """Tell the peer ``err`` (a last -ERR) and end the route for ``reason``."""
        log.error("%s: %s", self.name, reason)
        self.close(reason, err)
        return RouteClosed(reason)

    def _on_connect(self, opts: dict[str, Any]) -> None:
        if self.state is not RouteState.HANDSHAKE:
            return  # a second CONNECT changes nothing
        # Credentials first: who does not know them learns nothing else about this cluster.
        if self.cluster.user is not None:
            user, password = opts.get("user"), opts.get("pass")
            if not (
                isinstance(user, str)
                and isinstance(password, str)
                and hmac.compare_digest(user.encode(), self.cluster.user.encode())
                and hmac.compare_digest(password.encode(), (self.cluster.password or "").encode())
            ):
                raise self._refuse("Authorization Violation", f"bad route credentials (user {user!r})")
        self._check_peer(opts, opts.get("server_id"), opts.get("server_name"))
        self.peer_url = _text_field(opts, "ip")
        if not self.manager.wants(self):
            self.duplicate = True
            self.close(f"already connected to {self.peer_name}")
            return
        self._establish()

    def _establish(self) -> None:
        """The handshake is done: register with the manager, tell the peer the routes we have
        (gossip: only now, never in the INFO a stranger gets before it has authenticated), then
        join every account."""
        self.manager.register(self)
        self.state = RouteState.CONNECTED
        self._send(encoder.encode_info(self.manager.info(self, None)))
        self.was_connected = True
        self._connected.set()
        for account in list(self.server.accounts):
            self.attach(account)
        log.info(
            "route connection %s %s created (%s)",
            "to" if self.solicited else "from",
            self.name,
            self.peer_url or "no advertised URL",
        )

    # ------------------------------------------------------------------ accounts

    def attach(self, account: Account) -> None:
        """Join ``account``'s interest graph (at the handshake's end, or when the account is made
        later): the account sends this route its whole interest at once."""
        if self.state is not RouteState.CONNECTED or account.name in self.links:
            return
        link = AccountLink(self, account)
        self.links[account.name] = link
        account.attach_link(link)

    def _detach(self) -> None:
        links, self.links = self.links, {}
        for link in links.values():
            link.account.detach_link(link)
        self.manager.unregister(self)

    # ------------------------------------------------------------------ close

    def close(self, reason: str, err: str | None = None) -> None:
        """Close from anywhere (shutdown, a duplicate replacing this route, slow consumer)."""
        if self.state in (RouteState.CLOSING, RouteState.CLOSED):
            return
        if err is not None:
            self._queue(encoder.encode_err(err))
        self.close_reason = self.close_reason or reason
        self._begin_close()

    def _begin_close(self) -> None:
        if self.state in (RouteState.CLOSING, RouteState.CLOSED):
            return
        self.state = RouteState.CLOSING
        self._detach()
        self._wake.set()

    def _is_open(self) -> bool:
        return self.state is RouteState.CONNECTED

    def _is_closing(self) -> bool:
        return self.state is RouteState.CLOSING

    # ------------------------------------------------------------------ tasks

    async def _handshake_timer(self) -> None:
        with anyio.move_on_after(self.cluster.auth_timeout):
            await self._connected.wait()
            return
        if self.state is RouteState.HANDSHAKE:
            self.close("no CONNECT within the authentication timeout", "Authentication Timeout")

    def _ping_interval(self) -> float:
        return self.cluster.ping_interval

    async def _reader(self) -> None:
        while self.state is not RouteState.CLOSING:
            try:
                data = await self.stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.close_reason = self.close_reason or "closed by the peer"
                return
            try:
                events = self.parser.feed(data)
            except ProtocolError as e:
                for ev in e.events:
                    self._handle(ev)
                if e.message is not None:
                    self.close(f"protocol error: {e.message}", e.message)
                else:
                    self.close("protocol error: parser error")
                log.error("%s: %s", self.name, self.close_reason)
                return
            on_msg = self._on_msg
            for ev in events:
                if type(ev) is RouteMsgRun:  # the hot path: a run of one subject
                    self._on_msg_run(ev)
                elif type(ev) is RouteMsg:
                    on_msg(ev)
                else:
                    self._handle(ev)
                if self.state is RouteState.CLOSING:
                    return
                if self.server.stalled:  # between events: a read holds more than a queue may
                    await self._wait_for_stalled()

    def _handle(self, ev: Any) -> None:
        t = type(ev)
        if self.state is RouteState.HANDSHAKE:
            if t is Connect and not self.solicited:
                try:
                    self._on_connect(ev.options)
                except RouteClosed as e:
                    self.close(str(e))
            elif t is Err:
                self.close(f"the peer said: {ev.message}")
            else:
                self.close("operation before CONNECT", "Authorization Violation")
            return
        if self.state is not RouteState.CONNECTED:
            return
        if t is RouteMsgRun:
            self._on_msg_run(ev)
        elif t is RouteMsg:
            self._on_msg(ev)
        elif t is RouteSub:
            self._on_rs_plus(ev)
        elif t is RouteUnsub:
            account = self.server.accounts.find(ev.account)
            link = self.links.get(ev.account)
            if account is not None and link is not None:
                account.link_unsubscribe(link, ev.subject, ev.queue)
        elif t is Ping:
            self._send(encoder.PONG)
        elif t is Pong:
            self._on_pong()
        elif t is Info:
            self.manager.learn(self, ev.options)
        elif t is Err:
            self.close(f"the peer said: {ev.message}")
        elif t is Connect:
            pass  # a second CONNECT changes nothing

    def _on_rs_plus(self, ev: RouteSub) -> None:
        if not _ACCOUNT_NAME.fullmatch(ev.account):
            log.error("%s: interest for an invalid account name %r", self.name, ev.account)
            self._send(encoder.encode_err("Invalid Account"))
            return
        if ev.subject.startswith(self._local):
            return  # our JetStream answers our own clients only (mesh.local_prefixes)
        # Never made here: a peer could otherwise create an account per name it sends (unbounded).
        # Interest for an account this server does not have is ignored, as the reference does.
        account = self.server.accounts.find(ev.account)
        link = self.links.get(ev.account)
        if account is None or link is None:
            self.unknown_account_interest += 1
            if worth_logging(self.unknown_account_interest):
                log.warning(
                    "%s: ignored interest for account %r, which this server does not have (%d so far)",
                    self.name,
                    ev.account,
                    self.unknown_account_interest,
                )
            return
        try:
            account.link_subscribe(link, ev.subject, ev.queue, ev.weight)
        except ValueError as e:  # an invalid subject or queue name: the route stays
            log.error("%s: could not insert subscription: %s", self.name, e)
            self._send(encoder.encode_err("Invalid Subscription"))

    def _on_msg_run(self, ev: RouteMsgRun) -> None:
        if self.state is not RouteState.CONNECTED:
            return
        payloads = ev.payloads
        self.in_msgs += len(payloads)
        self.in_bytes += payload_bytes(payloads)
        link = self.links.get(ev.account)
        if link is None or ev.subject.startswith(self._local):
            return  # an account we do not have, or our own JetStream's API
        link.account.publish_run(ev.subject, payloads, link)

    def _on_msg(self, ev: RouteMsg) -> None:
        if self.state is not RouteState.CONNECTED:
            return
        self.in_msgs += 1
        self.in_bytes += len(ev.payload) + (len(ev.headers) if ev.headers is not None else 0)
        link = self.links.get(ev.account)
        if link is None or ev.subject.startswith(self._local):
            return  # an account we do not have, or our own JetStream's API
        reply, delivered = ev.reply, None
        if reply is not None and reply.startswith("$JS.ACK."):
            reply, delivered = split_ack_subject(reply)
        if delivered is None:
            link.account.publish(ev.subject, reply, ev.headers, ev.payload, link, queues=ev.queues)
        else:  # a JetStream delivery: routed by its deliver subject, seen with its own subject
            link.account.publish(
                delivered, reply, ev.headers, ev.payload, link, route=ev.subject, queues=ev.queues
            )

    # ------------------------------------------------------------------ outbound

    _write_through = BufferedOutput._write_through_tcp

    def _send(self, data: bytes) -> None:
        if self.state in (RouteState.CLOSING, RouteState.CLOSED):
            return
        self._queue(data)

    def announce(self, account: str, frame: LeafInterestFrame) -> None:
        """(An account, through its link) RS+ / RS- for one key."""
        if self.state is not RouteState.CONNECTED or frame.subject.startswith(self._local):
            return
        if frame.op == "LS+":
            self._send(encode_rs_plus(account, frame.subject, frame.queue, frame.weight or 1))
        else:
            self._send(encode_rs_minus(account, frame.subject, frame.queue))

    def send_info(self, info: dict[str, Any]) -> None:
        if self.state is RouteState.CONNECTED:
            self._send(encoder.encode_info(info))

    def forward(
        self,
        account: str,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        queues: tuple[str, ...],
    ) -> None:
        """(An account, through its link) one message to the peer."""
        if self.state is not RouteState.CONNECTED or subject.startswith(self._local):
            return
        if not self._buffer_delivery(encode_rmsg(account, subject, reply, queues, headers, payload)):
            return
        self.out_msgs += 1
        self.out_bytes += len(payload) + (len(headers) if headers is not None else 0)

    def forward_run_frame(self, subject: str, frames: bytes | memoryview, payloads: Sequence[bytes]) -> None:
        """``forward_frame`` of a run's frames already encoded, written through at once: one
        write per run instead of a writer wake-up."""
        if self.state is not RouteState.CONNECTED or subject.startswith(self._local):
            return
        if self._deliver_through(frames):
            self.out_msgs += len(payloads)
            self.out_bytes += payload_bytes(payloads)

    def forward_frame(self, subject: str, frame: bytes, size: int) -> None:
        """``forward`` of a frame already encoded (``size``: its message bytes, for /routez)."""
        if self.state is not RouteState.CONNECTED or subject.startswith(self._local):
            return
        if self._buffer_delivery(frame):
            self.out_msgs += 1
            self.out_bytes += size

    # ------------------------------------------------------------------ monitoring

    def describe(self) -> dict[str, Any]:
        """One entry of /routez, shaped like the reference's."""
        host, _, port = self.address.rpartition(":")
        return {
            "rid": self.cid,
            "remote_id": self.peer_id,
            "remote_name": self.peer_name,
            "did_solicit": self.solicited,
            "is_configured": self.solicited and self.url is not None and self.manager.is_configured(self.url),
            "ip": host,
            "port": int(port) if port.isdigit() else 0,
            "rtt": f"{self.rtt * 1e3:.3f}ms" if self.rtt is not None else "0s",
            "in_msgs": self.in_msgs,
            "out_msgs": self.out_msgs,
            "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes,
            "pending_size": self._pending,
            "subscriptions": sum(len(link.account.link_interest(link)) for link in self.links.values()),
        }


def _text_field(opts: dict[str, Any], key: str) -> str:
    value = opts.get(key)
    return value if isinstance(value, str) else ""
