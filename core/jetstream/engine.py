"""JetStream for one server: per-account streams, their recovery, and the API's service tasks.

Layout on disk, one folder per stream so a stream is created, recovered and deleted as a unit:

    <store_dir>/jetstream/<account>/streams/<stream>/stream.json   config + creation time
    <store_dir>/jetstream/<account>/streams/<stream>/msgs.db       the SQLite-WAL store

stream.json is written (to a temporary file, fsynced, renamed) before the stream is announced,
so a crash during create leaves either no stream or a whole one. Memory-storage streams are not
recovered after a restart, as on the reference.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from core import trace
from core.api_errors import ApiError, api_error
from core.config import JetStreamConfig
from core.errors import StartupError, StoreError, StoreKeyError
from core.faults import crash_point, fault_point
from core.fsync import fsync_dir
from core.jetstream import api
from core.jetstream.backup import RESTORE_BATCH_BYTES, STAGED_FILE, Backups, is_staging, remove_staging
from core.jetstream.bulk_read import BulkReads
from core.jetstream.consumer import STATE_PREFIX, Consumer, config_key, state_key
from core.jetstream.consumer_models import ConsumerConfig, paused_config
from core.jetstream.damaged import DamagedStream, is_set_aside, move_aside
from core.jetstream.held_subjects import HeldSubjects
from core.jetstream.models import StreamConfig
from core.jetstream.monitoring import JetStreamMonitor
from core.jetstream.opening_store import OpeningStore
from core.jetstream.prepared import Prepared, PreparedStreams, commit_staged, stage_atomic
from core.jetstream.sourcing import Sourcing
from core.jetstream.stream import FIRST_SEQ_SET_KEY, Stream
from core.server.accounts import Subscription
from core.server.failures import describe_failure
from core.server.internal import Backlog, InboundMsg, InternalReceiver
from core.store.api import DelMetaOp, PurgeOp, SetMetaOp
from core.store.colblocks import BLOCK_ROWS
from core.store.memory import MemoryStore
from core.store.pool import POOL, set_max_open_stores
from core.store.spare import SpareStores
from core.store.sqlite import BULK_PAGE_SIZE, DEFAULT_PAGE_SIZE, SqliteStore
from core.threads import run_job

if TYPE_CHECKING:
    from core.server.accounts import Account
    from core.server.server import Server

log = logging.getLogger("leafjet.jetstream")

API_PREFIX = "$JS.API."
API_QUEUE_MSGS = 4096  # what an account's API queue holds
API_QUEUE_BYTES = 64 * 1024 * 1024
# A stream pipeline or consumer task that fails is restarted, this many times within RESTART_WINDOW
# seconds; one more failure ends that asset (see _supervise).
# An update or delete waits at most this long for a prepared create's config file to be put in
# place (a rename and a folder fsync on a pool thread: milliseconds, unless the disk hangs).
CONFIG_WRITE_WAIT = 30.0
# streams recovered at once at start (``JetStream._recover``): enough to keep the store pool's
# threads busy while the loop does each one's own part
RECOVERY_WORKERS = 8
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0


@dataclass
class AccountJetStream:
    account: Account
    root: Path
    streams: dict[str, Stream] = field(default_factory=dict)
    # streams that could not be recovered at start: their names stay taken (damaged.py)
    damaged: dict[str, DamagedStream] = field(default_factory=dict)
    # the subjects of both, for the overlap check of a create (held_subjects.py)
    held_subjects: HeldSubjects = field(default_factory=HeldSubjects)
    api_total: int = 0
    api_errors: int = 0
    # the bytes all its streams hold before storing them (jetstream.max_buffered_account_size)
    inbound: Backlog | None = None

    async def usage(self) -> dict[str, int]:
        """What its streams store and reserve, by storage kind (account INFO, /jsz, /varz); a
        stream's reservation is its max_bytes, as the reference counts it."""
        memory = storage = reserved_memory = reserved_storage = 0
        for s in list(self.streams.values()):
            st = await s.state()
            reserved = max(s.config.max_bytes, 0)
            if s.config.storage == "memory":
                memory += st.bytes
                reserved_memory += reserved
            else:
                storage += st.bytes
                reserved_storage += reserved
        return {
            "memory": memory,
            "storage": storage,
            "reserved_memory": reserved_memory,
            "reserved_storage": reserved_storage,
        }


class ApiReceiver(InternalReceiver):
    """An account's JetStream API subscription, served by one API task.

    A pull request for a consumer that exists goes straight to that consumer's queue instead,
    behind the acks its client sent before it (the reference's consumer subscribes to its own
    next-message subject). Taken in the API's turn, it would wait there while the consumer
    counts those acks; a fetch loop sends the two together."""

    def __init__(
        self, ajs: AccountJetStream, domain: str | None, stall: Callable[[Backlog], None] | None = None
    ) -> None:
        # Bounded in messages and bytes: a flood of large requests pauses its publisher, and
        # past the limit is dropped (core/server/internal.py).
        backlog = Backlog(API_QUEUE_MSGS, API_QUEUE_BYTES, stall=stall)
        super().__init__(f"jsapi:{ajs.account.name}", ajs.account, backlog=backlog, release_on_receive=True)
        self.ajs = ajs
        self.domain = domain
        # The reference's domain mapping of the KV and object-store subjects: a client of another
        # domain writes a bucket through ``$JS.<domain>.API.$KV.…`` (the bare ``$KV.>`` never
        # crosses a leaf link); here that is the same publish on ``$KV.…``.
        self._mapped = (f"$JS.{domain}.API.$KV.", f"$JS.{domain}.API.$OBJ.") if domain else ()
        self._mapped_cut = len(f"$JS.{domain}.API.") if domain else 0

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, headers: bytes | None, payload: bytes
    ) -> None:
        if self._mapped and subject.startswith(self._mapped):
            self.account.publish(subject[self._mapped_cut :], reply, headers, payload)
            return
        if ".CONSUMER.MSG.NEXT." in subject:
            path = _api_path(subject, self.domain)
            if len(path) == 5 and path[:3] == ["CONSUMER", "MSG", "NEXT"]:
                stream = self.ajs.streams.get(path[3])
                consumer = stream.consumers.get(path[4]) if stream is not None else None
                if consumer is not None:
                    if reply:  # as the reference: a pull request without a reply is ignored
                        consumer.acks.deliver(sub, subject, reply, headers, payload)
                    return
        super().deliver(sub, subject, reply, headers, payload)


