"""Stream backups: ``$JS.API.STREAM.SNAPSHOT.<stream>`` and ``$JS.API.STREAM.RESTORE.<stream>``
on the reference's wire protocol, the one ``nats stream backup`` / ``nats stream restore`` and
nats.go's ``SnapshotStream`` / ``RestoreSnapshot`` speak.

Snapshot. The request (``deliver_subject``, ``no_consumers``, ``chunk_size``, ``window_size``,
``jsck``) is answered with the stream's config and state once the copy has begun; then the
bytes go to ``deliver_subject`` in chunks of ``chunk_size`` (clamped to 1 KiB-1 MiB, default
128 KiB), each with a reply subject ``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>`` the
receiver answers (anything) to acknowledge it; at most ``window_size`` (1 KiB-32 MiB, default
8 MiB) is unacknowledged at a time. The end is an empty message with status 204; a failure
ends it with an empty message of status 408 (``No Flow Response``: no acknowledgement for
``ACK_TIMEOUT``; ``No Interest``: nobody subscribes to the deliver subject any more, or came
within ``INTEREST_WAIT``) or 500 (the store failed).

Restore. The request (``config``, ``state``) is checked as the reference checks it -- the
config as a create checks it, then the name (10130 when taken) -- and answered with a
``deliver_subject``; the client sends the bytes there in order, each chunk as a request that is
answered (empty) once the chunk is on disk, then an empty message, answered with the restored
stream's info (or the error, 10062). A restore with no chunk for ``RESTORE_IDLE`` is given up.

The bytes are leafjet's own inside the reference's framing. The reference sends a tar of its
block files in S2's framed format, and `nats stream backup` decodes the S2 frames as they come
(to show progress) and fails on anything else; so leafjet sends the store snapshot
(core/store/snapshot.py: the messages with their sequences and times, the deleted sequences,
the consumers' configs and states unless ``no_consumers``, the sources' positions) as a
Snappy-framed stream, which S2 readers read. Inside, the bytes differ: a backup restores into
leafjet, and a nats-server backup into nats-server; each refuses the other's with a clear error.

A restore is all-or-nothing: the chunks are spooled to a file (``<name>.restoring-<id>.part``)
beside a staging folder (``<name>.restoring-<id>``; a restart removes both), the store is built
in the folder, checked (counts and checksum) and only then renamed into place and started, as a
restart starts a stream. The name is reserved meanwhile (a create of it is refused). Memory is
bounded by a batch of the restore (``RESTORE_BATCH_BYTES``), not by the stream. In a hub
cluster the meta leader places the restore as it would place a create; the placed server takes
the backup, builds the store, then creates the stream through the meta group on itself with
the creation time its store waits for (``Backups.staged``, hub/meta/api.py ``commit_restore``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from core import subjects
from core.api_errors import ApiError, api_error
from core.errors import StoreError
from core.fsync import fsync_dir
from core.jetstream.consumer import STATE_PREFIX
from core.jetstream.gotime import rfc3339_nano
from core.jetstream.models import api_response, error_response
from core.jetstream.stream import advise
from core.jetstream.task_owner import TaskOwner
from core.server.interest import nuid
from core.server.internal import InternalReceiver

if TYPE_CHECKING:
    from core.jetstream.engine import AccountJetStream, JetStream
    from core.jetstream.models import StreamConfig
    from core.jetstream.stream import Stream
    from core.server.accounts import Account
    from core.server.internal import InboundMsg

log = logging.getLogger("leafjet.jetstream.backup")

ACK_SUBJECT = "$JS.SNAPSHOT.ACK.{stream}.{id}"
RESTORE_SUBJECT = "$JS.SNAPSHOT.RESTORE.{stream}.{id}"
RESTORE_CREATE = "$JS.EVENT.ADVISORY.STREAM.RESTORE_CREATE"
RESTORE_COMPLETE = "$JS.EVENT.ADVISORY.STREAM.RESTORE_COMPLETE"
STAGING_MARK = ".restoring-"  # a staging folder's name: <stream>.restoring-<id>
# In a hub cluster's staging folder, once its store is whole and its create is asked of the meta
# group: {"name", "created"}, the assignment the store waits for (kept across a restart).
STAGED_FILE = "restored.json"

# The reference's defaults and clamps (nats-server's streamSnapshot)
CHUNK_DEFAULT = 128 << 10
CHUNK_MIN, CHUNK_MAX = 1 << 10, 1 << 20
WINDOW_DEFAULT = 8 << 20
WINDOW_MIN, WINDOW_MAX = 1 << 10, 32 << 20
ACK_TIMEOUT = 5.0  # no acknowledgement for this long ends a snapshot (408 No Flow Response)
INTEREST_WAIT = 2.0  # how long a snapshot waits for a subscriber on its deliver subject
RESTORE_IDLE = 5.0  # no chunk for this long gives a restore up (the reference's activity interval)
RESTORE_BATCH_BYTES = 8 << 20  # payload bytes a restore applies to the store per call
SNAPPY_MAGIC = b"\xff\x06\x00\x00sNaPpY"  # a framed stream's identifier chunk
MAX_SNAPSHOTS = 8  # running at once (each holds a read transaction on its store)
MAX_RESTORES = 4  # running at once (each holds a staging folder)
# Chunks a restore holds before writing them: a client sends each once the one before is answered
# (nats, jsm.go); one that does not loses what does not fit, and its restore fails saying so.
RESTORE_QUEUE = 16

NO_INTEREST = b"NATS/1.0 408 No Interest\r\n\r\n"
NO_FLOW = b"NATS/1.0 408 No Flow Response\r\n\r\n"
END_OK = b"NATS/1.0 204\r\n\r\n"


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    deliver_subject: str
    no_consumers: bool
    chunk_size: int
    window_size: int
    check: bool  # jsck: the store's integrity check before the copy

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> SnapshotRequest:
        deliver = body.get("deliver_subject") or ""
        if not isinstance(deliver, str) or not subjects.is_valid_literal_subject(deliver):
            raise api_error("JSSnapshotDeliverSubjectInvalidErr")
        chunk = _int(body.get("chunk_size")) or CHUNK_DEFAULT
        window = _int(body.get("window_size")) or WINDOW_DEFAULT
        chunk = min(max(CHUNK_MIN, chunk), CHUNK_MAX)
        window = max(min(max(WINDOW_MIN, window), WINDOW_MAX), chunk)
        return cls(deliver, bool(body.get("no_consumers")), chunk, window, bool(body.get("jsck")))


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def is_staging(folder_name: str) -> bool:
    return STAGING_MARK in folder_name


class Backups(TaskOwner):
    """The snapshots and restores of one JetStream, each in a task of its own (a restore waits
    for its client between chunks; the API's queue must not)."""

    def __init__(self, js: JetStream) -> None:
        super().__init__()
        self.js = js
        self.snapshots = 0  # running
        self.restores: dict[tuple[str, str], str] = {}  # (account, stream) -> deliver subject
        # in a hub cluster, restored stores waiting for their assignment: (account, stream) ->
        # (the creation time the assignment carries, the staging folder); engine.create_stream
        # moves the folder into place for that assignment only
        self.staged: dict[tuple[str, str], tuple[int, Path]] = {}
        # of those, the ones a start found (``staged_leftover``): the meta group's first pass
        # either moves each into place (its assignment is there) or drops it (``drop_unclaimed``)
        self.leftover: set[tuple[str, str]] = set()

    def restoring(self, ajs: AccountJetStream, name: str) -> bool:
        return (ajs.account.name, name) in self.restores

    def keep_leftover(self, ajs: AccountJetStream, folder: Path) -> bool:
        """At a start in a hub cluster: keep a staging folder whose store waits for its assignment
        (``mark_staged``); False: it is a leftover to remove."""
        waiting = staged_leftover(folder)
        if waiting is None:
            return False
        key = (ajs.account.name, waiting[0])
        self.staged[key] = (waiting[1], folder)
        self.leftover.add(key)
        log.info("keeping %s: a restored stream's store, waiting for its assignment", folder)
        return True

    async def drop_unclaimed(self, assigned: Callable[[tuple[str, str], int], bool]) -> None:
        """After the meta group's first pass: the kept staging folders that no assignment here
        took (``assigned(key, created)`` is False: the create never committed) are removed."""
        for key in list(self.leftover):
            self.leftover.discard(key)
            staged = self.staged.get(key)
            if staged is None or assigned(key, staged[0]):
                continue  # taken (moved into place), or its stream is being created now
            self.staged.pop(key, None)
            log.info("removing %s: a restore whose create did not commit", staged[1])
            await anyio.to_thread.run_sync(remove_staging, staged[1])

    # ------------------------------------------------------------------ snapshot

    def start_snapshot(
        self,
        ajs: AccountJetStream,
        stream: Stream,
        req: SnapshotRequest,
        answer: dict[str, Any],
        reply: str | None,
    ) -> None:
        """Send ``stream``'s snapshot as ``req`` asks; ``answer`` (its config and state) goes to
        ``reply`` once the copy has begun."""
        tg = self._room("JSStreamSnapshotErrF", "snapshots", self.snapshots, MAX_SNAPSHOTS)
        self.snapshots += 1
        what = f"snapshot of stream {ajs.account.name}/{stream.name}"
        tg.start_soon(_contained, what, self._snapshot(ajs, stream, req, answer, reply))

    def _room(self, error: str, what: str, running: int, most: int) -> anyio.abc.TaskGroup:
        """The task group to start one more of ``what`` in, or the API error ``error`` saying
        why there is none."""
        if self._tg is None:
            raise api_error(error, err=f"{what} are not being served")
        if running >= most:
            raise api_error(error, err=f"{most} {what} are running; try again later")
        return self._tg

    async def _snapshot(
        self,
        ajs: AccountJetStream,
        stream: Stream,
        req: SnapshotRequest,
        answer: dict[str, Any],
        reply: str | None,
    ) -> None:
        account, name = ajs.account, stream.name
        keep = (lambda key: not key.startswith(STATE_PREFIX)) if req.no_consumers else None
        chunks = stream.store.snapshot(keep, check=req.check)
        try:
            try:
                first = await chunks.__anext__()  # the copy's read transaction has begun
            except (StoreError, OSError) as e:
                log.warning("snapshot of stream %s/%s failed: %s", account.name, name, e)
                err = api_error("JSStreamSnapshotErrF", err=str(e))
                _answer(account, reply, error_response("stream_snapshot_response", err))
                return
            _answer(account, reply, api_response("stream_snapshot_response", answer))
            began, start = time.monotonic(), time.time_ns()
            stream.advise(
                f"$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_CREATE.{name}",
                "advisory.v1.snapshot_create",
                {"stream": name, "state": answer.get("state")},
            )
            error, sent = await self._send(ajs, name, first, chunks, req)
            fields = {"stream": name, "start": rfc3339_nano(start), "end": rfc3339_nano(time.time_ns())}
            stream.advise(
                f"$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.{name}",
                "advisory.v1.snapshot_complete",
                {**fields, **({"error": error} if error else {})},
            )
            took = time.monotonic() - began
            if error:
                log.warning(
                    "snapshot of stream %s/%s failed after %.1fs: %s", account.name, name, took, error
                )
            else:
                log.info("snapshot of stream %s/%s: %d bytes in %.2fs", account.name, name, sent, took)
        finally:
            self.snapshots -= 1
            with anyio.CancelScope(shield=True):
                await chunks.aclose()  # type: ignore[attr-defined]

    async def _send(
        self,
        ajs: AccountJetStream,
        name: str,
        first: bytes,
        chunks: AsyncIterator[bytes],
        req: SnapshotRequest,
    ) -> tuple[str | None, int]:
        """Compress and send the copy with the reference's flow control; (the error, or None;
        the bytes sent)."""
        account = ajs.account
        deliver = req.deliver_subject
        ack_subject = ACK_SUBJECT.format(stream=name, id=nuid())
        acks = InternalReceiver(
            f"snapshot-acks-{name}", account, capacity=req.window_size // req.chunk_size + 64
        )
        acks.subscribe(ack_subject + ".>")
        slots = window = req.window_size // req.chunk_size
        index, sent = 1, 0
        pending = bytearray()

        def interest() -> bool:
            found = account.sublist.match(deliver)
            return bool(found.plain or found.queues)

        async def send_ready(final: bool) -> str | None:
            nonlocal slots, index, sent
            while len(pending) >= req.chunk_size or (final and pending):
                while True:  # the acknowledgements that came meanwhile (never past the window)
                    try:
                        acks.inbox.receive_nowait()
                        slots = min(slots + 1, window)
                    except anyio.WouldBlock:
                        break
                if slots <= 0:
                    with anyio.move_on_after(ACK_TIMEOUT):
                        await acks.inbox.receive()
                        slots = min(slots + 1, window)
                    if slots <= 0:
                        return "no flow response"
                if not interest():
                    return "no interest"
                chunk = bytes(pending[: req.chunk_size])
                del pending[: req.chunk_size]
                account.publish(deliver, f"{ack_subject}.{len(chunk)}.{index}", None, chunk)
                slots -= 1
                index += 1
                sent += len(chunk)
            return None

        import cramjam  # here: ~3 MB of RSS an agent that never backs up does not need

        error: str | None = None
        header = END_OK
        try:
            if not interest():  # the client may subscribe just after asking: wait for it, bounded
                arrived = anyio.Event()
                account.watch_interest(deliver, arrived.set)
                try:
                    with anyio.move_on_after(INTEREST_WAIT):
                        await arrived.wait()
                finally:
                    account.unwatch_interest(deliver, arrived.set)
            piece: bytes | None = first
            while piece is not None:
                # each piece a framed stream of its own (their concatenation is one: the stream
                # identifier may repeat); ~0.2 ms for a store chunk of 256 KiB
                pending += cramjam.snappy.compress(piece)
                error = await send_ready(False)
                if error:
                    break
                piece = await anext(chunks, None)
            else:
                error = await send_ready(True)
            if error:
                header = NO_FLOW if error == "no flow response" else NO_INTEREST
        except (StoreError, OSError) as e:
            error = str(e)
            header = f"NATS/1.0 500 {_one_line(error)}\r\n\r\n".encode()
        finally:
            acks.unsubscribe_all()
        account.publish(deliver, None, header, b"")
        return error, sent

    # ------------------------------------------------------------------ restore

    def start_restore(
        self,
        ajs: AccountJetStream,
        cfg: StreamConfig,
        answer: Callable[[Stream], Awaitable[dict[str, Any]]],
    ) -> str:
        """Take a restore of ``cfg`` (already checked as a create): its name is reserved and the
        deliver subject the client sends the bytes to is returned. ``answer`` builds the reply
        to the last chunk from the restored stream."""
        tg = self._room("JSStreamRestoreErrF", "restores", len(self.restores), MAX_RESTORES)
        key = (ajs.account.name, cfg.name)
        if key in self.restores:
            raise api_error("JSStreamNameExistRestoreFailedErr")
        token = nuid()
        deliver = RESTORE_SUBJECT.format(stream=cfg.name, id=token)
        rx = _RestoreInbox(f"restore-{cfg.name}", ajs.account, capacity=RESTORE_QUEUE + 1)
        rx.subscribe(deliver)
        self.restores[key] = deliver
        what = f"restore of stream {ajs.account.name}/{cfg.name}"
        tg.start_soon(_contained, what, self._restore(ajs, cfg, rx, token, answer))
        return deliver

    async def _restore(
        self,
        ajs: AccountJetStream,
        cfg: StreamConfig,
        rx: _RestoreInbox,
        token: str,
        answer: Callable[[Stream], Awaitable[dict[str, Any]]],
    ) -> None:
        account, name = ajs.account, cfg.name
        staging = ajs.root / f"{name}{STAGING_MARK}{token}"
        spool = ajs.root / f"{name}{STAGING_MARK}{token}.part"  # beside it: never moved with it
        began, start = time.monotonic(), time.time_ns()
        domain = self.js.domain
        advise(account, domain, f"{RESTORE_CREATE}.{name}", "advisory.v1.restore_create", {"stream": name})
        total = 0
        try:
            await anyio.to_thread.run_sync(_make_staging, staging)
            fd = await anyio.to_thread.run_sync(_open_spool, spool)
            try:
                reply, total = await self._receive(ajs, name, rx, fd)
            finally:
                await anyio.to_thread.run_sync(os.close, fd)
            rx.unsubscribe_all()
            if reply is None:
                return
            try:
                async with contextlib.aclosing(_spooled_chunks(spool)) as chunks:
                    stream = await self.js.restore_stream(ajs, cfg, staging, chunks)
                body = await answer(stream)
            except Exception as e:
                err = e if isinstance(e, ApiError) else api_error("JSStreamRestoreErrF", err=_why(e))
                if not isinstance(e, ApiError | StoreError | OSError):
                    log.exception("restore of stream %s/%s failed", account.name, name)
                log.warning("restore of stream %s/%s failed: %s", account.name, name, err.description)
                _refuse(account, reply, err)
                return
            _answer(account, reply, body)
            log.info(
                "restored stream %s/%s from %d bytes in %.2fs",
                account.name,
                name,
                total,
                time.monotonic() - began,
            )
        except OSError as e:
            log.warning("restore of stream %s/%s failed: %s", account.name, name, e)
        finally:
            rx.unsubscribe_all()
            self.restores.pop((account.name, name), None)
            end = time.time_ns()
            fields = {"stream": name, "start": rfc3339_nano(start), "end": rfc3339_nano(end), "bytes": total}
            advise(account, domain, f"{RESTORE_COMPLETE}.{name}", "advisory.v1.restore_complete", fields)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(remove_staging, staging, spool)

    async def _receive(
        self, ajs: AccountJetStream, name: str, rx: _RestoreInbox, fd: int
    ) -> tuple[str | None, int]:
        """Write the chunks to ``fd``, acknowledging each once written, until the empty one:
        (its reply subject, the bytes received); (None, ...) when the restore was given up."""
        account = ajs.account
        limit = self.js.config.max_file  # the spool is bounded by what the server may store
        total = 0
        while True:
            msg: InboundMsg | None = None
            with anyio.move_on_after(RESTORE_IDLE):
                msg = await rx.inbox.receive()
            if rx.overflowed:
                why = "chunks came faster than they were answered"  # each was answered so
            elif msg is None:
                why = f"no chunk for {RESTORE_IDLE:g}s after {total} bytes"
            elif not msg.reply:
                why = "a chunk came without a reply subject"
            elif not msg.payload:
                return msg.reply, total
            elif 0 < limit < total + len(msg.payload):
                why = f"the backup is larger than jetstream.max_file_store ({limit} bytes)"
                _refuse(account, msg.reply, api_error("JSStreamRestoreErrF", err=why))
            else:
                try:
                    await anyio.to_thread.run_sync(_write_all, fd, msg.payload)
                except OSError as e:
                    why = f"cannot store the backup: {e.strerror or e}"
                    _refuse(account, msg.reply, api_error("JSStreamRestoreErrF", err=why))
                else:
                    total += len(msg.payload)
                    account.publish(msg.reply, None, None, b"")
                    continue
            log.warning("restore of stream %s/%s given up: %s", account.name, name, why)
            return None, total


class _RestoreInbox(InternalReceiver):
    """A restore's chunks, queued for its task. A client sends each chunk once the one before is
    answered (nats, jsm.go); one that does not and overflows the queue gets, for that chunk and
    every later one (its last, empty one too), the error that ends the restore: never a stream
    built from part of a backup, never a client left waiting."""

    overflowed = False

    def deliver(
        self, sub: Any, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None:
        if not self.overflowed and len(self.inbox) < RESTORE_QUEUE:
            super().deliver(sub, subject, reply, headers, payload)
            return
        if not self.overflowed:
            self.overflowed = True
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
                self.inbox.send_nowait(None)  # type: ignore[arg-type]  # wakes the task: it ends
        err = api_error(
            "JSStreamRestoreErrF",
            err="chunks came faster than they were answered: send each chunk once the one before"
            " it is answered",
        )
        _refuse(self.account, reply, err)


async def _contained(what: str, work: Awaitable[None]) -> None:
    """One snapshot's or restore's failure (a bug) ends it alone, logged: never the others, or
    JetStream, whose task group owns them."""
    try:
        await work
    except Exception:
        log.exception("%s failed", what)


def _answer(account: Account, reply: str | None, body: dict[str, Any]) -> None:
    if reply:
        account.publish(reply, None, None, json.dumps(body, separators=(",", ":")).encode())


def _refuse(account: Account, reply: str | None, err: ApiError) -> None:
    """A restore's chunk (or its last) answered with the error that ends the restore, as the
    reference answers it: a create response."""
    _answer(account, reply, error_response("stream_create_response", err))


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def _why(e: Exception) -> str:
    return str(e) or type(e).__name__


def _make_staging(staging: Path) -> None:
    staging.mkdir(parents=True)


def mark_staged(staging: Path, name: str, created: int) -> None:
    """Record, durably, that the store in ``staging`` is whole and waits for the assignment of
    stream ``name`` created at ``created`` (a cluster restore, before its create is asked of the
    meta group): a restart keeps the folder for that assignment (``staged_leftover``), so a crash
    between the commit and the store's move into place does not leave the stream empty."""
    path = staging / STAGED_FILE
    with open(path, "w") as f:
        json.dump({"name": name, "created": created}, f)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(staging)
    fsync_dir(staging.parent)  # the staging folder's own name (made without a sync)


def staged_leftover(folder: Path) -> tuple[str, int] | None:
    """The (stream name, creation time) a staging folder found at a start waits for (``mark_staged``),
    or None: a restore cut short before its store was whole."""
    try:
        with open(folder / STAGED_FILE) as f:
            body = json.load(f)
        name, created = body["name"], body["created"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(name, str) or type(created) is not int:
        return None
    if not folder.name.startswith(name + STAGING_MARK):
        return None
    return name, created


def remove_staging(*paths: Path) -> None:
    """A restore's staging folder and spool file (either may be gone: moved into place, never
    made)."""
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _open_spool(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _spooled_chunks(spool: Path) -> AsyncGenerator[bytes, None]:
    """The snapshot bytes of a spooled backup: its Snappy frames read and decompressed a few at a
    time, off the loop. Checksums are not checked frame by frame: the snapshot's own (CRC-32 of
    every record, at its end) covers the whole."""
    f = await anyio.to_thread.run_sync(open, spool, "rb")
    try:
        head = await anyio.to_thread.run_sync(f.read, len(SNAPPY_MAGIC))
        if head != SNAPPY_MAGIC:
            raise StoreError(
                "not a leafjet stream backup (a nats-server backup restores only into nats-server)"
            )
        while True:
            piece = await anyio.to_thread.run_sync(_read_frames, f)
            if piece is None:
                return
            yield piece
    finally:
        await anyio.to_thread.run_sync(f.close)


def _read_frames(f: Any, want: int = 256 << 10) -> bytes | None:
    """About ``want`` decompressed bytes from the framed stream in ``f`` (None at its end)."""
    import cramjam  # imported where first used (see _send)

    out: list[bytes] = []
    size = 0
    while size < want:
        header = f.read(4)
        if not header:
            break
        if len(header) < 4:
            raise StoreError("the backup is damaged: a frame's header is cut short")
        kind, length = header[0], int.from_bytes(header[1:], "little")
        body = f.read(length)
        if len(body) < length:
            raise StoreError("the backup is damaged: a frame is cut short")
        if kind in (0x00, 0x01):  # compressed, uncompressed: a 4-byte checksum, then the data
            if length < 4:
                raise StoreError("the backup is damaged: a frame too short for its checksum")
            try:
                data = bytes(cramjam.snappy.decompress_raw(body[4:])) if kind == 0x00 else body[4:]
            except cramjam.DecompressionError as e:
                raise StoreError(f"the backup is damaged: {e}") from None
            out.append(data)
            size += len(data)
        elif kind == 0xFF:  # a stream identifier again (streams concatenated)
            if body != SNAPPY_MAGIC[4:]:
                raise StoreError("the backup is damaged: a bad stream identifier")
        elif kind < 0x80:  # reserved, unskippable
            raise StoreError(f"the backup is damaged: a frame of unknown kind {kind:#x}")
        # 0x80-0xfe: skippable (padding, reserved)
    return b"".join(out) if out else None
