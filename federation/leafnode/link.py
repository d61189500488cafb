"""One leaf-node link: the thin IO shell around the sans-IO leaf protocol, in either role.

``ACCEPTED``: a leaf dialled our leaf port; we are its hub. ``SOLICITED``: we dialled a hub
(``leafnodes.remotes``). The handshake of each role follows nats-server (federation-wire.md
§1.2); after it both roles are the same: the reader feeds the parser and hands each event to
the account (interest, messages), the writer sends what the account forwarded, the pinger
keeps the link honest. Like a client connection, a link owns its three tasks in one task group
and whatever ends it ends it alone (the supervisor is ``LeafNodes._run_link``).

Permissions are two filters built once the handshake settles them:
- ``outbound``: may we send subject S to the peer (a forwarded message; a peer ``LS+`` for a
  literal S we may never send is a permissions violation on the hub side, as the reference);
- ``inbound``: may the peer send S to us (what we announce with ``LS+``; a message from the peer
  outside it is refused: a violation and a close on the hub side, dropped on the leaf side).
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from core.errors import AuthError, ProtocolError
from core.protocol import encoder
from core.protocol.compress import ZstdReader, ZstdWriter
from core.protocol.encoder import encode_run
from core.protocol.events import Connect, Err, Info, Ping, Pong
from core.protocol.leaf import (
    LeafMsg,
    LeafMsgRun,
    LeafParser,
    LeafSub,
    LeafUnsub,
    encode_deliveries,
    encode_lmsg,
)
from core.protocol.parser import UNKNOWN_OP
from core.server.accounts import Account
from core.server.auth import Authenticator, Permission, PermissionChecker, Permissions, Principal
from core.server.connection import aclose_quietly
from core.server.interest import LinkDelivery, LinkKind, split_ack_subject
from core.server.output import BufferedOutput
from core.server.peer import PeerPinger, read_first_info
from core.server.tcp import READ_SIZE, TcpStream
from core.subjects import has_wildcard, is_subset, overlaps
from federation.domains import link_denies
from federation.leafnode.credentials import redact_url, sign_nonce, url_credentials

if TYPE_CHECKING:
    from core.config import RemoteLeafConfig
    from core.server.interest import LeafInterestFrame
    from core.server.server import Server
    from federation.leafnode.manager import LeafNodes

log = logging.getLogger("leafjet.leafnode")

CONNECT_INFO_TIMEOUT = 2.0  # the reference's "Stale Leaf Node Connection" wait for connect_info
LOOP_DELAY = 30.0  # the reference's delay after a loop or a same-cluster refusal
PROTOCOL_LEVEL = 1  # >= 3 would claim message-trace support (federation-wire.md §1.2)
LEAFJET_COMPRESSION = "leafjet_compression"  # our own INFO/CONNECT field: zstd between leafjet peers
_CREDENTIAL_FIELDS = ("user", "pass", "auth_token", "nkey", "sig", "jwt")
ALWAYS_ALLOWED_INBOUND = ("_R_.", "$JS.ACK.")  # service replies and acks always pass (the reference)


class LinkState(Enum):
    """A link's life: transitions only ever move down this list."""

    HANDSHAKE = "handshake"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"


class LinkClosed(Exception):
    """The link ended for a reason worth a log line (its text)."""


