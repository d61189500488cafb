"""Range reads through leafjet's bulk read API (``$JS.API.LEAFJET.READ.<stream>``), nats-py IO.

One request ``{"v": 1, "seq": N, "max_msgs": M, "max_bytes": B[, "filter": [...]][, "compress": "zstd"]}``
gets one reply: a columnar frame (core/protocol/readframe.py) of the messages the reply covers, with
``Leafjet-Read-First``/``-Last`` saying which sequences it covers (every matching message in that
range is in the frame). The API is a leafjet extension: the reference leaves the request unanswered,
so whether a server has it is learnt once, on the driver (``probe``: only a server whose INFO names
leafjet is asked), and carried by the partitions; a server without it is read by batched direct gets
(reader.py), as before.

Unfiltered ranges are read in chunks of ``M`` sequences with up to ``in_flight`` requests out, so the
server builds the next frame while this process turns the last one into Arrow. A chunk asks for as
many messages as it has sequences; a reply cut short by the byte bound is continued before the next
chunk is used, and rows past the chunk's end (possible with deleted sequences) are left out. With a
subject filter the matches may be sparse: one request at a time, each from the last covered + 1.
"""

from __future__ import annotations

import asyncio
import bisect
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bridges.spark.options import SourceOptions
from bridges.spark.reader import LeafjetSourceError, StreamNotFoundError, _where
from core.protocol.readframe import FrameError, ReadFrame, decode_frame, decompress_frame

VERSION = 1
MAX_MSGS = 100_000  # the server clamps max_msgs to this
MAX_BYTES = 8 << 20  # asked per request; the server clamps it (to its max_payload less 4 KiB)
# Requests out per partition: two keep the server building the next frame while this process converts
# the last. More only queue up at the server (it serves them on one event loop), where every other
# partition's requests wait behind them.
MAX_IN_FLIGHT = 2
H_READ = "Leafjet-Read"
H_LAST = "Leafjet-Read-Last"
H_ENCODING = "Leafjet-Read-Encoding"
ERR_TOO_LARGE = 10054  # the message at `seq` alone does not fit a reply
ERR_NOT_FOUND = 10059


class NotServedError(LeafjetSourceError):
    """The server answered the read API with an error that means it does not serve it to us."""


class TooLargeError(LeafjetSourceError):
    """The message at ``seq`` does not fit a reply (10054): read that one by MSG.GET."""

    def __init__(self, seq: int, text: str) -> None:
        super().__init__(text)
        self.seq = seq


@dataclass(frozen=True, slots=True)
class Piece:
    """A reply's use: ``frame``'s first ``rows`` messages are every stored (matching) message with
    ``start <= seq <= covered``."""

    start: int
    covered: int
    frame: ReadFrame
    rows: int


def subject(stream: str) -> str:
    return f"$JS.API.LEAFJET.READ.{stream}"


def says_leafjet(nc: NATS) -> bool:
    """The connection's INFO names leafjet (its ``go`` field: ``python3.x leafjet/<version>``)."""
    info = getattr(nc, "_server_info", None) or {}
    return "leafjet/" in str(info.get("go", ""))


def is_loopback(servers: tuple[str, ...]) -> bool:
    for url in servers:
        host = urlsplit(url if "://" in url else f"nats://{url}").hostname or ""
        if host == "localhost":
            continue
        try:
            if not ip_address(host).is_loopback:
                return False
        except ValueError:
            return False
    return True


def wants_zstd(opts: SourceOptions) -> bool:
    """zstd when asked, or (auto) when the server is not on this machine: compressing costs the
    server CPU and saves bytes on the wire, which pays on a network link and not on loopback."""
    if opts.compression == "auto":
        return not is_loopback(opts.conn.servers)
    return opts.compression == "zstd"


def _request_body(opts: SourceOptions, seq: int, max_msgs: int) -> bytes:
    body: dict[str, Any] = {"v": VERSION, "seq": seq, "max_msgs": max_msgs, "max_bytes": MAX_BYTES}
    if opts.subject:
        body["filter"] = [opts.subject]
    if wants_zstd(opts):
        body["compress"] = "zstd"
    return json.dumps(body, separators=(",", ":")).encode()


def _error_of(msg: Msg) -> dict[str, Any] | None:
    """The API error of a JSON reply, or None for a frame."""
    if msg.headers and H_READ in msg.headers:
        return None
    try:
        body = json.loads(msg.data)
    except ValueError:
        return {"description": f"unreadable reply {msg.data[:60]!r}"}
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else {"description": f"unexpected reply {msg.data[:60]!r}"}


async def probe(nc: NATS, opts: SourceOptions) -> bool:
    """Does the server answer the read API for this stream? Asked once per query, on the driver.

    Only a server whose INFO names leafjet is asked (a one-message read): the reference leaves the
    request unanswered, and waiting out a timeout on every query against it would cost more than the
    question is worth (``bulkRead=true`` forces the API for a leafjet that does not say so). A frame,
    or "too large" (10054: the API is there), means yes; any other error reply or silence means no.
    """
    if not says_leafjet(nc):
        return False
    body = json.dumps({"v": VERSION, "seq": 1, "max_msgs": 1, "max_bytes": 1024}).encode()
    try:
        reply = await nc.request(subject(opts.stream), body, timeout=opts.conn.timeout)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return False
    err = _error_of(reply)
    return err is None or err.get("err_code") == ERR_TOO_LARGE


