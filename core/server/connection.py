"""One client connection: the thin IO shell around the sans-IO protocol parser.

Three tasks, owned by the connection's task group:
- the reader: receive bytes, feed the parser, handle each event (synchronously: routing
  never awaits), then apply back-pressure to receivers that fell behind;
- the writer: sends the outbound buffer whenever something is queued, each send bounded
  by ``write_deadline``;
- the pinger: a PING every ``ping_interval``; more than ``ping_max`` unanswered pings close
  the connection as stale.

The outbound buffer is bounded by ``max_pending``: a delivery that would overflow it closes
the receiver as a slow consumer instead of growing memory or stalling the publisher.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from core import subjects
from core.errors import AuthError, ProtocolError
from core.protocol import encoder
from core.protocol import headers as hdrs
from core.protocol.events import Connect, Ping, Pong, Pub, Sub, Unsub
from core.protocol.parser import ServerParser
from core.server.accounts import Account, Subscription
from core.server.auth import PermissionChecker, Principal
from core.server.tcp import TcpStream

if TYPE_CHECKING:
    from core.server.server import Server

log = logging.getLogger("leafjet.client")

_READ_SIZE = 65536


class State(Enum):
    """A connection's life: transitions only ever move down this list."""

    HANDSHAKE = "handshake"  # INFO sent; TLS and CONNECT pending
    CONNECTED = "connected"  # CONNECT accepted; normal traffic
    CLOSING = "closing"  # final bytes are being flushed
    CLOSED = "closed"


