"""One client connection: the thin IO shell around the sans-IO protocol parser.

Three tasks, owned by the connection's task group:
- the reader: receive bytes, feed the parser, handle each event (synchronously: routing
  never awaits; only a CONNECT whose password must be hashed waits, for the bounded auth
  pool, before the next event), then apply back-pressure to receivers that fell behind;
- the writer: sends the outbound buffer whenever something is queued, each send bounded
  by ``write_deadline``;
- the pinger: a PING every ``ping_interval``; more than ``ping_max`` unanswered pings close
  the connection as stale.

The outbound buffer is bounded by ``max_pending``: a delivery that would overflow it closes
the receiver as a slow consumer instead of growing memory or stalling the publisher.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from core import faults, subjects
from core.errors import AuthError, ProtocolError
from core.protocol import encoder
from core.protocol import headers as hdrs
from core.protocol.events import Connect, Ping, Pong, Pub, PubRun, Sub, Unsub, payload_bytes
from core.protocol.parser import ServerParser
from core.server.accounts import Account, Subscription
from core.server.auth import (
    AuthConfig,
    Authenticator,
    PermissionChecker,
    Permissions,
    Principal,
    Verification,
)
from core.server.output import BufferedOutput
from core.server.reload import secret_unchanged
from core.server.tcp import FEED_SIZE, READ_SIZE

if TYPE_CHECKING:
    from core.config import ServerConfig
    from core.server.server import Server

log = logging.getLogger("leafjet.client")


class State(Enum):
    """A connection's life: transitions only ever move down this list."""

    HANDSHAKE = "handshake"  # INFO sent; TLS and CONNECT pending
    CONNECTED = "connected"  # CONNECT accepted; normal traffic
    CLOSING = "closing"  # final bytes are being flushed
    CLOSED = "closed"