class _Requests:
    """Read requests on one wildcard inbox; each reply resolves its request's future."""

    def __init__(self, nc: NATS, opts: SourceOptions) -> None:
        self.nc, self.opts = nc, opts
        self.prefix = nc.new_inbox()
        self.subject = subject(opts.stream)
        self.pending: dict[str, asyncio.Future[Msg]] = {}
        self.counter = 0
        self.sub: Any = None
        self.progress = 0.0  # loop time of the last reply (or of a send into an empty window)

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(
            f"{self.prefix}.*", cb=self._on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1
        )

    async def stop(self) -> None:
        for fut in self.pending.values():
            fut.cancel()
        if self.sub is not None:
            await self.sub.unsubscribe()

    async def _on_msg(self, msg: Msg) -> None:
        fut = self.pending.pop(msg.subject.rsplit(".", 1)[-1], None)
        self.progress = asyncio.get_running_loop().time()
        if fut is not None and not fut.done():
            fut.set_result(msg)

    async def ask(self, seq: int, max_msgs: int) -> asyncio.Future[Msg]:
        self.counter += 1
        token = str(self.counter)
        loop = asyncio.get_running_loop()
        if not self.pending:
            self.progress = loop.time()
        fut: asyncio.Future[Msg] = loop.create_future()
        self.pending[token] = fut
        body = _request_body(self.opts, seq, max_msgs)
        await self.nc.publish(self.subject, body, reply=f"{self.prefix}.{token}")
        return fut

    async def _wait(self, seq: int, fut: asyncio.Future[Msg]) -> Msg:
        """The reply, or a timeout once *no* reply has come for ``timeout`` seconds. The deadline runs
        from the last progress, not from the send: a request queued at a busy server behind this
        partition's earlier ones is not late while those arrive. A server that sends nothing for
        ``timeout`` still ends the read with an error."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = self.progress + self.opts.conn.timeout - loop.time()
            if remaining <= 0:
                raise LeafjetSourceError(
                    f"bulk read from {seq} timed out after {self.opts.conn.timeout}s for {_where(self.opts)}"
                )
            try:
                return await asyncio.wait_for(asyncio.shield(fut), remaining)
            except TimeoutError:
                continue  # another reply may have come meanwhile: the deadline moved

    async def answer(self, seq: int, fut: asyncio.Future[Msg], first: bool) -> tuple[int, ReadFrame]:
        """The reply to a request from ``seq``: (last covered, frame)."""
        msg = await self._wait(seq, fut)
        err = _error_of(msg)
        if err is not None:
            code = err.get("err_code")
            text = f"bulk read from {seq} failed for {_where(self.opts)}: {err.get('description', err)}"
            if code == ERR_NOT_FOUND:
                raise StreamNotFoundError(f"{_where(self.opts)} not found: {err.get('description', err)}")
            if code == ERR_TOO_LARGE:
                raise TooLargeError(seq, text)
            raise (NotServedError if first else LeafjetSourceError)(text)
        try:
            covered = int(msg.headers[H_LAST]) if msg.headers else -1
            data = msg.data
            if msg.headers and msg.headers.get(H_ENCODING) == "zstd":
                data = decompress_frame(data)
            frame = decode_frame(data)
        except (FrameError, ValueError, KeyError) as e:
            raise LeafjetSourceError(f"bad bulk read reply from {seq} for {_where(self.opts)}: {e}") from None
        if covered < seq - 1 or (len(frame) and (frame.seqs[0] < seq or frame.seqs[-1] > covered)):
            raise LeafjetSourceError(
                f"bad bulk read reply from {seq} for {_where(self.opts)}: covers up to {covered} "
                f"with {len(frame)} messages"
            )
        return covered, frame


def _piece(seq: int, covered: int, frame: ReadFrame, hi: int) -> Piece:
    rows = len(frame) if covered <= hi else bisect.bisect_right(frame.seqs, hi)
    return Piece(seq, min(covered, hi), frame, rows)


async def read_pieces(
    nc: NATS, opts: SourceOptions, first: int, last: int, probing: bool = True
) -> AsyncIterator[Piece]:
    """The stream's messages with ``first <= seq <= last`` (matching ``opts.subject``) as pieces, in
    order. With ``probing``, an error reply to the first request raises ``NotServedError`` (nothing
    was yielded yet: the caller may read another way); ``TooLargeError`` names a message to read by
    MSG.GET (every message before it was yielded)."""
    if last < first:
        return
    per_request = max(1, min(opts.rows_per_arrow_batch, MAX_MSGS))
    reqs = _Requests(nc, opts)
    await reqs.start()
    try:
        asked_first = probing
        if opts.subject:
            seq = first
            while seq <= last:
                # never more matches than the range has sequences: less read past `last`
                want = min(per_request, last - seq + 1)
                covered, frame = await reqs.answer(seq, await reqs.ask(seq, want), asked_first)
                asked_first = False
                if covered < seq:
                    return  # the stream ends before `last` (it was purged or replaced meanwhile)
                yield _piece(seq, covered, frame, last)
                seq = covered + 1
            return
        chunks = deque((lo, min(lo + per_request - 1, last)) for lo in range(first, last + 1, per_request))
        window: deque[tuple[int, int, asyncio.Future[Msg]]] = deque()
        in_flight = max(1, min(opts.in_flight, MAX_IN_FLIGHT))
        while chunks or window:
            while chunks and len(window) < in_flight:
                lo, hi = chunks.popleft()
                window.append((lo, hi, await reqs.ask(lo, hi - lo + 1)))
            lo, hi, fut = window.popleft()
            covered, frame = await reqs.answer(lo, fut, asked_first)
            asked_first = False
            if covered < lo:
                for _lo, _hi, f in window:
                    f.cancel()
                return  # the stream ends before `last`
            yield _piece(lo, covered, frame, hi)
            if covered < hi:  # cut short by the byte bound: the rest of this chunk goes first
                window.appendleft((covered + 1, hi, await reqs.ask(covered + 1, hi - covered)))
    finally:
        await reqs.stop()
