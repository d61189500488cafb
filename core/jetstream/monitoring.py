"""What the monitoring endpoints read of JetStream: ``/jsz``, the JetStream part of ``/varz`` and
``/healthz``, and the per-stream and per-consumer figures of ``/metrics``.

Read-only: the figures come from the streams' cached state and the consumers' in-memory counters;
``num_pending`` may ask the store (as CONSUMER.INFO does). The JSON field names are the reference's
(``JSInfo``, ``AccountDetail``, ``StreamDetail``, ``ConsumerInfo`` in nats-server's monitor.go).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from core.errors import StoreError
from core.jetstream.damaged import DamagedStream, is_set_aside
from core.jetstream.models import stream_info_json
from core.server.health import ACCOUNT, CONSUMER, STREAM, Health, HealthOptions, Problem

if TYPE_CHECKING:
    from core.jetstream.consumer import Consumer
    from core.jetstream.engine import AccountJetStream, JetStream
    from core.jetstream.stream import Stream

API_LEVEL = 1  # as account_info reports it (core/jetstream/api.py)
_PROBE_TIMEOUT = 2.0  # a store that cannot answer a point read in this long is reported unhealthy


@dataclass(frozen=True, slots=True)
class JszOptions:
    accounts: bool = False
    streams: bool = False
    consumers: bool = False
    config: bool = False
    account: str | None = None  # acc=<name>: only this account's details


@dataclass(frozen=True, slots=True)
class StreamFigures:
    account: str
    name: str
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    consumer_count: int
    store_commits: int | None
    store_failed_commits: int | None


@dataclass(frozen=True, slots=True)
class ConsumerFigures:
    account: str
    stream: str
    name: str
    num_pending: int
    num_ack_pending: int
    num_redelivered: int
    num_waiting: int
    delivered_stream_seq: int
    delivered_consumer_seq: int
    ack_floor_stream_seq: int


class JetStreamMonitor:
    """The monitoring view of one server's JetStream (``server.jetstream_monitor``)."""

    def __init__(self, js: JetStream) -> None:
        self.js = js

    @property
    def ready(self) -> bool:
        return self.js.recovered

    # ------------------------------------------------------------------ /varz, /jsz

    def config_json(self) -> dict[str, Any]:
        cfg = self.js.config
        out: dict[str, Any] = {
            "max_memory": cfg.max_memory,
            "max_storage": cfg.max_file,
            "store_dir": str(self.js.root),
        }
        if cfg.sync == "always":
            out["sync_always"] = True
        else:
            out["sync_interval"] = int(cfg.sync_interval * 1e9)
        if self.js.domain:
            out["domain"] = self.js.domain
        return out

    def _active_accounts(self) -> list[AccountJetStream]:
        # The reference counts the accounts JetStream is enabled for; every account has it here,
        # but the reference lists only accounts that used it. Those with streams, or API calls.
        return [a for a in self.js.accounts.values() if a.streams or a.damaged or a.api_total]

    async def stats_json(self) -> dict[str, Any]:
        """``/varz``'s ``jetstream.stats`` and the head of ``/jsz``."""
        totals = {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0}
        api_total = api_errors = 0
        active = self._active_accounts()
        for ajs in active:
            usage = await ajs.usage()
            for k in totals:
                totals[k] += usage[k]
            api_total += ajs.api_total
            api_errors += ajs.api_errors
        return {
            **totals,
            "accounts": len(active),
            "ha_assets": 0,
            "api": {"level": API_LEVEL, "total": api_total, "errors": api_errors},
        }

    async def jsz(self, opts: JszOptions, server_id: str, now: str) -> dict[str, Any]:
        out = await self.stats_json()
        out["server_id"] = server_id
        out["now"] = now
        out["config"] = self.config_json()
        streams = consumers = messages = nbytes = 0
        for ajs in self.js.accounts.values():
            for s in list(ajs.streams.values()):
                st = await s.state()
                streams += 1
                consumers += s.consumer_count
                messages += st.msgs
                nbytes += st.bytes
            streams += len(ajs.damaged)  # held, as the reference counts the streams it holds offline
        out.update(streams=streams, consumers=consumers, messages=messages, bytes=nbytes)
        if opts.accounts or opts.streams or opts.consumers or opts.account:
            details = []
            for ajs in self._active_accounts():
                if opts.account and ajs.account.name != opts.account:
                    continue
                details.append(await self._account_detail(ajs, opts))
            out["account_details"] = details
            out["total"] = len(details)
        return out

    async def _account_detail(self, ajs: AccountJetStream, opts: JszOptions) -> dict[str, Any]:
        name = ajs.account.name
        d: dict[str, Any] = {"name": name, "id": name, **await ajs.usage()}
        d["api"] = {"level": 0, "total": ajs.api_total, "errors": ajs.api_errors}
        if opts.streams or opts.consumers:
            d["stream_detail"] = [await self._stream_detail(s, opts) for s in list(ajs.streams.values())]
            d["stream_detail"].extend(_damaged_detail(dmg, opts) for dmg in list(ajs.damaged.values()))
        return d

    async def _stream_detail(self, stream: Stream, opts: JszOptions) -> dict[str, Any]:
        st = await stream.state()
        info = stream_info_json(
            stream.config,
            stream.created_ns,
            st,
            consumer_count=stream.consumer_count,
            server_name=self.js.server.name,
            first_seq_set=stream.first_seq_set,
        )
        d: dict[str, Any] = {"name": stream.name, "created": info["created"], "cluster": info["cluster"]}
        if opts.config:
            d["config"] = info["config"]
        d["state"] = info["state"]
        if opts.consumers:
            d["consumer_detail"] = [
                await self._consumer_detail(c, opts) for c in list(stream.consumers.values())
            ]
        if stream.sourcing is not None:
            # the reference's StreamSourceInfo, each with leafjet's ``leafjet`` object
            # (retries, state, upstream gaps: core/jetstream/source_health.py)
            mirror = stream.sourcing.mirror_info(extras=True)
            if mirror is not None:
                d["mirror"] = mirror
            sources = stream.sourcing.info(extras=True)
            if sources:
                d["sources"] = sources
        return d

    async def _consumer_detail(self, consumer: Consumer, opts: JszOptions) -> dict[str, Any]:
        info = await consumer.info()
        if not opts.config:
            info.pop("config", None)
        return info

    # ------------------------------------------------------------------ /metrics

    async def figures(self) -> tuple[list[StreamFigures], list[ConsumerFigures]]:
        streams: list[StreamFigures] = []
        consumers: list[ConsumerFigures] = []
        for ajs in list(self.js.accounts.values()):
            acc = ajs.account.name
            for s in list(ajs.streams.values()):
                st = await s.state()
                stats = getattr(s.store, "stats", None)
                ss = stats() if callable(stats) else None
                streams.append(
                    StreamFigures(
                        acc,
                        s.name,
                        st.msgs,
                        st.bytes,
                        st.first_seq,
                        st.last_seq,
                        s.consumer_count,
                        getattr(ss, "commits", None),
                        getattr(ss, "failed_commits", None),
                    )
                )
                for c in list(s.consumers.values()):
                    consumers.append(
                        ConsumerFigures(
                            acc,
                            s.name,
                            c.name,
                            await c.num_pending(),
                            len(c.pending),
                            c.num_redelivered,
                            len(c.waiting),
                            c.last_delivered_sseq,
                            c.dseq,
                            c.ack_floor_sseq,
                        )
                    )
        return streams, consumers

    # ------------------------------------------------------------------ /healthz

    async def health(self, opts: HealthOptions, health: Health) -> None:
        """The streams' part of ``/healthz`` (the reference's checks of a server without a
        cluster): every stream folder on disk was recovered (one held as damaged, or not loaded,
        "could not be recovered") and each loaded stream's store answers a point read; then,
        for an ``account``/``stream``/``consumer`` asked about, that it exists here (404 if not).
        Without ``details`` it stops at the first problem."""
        first_only = not opts.details
        account_found = stream_found = consumer_found = False
        for ajs in list(self.js.accounts.values()):
            acc = ajs.account.name
            if opts.account:
                if acc != opts.account:
                    continue
                account_found = ajs.root.is_dir()  # as the reference: its folder in the store
            for name, problem in await self._stream_problems(ajs, opts.stream, first_only):
                if opts.stream:
                    stream_found = True
                if problem is not None:
                    health.fail(Problem(STREAM, problem, account=acc, stream=name))
                    if first_only:
                        return
                    continue
                stream = ajs.streams.get(name)
                if opts.consumer and stream is not None:
                    consumer_found = opts.consumer in stream.consumers
                    why = stream.damaged_consumers.get(opts.consumer)
                    if why is not None:  # held: its records could not be read (engine.py)
                        what = f"'{acc} > {name} > {opts.consumer}'"
                        error = f"JetStream consumer {what} could not be recovered: {why}"
                        consumer_found = True
                        health.fail(Problem(CONSUMER, error, acc, name, opts.consumer))
                        if first_only:
                            return
        if opts.account and not account_found:
            health.only(Problem(ACCOUNT, f'JetStream account "{opts.account}" not found', opts.account), 404)
        elif opts.stream and not stream_found:
            error = f'JetStream stream "{opts.stream}" not found on account "{opts.account}"'
            health.only(Problem(STREAM, error, opts.account, opts.stream), 404)
        elif opts.consumer and not consumer_found:
            error = (
                f'JetStream consumer "{opts.consumer}" not found for stream "{opts.stream}" '
                f'on account "{opts.account}"'
            )
            health.only(Problem(CONSUMER, error, opts.account, opts.stream, opts.consumer), 404)

    async def _stream_problems(
        self, ajs: AccountJetStream, only: str, first_only: bool
    ) -> list[tuple[str, str | None]]:
        """(name, the reference's wording of its problem or None) for each stream of ``ajs`` on
        disk or running (``only``: that one alone), in name order; with ``first_only`` up to the
        first problem (no store probed after it)."""
        acc = ajs.account.name
        # a folder scan (one stat per stream): off the event loop
        on_disk = await anyio.to_thread.run_sync(_stream_folders, ajs.root)
        out: list[tuple[str, str | None]] = []
        for name in sorted(on_disk | set(ajs.streams) | set(ajs.damaged)):
            if only and name != only:
                continue
            damaged = ajs.damaged.get(name)
            s = ajs.streams.get(name)
            unrecovered = f"JetStream stream '{acc} > {name}' could not be recovered"
            problem: str | None
            if damaged is not None:  # the reference's words, and why (it says nothing more)
                problem = f"{unrecovered}: {damaged.reason}"
            elif s is None:
                problem = unrecovered
            else:
                problem = await _probe(acc, s)
            out.append((name, problem))
            if problem is not None and first_only:
                break
        return out