class ClusterApi(Protocol):
    """The hub cluster's hook into the API (hub/meta/): what a clustered server answers
    differently. ``takeover`` returns the (handler, response type, args) to run instead of the
    local ``found`` one (None: no API request there); it must not block."""

    name: str

    def takeover(
        self, ajs: AccountJetStream, path: list[str], found: tuple[api.Handler, str, list[str]] | None
    ) -> tuple[api.Handler, str, list[str]] | None: ...

    def is_this_server(self, peer: str) -> bool:
        """Whether ``peer`` (a server name or a meta peer id) names this server."""
        ...

    def stream_exists(self, account: str, name: str) -> bool:
        """Whether the cluster has a stream of that name in that account, on any server."""
        ...

    async def commit_restore(self, ajs: AccountJetStream, cfg: StreamConfig, staging: Path) -> Stream:
        """Create the restored stream ``cfg`` on this server through the meta group, from the
        store built in ``staging`` (``Backups.staged``); the running stream."""
        ...


class JetStream:
    def __init__(self, server: Server, config: JetStreamConfig, store_dir: Path) -> None:
        self.server = server
        self.config = config
        self.root = store_dir / "jetstream"
        self.domain = config.domain
        self.accounts: dict[str, AccountJetStream] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._stream_scopes: dict[tuple[str, str], anyio.CancelScope] = {}
        self._consumer_scopes: dict[tuple[str, str, str], anyio.CancelScope] = {}
        self._sourcing_scopes: dict[tuple[str, str], anyio.CancelScope] = {}
        server.shutdown_hooks.append(self._server_shutdown)
        self.cluster: ClusterApi | None = None  # set by the hub's meta group (hub/meta/)
        self.recovered = False  # every stream on disk loaded (/healthz answers 503 until then)
        server.jetstream_monitor = JetStreamMonitor(self)
        self.spares: SpareStores | None = None  # made by run(), in the store folder
        # streams made ready ahead of a create (prepared.py)
        self.prepared = PreparedStreams(self._open_store)
        # prepared creates whose config file is being put in place behind their answer
        self._config_writes: dict[tuple[str, str], anyio.Event] = {}
        self.reads = BulkReads(self)  # the bulk read API's requests (core/jetstream/bulk_read.py)
        self.backups = Backups(self)  # stream snapshots and restores (core/jetstream/backup.py)
        set_max_open_stores(config.max_open_stores or None)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StartupError(f"cannot create JetStream store {self.root}: {e.strerror}") from None
        # a new file stream's store is a spare built ahead, moved into place (core/store/spare.py)
        self.spares = SpareStores(self.root, self.server.store_cipher, POOL.submit)
        self.spares.prepare(DEFAULT_PAGE_SIZE)
        receivers: list[tuple[AccountJetStream, InternalReceiver]] = []
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await tg.start(self.reads.run)
                await tg.start(self.backups.run)
                for account in self.server.accounts:
                    ajs = self._account(account)
                    await self._recover(ajs)
                    rx = ApiReceiver(ajs, self.domain, self._stall)
                    rx.subscribe(API_PREFIX + ">")
                    if self.domain:
                        rx.subscribe(f"$JS.{self.domain}.API.>")
                    receivers.append((ajs, rx))
                    tg.start_soon(self._serve_api, ajs, rx)
                tg.start_soon(self._reap_inactive)
                self.recovered = True
                task_status.started()
        finally:
            for _ajs, api_rx in receivers:
                api_rx.close()
            with anyio.CancelScope(shield=True):
                await self.close_stores()

    def _server_shutdown(self) -> None:
        """As the reference: every waiting pull request hears "409 Server Shutdown" before the
        clients are drained, so a client ends its pull at once."""
        for ajs in self.accounts.values():
            for stream in ajs.streams.values():
                for consumer in stream.consumers.values():
                    consumer.server_shutdown()

    async def close_stores(self) -> None:
        with anyio.move_on_after(10):  # prepared creates' config files, still being put in place
            for pending in list(self._config_writes.values()):
                await pending.wait()
        await self.prepared.close_all()
        for ajs in self.accounts.values():
            for stream in list(ajs.streams.values()):
                await stream.close()
                try:
                    with anyio.move_on_after(10):
                        await stream.store.close()
                except StoreError as e:
                    log.error("closing stream %s failed: %s", stream.name, e)

    def _account(self, account: Account) -> AccountJetStream:
        ajs = self.accounts.get(account.name)
        if ajs is None:
            ajs = self.accounts[account.name] = AccountJetStream(
                account, self.root / account.name / "streams"
            )
            ajs.inbound = Backlog(1 << 62, self.config.max_buffered_account_size, stall=self._stall)
        return ajs

    async def _recover(self, ajs: AccountJetStream) -> None:
        """Every stream on disk, each on its own: one that cannot be read or opened is held as
        damaged (core/jetstream/damaged.py) and the others start. Only an encryption key that
        does not fit (a configuration mistake every stream shares) stops the start.

        ``RECOVERY_WORKERS`` streams at a time: a stream's recovery is mostly waits (its store
        opened on a pool thread, its state read back), and one after the other a server with
        2,000 streams took 8.4 s to come back (the reference: ~1 s)."""
        if not ajs.root.is_dir():
            return
        for d in ajs.root.iterdir():
            if is_staging(d.name):  # a restore cut short by a crash: never announced
                if self.cluster is not None and self.backups.keep_leftover(ajs, d):
                    continue  # its create may have committed: the meta group decides
                log.info("removing %s, left by a restore that did not finish", d)
                remove_staging(d)
        folders = iter(
            d
            for d in sorted(ajs.root.iterdir())
            if not is_set_aside(d.name) and (d / "stream.json").is_file()
        )
        refused: list[StartupError] = []
        began, held = time.monotonic(), len(ajs.damaged)

        async def worker() -> None:
            for d in folders:  # one iterator for all the workers: each folder is taken once
                if refused:
                    return
                try:
                    await self._recover_folder(ajs, d)
                except StartupError as e:
                    refused.append(e)

        async with anyio.create_task_group() as tg:
            for _ in range(RECOVERY_WORKERS):
                tg.start_soon(worker)
        if refused:
            raise refused[0]
        if ajs.streams or len(ajs.damaged) > held:  # one line (each stream's is at debug level)
            log.info(
                "recovered %d stream(s) of account %s in %.2f s%s",
                len(ajs.streams),
                ajs.account.name,
                time.monotonic() - began,
                f"; {len(ajs.damaged) - held} held as damaged" if len(ajs.damaged) > held else "",
            )

    async def _recover_folder(self, ajs: AccountJetStream, d: Path) -> None:
        cfg: StreamConfig | None = None
        try:
            cfg, created = _read_stream_meta(d / "stream.json")
            if cfg.name != d.name:  # a folder copied or renamed by hand: two could claim a name
                why = StoreError(f"{d / 'stream.json'} is the config of stream {cfg.name!r}, not {d.name!r}")
                self._hold_damaged(ajs, d, why, None)  # held by its folder's name
                return
            if cfg.storage == "memory":
                shutil.rmtree(d, ignore_errors=True)
                return
            for left in d.glob(TMP_GLOB):  # a config write that a crash cut short
                left.unlink(missing_ok=True)
            await self._recover_stream(ajs, cfg, created, d)
        except StoreKeyError as e:
            raise StartupError(f"stream {d.name}: {e}") from None
        except Exception as e:  # this stream's failure only
            self._hold_damaged(ajs, d, e, cfg)
            return
        log.debug("recovered stream %s (account %s)", cfg.name, ajs.account.name)

    async def _recover_stream(self, ajs: AccountJetStream, cfg: StreamConfig, created: int, d: Path) -> None:
        """Open and start one stream found on disk; on a failure nothing of it keeps running."""
        store = await self._open_store(cfg, d)
        try:
            await self._start_stream(ajs, cfg, store, created)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._undo_start(ajs, cfg.name, store, "recovery")
            raise

    async def restore_stream(
        self, ajs: AccountJetStream, cfg: StreamConfig, staging: Path, chunks: AsyncIterator[bytes]
    ) -> Stream:
        """A stream from a backup (core/jetstream/backup.py; ``cfg`` checked as a create): its
        store built in the folder ``staging`` from the snapshot ``chunks`` and checked, then
        moved into place and started as a restart starts a stream (its consumers from their
        records). On a failure nothing of it runs or stays in place (the caller removes
        ``staging``). In a hub cluster the stream is created through the meta group, on this
        server, from the store built here (``ClusterApi.commit_restore``)."""
        created = time.time_ns()
        if cfg.storage == "memory":
            store: Any = MemoryStore()
            await store.restore(chunks, batch_bytes=RESTORE_BATCH_BYTES)
            self._refuse_taken(ajs, cfg.name)
            return await self._start_stream(ajs, cfg, store, created)
        store = await self._open_store(cfg, staging)
        try:
            await store.restore(chunks, batch_bytes=RESTORE_BATCH_BYTES)
        finally:
            with anyio.CancelScope(shield=True):
                await store.close()
        if self.cluster is not None:
            return await self.cluster.commit_restore(ajs, cfg, staging)
        await _write_atomic(staging / "stream.json", {"config": cfg.to_json(), "created": created})
        self._refuse_taken(ajs, cfg.name)
        final = ajs.root / cfg.name
        if final.exists():
            raise api_error("JSStreamNameExistRestoreFailedErr")
        await anyio.to_thread.run_sync(_move_into_place, staging, final)
        try:
            await self._recover_stream(ajs, cfg, created, final)
        except BaseException:
            with anyio.CancelScope(shield=True):  # started nothing: a restart must not find it
                await anyio.to_thread.run_sync(_remove_folder_durably, final)
            raise
        return ajs.streams[cfg.name]

    @staticmethod
    def _refuse_taken(ajs: AccountJetStream, name: str) -> None:
        if name in ajs.streams or name in ajs.damaged:
            raise api_error("JSStreamNameExistRestoreFailedErr")

    async def _undo_start(self, ajs: AccountJetStream, name: str, store: Any, after: str) -> None:
        """Undo a stream start (a recovery or a create) that failed ``after`` some point: its
        tasks, its subscriptions, its entry and its store, whichever had started."""
        self._stop_sourcing(ajs, name)
        stream = ajs.streams.get(name)
        if stream is not None and stream.store is store:  # only the one this start made
            del ajs.streams[name]
            await stream.close()
        for key in [k for k in self._consumer_scopes if k[:2] == (ajs.account.name, name)]:
            self._consumer_scopes.pop(key).cancel()
        scope = self._stream_scopes.pop((ajs.account.name, name), None)
        if scope is not None:
            scope.cancel()
        try:
            with anyio.move_on_after(10):
                await store.close()
        except StoreError as e:
            log.error("closing the store of stream %s after a failed %s failed: %s", name, after, e)

    def _hold_damaged(
        self, ajs: AccountJetStream, folder: Path, error: Exception, cfg: StreamConfig | None
    ) -> None:
        """Log once (the folder and the cause, no traceback) and hold the stream's name."""
        name = cfg.name if cfg is not None else folder.name
        reason = str(error) or type(error).__name__
        if not isinstance(error, StoreError | OSError | ValueError | KeyError | ApiError):
            reason = describe_failure(error)  # a bug: say where, in one line
            log.debug("recovering stream %s failed", name, exc_info=error)
        ajs.damaged[name] = DamagedStream(name, folder, reason, cfg)
        log.error(
            "stream %s (account %s) could not be recovered and is held as damaged; the other "
            "streams run, a delete of it moves %s aside: %s",
            name,
            ajs.account.name,
            folder,
            reason,
        )

    async def delete_damaged(self, ajs: AccountJetStream, damaged: DamagedStream) -> Path:
        """Free a damaged stream's name: its folder moves aside, kept (logged with where)."""
        await self.config_written(ajs, damaged.name)  # a store that failed to open after its create
        target = await anyio.to_thread.run_sync(move_aside, damaged.folder)
        ajs.damaged.pop(damaged.name, None)
        log.warning(
            "damaged stream %s (account %s) deleted: its data was moved to %s",
            damaged.name,
            ajs.account.name,
            target,
        )
        return target

    def _stall(self, backlog: Backlog) -> None:
        """A backlog past its high-water mark: the publisher whose read chunk fed it pauses."""
        self.server.stalled.add(backlog)

    async def _supervise(
        self,
        what: str,
        run: Callable[..., Awaitable[None]],
        restart: Callable[[], None],
        give_up: Callable[[str], None],
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        """Run an asset's task (``run(task_status=...)``). When it fails after it started, log
        one line and run it again after ``restart()``; past MAX_RESTARTS failures within
        RESTART_WINDOW seconds, ``give_up(reason)`` ends the asset. The failure never reaches
        JetStream's task group (ARCHITECTURE.md rule 15)."""
        failures: list[float] = []
        status = _Started(task_status)
        while True:
            try:
                await run(task_status=status)
                return
            except Exception as e:
                if not status.done:
                    raise  # it never started: its creator hears the error
                now = time.monotonic()
                failures = [t for t in failures if now - t < RESTART_WINDOW] + [now]
                reason = describe_failure(e)
                if len(failures) > MAX_RESTARTS:
                    n = len(failures)
                    log.error("%s failed %d times within %gs, stopped: %s", what, n, RESTART_WINDOW, reason)
                    give_up(reason)
                    return
                log.error("%s failed, restarting: %s", what, reason)
                restart()
            await anyio.sleep(0.05 * len(failures))

    async def _open_store(self, cfg: StreamConfig, d: Path, *, sync_new_folder: bool = True) -> Any:
        if cfg.storage == "memory":
            return MemoryStore()
        return await SqliteStore.open(
            d / "msgs.db",
            sync=self.config.sync,
            sync_interval=self.config.sync_interval,
            compression="zstd" if cfg.compression == "s2" else "none",
            cipher=self.server.store_cipher,
            # a stream fed by sources or a mirror stores in large batches (sqlite.py)
            page_size=BULK_PAGE_SIZE if cfg.sources or cfg.mirror else DEFAULT_PAGE_SIZE,
            spare=self.spares,
            sync_new_folder=sync_new_folder,
            # off: none built, and a store that holds some drops them (core/config.py)
            block_rows=0 if self.config.column_blocks is False else BLOCK_ROWS,
        )

    async def _start_stream(
        self, ajs: AccountJetStream, cfg: StreamConfig, store: Any, created: int, *, fresh: bool = False
    ) -> Stream:
        """Run a stream on its open store. ``fresh``: the store was built empty by a create, so
        there are no dedup ids, TTLs or consumers to read back (each read is a trip to the
        store's thread: a create skips five)."""
        backlog = Backlog(self.config.max_buffered_msgs, self.config.max_buffered_size, parent=ajs.inbound)
        stream = Stream(cfg, store, created, ajs.account, self.domain, backlog=backlog)
        meta = await stream.load(fresh=fresh)
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._stream_scopes[(ajs.account.name, cfg.name)] = scope

        async def run_stream(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with scope:
                what = f"stream {ajs.account.name}/{cfg.name}: pipeline"
                await self._supervise(what, stream.run, stream.reset_pipeline, stream.fail, task_status)

        await self._tg.start(run_stream)
        try:
            await stream.expire_due()
        except StoreError as e:
            log.error("stream %s: expiry at start failed: %s", cfg.name, e)
        if not fresh:
            await self._recover_consumers(stream, meta)
        stream.subscribe()
        ajs.streams[cfg.name] = stream
        if cfg.sources or cfg.mirror is not None:
            await self._start_sourcing(ajs, stream)
        return stream

    async def _start_sourcing(self, ajs: AccountJetStream, stream: Stream) -> None:
        """The stream's source workers (core/jetstream/sourcing.py), in a scope of their own
        that ends with the stream; each worker contains its own failures."""
        assert self._tg is not None
        sourcing = stream.sourcing = Sourcing(stream)
        scope = anyio.CancelScope()
        self._sourcing_scopes[(ajs.account.name, stream.name)] = scope

        async def run_sourcing(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with scope:
                await sourcing.run(task_status=task_status)

        await self._tg.start(run_sourcing)

    def _stop_sourcing(self, ajs: AccountJetStream, name: str) -> None:
        scope = self._sourcing_scopes.pop((ajs.account.name, name), None)
        if scope is not None:
            scope.cancel()

    # ------------------------------------------------------------------ consumers

    async def _recover_consumers(self, stream: Stream, meta: list[tuple[str, bytes]]) -> None:
        """The stream's recorded consumers (from ``meta``, its metadata rows as its load read
        them), each on its own: one whose records cannot be read is left out and its name held
        (``Stream.damaged_consumers``), its rows kept."""
        for key, raw in meta:
            if not key.startswith(STATE_PREFIX) or not key.endswith("/config"):
                continue
            name = key[len(STATE_PREFIX) : -len("/config")]
            try:
                await self._recover_consumer(stream, raw)
            except StoreError:
                raise  # the store itself failed: the stream's problem, not this consumer's
            except Exception as e:
                reason = str(e) or type(e).__name__
                if not isinstance(e, ValueError | KeyError | TypeError | ApiError):
                    reason = describe_failure(e)
                scope = self._consumer_scopes.pop((stream.account.name, stream.name, name), None)
                if scope is not None:  # it failed after its task started
                    scope.cancel()
                stream.consumers.pop(name, None)
                stream.damaged_consumers[name] = reason
                log.error(
                    "consumer %s/%s/%s could not be recovered and is held as damaged (its records "
                    "stay; a delete of it removes them): %s",
                    stream.account.name,
                    stream.name,
                    name,
                    reason,
                )

    async def _recover_consumer(self, stream: Stream, raw: bytes) -> None:
        saved = json.loads(raw)
        cfg = ConsumerConfig.from_json(saved["config"])
        if cfg.mem_storage:
            # A memory-stored consumer is not recorded (Consumer.recorded); rows of one are
            # left by earlier builds, which recorded them all: they go, as the consumer would.
            name = saved["name"]
            await stream.store.apply([DelMetaOp(config_key(name)), DelMetaOp(state_key(name))])
            return
        consumer = Consumer(stream, saved["name"], cfg, int(saved["created"]))
        state = await stream.store.meta_get(state_key(consumer.name))
        if state is not None:
            consumer.restore_state(state)
        else:
            await consumer.position_from_policy()
        await self.start_consumer(stream, consumer)

    async def delete_damaged_consumer(self, stream: Stream, name: str) -> None:
        """Remove a damaged consumer's records; the caller holds ``stream.lock``."""
        await stream.apply_consumer_ops([DelMetaOp(config_key(name)), DelMetaOp(state_key(name))])
        stream.damaged_consumers.pop(name, None)
        log.warning("damaged consumer %s/%s/%s deleted", stream.account.name, stream.name, name)

    async def start_consumer(self, stream: Stream, consumer: Consumer) -> None:
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._consumer_scopes[(stream.account.name, stream.name, consumer.name)] = scope

        def give_up(reason: str) -> None:
            # Ended in memory only: its stored records stay, so a restart brings it back.
            consumer.failed = reason
            consumer.close()
            if stream.consumers.get(consumer.name) is consumer:
                del stream.consumers[consumer.name]
            self._consumer_scopes.pop((stream.account.name, stream.name, consumer.name), None)

        async def run_consumer(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with scope:
                what = f"consumer {stream.account.name}/{stream.name}/{consumer.name}"
                await self._supervise(what, consumer.run, lambda: None, give_up, task_status)

        await self._tg.start(run_consumer)
        consumer.subscribe()
        stream.consumers[consumer.name] = consumer

    async def create_consumer(self, stream: Stream, name: str, cfg: ConsumerConfig) -> Consumer:
        """A new consumer, positioned and recorded but not delivering yet: the caller reads its
        info for the create response, then calls ``start_consumer`` (as the reference answers
        with the state before the first delivery)."""
        consumer = Consumer(stream, name, cfg, time.time_ns())
        await consumer.position_from_policy()
        # Ephemerals are recorded too: after a restart they come back and expire as usual. A
        # memory-stored consumer (mem_storage) is never recorded: it does not outlive the server.
        if consumer.recorded:
            await stream.apply_consumer_ops(
                [
                    SetMetaOp(config_key(name), _consumer_record(consumer, cfg)),
                    SetMetaOp(state_key(name), consumer.state_json()),
                ]
            )
        self._action_advisory(stream, "create", consumer.name)
        if cfg.pause_until is not None:
            consumer.pause_advisory()  # created paused, as the reference advises
        return consumer

    async def update_consumer(self, stream: Stream, consumer: Consumer, cfg: ConsumerConfig) -> None:
        consumer.reconfigure(cfg)
        if consumer.recorded:
            record = _consumer_record(consumer, cfg)
            await stream.apply_consumer_ops([SetMetaOp(config_key(consumer.name), record)])
        consumer.wake()

    async def pause_consumer(self, stream: Stream, consumer: Consumer, until_ns: int | None) -> None:
        """CONSUMER.PAUSE: pause delivery until ``until_ns`` (wall ns), or resume (None or a time
        passed). The new pause_until is part of the stored config; a change is advised."""
        cfg = paused_config(consumer.config, until_ns)
        changed = cfg.pause_until != consumer.config.pause_until
        await self.update_consumer(stream, consumer, cfg)
        if changed:
            consumer.pause_changed()

    async def delete_consumer(self, stream: Stream, consumer: Consumer) -> None:
        """Remove a consumer; the caller holds ``stream.lock``."""
        consumer.close()
        stream.consumers.pop(consumer.name, None)
        scope = self._consumer_scopes.pop((stream.account.name, stream.name, consumer.name), None)
        if scope is not None:
            scope.cancel()
        if consumer.recorded:
            await stream.apply_consumer_ops(
                [DelMetaOp(config_key(consumer.name)), DelMetaOp(state_key(consumer.name))]
            )
        self._action_advisory(stream, "delete", consumer.name)
        await stream.recheck_interest()

    def _action_advisory(self, stream: Stream, action: str, consumer: str | None = None) -> None:
        """The reference's stream_action / consumer_action advisory of a create, an update
        ("modify", streams only) or a delete made through the API (or an inactive consumer's
        removal), on ``$JS.EVENT.ADVISORY.{STREAM|CONSUMER}.{CREATED|UPDATED|DELETED}...``."""
        event = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}[action]
        if consumer is None:
            subject = f"$JS.EVENT.ADVISORY.STREAM.{event}.{stream.name}"
            stream.advise(subject, "advisory.v1.stream_action", {"stream": stream.name, "action": action})
        else:
            subject = f"$JS.EVENT.ADVISORY.CONSUMER.{event}.{stream.name}.{consumer}"
            fields = {"stream": stream.name, "consumer": consumer, "action": action}
            stream.advise(subject, "advisory.v1.consumer_action", fields)

    async def _reap_inactive(self) -> None:
        """Consumers with an inactive_threshold (ephemerals by default) go away after that long
        without interest (the reference's rule): no subscriber to a push consumer's deliver
        subject; no pull request waiting, nor an ack still due, for a pull consumer."""
        while True:
            await anyio.sleep(0.25)
            for stream, consumer in self._inactive_consumers():
                log.info("consumer %s/%s inactive: removing", stream.name, consumer.name)
                try:
                    async with stream.lock:
                        await self.delete_consumer(stream, consumer)
                except Exception as e:  # that consumer's problem, not the reaper's
                    log.error("removing consumer %s/%s failed: %s", stream.name, consumer.name, e)

    def _inactive_consumers(self) -> list[tuple[Stream, Consumer]]:
        """The consumers due for removal now. One pass without an await, so no copies of the
        dicts it walks: four times a second over every stream, the copies were most of an idle
        server's CPU (200 streams without consumers: ~5 ms a second)."""
        now = time.monotonic_ns()
        due = []
        for ajs in self.accounts.values():
            for stream in ajs.streams.values():
                if not stream.consumers:
                    continue
                for consumer in stream.consumers.values():
                    limit = consumer.config.inactive_threshold
                    if not limit or consumer.deleted:
                        continue
                    if (consumer.is_pull and consumer.waiting) or (
                        not consumer.is_pull and consumer.has_interest()
                    ):
                        consumer.touch()
                    if now - consumer.last_interest_ns < limit:
                        continue
                    if consumer.is_pull and consumer.acks_expected_until() + limit > time.time_ns():
                        # as the reference: a pull consumer's client may still be working on
                        # what it was given; it goes inactive_threshold after the last ack due
                        continue
                    due.append((stream, consumer))
        return due

    # ------------------------------------------------------------------ streams

    async def create_stream(
        self, ajs: AccountJetStream, cfg: StreamConfig, created: int | None = None
    ) -> Stream:
        """A new stream; ``created`` (wall ns) is the meta group's, when it assigned the stream."""
        damaged = ajs.damaged.get(cfg.name)
        if damaged is not None:  # its folder is never written to: the name frees with a delete
            raise api_error("JSStreamOfflineReasonErrF", err=damaged.offline_reason)
        d = ajs.root / cfg.name
        created = created or time.time_ns()
        config_file = d / "stream.json"
        staged = self.backups.staged.get((ajs.account.name, cfg.name))
        if staged is not None and staged[0] == created and not config_file.exists():
            # a restore's store, built on this server, for this very assignment (its creation
            # time is the restore's): moved into place, and opened below as an existing store.
            # A folder there without a config (a preparation, or one a crash left) held no
            # announced stream: it goes, or the create would open its store instead.
            await self.discard_prepared(ajs, cfg.name)
            await anyio.to_thread.run_sync(_remove_folder_durably, d)
            crash_point("restore_move")
            await anyio.to_thread.run_sync(_move_into_place, staged[1], d)
            self.backups.staged.pop((ajs.account.name, cfg.name), None)
        config_body = {"config": cfg.to_json(), "created": created}
        # The config file is written while the store is built (each waits on its own fsyncs, so
        # a create costs the longer of the two, not their sum), except for a stream that starts
        # at first_seq: its file must not exist before the store holds that start (a crash in
        # between would recover a stream starting at 1).
        early = cfg.storage != "memory" and cfg.first_seq == 0
        written: list[BaseException | None] = []
        failed: StoreError | None = None
        store: Any = None
        # made ready while the meta group committed this create (prepared.py): only the config
        # file's rename is left
        prepared = await self.prepared.take((ajs.account.name, cfg.name), cfg, created)
        trace.point("create.prepared_taken", cfg.name)
        if prepared is None:  # a preparation made the folder
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # the name taken by a file, a disk error: as the reference, 10049
                raise api_error("JSStreamCreateErrF", err=f"stream folder {d}: {e.strerror or e}") from None
        # built empty by this create (no file was there): nothing to read back from it
        fresh = cfg.first_seq == 0 and (
            cfg.storage == "memory" or prepared is not None or not (d / "msgs.db").exists()
        )
        opening: OpeningStore | None = None
        if prepared is not None:
            # Answered at once (prepared.py): the store may still be opening (the stream starts
            # on the OpeningStore, whose calls wait for it) and the config file is put in place
            # behind the answer: the committed meta entry is this create's durable record.
            store = prepared.store.store
            if store is None:
                store = opening = prepared.store
        else:
            try:
                async with anyio.create_task_group() as tg:
                    if early:
                        tg.start_soon(_write_atomic_noting, config_file, config_body, written)
                    try:
                        store = await self._open_store(cfg, d)
                    except StoreError as e:  # raised after the config file's writer has finished
                        failed = e
            except BaseException:
                # Cancelled (or another error) while the store was built; the writer has finished
                # (the task group waited for it). Neither the file nor an open store may stay: a
                # restart would recover a stream never announced, and an open store holds its file
                # against the same create later.
                with anyio.CancelScope(shield=True):
                    if store is not None:
                        await self._abandon_create(ajs, cfg, store, d)
                    elif early:
                        await anyio.to_thread.run_sync(_remove_durably, config_file)
                raise
        if failed is not None:
            if early:  # a config file without its store would be recovered as a stream
                await anyio.to_thread.run_sync(_remove_durably, config_file)
            raise api_error("JSStreamCreateErrF", err=str(failed)) from None
        try:
            if written and written[0] is not None:
                raise written[0]
            if cfg.first_seq > 0:
                # An empty stream that starts at first_seq: last_seq moves to first_seq - 1, and
                # it reports that first sequence (not 0) until its first message.
                await store.apply([PurgeOp(up_to_seq=cfg.first_seq), SetMetaOp(FIRST_SEQ_SET_KEY, b"1")])
            if cfg.storage != "memory" and not early:
                await _write_atomic(config_file, config_body)
            stream = await self._start_stream(ajs, cfg, store, created, fresh=fresh)
            trace.point("create.started", cfg.name)
            if prepared is not None:
                self._write_config_behind(ajs, cfg, prepared, config_body)
            if opening is not None:  # a task only if the open fails (rare): none on the way
                opening.when_ended(functools.partial(self._opened_after_create, ajs, stream))
        except BaseException as e:
            # The stream was never announced: nothing of it may stay behind (its store's
            # connections, its task, its folder, which a restart would recover).
            with anyio.CancelScope(shield=True):
                if prepared is not None:  # its staging writes no file into a removed folder
                    await prepared.staged_file()
                await self._abandon_create(ajs, cfg, store, d)
            if isinstance(e, StoreError | OSError):
                raise api_error("JSStreamCreateErrF", err=str(e)) from None
            raise
        self._action_advisory(stream, "create")
        return stream

    def _write_config_behind(
        self, ajs: AccountJetStream, cfg: StreamConfig, prepared: Prepared, body: dict[str, Any]
    ) -> None:
        """A prepared create's config file put in place after its answer (``commit_behind``: a
        pool job once the staging has ended, no task). Until then an update or a delete of the
        stream waits for it (``config_written``), so the file never ends up older than the
        stream. A failure is logged; the stream runs (after a restart the meta group creates it
        again from its assignment, on the store in its folder)."""
        key = (ajs.account.name, cfg.name)
        pending = self._config_writes[key] = anyio.Event()

        def done(error: Exception | None) -> None:
            if self._config_writes.get(key) is pending:
                del self._config_writes[key]
            pending.set()
            if error is not None:
                log.error(
                    "stream %s (account %s): its config file could not be written (%s); the stream "
                    "runs, and after a restart the meta group creates it again from its assignment",
                    cfg.name,
                    ajs.account.name,
                    error,
                )
            else:
                trace.point("create.config_committed", cfg.name)

        prepared.commit_behind(ajs.root / cfg.name / "stream.json", json.dumps(body), done)

    async def config_written(self, ajs: AccountJetStream, name: str) -> None:
        """Until a prepared create's config file is in place (at once when none is pending);
        an ApiError after ``CONFIG_WRITE_WAIT`` (a hung disk): the update or delete waiting
        for it fails and may be asked again, nothing waits for ever."""
        pending = self._config_writes.get((ajs.account.name, name))
        if pending is None:
            return
        with anyio.move_on_after(CONFIG_WRITE_WAIT):
            await pending.wait()
            return
        raise api_error(
            "JSStreamGeneralErrorF",
            err=f"stream {name}: its config file is still being written after {CONFIG_WRITE_WAIT:g}s",
        )

    def _opened_after_create(self, ajs: AccountJetStream, stream: Stream, reason: str | None) -> None:
        """The open of a created stream's store has ended (``reason``: why it failed)."""
        if reason is not None and ajs.streams.get(stream.name) is stream:  # not deleted meanwhile
            assert self._tg is not None
            self._tg.start_soon(self._hold_unopened, ajs, stream, reason)

    async def _hold_unopened(self, ajs: AccountJetStream, stream: Stream, reason: str) -> None:
        """A stream whose store failed to open after its create is held as damaged (its calls
        failed meanwhile, with the cause): its name stays taken, a stream info or a publish
        hears that it is offline and why, a delete moves its folder aside, and a restart tries
        to open it again."""
        if ajs.streams.get(stream.name) is not stream:
            return  # deleted meanwhile
        log.error(
            "stream %s (account %s): its store could not be opened after its create; it is "
            "held as damaged (a delete of it moves %s aside): %s",
            stream.name,
            ajs.account.name,
            ajs.root / stream.name,
            reason,
        )
        try:
            with anyio.CancelScope(shield=True):
                await self._undo_start(ajs, stream.name, stream.store, "store open")
        except Exception as e:  # a task of the engine's group: its failure must not end the engine
            log.error("stream %s: undoing its start failed: %s", stream.name, describe_failure(e))
        finally:
            ajs.damaged[stream.name] = _NotOpened(stream.name, ajs.root / stream.name, reason, stream.config)

    async def prepare_stream(self, ajs: AccountJetStream, cfg: StreamConfig, created: int) -> None:
        """Make the stream ``cfg`` ready for its create at ``created`` (prepared.py): the hub's
        meta group calls this when an assignment to this server reaches its log, before it is
        committed. A failure only logs."""
        if cfg.name not in ajs.streams and self.backups.staged.get((ajs.account.name, cfg.name)) is None:
            await self.prepared.prepare((ajs.account.name, cfg.name), ajs.root, cfg, created)

    async def discard_prepared(self, ajs: AccountJetStream, name: str) -> None:
        """Drop the preparation of stream ``name`` if its create did not use it."""
        await self.prepared.discard((ajs.account.name, name), ajs.root, live=name in ajs.streams)

    async def _abandon_create(self, ajs: AccountJetStream, cfg: StreamConfig, store: Any, d: Path) -> None:
        await self._undo_start(ajs, cfg.name, store, "create")
        shutil.rmtree(d, ignore_errors=True)

    async def update_stream(self, ajs: AccountJetStream, stream: Stream, cfg: StreamConfig) -> None:
        await self.config_written(ajs, stream.name)  # not overwritten by a create's, later
        if cfg.storage != "memory":
            await _write_atomic(
                ajs.root / cfg.name / "stream.json", {"config": cfg.to_json(), "created": stream.created_ns}
            )
        await stream.reconfigure(cfg)
        if stream.sourcing is not None:
            await stream.sourcing.reconcile()
        elif cfg.sources or cfg.mirror is not None:
            # Only a stream with sources runs their task: 10,000 plain streams hold no idle tasks.
            await self._start_sourcing(ajs, stream)
        self._action_advisory(stream, "modify")

    async def delete_stream(self, ajs: AccountJetStream, stream: Stream) -> None:
        await self.config_written(ajs, stream.name)  # its folder is not written to after
        self._stop_sourcing(ajs, stream.name)
        async with stream.lock:
            with anyio.move_on_after(10):
                await stream.drain()
            for consumer in list(stream.consumers.values()):
                consumer.close()
                scope = self._consumer_scopes.pop((ajs.account.name, stream.name, consumer.name), None)
                if scope is not None:
                    scope.cancel()
            stream.consumers.clear()
            await stream.close()
            ajs.streams.pop(stream.name, None)
            scope = self._stream_scopes.pop((ajs.account.name, stream.name), None)
            if scope is not None:
                scope.cancel()
            with anyio.move_on_after(10):
                await stream.store.close()
        shutil.rmtree(ajs.root / stream.name, ignore_errors=True)
        self._action_advisory(stream, "delete")

    # ------------------------------------------------------------------ API service

    async def _serve_api(self, ajs: AccountJetStream, rx: InternalReceiver) -> None:
        async for msg in rx.inbox:
            # A request without a reply subject is carried out all the same (as the reference:
            # fire-and-forget administration), and answered to no one.
            try:
                path = _api_path(msg.subject, self.domain)
                fault_point("api", path[0] if path else "")
                await api.dispatch(self, ajs, path, msg)
            except ApiError:
                pass  # dispatch replied with the error, and counted it
            except Exception:
                # A bug must not take JetStream down for every client: reply, log, keep serving.
                ajs.api_total += 1
                ajs.api_errors += 1
                log.exception("JetStream API request on %s failed", msg.subject)
                err = api_error("JSStreamGeneralErrorF", err="internal error")
                self.reply_json(ajs, msg, {"error": err.to_json()})

    def reply_json(self, ajs: AccountJetStream, msg: InboundMsg, body: dict[str, Any]) -> None:
        if msg.reply:
            ajs.account.publish(msg.reply, None, None, json.dumps(body, separators=(",", ":")).encode())

    def reply_raw(self, ajs: AccountJetStream, reply: str, headers: bytes | None, payload: bytes) -> None:
        ajs.account.publish(reply, None, headers, payload)


@dataclass(frozen=True, slots=True)
class _NotOpened(DamagedStream):
    """A stream whose store failed to open after its create was answered (``_hold_unopened``)."""

    @property
    def offline_reason(self) -> str:
        return f"its store could not be opened ({self.reason}); delete the stream to move its data aside"


class _Started:
    """A task status that remembers whether its task started; the first start is passed on."""

    def __init__(self, outer: anyio.abc.TaskStatus[None] | None) -> None:
        self.outer = outer
        self.done = False

    def started(self, value: None = None) -> None:
        self.done = True
        if self.outer is not None:
            outer, self.outer = self.outer, None
            outer.started()


def _consumer_record(consumer: Consumer, cfg: ConsumerConfig) -> bytes:
    """A consumer's config row, as ``_recover_consumers`` reads it back."""
    record = {"name": consumer.name, "config": cfg.to_json(), "created": consumer.created_ns}
    return json.dumps(record).encode()


def _api_path(subject: str, domain: str | None) -> list[str]:
    """Tokens after the API prefix: ``$JS.API.STREAM.INFO.x`` -> ``["STREAM", "INFO", "x"]``.

    A byte that is no UTF-8 (kept by the parser as a lone surrogate) reads as U+FFFD, as the
    reference shows it: a name taken from the subject must be text that can be stored and sent."""
    if not subject.isascii():
        subject = subject.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    tokens = subject.split(".")
    if tokens[1] == "API":
        return tokens[2:]
    return tokens[3:]  # $JS.<domain>.API.…


async def _write_atomic(path: Path, body: dict[str, Any]) -> None:
    """``body`` as ``path``, whole or not at all, durably; the two fsyncs run on a store pool thread
    (on a busy disk they take milliseconds, which the event loop's other clients must not wait)."""
    await run_job(POOL.submit, functools.partial(_write_atomic_sync, path, json.dumps(body)))


async def _write_atomic_noting(path: Path, body: dict[str, Any], outcome: list[BaseException | None]) -> None:
    """``_write_atomic`` whose OSError is noted in ``outcome`` instead of raised (the caller
    raises it once the work beside it is done)."""
    try:
        await _write_atomic(path, body)
    except OSError as e:
        outcome.append(e)
    else:
        outcome.append(None)


TMP_GLOB = ".stream.json.*.tmp"


def _read_stream_meta(meta: Path) -> tuple[StreamConfig, int]:
    """A stream's config and creation time (wall ns) from its ``stream.json``."""
    try:
        saved = json.loads(meta.read_text())
        cfg = StreamConfig.from_json(saved["config"], create=False)
        return cfg, int(saved["created"])
    except (OSError, ValueError, KeyError, TypeError, ApiError) as e:
        raise StoreError(f"stream metadata {meta} is unreadable: {e}") from None


def _move_into_place(staging: Path, final: Path) -> None:
    """A restored stream's folder renamed to its stream's name, durably; a cluster restore's
    marker (``STAGED_FILE``) has served its purpose then (one a crash leaves is harmless)."""
    os.rename(staging, final)
    (final / STAGED_FILE).unlink(missing_ok=True)
    fsync_dir(final.parent)


def _remove_folder_durably(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    fsync_dir(folder.parent)


def _remove_durably(path: Path) -> None:
    """Remove ``path`` and fsync its folder: a crash right after must not bring it back (a
    config file beside a store that failed would be recovered as a stream)."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _write_atomic_sync(path: Path, text: str) -> None:
    commit_staged(stage_atomic(path, text), path)