class ClientConnection:
    def __init__(self, server: Server, stream: ByteStream, cid: int, client_ip: str) -> None:
        self.server = server
        self.cfg = server.config
        self.stream = stream
        self.cid = cid
        self.client_ip = client_ip
        self.state = State.HANDSHAKE
        self.parser = ServerParser(self.cfg.max_control_line, self.cfg.max_payload)
        self.account: Account | None = None
        self.principal: Principal | None = None
        self.perms: PermissionChecker | None = None
        self.subs: dict[str, Subscription] = {}
        self.name = ""
        self.lang = ""
        self.version = ""
        # The reference's defaults; each CONNECT overlays the fields it names on the current values.
        self.verbose = True
        self.pedantic = True
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.nonce: str | None = None
        self.pings_out = 0
        # outbound buffer
        self._out: list[bytes] = []
        self._pending = 0
        # asyncio's Event, set and cleared in place: the writer wakes once per outbound burst, and
        # making an anyio Event per wake-up cost more than the rest of the wake-up.
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._close_reason = ""
        self._scope: anyio.CancelScope | None = None
        self._high_water = self.cfg.max_pending * 3 // 4
        self._connected = anyio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serve the connection until either side closes it."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                await self._serve()
        finally:
            self.state = State.CLOSED
            self._remove_subscriptions()
            with anyio.CancelScope(shield=True):
                await _aclose_quietly(self.stream)
            if self._close_reason:
                log.info("client %d %s closed: %s", self.cid, self.client_ip, self._close_reason)

    async def _serve(self) -> None:
        auth = self.server.authenticator
        if auth.needs_nonce:
            self.nonce = auth.new_nonce()
        await self.stream.send(self.server.info_for(self))
        if self.server.ssl_context is not None and not await self._start_tls():
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._writer)
            if auth.required:
                tg.start_soon(self._auth_timer, auth.config.auth_timeout)
            tg.start_soon(self._pinger)
            try:
                await self._reader()
            finally:
                # The reader ended (EOF, protocol error, close requested): let the writer flush.
                self._begin_close()
                with anyio.move_on_after(self.cfg.write_deadline, shield=True):
                    await self._drained.wait()
                tg.cancel_scope.cancel()

    async def _start_tls(self) -> bool:
        assert self.server.ssl_context is not None
        try:
            with anyio.fail_after(self.server.config.tls.timeout if self.server.config.tls else 2.0):
                self.stream = await TLSStream.wrap(
                    self.stream,
                    server_side=True,
                    ssl_context=self.server.ssl_context,
                    standard_compatible=False,
                )
        except (TimeoutError, OSError, anyio.BrokenResourceError, anyio.EndOfStream) as e:
            self._close_reason = f"TLS handshake failed: {e.__class__.__name__}: {e}"
            return False
        except Exception as e:  # ssl.SSLError is an OSError, but be sure garbage never escapes
            self._close_reason = f"TLS handshake failed: {e!r}"
            return False
        return True

    def close(self, reason: str, err: str | None = None) -> None:
        """Close from anywhere (another connection's routing, server shutdown)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        if err is not None:
            self._out.append(encoder.encode_err(err))
        self._close_reason = reason
        self._begin_close()

    def _begin_close(self) -> None:
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.state = State.CLOSING
        self._remove_subscriptions()
        self._wake.set()

    def _remove_subscriptions(self) -> None:
        if self.account is not None:
            for sub in self.subs.values():
                self.account.unsubscribe(sub)
        self.subs.clear()

    # ------------------------------------------------------------------ tasks

    async def _reader(self) -> None:
        stream = self.stream
        handle = self._handle
        while self.state is not State.CLOSING:
            try:
                data = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._close_reason = self._close_reason or "client closed the connection"
                return
            try:
                for event in self.parser.feed(data):
                    handle(event)
                    if self.state is State.CLOSING:
                        return
            except ProtocolError as e:
                # Ops parsed before the bad one in this chunk still count, as on the reference.
                for event in e.events:
                    handle(event)
                    if self.state is State.CLOSING:
                        return
                self._protocol_error(e)
                if e.close:
                    return
            if self.server.stalled:
                await self._wait_for_stalled()

    async def _wait_for_stalled(self) -> None:
        """Back-pressure: a publisher waits (bounded) while receivers past their high-water mark drain.

        Routing is synchronous, so the receivers marked during this chunk were fed by it.
        """
        stalled = self.server.stalled
        self.server.stalled = set()
        with anyio.move_on_after(self.cfg.write_deadline):
            for receiver in stalled:
                await receiver.wait_drained()

    async def wait_drained(self) -> None:
        """(A receiver in ``server.stalled``) Until its buffer is down to half its high-water mark."""
        while self.state is State.CONNECTED and self._pending > self._high_water // 2:
            await self._drained.wait()

    async def _writer(self) -> None:
        # One cancel scope for the writer's life, armed with write_deadline only while a send is
        # under way: a fail_after per send cost more CPU than the send itself.
        with anyio.CancelScope() as guard:
            await self._write_loop(guard)
        if guard.cancelled_caught:
            self._close_reason = "write deadline exceeded (slow consumer)"
            self._out.clear()
            self._drained.set()
            self.server.stats.slow_consumers += 1
            self._begin_close()
            if self._scope is not None:
                self._scope.cancel()

    async def _write_loop(self, guard: anyio.CancelScope) -> None:
        stream = self.stream
        deadline = self.cfg.write_deadline
        clock = asyncio.get_running_loop().time  # the clock anyio's deadlines use on asyncio
        while True:
            if not self._out:
                self._drained.set()
                if self.state is State.CLOSING:
                    # Everything, including a final -ERR, is out: end the connection's tasks.
                    if self._scope is not None:
                        self._scope.cancel()
                    return
                await self._wake.wait()
                self._wake.clear()
                continue
            # A plain TCP connection whose transport takes the bytes at once needs no deadline:
            # arming and disarming one (a timer on the loop) cost a tenth of a request's CPU.
            if self._write_through():
                continue
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._pending = 0
            guard.deadline = clock() + deadline
            try:
                await stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._close_reason = self._close_reason or "write failed"
                self._out.clear()
                self._drained.set()
                self._begin_close()
                if self._scope is not None:
                    self._scope.cancel()
                return
            guard.deadline = math.inf

    async def _pinger(self) -> None:
        while True:
            await anyio.sleep(self.cfg.ping_interval)
            if self.pings_out >= self.cfg.ping_max:
                self.close("stale connection", "Stale Connection")
                return
            self.pings_out += 1
            self._send(encoder.PING)

    async def _auth_timer(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await self._connected.wait()
            return
        if self.state is State.HANDSHAKE:
            self.close("authentication timeout", "Authentication Timeout")

    # ------------------------------------------------------------------ outbound

    def _send(self, data: bytes) -> None:
        if self.state is State.CLOSED:
            return
        self._out.append(data)
        self._pending += len(data)
        self._wake.set()
        if self._drained.is_set():
            self._drained.clear()

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None:
        """Queue one MSG/HMSG for this client (called by the router, never blocks)."""
        if self.state is not State.CONNECTED:
            return
        if headers is not None and not self.headers:
            headers = None  # a client that did not ask for headers gets the payload only
        if not self._buffer_delivery(encoder.encode_msg(subject, sub.sid, reply, payload, headers)):
            return
        sub.delivered += 1
        if sub.max_msgs is not None and sub.delivered >= sub.max_msgs:
            self._unsubscribe(sub)

    def deliver_many(
        self, sub: Subscription, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        """``deliver`` of each ``(subject, reply, headers, payload)``, in order, as one buffer entry
        (a JetStream run to one inbox). A run that overflows max_pending closes the client as
        ``deliver`` would: that drops everything buffered, the run's first messages included."""
        if self.state is not State.CONNECTED or not msgs:
            return
        if self._buffer_delivery(encoder.encode_msgs(sub.sid, msgs, self.headers)):
            sub.delivered += len(msgs)
            self._write_through()

    def _write_through(self) -> bool:
        """Hand what is buffered to the TCP transport now, when it takes it without waiting (see
        DESIGN.md: a run must not wait for the writer's turn); else the writer sends it. Whether
        it was handed over."""
        stream = self.stream
        out = self._out
        if type(stream) is TcpStream and out:
            data = b"".join(out) if len(out) > 1 else out[0]
            if stream.try_send(data):
                out.clear()
                self._pending = 0
                self._drained.set()
                return True
        return False

    def _buffer_delivery(self, data: bytes) -> bool:
        """Buffer ``data`` for the writer; False, and the client closed as a slow consumer, when
        it would take the buffer past max_pending."""
        size = len(data)
        if self._pending + size > self.cfg.max_pending:
            self.server.stats.slow_consumers += 1
            self._out.clear()
            self._pending = 0
            self.close("slow consumer: max_pending exceeded", "Slow Consumer")
            return False
        self._out.append(data)
        self._pending += size
        if self._pending > self._high_water:
            self.server.stalled.add(self)
        if len(self._out) == 1:  # the buffer just became non-empty
            self._wake.set()
            if self._drained.is_set():
                self._drained.clear()
        return True

    # ------------------------------------------------------------------ inbound ops

    def _handle(self, ev: Any) -> None:
        if type(ev) is Pub:
            self._on_pub(ev)
        elif type(ev) is Connect:
            self._on_connect(ev.options)
        elif self.state is not State.CONNECTED and not self._require_connected():
            return
        elif type(ev) is Ping:
            self._send(encoder.PONG)
        elif type(ev) is Pong:
            self.pings_out = 0
        elif type(ev) is Sub:
            self._on_sub(ev)
        elif type(ev) is Unsub:
            self._on_unsub(ev)

    def _require_connected(self) -> bool:
        if self.state is State.CONNECTED:
            return True
        if self.server.authenticator.required:
            self.close("operation before CONNECT", "Authorization Violation")
            return False
        # The reference lets an open server's client skip CONNECT and use the defaults.
        self._enter_account(self.server.accounts.get(self.server.default_account), None)
        return True

    def _ok(self) -> None:
        if self.verbose:
            self._send(encoder.OK)

    def _protocol_error(self, e: ProtocolError) -> None:
        if e.message is not None:
            self._send(encoder.encode_err(e.message))
        if e.close:
            self._close_reason = f"protocol error: {e.message or 'parser error'}"

    def _on_connect(self, opts: dict[str, Any]) -> None:
        if self.state is State.CONNECTED:
            # A second CONNECT may change options but never the identity.
            self._apply_options(opts)
            self._ok()
            return
        if not self._apply_options(opts):
            return
        auth = self.server.authenticator
        principal: Principal | None = None
        if auth.required:
            try:
                principal = auth.authenticate(opts, self.nonce)
            except AuthError as e:
                log.warning("client %d %s: authorization violation: %s", self.cid, self.client_ip, e)
                self.close(f"authorization violation: {e}", "Authorization Violation")
                return
        account = self.server.accounts.get(principal.account if principal else self.server.default_account)
        self._enter_account(account, principal)
        self._ok()

    def _apply_options(self, opts: dict[str, Any]) -> bool:
        self.verbose = bool(opts.get("verbose", self.verbose))
        self.pedantic = bool(opts.get("pedantic", self.pedantic))
        self.echo = bool(opts.get("echo", self.echo))
        self.headers = bool(opts.get("headers", self.headers))
        self.no_responders = bool(opts.get("no_responders", self.no_responders))
        self.name = str(opts.get("name", self.name) or "")
        self.lang = str(opts.get("lang", self.lang) or "")
        self.version = str(opts.get("version", self.version) or "")
        if self.no_responders and not self.headers:
            self.close("no responders without headers", "no responders requires headers support")
            return False
        return True

    def _enter_account(self, account: Account, principal: Principal | None) -> None:
        self.account = account
        self.principal = principal
        if principal is not None and principal.permissions is not None:
            self.perms = self.server.permission_checker(principal.permissions)
        self.state = State.CONNECTED
        self._connected.set()

    def _on_pub(self, ev: Pub) -> None:
        if self.state is not State.CONNECTED and not self._require_connected():
            return
        if ev.headers is not None and not self.headers:
            # The reference closes a client that sends HPUB without having negotiated headers.
            self.close("HPUB without headers support", None)
            return
        subject = ev.subject
        if self.pedantic and not subjects.is_valid_literal_subject(subject):
            self._send(encoder.encode_err("Invalid Publish Subject"))
            return
        if self.perms is not None and not self.perms.can_publish(subject):
            self._send(encoder.encode_err(f'Permissions Violation for Publish to "{subject}"'))
            return
        if self.verbose:
            self._send(encoder.OK)
        assert self.account is not None
        delivered = self.account.publish(subject, ev.reply, ev.headers, ev.payload, self)
        if delivered == 0 and ev.reply is not None and self.no_responders:
            self._no_responders(subject, ev.reply)

    def _no_responders(self, subject: str, reply: str) -> None:
        """A request nobody listens to: tell the requester with a 503 status on its reply subject."""
        block = hdrs.no_responders_headers(subject)
        for sub in self.subs.values():
            if subjects.match(sub.subject, reply):
                self.deliver(sub, reply, None, block, b"")
                return

    def _on_sub(self, ev: Sub) -> None:
        if not subjects.is_valid_subject(ev.subject) or (ev.queue is not None and not _valid_queue(ev.queue)):
            self._send(encoder.encode_err("Invalid Subject"))
            return
        if self.perms is not None and not self.perms.can_subscribe(ev.subject, ev.queue):
            q = f' using queue "{ev.queue}"' if ev.queue else ""
            self._send(encoder.encode_err(f'Permissions Violation for Subscription to "{ev.subject}"{q}'))
            return
        if ev.sid in self.subs:
            # The reference silently ignores a SUB that reuses a live sid.
            self._ok()
            return
        sub = Subscription(self, ev.subject, ev.queue, ev.sid)
        if self.perms is not None:
            sub.deny_filter = self.perms.deliver_filter(ev.subject, ev.queue)
        self.subs[ev.sid] = sub
        assert self.account is not None
        self.account.subscribe(sub)
        self._ok()

    def _on_unsub(self, ev: Unsub) -> None:
        sub = self.subs.get(ev.sid)
        if sub is not None:
            if ev.max_msgs is not None and ev.max_msgs > sub.delivered:
                sub.max_msgs = ev.max_msgs
            else:
                self._unsubscribe(sub)
        self._ok()

    def _unsubscribe(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None and self.account is not None:
            self.account.unsubscribe(sub)


def _valid_queue(queue: str) -> bool:
    return bool(queue) and not any(c.isspace() for c in queue)


async def _aclose_quietly(stream: ByteStream) -> None:
    try:
        with anyio.move_on_after(1):
            await stream.aclose()
    except Exception:  # the socket may already be gone; closing is best effort by nature
        pass