def _stream_folders(root: Path) -> set[str]:
    """The stream folders under ``root`` that hold a config (none set aside as damaged)."""
    if not root.is_dir():
        return set()
    return {d.name for d in root.iterdir() if not is_set_aside(d.name) and (d / "stream.json").is_file()}


async def _probe(acc: str, s: Stream) -> str | None:
    """None when the stream's store answers a point read in time (one closed while idle, under
    the open-files cap, is not reopened for it)."""
    if getattr(s.store, "resting", False):
        return None
    try:
        with anyio.fail_after(_PROBE_TIMEOUT):
            await s.store.meta_get("healthz-probe")
    except (StoreError, OSError, TimeoutError) as e:
        reason = "store read timed out" if isinstance(e, TimeoutError) else str(e)
        return f"JetStream stream '{acc} > {s.name}' is not current: {reason}"
    return None


def _damaged_detail(damaged: DamagedStream, opts: JszOptions) -> dict[str, Any]:
    """A stream held as damaged in ``/jsz``: the reference's ``StreamDetail`` fields a reader
    expects (an empty state), and leafjet's ``leafjet`` object saying why and where it is."""
    d: dict[str, Any] = {"name": damaged.name}
    if opts.config and damaged.config is not None:
        d["config"] = damaged.config.to_json()
    d["state"] = {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0, "consumer_count": 0}
    d["leafjet"] = {"damaged": damaged.reason, "folder": str(damaged.folder)}
    return d
