"""A small, bounded HTTP/1.1 server for the monitoring endpoints: h11 (sans-IO) in an anyio shell.

Nothing a monitoring client does can stall or crash the server:
- a request head is at most ``max_head`` bytes (h11 refuses more: 431); no request may carry a
  body; only GET and HEAD are served (anything else: 405, then close);
- each request has ``request_timeout`` from when the server waits for it (an idle keep-alive
  connection included) to the end of its response, so a slowloris client is closed; each
  connection has ``connection_timeout`` in all, and at most ``max_requests`` requests;
- at most ``max_connections`` monitoring connections at once: one more is closed at accept;
- a handler that fails answers 500 and logs one line; a handler that outlives the request's
  deadline is cancelled.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import anyio
import h11
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

from core.server.failures import describe_failure

log = logging.getLogger("leafjet.monitor")

_READ_SIZE = 4096
_KNOWN = {s.value for s in HTTPStatus}


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_head: int = 8 * 1024
    request_timeout: float = 5.0
    connection_timeout: float = 60.0
    max_connections: int = 32
    max_requests: int = 1000


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


Handler = Callable[[Request], Awaitable[Response]]


def text(status: int, body: str) -> Response:
    return Response(status, body.encode(), "text/plain; charset=utf-8")


class HttpServer:
    def __init__(self, host: str, port: int, handler: Handler, limits: HttpLimits = HttpLimits()) -> None:
        self.host = host
        self.port = port
        self.handler = handler
        self.limits = limits
        self.active = 0
        self.refused = 0  # connections closed at accept: over max_connections

        self._listener: MultiListener[SocketStream] | None = None

    async def serve_until_ready(self) -> int:
        """Bind (OSError when the port is taken); the bound port."""
        self._listener = await anyio.create_tcp_listener(local_host=self.host or None, local_port=self.port)
        self.port = self._listener.extra(SocketAttribute.local_port)
        return self.port

    async def serve_forever(self) -> None:
        assert self._listener is not None
        async with self._listener, anyio.create_task_group() as tg:
            for listener in self._listener.listeners:
                assert isinstance(listener, SocketListener)  # what create_tcp_listener makes
                tg.start_soon(self._accept_loop, listener, tg)

    async def _accept_loop(self, listener: SocketListener, tg: TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as e:
                # Out of descriptors (EMFILE) and the like: the port waits and goes on; it never
                # ends the server it monitors.
                log.warning("monitoring port: accept failed: %s", e)
                await anyio.sleep(0.1)
                continue
            tg.start_soon(self._accepted, stream)

    async def _accepted(self, stream: SocketStream) -> None:
        if self.active >= self.limits.max_connections:
            self.refused += 1
            await _close(stream)
            return
        self.active += 1
        try:
            with anyio.move_on_after(self.limits.connection_timeout):
                await self._serve_connection(stream)
        except Exception as e:  # the shell itself failed: this connection ends, nothing else
            log.error("monitoring connection failed: %s", describe_failure(e))
        finally:
            self.active -= 1
            await _close(stream)

    async def _serve_connection(self, stream: SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head)
        for _ in range(self.limits.max_requests):
            with anyio.move_on_after(self.limits.request_timeout) as deadline:
                keep = await self._one_request(conn, stream)
            if deadline.cancelled_caught or not keep:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _one_request(self, conn: h11.Connection, stream: SocketStream) -> bool:
        """Read one request, answer it; whether the connection may serve another."""
        try:
            event = await _next_event(conn, stream)
        except h11.RemoteProtocolError as e:
            # a fixed text: never reflect what the peer sent
            status = e.error_status_hint if 400 <= e.error_status_hint < 500 else 400
            await _send(conn, stream, text(status, HTTPStatus(status).phrase + "\n"), False, close=True)
            return False
        if not isinstance(event, h11.Request):
            return False  # the peer closed
        method = event.method.decode("ascii", "replace")
        if method not in ("GET", "HEAD"):
            resp = text(405, "method not allowed\n")
            resp = Response(resp.status, resp.body, resp.content_type, (("Allow", "GET, HEAD"),))
            await _send(conn, stream, resp, head_only=False, close=True)
            return False
        if any(
            (k == b"content-length" and v.strip() != b"0") or k == b"transfer-encoding"
            for k, v in event.headers
        ):
            await _send(conn, stream, text(413, "a request body is not accepted\n"), False, close=True)
            return False
        try:
            end = await _next_event(conn, stream)
        except h11.RemoteProtocolError:
            return False
        if not isinstance(end, h11.EndOfMessage):
            return False
        target = event.target.decode("ascii", "replace")
        parts = urlsplit(target)
        request = Request(method, parts.path or "/", dict(parse_qsl(parts.query, keep_blank_values=True)))
        try:
            response = await self.handler(request)
        except Exception as e:
            log.error("monitoring %s %s failed: %s", method, request.path, describe_failure(e))
            log.debug("monitoring handler failure", exc_info=e)
            response = text(500, "internal error\n")
        close = conn.their_state is not h11.DONE
        await _send(conn, stream, response, head_only=method == "HEAD", close=close)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE


async def _next_event(conn: h11.Connection, stream: SocketStream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            data = await stream.receive(_READ_SIZE)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            data = b""
        conn.receive_data(data)


async def _send(
    conn: h11.Connection, stream: SocketStream, resp: Response, head_only: bool, close: bool
) -> None:
    headers = [
        ("Content-Type", resp.content_type),
        ("Content-Length", str(len(resp.body))),
        ("Access-Control-Allow-Origin", "*"),
        *resp.headers,
    ]
    if close:
        headers.append(("Connection", "close"))
    try:
        reason = HTTPStatus(resp.status).phrase.encode() if resp.status in _KNOWN else b""
        data = conn.send(h11.Response(status_code=resp.status, headers=headers, reason=reason))
        if not head_only and resp.body:
            data += conn.send(h11.Data(data=resp.body))
        data += conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        return  # h11 cannot answer in this state (the peer broke the exchange): just close
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await stream.send(data)


async def _close(stream: SocketStream) -> None:
    try:
        with anyio.move_on_after(1):
            await stream.aclose()
    except Exception:  # the peer may be gone already; closing is best effort
        pass