class LeafLink(LinkDelivery, PeerPinger, BufferedOutput):
    """A leaf link of either role; see the module docstring."""

    echo = True

    def __init__(
        self,
        manager: LeafNodes,
        server: Server,
        stream: ByteStream,
        kind: LinkKind,
        cid: int,
        address: str,
        *,
        remote: RemoteLeafConfig | None = None,
        authenticator: Authenticator | None = None,
        url: str = "",
    ) -> None:
        self.manager = manager
        self.server = server
        self.cfg = server.config
        self.stream = stream
        self.kind = kind
        self.cid = cid
        self.address = address
        self.remote = remote
        self.url = redact_url(url) if url else ""  # the URL dialled, without its userinfo (logs)
        self._raw_url = url  # with its userinfo: read only to build the CONNECT
        self.authenticator = authenticator  # who may connect (accepted)
        self.state = LinkState.HANDSHAKE
        self.parser = LeafParser(
            max_control_line=self.cfg.max_control_line * 16, max_payload=self.cfg.max_payload
        )
        self.parser.runs = True  # a consumer's deliveries to one deliver subject: LeafMsgRun
        self.account: Account | None = None
        self.peer: dict[str, Any] = {}  # the peer's INFO (solicited) or CONNECT (accepted)
        self.peer_name = ""
        self.peer_domain: str | None = None
        self.remote_account = ""  # the account the peer binds the link to, on its side
        self.nonce: str | None = None
        self.headers = True
        self.compression = "off"
        self._zw: ZstdWriter | None = None
        self._zr: ZstdReader | None = None
        self.outbound = PermissionChecker(Permissions())
        self.inbound = PermissionChecker(Permissions())
        self.reconnect_delay: float | None = None  # a forced wait before the next dial (loop)
        self.last_error = ""
        # monitoring (/leafz)
        self.start_ns = time.time_ns()
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self._init_pings()
        self._connected = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self.close_reason = ""
        self._init_output()  # the outbound buffer, as a client connection's
        self.was_connected = False
        self._attached = False
        self._plain_head = b""  # bytes queued before compression started: they go out plain

    @property
    def name(self) -> str:
        return f"leafnode {self.cid} {self.peer_name or '?'} ({self.address})"

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        """Serve the link until either side ends it; the supervisor logs the reason."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.kind is LinkKind.LEAF_ACCEPTED:
                    await self._serve_accepted()
                else:
                    await self._serve_solicited()
        finally:
            self._detach()
            self.state = LinkState.CLOSED
            with anyio.CancelScope(shield=True):
                await aclose_quietly(self.stream)

    async def _serve_accepted(self) -> None:
        self.nonce = secrets.token_urlsafe(11)
        info = self.manager.info(self.cid, self.nonce)
        try:
            await self.stream.send(encoder.encode_info(info))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self.close_reason = "closed by the peer before INFO"
            return
        if self.manager.ssl_context is not None:
            await self._start_tls_server()
        await self._serve_tasks(handshake_timeout=self._auth_timeout())

    async def _serve_solicited(self) -> None:
        assert self.remote is not None
        info = await read_first_info(
            self.stream, self.parser, self.remote.first_info_timeout, LinkClosed, peer="hub", port="leaf node"
        )
        self._check_hub_info(info)
        wants_tls = self.remote.tls is not None or info.get("tls_required") or self.url.startswith("tls://")
        if wants_tls:
            await self._start_tls_client()
        self._send(encoder.encode_connect(self._connect_options(info)))
        await self._serve_tasks(handshake_timeout=CONNECT_INFO_TIMEOUT)

    async def _serve_tasks(self, handshake_timeout: float) -> None:
        await self._run_io(
            self._reader, self._pinger, functools.partial(self._handshake_timer, handshake_timeout)
        )

    def _auth_timeout(self) -> float:
        return self.manager.auth_timeout

    # ------------------------------------------------------------------ TLS

    async def _start_tls_server(self) -> None:
        ctx = self.manager.ssl_context
        assert ctx is not None
        timeout = self.cfg.leafnodes.tls.timeout if self.cfg.leafnodes.tls else 2.0
        try:
            with anyio.fail_after(timeout):
                self.stream = await TLSStream.wrap(
                    self.stream, server_side=True, ssl_context=ctx, standard_compatible=False
                )
        except Exception as e:  # any failure of the peer's handshake ends this link only
            raise LinkClosed(f"TLS handshake failed: {e.__class__.__name__}: {e}") from None

    async def _start_tls_client(self) -> None:
        from core.tls import client_ssl_context

        assert self.remote is not None
        tls = self.remote.tls
        if self.parser.take_buffer():
            raise LinkClosed("the hub sent data before the TLS handshake")
        ctx = client_ssl_context(
            tls.ca_file if tls else None, tls.cert_file if tls else None, tls.key_file if tls else None
        )
        host = self.url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
        try:
            with anyio.fail_after(tls.timeout if tls else 2.0):
                self.stream = await TLSStream.wrap(
                    self.stream, server_side=False, hostname=host, ssl_context=ctx, standard_compatible=False
                )
        except Exception as e:
            raise LinkClosed(f"TLS handshake with the hub failed: {e.__class__.__name__}: {e}") from None

    # ------------------------------------------------------------------ solicit-side handshake

    def _check_hub_info(self, info: dict[str, Any]) -> None:
        if not info.get("client_id") or info.get("leafnode_urls") is None:
            raise LinkClosed("attempted to connect to wrong port: the remote is not a leaf node port")
        cluster = info.get("cluster")
        if isinstance(cluster, str) and " " in cluster:
            raise LinkClosed("the hub's cluster name contains spaces")
        self.peer = info
        self.peer_name = str(info.get("server_name") or info.get("server_id") or "")
        self.peer_domain = info.get("domain") or None
        self.headers = bool(info.get("headers"))
        self.nonce = info.get("nonce")

    def _connect_options(self, info: dict[str, Any]) -> dict[str, Any]:

        assert self.remote is not None
        server = self.server
        js = server.config.jetstream
        opts: dict[str, Any] = {
            "version": self.manager.version,
            "server_id": server.server_id,
            "name": server.name,
            "headers": True,
            "jetstream": js.enabled,
            "compress_mode": "off",
            "remote_account": self.remote.account,
            "protocol": PROTOCOL_LEVEL,
        }
        if js.enabled and js.domain:
            opts["domain"] = js.domain
        if self.remote.deny_imports:
            opts["deny_pub"] = list(self.remote.deny_imports)
        offered = info.get(LEAFJET_COMPRESSION)
        if self.remote.compression == "zstd" and isinstance(offered, list) and "zstd" in offered:
            opts[LEAFJET_COMPRESSION] = "zstd"
        if self.remote.nkey_seed is not None:
            public, sig = sign_nonce(self.remote.nkey_seed, self.nonce or "")
            opts["nkey"], opts["sig"] = public, sig
        user, password = url_credentials(self._raw_url)
        if user is not None:
            opts["user"] = user
            if password is not None:
                opts["pass"] = password
            else:
                opts["auth_token"] = user
        return opts

    def _on_connect_info(self, info: dict[str, Any]) -> None:
        """The hub accepted us: its permissions for this link, then our interest (never before:
        an LS+ before the permissions are known gets a leaf disconnected)."""
        assert self.remote is not None
        self.remote_account = str(info.get("remote_account") or "")
        imports = _permission(info.get("import"))
        exports = _permission(info.get("export"))
        denies = link_denies(self.server.config.jetstream.domain)
        self.outbound = _checker(exports, self.remote.deny_exports + denies.exports)
        self.inbound = _checker(imports, self.remote.deny_imports + denies.imports)
        if info.get(LEAFJET_COMPRESSION) == "zstd" and self.remote.compression == "zstd":
            self._start_compression()
        self._enter(self.server.accounts.get(self.remote.account))

    # ------------------------------------------------------------------ accept-side handshake

    async def _on_connect(self, opts: dict[str, Any]) -> None:
        if self.state is not LinkState.HANDSHAKE:
            return  # a second CONNECT changes nothing on a leaf link
        # Credentials first, as the reference: a client or a gateway without leaf credentials
        # only ever learns "Authorization Violation".
        principal = await self._authenticate(opts)
        if "lang" in opts:
            raise self._refuse(
                "attempted to connect to leaf node port", "a client connected to the leaf port"
            )
        if "gateway" in opts:
            gw = opts.get("gateway")
            raise self._refuse(
                f'Rejecting connection from gateway "{gw}" on the leafnode port', "a gateway connected"
            )
        self.peer = opts
        self.peer_name = str(opts.get("name") or opts.get("server_id") or "")
        self.peer_domain = opts.get("domain") or None
        self.headers = bool(opts.get("headers"))
        self.remote_account = str(opts.get("remote_account") or "")
        account = self.server.accounts.get(principal.account)
        perms = principal.permissions
        denies = link_denies(self.server.config.jetstream.domain)
        # The reference swaps the user's permissions for a leaf: what it may publish is what it
        # may send us, what it may subscribe to is what we may send it (plus its deny_pub).
        deny_pub = tuple(s for s in opts.get("deny_pub") or () if isinstance(s, str))
        self.outbound = _checker(perms.subscribe, deny_pub + denies.exports)
        self.inbound = _checker(perms.publish, denies.imports)
        self.manager.replace_duplicate(self, account)
        zstd = opts.get(LEAFJET_COMPRESSION) == "zstd" and self.server.config.leafnodes.compression == "zstd"
        # The leaf sends nothing after a CONNECT that asks for zstd until our connect_info
        # INFO: anything already here would be read on the wrong side of the switch.
        if zstd and self.parser.take_buffer():
            raise self._refuse(
                "Unknown Protocol Operation", "data after a CONNECT that asked for compression"
            )
        info = self.manager.info(self.cid, None)
        info.update(
            connect_info=True,
            remote_account=account.name,
            acc_is_sys=False,
            client_id=self.cid,
        )
        if perms.subscribe.allow or perms.subscribe.deny:
            info["import"] = _perm_json(perms.subscribe)
        if perms.publish.allow or perms.publish.deny:
            info["export"] = _perm_json(perms.publish)
        if zstd:
            info[LEAFJET_COMPRESSION] = "zstd"
        self._send(encoder.encode_info(info))
        if zstd:
            self._start_compression()
        self._enter(account)

    async def _authenticate(self, opts: dict[str, Any]) -> Principal:
        auth = self.authenticator
        assert auth is not None
        creds: dict[str, Any] = {k: opts[k] for k in _CREDENTIAL_FIELDS if k in opts}
        try:
            decided = auth.begin(creds, self.nonce)
            if isinstance(decided, Principal):
                return decided
            workers = self.server.auth_workers
            if not workers.reserve():
                raise AuthError("too many authentications pending")
            try:
                return await anyio.to_thread.run_sync(decided.run, limiter=workers.limiter)
            finally:
                workers.release()
        except AuthError as e:
            log.warning("leafnode %d %s: authorization violation: %s", self.cid, self.address, e)
            raise self._refuse("Authorization Violation", f"authorization violation: {e}") from None

    # ------------------------------------------------------------------ both roles

    def _enter(self, account: Account) -> None:
        self.account = account
        self.state = LinkState.CONNECTED
        self._connected.set()
        self.manager.connected(self)
        self._attached = True
        account.attach_link(self)  # sends our interest: the initial LS+ burst

    def _detach(self) -> None:
        """Take the link's interest out of the account (once), so nothing routes to it."""
        if self._attached and self.account is not None:
            self._attached = False
            self.account.detach_link(self)
        self.manager.disconnected(self)

    def _start_compression(self) -> None:
        """From here on both directions are zstd. What is queued (the connect_info INFO on the
        hub side) still goes out plain, ahead of the compressed stream."""
        self._plain_head = b"".join(self._out)
        self._out.clear()
        self._pending = len(self._plain_head)
        if self._plain_head:
            self._out.append(b"")  # wake the writer for the plain head
        self.compression = "zstd"
        self._zw = ZstdWriter()
        self._zr = ZstdReader(max_output=max(self.cfg.max_payload * 2, 4 << 20))

    def _refuse(self, err: str, reason: str) -> LinkClosed:
        """Queue ``-ERR '<err>'`` and return the exception that ends the link with ``reason``."""
        self._send_now(encoder.encode_err(err))
        return LinkClosed(reason)

    def close(self, reason: str, err: str | None = None) -> None:
        """Close from anywhere (server shutdown, a duplicate replacing this link, slow consumer)."""
        if self.state in (LinkState.CLOSING, LinkState.CLOSED):
            return
        if err is not None:
            self._send_now(encoder.encode_err(err))
        self.close_reason = self.close_reason or reason
        self._begin_close()

    def _begin_close(self) -> None:
        if self.state in (LinkState.CLOSING, LinkState.CLOSED):
            return
        self.state = LinkState.CLOSING
        self._detach()
        self._wake.set()

    # ------------------------------------------------------------------ tasks

    async def _handshake_timer(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await self._connected.wait()
            return
        if self.state is LinkState.HANDSHAKE:
            if self.kind is LinkKind.LEAF_ACCEPTED:
                self.close("authentication timeout", "Authentication Timeout")
            else:
                self.close("no connect_info INFO from the hub", "Stale Leaf Node Connection - Closing")

    async def _reader(self) -> None:
        while self.state is not LinkState.CLOSING:
            try:
                data = await self.stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.close_reason = self.close_reason or "closed by the peer"
                return
            try:
                if self._zr is not None:
                    data = self._zr.decompress(data)
                await self._consume(data)
                while self._zr is not None and self._zr.pending():
                    await self._consume(self._zr.decompress(b""))
            except ProtocolError as e:
                for ev in e.events:
                    await self._handle(ev)
                if self.state is LinkState.HANDSHAKE and self.kind is LinkKind.LEAF_ACCEPTED:
                    # Bytes that are not a CONNECT before one: the reference's answer.
                    self.close("operation before CONNECT", "Authorization Violation")
                    return
                if e.message is not None:
                    self._send_now(encoder.encode_err(e.message))
                self.close_reason = self.close_reason or f"protocol error: {e.message or 'parser error'}"
                return
            if self.server.stalled:
                await self._wait_for_stalled()

    async def _consume(self, data: bytes) -> None:
        """Feed the parser and handle each event. During the handshake the parser stops after the
        frame that may switch the stream to zstd (the CONNECT on the hub side, the connect_info
        INFO on the leaf side): what follows it in the same read is compressed."""
        while True:
            stop = (
                (Connect if self.kind is LinkKind.LEAF_ACCEPTED else Info)
                if self.state is LinkState.HANDSHAKE
                else None
            )
            events = self.parser.feed(data, stop_after=stop)
            data = b""
            on_msg = self._on_msg
            for ev in events:
                if type(ev) is LeafMsg:  # the hot path, without a coroutine per message
                    on_msg(ev)
                elif type(ev) is LeafMsgRun:  # a consumer's deliveries, read in one pass
                    self._on_msg_run(ev)
                else:
                    await self._handle(ev)
                if self.state is LinkState.CLOSING:
                    return
                if self.server.stalled:  # between events: a read holds more than a queue may
                    await self._wait_for_stalled()
            if stop is None or not events or type(events[-1]) is not stop:
                return
            if self._zr is not None:  # compression just started: the rest was compressed
                rest = self.parser.take_buffer()
                if rest:
                    data = self._zr.decompress(rest)

    async def _handle(self, ev: Any) -> None:
        t = type(ev)
        if self.state is LinkState.HANDSHAKE and self.kind is LinkKind.LEAF_ACCEPTED and t is not Connect:
            # Anything but CONNECT first (even a PING) is refused, as the reference does.
            self.close("operation before CONNECT", "Authorization Violation")
            return
        if t is LeafMsg:
            self._on_msg(ev)
        elif t is LeafSub:
            self._on_ls_plus(ev)
        elif t is LeafUnsub:
            if self.account is not None and self.state is LinkState.CONNECTED:
                self.account.link_unsubscribe(self, ev.subject, ev.queue)
        elif t is Ping:
            self._send(encoder.PONG)
        elif t is Pong:
            self._on_pong()
        elif t is Connect:
            if self.kind is not LinkKind.LEAF_ACCEPTED:
                raise ProtocolError(UNKNOWN_OP)  # a CONNECT from our hub
            try:
                await self._on_connect(ev.options)
            except LinkClosed as e:
                self.close(str(e))
        elif t is Info:
            if (
                self.kind is LinkKind.LEAF_SOLICITED
                and ev.options.get("connect_info")
                and self.state is LinkState.HANDSHAKE
            ):
                self._on_connect_info(ev.options)
            # other INFOs (URL updates) change nothing we use
        elif t is Err:
            self._on_err(ev.message)
        elif self.state is LinkState.HANDSHAKE and self.kind is LinkKind.LEAF_ACCEPTED:
            self.close("operation before CONNECT", "Authorization Violation")

    def _on_err(self, message: str) -> None:
        self.last_error = message
        if "Loop detected" in message or "same cluster name" in message:
            self.reconnect_delay = LOOP_DELAY
        elif "minimum version required" in message:
            self.reconnect_delay = 5.0
        self.close(f"the peer said: {message}")

    def _on_ls_plus(self, ev: LeafSub) -> None:
        if self.state is not LinkState.CONNECTED:
            if self.kind is LinkKind.LEAF_ACCEPTED:
                self.close("operation before CONNECT", "Authorization Violation")
            return
        account = self.account
        assert account is not None
        if account.is_own_loop_subject(ev.subject):
            msg = (
                f'Loop detected for leafnode account="{account.name}". Delaying attempt to reconnect for 30s'
            )
            log.error("%s: %s", self.name, msg)
            self.reconnect_delay = LOOP_DELAY
            self.last_error = msg
            self.close("loop detected", msg)
            return
        # A literal subject we may never send is refused (the hub side closes the link, as the
        # reference); a wildcard is kept and each message under it checked in ``forward``.
        if not has_wildcard(ev.subject) and not self.outbound.can_publish(ev.subject):
            if self.kind is LinkKind.LEAF_ACCEPTED:
                q = f' using queue "{ev.queue}"' if ev.queue else ""
                err = f'Permissions Violation for Subscription to "{ev.subject}"{q}'
                self.close("permissions violation for subscription", err)
            return
        try:
            account.link_subscribe(self, ev.subject, ev.queue, ev.weight)
        except ValueError as e:  # an invalid subject or queue name: the reference's answer, link kept
            log.error("%s: could not insert subscription: %s", self.name, e)
            self._send(encoder.encode_err("Invalid Subscription"))

    def _on_msg(self, ev: LeafMsg) -> None:
        if self.state is not LinkState.CONNECTED:
            if self.kind is LinkKind.LEAF_ACCEPTED:
                self.close("operation before CONNECT", "Authorization Violation")
            return
        self.in_msgs += 1
        self.in_bytes += len(ev.payload) + (len(ev.headers) if ev.headers is not None else 0)
        subject = ev.subject
        if not self.inbound.can_publish(subject) and not subject.startswith(ALWAYS_ALLOWED_INBOUND):
            if self.kind is LinkKind.LEAF_ACCEPTED:
                self.close(
                    "permissions violation for publish", f'Permissions Violation for Publish to "{subject}"'
                )
            return
        assert self.account is not None
        reply, delivered = ev.reply, None
        if reply is not None and reply.startswith("$JS.ACK."):
            reply, delivered = split_ack_subject(reply)
        if delivered is None:
            self.account.publish(subject, reply, ev.headers, ev.payload, self, queues=ev.queues)
        else:  # a JetStream delivery: routed by its deliver subject, seen with its own subject
            self.account.publish(
                delivered, reply, ev.headers, ev.payload, self, route=subject, queues=ev.queues
            )

    def _on_msg_run(self, ev: LeafMsgRun) -> None:
        """``_on_msg`` for each message of the run, with the state and the permission checked
        once. The JetStream deliveries in it (an ack reply carrying the stored message's subject)
        are routed by their deliver subject together (``Account.publish_many``: one match, one
        call per receiver); any other message on its own, in order."""
        if self.state is not LinkState.CONNECTED:
            if self.kind is LinkKind.LEAF_ACCEPTED:
                self.close("operation before CONNECT", "Authorization Violation")
            return
        subject, replies, payloads = ev.subject, ev.replies, ev.payloads
        self.in_msgs += len(payloads)
        self.in_bytes += sum(map(len, payloads))
        if not self.inbound.can_publish(subject) and not subject.startswith(ALWAYS_ALLOWED_INBOUND):
            if self.kind is LinkKind.LEAF_ACCEPTED:
                self.close(
                    "permissions violation for publish", f'Permissions Violation for Publish to "{subject}"'
                )
            return
        account = self.account
        assert account is not None
        if account.publish_ack_run(subject, replies, payloads, self):
            return  # a source's deliveries: its worker splits the replies, all at once
        deliveries: list[tuple[str, str | None, bytes | None, bytes]] = []
        for reply, payload in zip(replies, payloads, strict=True):
            ack, delivered = split_ack_subject(reply) if reply.startswith("$JS.ACK.") else (reply, None)
            if delivered is not None:
                deliveries.append((delivered, ack, None, payload))
                continue
            if deliveries:
                account.publish_many(subject, deliveries, self)
                deliveries = []
            account.publish(subject, reply, None, payload, self)
        if deliveries:
            account.publish_many(subject, deliveries, self)

    # BufferedOutput's questions (core/server/output.py)
    def _is_open(self) -> bool:
        return self.state is LinkState.CONNECTED

    def _is_closing(self) -> bool:
        return self.state is LinkState.CLOSING

    def _prepare(self, data: bytes | memoryview) -> bytes | memoryview:
        if self._zw is None:
            return data
        # One call for everything queued: a batch compresses far better than a frame at a time
        # (core/protocol/compress.py), and costs less CPU per message.
        data = self._plain_head + self._zw.compress(data)
        self._plain_head = b""
        return data

    def _ping_interval(self) -> float:
        return self.cfg.ping_interval

    def _send_through(self, frame: bytes | memoryview) -> bool:
        """Hand a message that finds nothing buffered to a plain TCP transport now, when it takes
        it without waiting; False leaves it to the buffer. A live source's frame (a read reply,
        a consumer's delivery) otherwise waited for the writer task's turn behind whatever else
        the loop had ready: 0.4 ms p50 on the leaf, with 1000 msgs/s, measured between the
        read's reply and its write (bench sources-latency). A burst still goes out in few
        writes: only its first message finds the buffer empty; the rest join the buffer, which
        the writer sends as one (and compresses as one)."""
        stream = self.stream
        if type(stream) is not TcpStream or not stream.can_send():
            return False
        stream.try_send(self._prepare(frame))
        return True

    def _deliver_frames(self, frames: bytes | memoryview) -> bool:
        """Send a message (or a run of them) now when nothing is buffered (``_send_through``),
        else buffer it for the writer; False when the buffer overflowed (the link is closed as
        a slow consumer)."""
        if not self._out and self._send_through(frames):
            return True
        return self._buffer_delivery(frames)

    def _write_through(self) -> bool:
        """The writer's shortcut (``BufferedOutput._write_through_tcp``), with this link's
        compression: no write deadline to arm for a transport that takes the bytes now."""
        out = self._out
        stream = self.stream
        # asked before the join, as a client's write-through asks (core/server/output.py)
        if not out or type(stream) is not TcpStream or not stream.can_send():
            return False
        stream.try_send(self._prepare(b"".join(out) if len(out) > 1 else out[0]))
        out.clear()
        self._pending = 0
        self._drained.set()
        return True

    # ------------------------------------------------------------------ outbound

    def _send_now(self, data: bytes) -> None:
        """A control frame (an -ERR before closing): buffered even while closing."""
        if self.state is LinkState.CLOSED:
            return
        self._append(data)

    def _send(self, data: bytes) -> None:
        if self.state in (LinkState.CLOSING, LinkState.CLOSED):
            return
        self._append(data)

    def _append(self, data: bytes) -> None:
        self._queue(data)

    def announce(self, frame: LeafInterestFrame) -> None:
        """(The account) tell the peer about an interest change: LS+ / LS-, unless the peer may
        never send us anything under that subject (then the peer never learns of it; nats-server
        disconnects a leaf that announces a literal subject it denies)."""
        if self.state is not LinkState.CONNECTED:
            return
        subject = frame.subject
        if subject.startswith("$LDS.") or self._may_receive(subject):
            self._send(frame.encode())

    def _may_receive(self, subject: str) -> bool:
        """May the peer send us something on ``subject`` (a literal: exactly it; a wildcard: at
        least one subject under it)?"""
        if not has_wildcard(subject):
            return self.inbound.can_publish(subject)
        perm = self.inbound.permissions.publish
        if any(is_subset(subject, d) for d in perm.deny):
            return False
        return not perm.allow or any(overlaps(subject, a) for a in perm.allow)

    def forward(
        self,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        queues: tuple[str, ...] = (),
    ) -> None:
        """(The account) send one message to the peer, unless it may not receive it."""
        if self.state is not LinkState.CONNECTED:
            return
        if not self.outbound.can_publish(subject):
            return
        if headers is not None and not self.headers:
            headers = None
        if not self._deliver_frames(encode_lmsg(subject, reply, queues, headers, payload)):
            return
        self.out_msgs += 1
        self.out_bytes += len(payload) + (len(headers) if headers is not None else 0)

    def forward_run(self, subject: str, payloads: Sequence[bytes]) -> None:
        """``forward(subject, None, None, p)`` for each of ``payloads`` (``Account.publish_run``):
        the permission check once and the run encoded as one buffer entry, as a route does."""
        if self.state is not LinkState.CONNECTED or not payloads:
            return
        if not self.outbound.can_publish(subject):
            return
        prefix = b"LMSG %b " % subject.encode("utf-8", "surrogateescape")
        if self._deliver_frames(encode_run(prefix, payloads)):
            self.out_msgs += len(payloads)
            self.out_bytes += sum(map(len, payloads))

    def forward_many(self, subject: str, msgs: Sequence[tuple[str | None, bytes | None, bytes]]) -> None:
        """(The account) ``forward(subject, reply, headers, payload)`` for each of ``msgs``, in
        order: the frames encoded into one buffer (a consumer's run of deliveries), one buffer
        entry and one back-pressure check for the run instead of one per message."""
        if self.state is not LinkState.CONNECTED or not msgs:
            return
        if not self.outbound.can_publish(subject):
            return
        with_headers = self.headers
        if not self._deliver_frames(encode_deliveries(subject, msgs, with_headers)):
            return
        self.out_msgs += len(msgs)
        self.out_bytes += sum(
            len(body) + (len(hdrs) if hdrs is not None and with_headers else 0) for _r, hdrs, body in msgs
        )

    # ------------------------------------------------------------------ monitoring

    def describe(self, subs: bool = False) -> dict[str, Any]:
        """One entry of /leafz, shaped like the reference's."""
        entry: dict[str, Any] = {
            "id": self.cid,
            "name": self.peer_name,
            "is_spoke": self.kind is LinkKind.LEAF_SOLICITED,
            "account": self.account.name if self.account else "",
            "ip": self.address.rsplit(":", 1)[0],
            "port": int(self.address.rsplit(":", 1)[1]) if ":" in self.address else 0,
            "rtt": _go_duration(self.rtt),
            "in_msgs": self.in_msgs,
            "out_msgs": self.out_msgs,
            "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes,
            "subscriptions": len(self.account.link_interest(self)) if self.account else 0,
            "compression": self.compression,
        }
        if self.peer_domain:
            entry["domain"] = self.peer_domain
        if subs and self.account is not None:
            entry["subscriptions_list"] = sorted(
                {subject for subject, _q in self.account.link_interest(self)}
            )
        return entry


def _permission(raw: Any) -> Permission:
    if not isinstance(raw, dict):
        return Permission()
    allow = tuple(s for s in raw.get("allow") or () if isinstance(s, str))
    deny = tuple(s for s in raw.get("deny") or () if isinstance(s, str))
    try:
        return Permission(allow=allow, deny=deny)
    except Exception:  # a permission list we cannot read: take nothing from it rather than fail
        return Permission()


def _checker(base: Permission, extra_deny: tuple[str, ...]) -> PermissionChecker:
    perm = Permission(allow=base.allow, deny=base.deny + tuple(d for d in extra_deny if d not in base.deny))
    return PermissionChecker(Permissions(publish=perm, subscribe=perm))


def _perm_json(perm: Permission) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if perm.allow:
        out["allow"] = list(perm.allow)
    if perm.deny:
        out["deny"] = list(perm.deny)
    return out


def _go_duration(seconds: float | None) -> str:
    if seconds is None:
        return "0s"
    if seconds < 0.001:
        return f"{seconds * 1e6:.3f}µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3f}ms"
    return f"{seconds:.3f}s"