class ClientConnection(BufferedOutput):
    writer_fault = "client_writer"

    def __init__(self, server: Server, stream: ByteStream, cid: int, client_ip: str) -> None:
        self.server = server
        self.cfg = server.config
        self.stream = stream
        self.cid = cid
        self.client_ip = client_ip
        self.state = State.HANDSHAKE
        self.parser = ServerParser(self.cfg.max_control_line, self.cfg.max_payload)
        self.parser.runs = True  # a publisher's stream of one subject is routed a run at a time
        self.parser.max_run_input = FEED_SIZE  # the reader's back-pressure granularity (_handle_events)
        self.account: Account | None = None
        self.principal: Principal | None = None
        self._credentials: dict[str, Any] = {}
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
        # monitoring counters (/connz, /varz, /metrics): an increment per message, nothing more
        self.start_ns = time.time_ns()
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.close_reason = ""
        self._scope: anyio.CancelScope | None = None
        self._init_output()  # the outbound buffer (core/server/output.py)
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
                await aclose_quietly(self.stream)
            if self.close_reason:
                log.info("client %d %s closed: %s", self.cid, self.client_ip, self.close_reason)

    async def _serve(self) -> None:
        auth = self.server.authenticator
        if auth.needs_nonce:
            self.nonce = auth.new_nonce()
        try:
            await self.stream.send(self.server.info_for(self))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # A health check or port scan that connects and closes at once: nothing to serve.
            self.close_reason = "client closed the connection before INFO"
            return
        if self.server.ssl_context is not None and not await self._start_tls():
            return
        timers = (functools.partial(self._auth_timer, auth.config.auth_timeout),) if auth.required else ()
        await self._run_io(self._reader, self._pinger, *timers)

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
            self.close_reason = f"TLS handshake failed: {e.__class__.__name__}: {e}"
            return False
        except Exception as e:  # ssl.SSLError is an OSError, but be sure garbage never escapes
            self.close_reason = f"TLS handshake failed: {e!r}"
            return False
        return True

    def close(self, reason: str, err: str | None = None) -> None:
        """Close from anywhere (another connection's routing, server shutdown)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        if err is not None:
            self._out.append(encoder.encode_err(err))
        self.close_reason = reason
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
        while self.state is not State.CLOSING:
            try:
                data = await stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.close_reason = self.close_reason or "client closed the connection"
                return
            if faults.ARMED:
                faults.fault_point("client_reader", self.name)
            try:
                events = self.parser.feed(data)
            except ProtocolError as e:
                # Ops parsed before the bad one in this read still count, as on the reference.
                if not await self._handle_events(e.events):
                    return
                self._protocol_error(e)
                if e.close:
                    return
                continue
            if not await self._handle_events(events):
                return

    async def _handle_events(self, events: list[Any]) -> bool:
        """Handle a read's events in order; False once the connection is closing.

        Back-pressure is checked before the input handled since the last check would pass
        FEED_SIZE (a run covers at most that much: ``parser.max_run_input``), as when reads were
        that size: a stream queue's limit then
        bounds what one publisher adds before it pauses, and publishes past it are refused (429)
        as the reference refuses them. Checking after every event would pause before any
        refusal; after a whole 256 KiB read, too late (plain publishes, which hear no refusal,
        were dropped). The read is parsed whole, not in FEED_SIZE slices: slicing copied every
        read, and each slice's last message, cut in two, was routed alone."""
        handle = self._handle
        fed = 0
        for event in events:
            size = _input_size(event)
            if fed and fed + size > FEED_SIZE:
                # this event would take the input handled since the last check past FEED_SIZE
                fed = 0
                if self.server.stalled:
                    await self._wait_for_stalled()
            fed += size
            # Only a CONNECT whose password must be hashed gives a Verification: the ops after
            # it wait, in order, until it is decided.
            pending = handle(event)
            if pending is not None:
                await self._verify_connect(pending)
            if self.state is State.CLOSING:
                return False
        if self.server.stalled:
            await self._wait_for_stalled()
        return True

    async def _pinger(self) -> None:
        while True:
            await anyio.sleep(self.cfg.ping_interval)
            if faults.ARMED:
                faults.fault_point("client_pinger", self.name)
            if self.pings_out >= self.cfg.ping_max:
                self.server.stats.stale_connections += 1
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
        self._queue(data)

    # BufferedOutput's questions
    def _is_open(self) -> bool:
        return self.state is State.CONNECTED

    def _is_closing(self) -> bool:
        return self.state is State.CLOSING

    def _slow_consumer(self) -> None:
        self.server.stats.slow_consumers += 1

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
        self.out_msgs += 1
        self.out_bytes += len(payload) if headers is None else len(payload) + len(headers)
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
        if self._deliver_through(encoder.encode_msgs(sub.sid, msgs, self.headers)):
            sub.delivered += len(msgs)
            self.out_msgs += len(msgs)
            self.out_bytes += _run_bytes(msgs, self.headers)

    def deliver_run(self, sub: Subscription, subject: str, payloads: Sequence[bytes]) -> None:
        """``deliver(sub, subject, None, None, p)`` for each of ``payloads``, as one buffer entry
        (the router calls it only for a subscription without a message limit)."""
        if self.state is not State.CONNECTED or not payloads:
            return
        if self._deliver_through(encoder.encode_msg_run(subject, sub.sid, payloads)):
            n = len(payloads)
            sub.delivered += n
            self.out_msgs += n
            self.out_bytes += payload_bytes(payloads)

    _write_through = BufferedOutput._write_through_tcp

    # ------------------------------------------------------------------ inbound ops

    def _handle(self, ev: Any) -> Verification | None:
        if type(ev) is PubRun:
            self._on_pub_run(ev)
        elif type(ev) is Pub:
            self._on_pub(ev)
        elif type(ev) is Connect:
            return self._on_connect(ev.options)
        elif self.state is not State.CONNECTED and not self._require_connected():
            return None
        elif type(ev) is Ping:
            self._send(encoder.PONG)
        elif type(ev) is Pong:
            self.pings_out = 0
        elif type(ev) is Sub:
            self._on_sub(ev)
        elif type(ev) is Unsub:
            self._on_unsub(ev)
        return None

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
            self.close_reason = f"protocol error: {e.message or 'parser error'}"

    def _on_connect(self, opts: dict[str, Any]) -> Verification | None:
        """Apply a CONNECT. Decided here when that is cheap (no auth, a token or password verified
        before, nkeys); a password or token that must be hashed is returned as a Verification for
        the reader to await (``_verify_connect``) before it handles the client's next op."""
        if self.state is State.CONNECTED:
            # A second CONNECT may change options but never the identity.
            self._apply_options(opts)
            self._ok()
            return None
        if not self._apply_options(opts):
            return None
        auth = self.server.authenticator
        principal: Principal | None = None
        if auth.required:
            # Kept to check this client again when a reload changes the users (as the reference
            # keeps its CONNECT options): only the fields an authenticator reads.
            self._credentials = {k: opts[k] for k in _CREDENTIAL_FIELDS if k in opts}
            try:
                decided = auth.begin(opts, self.nonce)
            except AuthError as e:
                self._auth_violation(e)
                return None
            if isinstance(decided, Verification):
                return decided
            principal = decided
        self._accept(principal)
        return None

    async def _verify_connect(self, verification: Verification) -> None:
        """Run the CONNECT's password check on the bounded worker pool, then accept or refuse.
        Past the pool's queue bound the CONNECT is refused at once."""
        workers = self.server.auth_workers
        if not workers.reserve():
            self._auth_violation(AuthError("too many authentications pending"))
            return
        try:
            principal = await anyio.to_thread.run_sync(verification.run, limiter=workers.limiter)
        except AuthError as e:
            if self.state is State.HANDSHAKE:
                self._auth_violation(e)
            return
        finally:
            workers.release()
        if self.state is State.HANDSHAKE:  # not closed meanwhile (auth timeout, server shutdown)
            self._accept(principal)

    def _accept(self, principal: Principal | None) -> None:
        account = self.server.accounts.get(principal.account if principal else self.server.default_account)
        self._enter_account(account, principal)
        self._ok()

    def _auth_violation(self, e: AuthError) -> None:
        log.warning("client %d %s: authorization violation: %s", self.cid, self.client_ip, e)
        self.close(f"authorization violation: {e}", "Authorization Violation")

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

    # ------------------------------------------------------------------ reload

    def apply_limits(self, cfg: ServerConfig) -> None:
        """A reloaded config's limits, for this live connection too (as the reference applies a
        new max_payload to its clients): the parser's bounds, the buffer, pings, deadlines."""
        self.cfg = cfg
        self.parser.max_payload = cfg.max_payload
        self.parser.max_control_line = cfg.max_control_line
        self._high_water = cfg.max_pending * 3 // 4

    def reauthorize(self, old: AuthConfig, auth: Authenticator) -> Verification | None:
        """Check this client against reloaded users, with the credentials it connected with:
        closed if they no longer pass, else given its (possibly new) permissions. A password
        that must be hashed again comes back as a Verification for the caller to run off the loop
        and then hand to ``reauthorized``; a secret the reload left as it was is not re-hashed."""
        if self.state is not State.CONNECTED:
            return None
        if not auth.required:
            self.reauthorized(Principal(self.account.name if self.account else "", "", Permissions()))
            return None
        creds = self._credentials
        try:
            decided = auth.begin(creds, self.nonce)
        except AuthError as e:
            self._refused_on_reload(e)
            return None
        if isinstance(decided, Verification):
            if decided.principal is None:  # the user is gone: nothing to hash
                self._refused_on_reload(AuthError(decided.failure))
                return None
            if not secret_unchanged(old, auth.config, creds):
                return decided
            decided = decided.principal
        self.reauthorized(decided)
        return None

    def reauthorized(self, principal: Principal | AuthError) -> None:
        """Apply the outcome of a reload's check: refused, moved to another account (closed: a
        client's account is fixed for its life), or the new permissions, dropping every
        subscription they no longer allow with the reference's error."""
        if self.state is not State.CONNECTED:
            return
        if isinstance(principal, AuthError):
            # A user whose secret changed: the reference answers this one with the error.
            self._auth_violation(principal)
            return
        if self.account is not None and principal.account and principal.account != self.account.name:
            self._refused_on_reload(AuthError(f"account changed by reload to {principal.account!r}"))
            return
        self.principal = principal
        self.perms = self.server.permission_checker(principal.permissions)
        for sub in list(self.subs.values()):
            if not self.perms.can_subscribe(sub.subject, sub.queue):
                self._unsubscribe(sub)
                self._send(
                    encoder.encode_err(
                        f'Permissions Violation for Subscription to "{sub.subject}" (sid "{sub.sid}")'
                    )
                )
                log.info(
                    "client %d %s: removed subscription %r: not allowed after reload",
                    self.cid,
                    self.client_ip,
                    sub.subject,
                )
            else:
                sub.deny_filter = self.perms.deliver_filter(sub.subject, sub.queue)

    def _refused_on_reload(self, e: AuthError) -> None:
        # A client whose user (or nkey) a reload removed: the reference closes it without a word
        # (no -ERR), and so does leafjet.
        log.warning("client %d %s: no longer authorized after reload: %s", self.cid, self.client_ip, e)
        self.close(f"no longer authorized after reload: {e}")

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
        self.in_msgs += 1
        self.in_bytes += len(ev.payload) if ev.headers is None else len(ev.payload) + len(ev.headers)
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

    def _on_pub_run(self, ev: PubRun) -> None:
        """A run of plain PUBs to one subject: the checks of ``_on_pub`` once, one routing."""
        if self.verbose:
            # +OK after each message, interleaved with any delivery to this very client
            for payload in ev.payloads:
                self._on_pub(Pub(ev.subject, None, payload, None))
                if self.state is State.CLOSING:
                    return
            return
        if self.state is not State.CONNECTED and not self._require_connected():
            return
        payloads = ev.payloads
        self.in_msgs += len(payloads)
        self.in_bytes += payload_bytes(payloads)
        subject = ev.subject
        if self.pedantic and not subjects.is_valid_literal_subject(subject):
            err = encoder.encode_err("Invalid Publish Subject")
        elif self.perms is not None and not self.perms.can_publish(subject):
            err = encoder.encode_err(f'Permissions Violation for Publish to "{subject}"')
        else:
            assert self.account is not None
            self.account.publish_run(subject, payloads, self)
            return
        for _ in payloads:  # one error per message, as the one-by-one path answers
            self._send(err)

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


