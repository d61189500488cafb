"""Stateless range reads of a leafjet (or NATS) stream through nats-py.

Nothing here leaves state on the server: no consumers, only STREAM.INFO, batched
``$JS.API.DIRECT.GET.<stream>`` requests (``{"seq": N, "batch": B}``, answered by one message per hit and a
``204 EOB`` status) and, when the stream does not allow direct gets, ``$JS.API.STREAM.MSG.GET`` one
message at a time. Every wait has a deadline (``ConnOptions.timeout``).

The Spark side is synchronous; :class:`SyncSession` owns a private event loop for one ``read()`` (or one
driver-side planning call) and closes it, with the connection, when done.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bridges.spark.options import ConnOptions, SourceOptions

T = TypeVar("T")

# Fields the server appends to a direct-get reply; they become columns, not entries of `headers`.
META_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
    }
)

# (seq, subject, timestamp as epoch microseconds, user headers or None, payload)
Record = tuple[int, str, int, dict[str, str] | None, bytes]


class LeafjetSourceError(RuntimeError):
    """Any failure of the leafjet Spark source; the message names the server(s) and the stream."""


class ServerUnreachableError(LeafjetSourceError):
    pass


class AuthenticationError(LeafjetSourceError):
    pass


class StreamNotFoundError(LeafjetSourceError):
    pass


class DataLossError(LeafjetSourceError):
    pass


@dataclass(frozen=True, slots=True)
class StreamInfo:
    first_seq: int
    last_seq: int
    msgs: int
    allow_direct: bool


def _where(opts: SourceOptions) -> str:
    return f"stream {opts.stream!r} on {opts.conn.display}"


# ------------------------------------------------------------------------------------------- time parsing

_SECOND_CACHE: dict[str, int] = {}


def parse_rfc3339_us(text: str) -> int:
    """``2024-05-01T10:00:00.123456789Z`` (Go's RFC3339Nano, UTC) as epoch microseconds.

    The seconds part is cached: a stream's consecutive messages share it, so this is a dict hit and an
    int() of the fraction.
    """
    head = text[:19]
    secs = _SECOND_CACHE.get(head)
    if secs is None:
        secs = calendar.timegm(
            (
                int(head[0:4]),
                int(head[5:7]),
                int(head[8:10]),
                int(head[11:13]),
                int(head[14:16]),
                int(head[17:19]),
            )
        )
        if len(_SECOND_CACHE) > 4096:
            _SECOND_CACHE.clear()
        _SECOND_CACHE[head] = secs
    micros = 0
    if len(text) > 20 and text[19] == ".":
        frac = text[20:].rstrip("Z")
        micros = int((frac + "000000")[:6])
    elif len(text) > 19 and text[19] not in "Z":
        raise ValueError(f"only UTC timestamps are expected, got {text!r}")
    return secs * 1_000_000 + micros


def parse_header_block(raw: bytes) -> dict[str, str] | None:
    """A ``NATS/1.0\\r\\nName: value\\r\\n...`` block (as in MSG.GET's ``hdrs``) as a dict."""
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip():
            out[name.strip().decode("ascii", "replace")] = value.strip().decode("utf-8", "replace")
    return out or None


# ----------------------------------------------------------------------------------------- connections


async def connect(conn: ConnOptions, stream: str) -> NATS:
    """Connect once (no reconnects: a Spark task that loses its server fails and Spark retries it)."""
    errors: list[BaseException] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    kwargs: dict[str, Any] = {
        "servers": list(conn.servers),
        "name": "leafjet-spark",
        "allow_reconnect": False,
        "max_reconnect_attempts": 0,
        "connect_timeout": conn.timeout,
        "error_cb": on_error,
    }
    if conn.user is not None:
        kwargs["user"] = conn.user
        kwargs["password"] = conn.password or ""
    if conn.token is not None:
        kwargs["token"] = conn.token
    if conn.ca_file or conn.cert_file or any(s.startswith("tls://") for s in conn.servers):
        ctx = ssl.create_default_context(cafile=conn.ca_file)
        if conn.cert_file:
            ctx.load_cert_chain(conn.cert_file, conn.key_file)
        kwargs["tls"] = ctx
    nc = NATS()
    where = f"leafjet server {conn.display} (stream {stream!r})"
    try:
        await asyncio.wait_for(nc.connect(**kwargs), conn.timeout * 2 + 1)
    except Exception as e:
        await _close_quietly(nc)
        seen = [e, *errors]
        text = " ".join(str(x).lower() for x in seen)
        if "authoriz" in text or "authentic" in text or isinstance(e, nats.errors.AuthorizationError):
            who = f"user {conn.user!r}" if conn.user else ("a token" if conn.token else "no credentials")
            raise AuthenticationError(
                f"authentication failed at {where} with {who}: {_first_message(seen)}"
            ) from e
        raise ServerUnreachableError(f"cannot reach {where}: {_first_message(seen)}") from e
    return nc


def _first_message(errs: list[BaseException]) -> str:
    for e in errs:
        text = str(e).strip()
        if text:
            return f"{type(e).__name__}: {text}"
    return type(errs[0]).__name__


async def _close_quietly(nc: NATS) -> None:
    try:
        if not nc.is_closed:
            await asyncio.wait_for(nc.close(), 5)
    except Exception:  # the connection is being discarded; a close error changes nothing for the caller
        pass


async def _api(nc: NATS, opts: SourceOptions, subject: str, body: dict[str, Any] | None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    try:
        reply = await nc.request(subject, payload, timeout=opts.conn.timeout)
    except nats.errors.NoRespondersError:
        raise LeafjetSourceError(
            f"no JetStream API answered {subject} for {_where(opts)} (is JetStream enabled for this account?)"
        ) from None
    except nats.errors.TimeoutError:
        raise LeafjetSourceError(
            f"{subject} timed out after {opts.conn.timeout}s for {_where(opts)}"
        ) from None
    return _api_answer(reply.data, subject, opts)


def _api_answer(data: bytes, subject: str, opts: SourceOptions) -> dict[str, Any]:
    """A JetStream API answer as a dict; anything else (no JSON, not an object, an ``error``
    that is no object) is a ``LeafjetSourceError`` that names the subject and shows the start
    of what came, never a bare ``JSONDecodeError`` or ``AttributeError`` later."""
    try:
        resp = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        resp = None
    if not isinstance(resp, dict) or not isinstance(resp.get("error", {}), dict):
        raise LeafjetSourceError(f"unreadable answer to {subject} for {_where(opts)}: {bytes(data[:80])!r}")
    return resp


async def stream_info(nc: NATS, opts: SourceOptions) -> StreamInfo:
    resp = await _api(nc, opts, f"$JS.API.STREAM.INFO.{opts.stream}", None)
    err = resp.get("error")
    if err:
        if err.get("err_code") == 10059 or err.get("code") == 404:
            raise StreamNotFoundError(f"{_where(opts)} not found: {err.get('description', err)}")
        raise LeafjetSourceError(f"STREAM.INFO failed for {_where(opts)}: {err.get('description', err)}")
    try:
        state = resp.get("state", {})
        return StreamInfo(
            first_seq=int(state.get("first_seq", 0)),
            last_seq=int(state.get("last_seq", 0)),
            msgs=int(state.get("messages", 0)),
            allow_direct=bool(resp.get("config", {}).get("allow_direct", False)),
        )
    except (AttributeError, TypeError, ValueError) as e:
        raise LeafjetSourceError(f"unreadable STREAM.INFO answer for {_where(opts)}: {e}") from None


async def msg_get_next(nc: NATS, opts: SourceOptions, seq: int, subject: str | None) -> Record | None:
    """The first message at or after ``seq`` (matching ``subject``) via STREAM.MSG.GET, or None."""
    body = {"seq": seq, "next_by_subj": subject or ">"}
    resp = await _api(nc, opts, f"$JS.API.STREAM.MSG.GET.{opts.stream}", body)
    err = resp.get("error")
    if err:
        if err.get("err_code") == 10037 or (err.get("code") == 404 and err.get("err_code") != 10059):
            return None
        if err.get("err_code") == 10059:
            raise StreamNotFoundError(f"{_where(opts)} not found: {err.get('description', err)}")
        raise LeafjetSourceError(f"STREAM.MSG.GET failed for {_where(opts)}: {err.get('description', err)}")
    try:
        m = resp["message"]
        hdrs = parse_header_block(base64.b64decode(m["hdrs"])) if m.get("hdrs") else None
        data = base64.b64decode(m["data"]) if m.get("data") else b""
        return (int(m["seq"]), str(m["subject"]), parse_rfc3339_us(m["time"]), hdrs, data)
    except (KeyError, AttributeError, TypeError, ValueError) as e:
        raise LeafjetSourceError(f"unreadable STREAM.MSG.GET answer for {_where(opts)}: {e!r}") from None


async def seq_at_time(nc: NATS, opts: SourceOptions, info: StreamInfo, t_us: int) -> int:
    """The first sequence whose timestamp is >= ``t_us`` (last_seq + 1 when none): a binary search.

    Stream timestamps are assigned on append, so they do not decrease with the sequence.
    """
    lo, hi = info.first_seq, info.last_seq + 1
    while lo < hi:
        mid = (lo + hi) // 2
        rec = await msg_get_next(nc, opts, mid, None)
        if rec is None or rec[2] >= t_us:
            hi = mid
        else:
            lo = rec[0] + 1
    return lo


# ----------------------------------------------------------------------------------------- range reads


def _direct_record(msg: Msg) -> Record:
    h = msg.headers or {}
    user = {k: v for k, v in h.items() if k not in META_HEADERS} or None
    ts = parse_rfc3339_us(h["Nats-Time-Stamp"])
    return (int(h["Nats-Sequence"]), h["Nats-Subject"], ts, user, msg.data)


class _DirectBatches:
    """Pipelined batched direct gets on one wildcard inbox; replies are routed by their token."""

    def __init__(self, nc: NATS, opts: SourceOptions) -> None:
        self.nc, self.opts = nc, opts
        self.prefix = nc.new_inbox()
        self.subject = f"$JS.API.DIRECT.GET.{opts.stream}"
        self.pending: dict[str, tuple[list[Record], asyncio.Future[list[Record]]]] = {}
        self.counter = 0
        self.sub: Any = None

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(f"{self.prefix}.*", cb=self._on_msg, pending_msgs_limit=-1)

    async def stop(self) -> None:
        if self.sub is not None:
            await self.sub.unsubscribe()

    async def _on_msg(self, msg: Msg) -> None:
        token = msg.subject.rsplit(".", 1)[-1]
        entry = self.pending.get(token)
        if entry is None:
            return
        rows, fut = entry
        status = msg.headers.get("Status") if msg.headers else None
        if status is None:
            rows.append(_direct_record(msg))
            return
        self.pending.pop(token, None)
        if fut.done():
            return
        if status in ("204", "404"):
            fut.set_result(rows)
        elif status == "503":
            fut.set_exception(
                LeafjetSourceError(f"direct get is not available for {_where(self.opts)} (allow_direct off?)")
            )
        else:
            desc = msg.headers.get("Description", "") if msg.headers else ""
            err = f"direct get failed for {_where(self.opts)}: {status} {desc}"
            fut.set_exception(LeafjetSourceError(err))

    async def request(self, seq: int, batch: int, subject: str | None) -> asyncio.Future[list[Record]]:
        self.counter += 1
        token = str(self.counter)
        fut: asyncio.Future[list[Record]] = asyncio.get_running_loop().create_future()
        self.pending[token] = ([], fut)
        body: dict[str, Any] = {"seq": seq, "batch": batch}
        if subject:
            body["next_by_subj"] = subject
        await self.nc.publish(self.subject, json.dumps(body).encode(), reply=f"{self.prefix}.{token}")
        return fut

    async def wait(self, fut: asyncio.Future[list[Record]]) -> list[Record]:
        try:
            return await asyncio.wait_for(fut, self.opts.conn.timeout)
        except TimeoutError:
            raise LeafjetSourceError(
                f"direct get timed out after {self.opts.conn.timeout}s for {_where(self.opts)}"
            ) from None


async def read_range(
    nc: NATS, opts: SourceOptions, first: int, last: int, direct: bool
) -> AsyncIterator[list[Record]]:
    """Yield the stream's messages with ``first <= seq <= last`` (matching ``opts.subject``), in order."""
    if last < first:
        return
    if not direct:
        async for chunk in _read_msg_get(nc, opts, first, last):
            yield chunk
        return
    db = _DirectBatches(nc, opts)
    await db.start()
    try:
        if opts.subject:
            # Matches may be sparse: ask for the next `batch` matches, continue after the last one.
            seq = first
            while seq <= last:
                rows = await db.wait(await db.request(seq, opts.batch_size, opts.subject))
                inside = [r for r in rows if r[0] <= last]
                if inside:
                    yield inside
                if len(rows) < opts.batch_size or len(inside) < len(rows):
                    return
                seq = rows[-1][0] + 1
            return
        # Unfiltered: fixed chunks of `batch_size` sequences, `in_flight` requests outstanding. A chunk
        # asks for as many messages as it has sequences, so it is complete even with deleted messages;
        # hits past its end belong to the next chunk and are dropped here.
        chunks = [(lo, min(lo + opts.batch_size - 1, last)) for lo in range(first, last + 1, opts.batch_size)]
        window: list[tuple[int, asyncio.Future[list[Record]]]] = []
        nxt = 0
        while nxt < len(chunks) or window:
            while nxt < len(chunks) and len(window) < opts.in_flight:
                lo, hi = chunks[nxt]
                window.append((hi, await db.request(lo, hi - lo + 1, None)))
                nxt += 1
            hi, fut = window.pop(0)
            rows = await db.wait(fut)
            if rows and rows[-1][0] > hi:
                rows = [r for r in rows if r[0] <= hi]
            if rows:
                yield rows
    finally:
        for _rows, fut in db.pending.values():
            fut.cancel()
        await db.stop()


async def _read_msg_get(nc: NATS, opts: SourceOptions, first: int, last: int) -> AsyncIterator[list[Record]]:
    seq, rows = first, []
    while seq <= last:
        rec = await msg_get_next(nc, opts, seq, opts.subject)
        if rec is None or rec[0] > last:
            break
        rows.append(rec)
        seq = rec[0] + 1
        if len(rows) >= opts.batch_size:
            yield rows
            rows = []
    if rows:
        yield rows


# ------------------------------------------------------------------------------------- the sync shell


class SyncSession:
    """One private event loop and one connection, for use from synchronous Spark code.

    ``with SyncSession(opts) as s: s.run(lambda nc: stream_info(nc, opts))``; :meth:`iterate` drives an
    async generator one item at a time so a partition streams through memory in chunks.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.loop = asyncio.new_event_loop()
        self.nc: NATS | None = None

    def __enter__(self) -> SyncSession:
        try:
            self.nc = self.loop.run_until_complete(connect(self.opts.conn, self.opts.stream))
        except BaseException:
            self.loop.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.nc is not None:
                self.loop.run_until_complete(_close_quietly(self.nc))
        finally:
            self.loop.close()

    def run(self, fn: Callable[[NATS], Awaitable[T]]) -> T:
        assert self.nc is not None
        return self.loop.run_until_complete(fn(self.nc))

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    item = self.loop.run_until_complete(agen.__anext__())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                self.loop.run_until_complete(aclose())


def fetch_info(opts: SourceOptions) -> StreamInfo:
    with SyncSession(opts) as s:
        return s.run(lambda nc: stream_info(nc, opts))


def resolve_range(opts: SourceOptions, s: SyncSession) -> tuple[StreamInfo, int, int]:
    """Driver side, on session ``s``: the stream's state and the inclusive sequence range the options
    ask for.

    A start below the stream's first sequence is data loss (purged or aged out): an error unless
    ``failOnDataLoss=false``, which starts at the first sequence still stored.
    """
    info = s.run(lambda nc: stream_info(nc, opts))
    first = 1 if opts.start_seq is None else opts.start_seq
    explicit_start = opts.start_seq is not None
    if opts.start_time_us is not None:
        t = opts.start_time_us
        first = s.run(lambda nc: seq_at_time(nc, opts, info, t))
        explicit_start = False
    last = info.last_seq if opts.end_seq is None else min(opts.end_seq, info.last_seq)
    if opts.end_time_us is not None:
        te = opts.end_time_us
        last = min(last, s.run(lambda nc: seq_at_time(nc, opts, info, te)) - 1)
    if explicit_start:
        check_data_loss(opts, first, last, info.first_seq)
    return info, max(first, info.first_seq), last


def check_data_loss(opts: SourceOptions, first: int, last: int, stream_first: int) -> int:
    """The first sequence to read: ``first``, or ``stream_first`` when messages before it are gone."""
    if first >= stream_first or last < first:
        return first
    if opts.fail_on_data_loss:
        gone_to = min(last, stream_first - 1)
        raise DataLossError(
            f"data loss on {_where(opts)}: sequences {first}..{gone_to} were removed (purged, deleted by "
            f"limits or aged out) before they were read; the stream now starts at {stream_first}. "
            "Set option failOnDataLoss=false to skip them."
        )
    return stream_first