def _input_size(event: Any) -> int:
    """About how many input bytes ``event`` was parsed from (its control line counted roughly):
    what the reader counts towards its next back-pressure check."""
    t = type(event)
    if t is PubRun:
        payloads = event.payloads
        return len(payloads) * (len(payloads[0]) + len(event.subject) + 16)
    if t is Pub:
        headers = event.headers
        return len(event.payload) + len(event.subject) + 16 + (len(headers) if headers is not None else 0)
    return 16


def _run_bytes(msgs: Sequence[tuple[str, str | None, bytes | None, bytes]], with_headers: bool) -> int:
    """Payload (and header) bytes of a run, as ``deliver`` counts them for each message."""
    if with_headers:
        return sum(len(p) + (len(h) if h is not None else 0) for _s, _r, h, p in msgs)
    return sum(len(p) for _s, _r, _h, p in msgs)


class AuthWorkers:
    """The bounded pool that runs password checks (scrypt) off the event loop, owned by the
    server: ``WORKERS`` threads at a time, at most ``PENDING`` CONNECTs running or waiting (beyond
    that a CONNECT is refused at once, so a flood of bad passwords costs the loop nothing and
    queues nothing unbounded). A reload's checks of connected clients use the same threads."""

    WORKERS = 2
    PENDING = 32

    def __init__(self) -> None:
        self._limiter: anyio.CapacityLimiter | None = None
        self.pending = 0

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made on first use: it needs the running event loop
            self._limiter = anyio.CapacityLimiter(self.WORKERS)
        return self._limiter

    def reserve(self) -> bool:
        if self.pending >= self.PENDING:
            return False
        self.pending += 1
        return True

    def release(self) -> None:
        self.pending -= 1


_CREDENTIAL_FIELDS = ("user", "pass", "auth_token", "nkey", "sig", "jwt")


def _valid_queue(queue: str) -> bool:
    return bool(queue) and not any(c.isspace() for c in queue)


async def aclose_quietly(stream: ByteStream) -> None:
    try:
        with anyio.move_on_after(1):
            await stream.aclose()
    except Exception:  # the socket may already be gone; closing is best effort by nature
        pass
