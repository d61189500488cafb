"""The edge composition root: config -> server (+ later the SQLite-backed JetStream and leaf remotes).

Start-up is a handshake: the readiness line is printed (and systemd notified) only after the
listener is bound. SIGTERM and SIGINT start the ordered shutdown; SIGHUP reloads the config.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import anyio
from anyio.abc import TaskGroup, TaskStatus

from agent import systemd
from agent.config import AgentConfig
from bridges.mqtt.config import MqttBridgeConfig
from core.config import ServerConfig
from core.datadir import DataDirLock, lock_data_dir
from core.errors import ConfigError, StartupError
from core.jetstream.engine import JetStream
from core.server.failures import describe_failure, leaf_exception
from core.server.server import Server
from federation.leafnode.manager import LeafNodes
from hub.meta.group import MetaGroup
from hub.routes import Routes

log = logging.getLogger("leafjet.agent")


def prepare_data_dir(path: str) -> Path:
    d = Path(path)
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".leafjet-write-check"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as e:
        raise StartupError(f"data directory {d} is not writable: {e.strerror or e}") from None
    return d


ReloadSource = Callable[[], AgentConfig]
"""Reads the config again as the agent was started (the same file, flags and variables)."""


async def serve_agent(
    cfg: ServerConfig,
    mqtt: tuple[MqttBridgeConfig, ...] = (),
    reload_source: ReloadSource | None = None,
    role: str = "agent",
) -> None:
    """Start JetStream (recovering streams) before the listener, then the in-process bridges; stop
    in the reverse order: the bridges, then stop accepting, drain clients, then stop the streams
    and close their stores. SIGHUP reloads the config from ``reload_source``."""
    data_dir = prepare_data_dir(cfg.data_dir)
    locks = [lock_data_dir(data_dir)]  # held until the process exits
    try:
        await _serve(cfg, data_dir, locks, mqtt, reload_source, role)
    finally:
        for lock in locks:
            lock.release()
    log.info("stopped")


async def _serve(
    cfg: ServerConfig,
    data_dir: Path,
    locks: list[DataDirLock],
    mqtt: tuple[MqttBridgeConfig, ...],
    reload_source: ReloadSource | None,
    role: str,
) -> None:
    server = Server(cfg)
    leafnodes = LeafNodes(server) if LeafNodes.configured(cfg) else None
    routes = Routes(server) if Routes.configured(cfg) else None
    js: JetStream | None = None
    if cfg.jetstream.enabled:
        store_dir = Path(cfg.jetstream.store_dir) if cfg.jetstream.store_dir else data_dir
        if store_dir.resolve() != data_dir.resolve():
            locks.append(lock_data_dir(prepare_data_dir(str(store_dir))))
        js = JetStream(server, cfg.jetstream, store_dir)
        server.extra_info["jetstream"] = True
        if cfg.jetstream.domain:
            server.extra_info["domain"] = cfg.jetstream.domain
    meta: MetaGroup | None = None
    if routes is not None and js is not None:
        # A hub cluster with JetStream: the meta group places streams and answers the API
        # from any server (hub/meta/); set before the API serves its first request.
        meta = MetaGroup(
            server, js, routes, Path(cfg.jetstream.store_dir) if cfg.jetstream.store_dir else data_dir
        )
        js.cluster = meta.api
    meta_scope = anyio.CancelScope()
    js_scope = anyio.CancelScope()
    monitor_scope = anyio.CancelScope()
    leaf_scope = anyio.CancelScope()
    routes_scope = anyio.CancelScope()

    async def run_leafnodes(*, task_status: TaskStatus[int | None]) -> None:
        assert leafnodes is not None
        with leaf_scope:
            await leafnodes.run(task_status=task_status)

    async def run_routes(*, task_status: TaskStatus[int]) -> None:
        assert routes is not None
        with routes_scope:
            await routes.run(task_status=task_status)

    async def run_meta(*, task_status: TaskStatus[None]) -> None:
        assert meta is not None
        with meta_scope:
            await meta.run(task_status=task_status)

    async def run_monitor(*, task_status: TaskStatus[int]) -> None:
        with monitor_scope:
            await server.run_monitor(task_status=task_status)

    async def run_jetstream(*, task_status: TaskStatus[None]) -> None:
        assert js is not None
        with js_scope:
            await js.run(task_status=task_status)

    async def run_server(*, task_status: TaskStatus[int]) -> None:
        try:
            await server.run(task_status=task_status)
        finally:
            leaf_scope.cancel()
            meta_scope.cancel()
            routes_scope.cancel()
            js_scope.cancel()
            monitor_scope.cancel()

    async with anyio.create_task_group() as tg:
        if cfg.http_port is not None:
            # Before JetStream's recovery: /healthz answers 503 until every stream is loaded.
            await tg.start(run_monitor)
        if js is not None:
            await tg.start(run_jetstream)
        port = await tg.start(run_server)
        leaf_note = ""
        if leafnodes is not None:
            leaf_port = await tg.start(run_leafnodes)
            if leaf_port is not None:
                leaf_note = f", leafnodes on {cfg.leafnodes.host}:{leaf_port}"
            if cfg.leafnodes.remotes:
                leaf_note += f", {len(cfg.leafnodes.remotes)} leafnode remote(s)"
        if routes is not None:
            cluster_port = await tg.start(run_routes)
            leaf_note += f", cluster {cfg.cluster.name} routes on {cfg.cluster.host}:{cluster_port}"
            if meta is not None:
                await tg.start(run_meta)
        print(
            f"leafjet {role} ready: listening on nats://{cfg.host}:{port} "
            f"(server {server.name}, data {cfg.data_dir}{leaf_note})",
            flush=True,
        )
        # In-process bridges are ordinary NATS clients of this agent's own listener.
        bridges = BridgeSet(tg, f"nats://127.0.0.1:{port}")
        await bridges.apply(mqtt)
        systemd.notify("READY=1")
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    await _reload(server, bridges, reload_source)
                    continue
                log.info("received %s: shutting down", signal.Signals(signum).name)
                systemd.notify("STOPPING=1")
                bridges.stop_all()
                if meta is not None:
                    await _leave_meta_leadership(meta)
                server.request_shutdown()
                break


LEAVE_LEADERSHIP_TIMEOUT = 2.0  # as long as the reference's lame duck mode waits for its hand-overs


async def _leave_meta_leadership(meta: MetaGroup) -> None:
    """A stopping meta leader hands leadership over first (a rolling restart then leaves the
    JetStream API without a leader for a round trip instead of an election timeout); bounded:
    a group that cannot take it elects a leader after this server has gone, as before."""
    try:
        with anyio.move_on_after(LEAVE_LEADERSHIP_TIMEOUT):
            new = await meta.api.leave_leadership()
            if new is not None:
                log.info("meta group: handed leadership to %s before stopping", new)
    except Exception:  # the shutdown goes on: the others elect a leader after their timeout
        log.exception("meta group: handing leadership over before stopping failed")


async def _reload(server: Server, bridges: BridgeSet, reload_source: ReloadSource | None) -> None:
    """SIGHUP: read the config again and apply what may change at runtime, or refuse it whole
    with one log line (the running config stays)."""
    if reload_source is None:
        log.warning("received SIGHUP: no config to reload")
        return
    systemd.notify("RELOADING=1")
    try:
        # Loading hashes the users' passwords (tens of ms each): off the loop.
        agent_cfg = await anyio.to_thread.run_sync(reload_source)
        plan = await server.reload(agent_cfg.server)
    except ConfigError as e:
        log.error("config reload refused, the running configuration stays: %s", e)
        return
    finally:
        systemd.notify("READY=1")
    set_log_level(agent_cfg.server)
    log.debug("reload: the new config is %r", _redacted(agent_cfg.server))
    changed = list(plan.changed)
    if await bridges.apply(agent_cfg.mqtt):
        changed.append("bridges")
    log.info("reloaded configuration: %s", ", ".join(changed) if changed else "nothing changed")


def _redacted(cfg: ServerConfig) -> str:
    """The config for a debug line, with no secret in it (users and TLS keys are named only)."""
    users = [u.user or u.nkey for u in cfg.auth.users]
    return f"{replace(cfg, auth=replace(cfg.auth, users=(), token=None))!r}, users={users}"


_LOG_LEVEL_FIXED = False  # a --log-level flag or LEAFJET_LOG_LEVEL wins over the config's debug/trace


def set_log_level(cfg: ServerConfig, *, fixed: str | None = None) -> None:
    """The root logger's level: a fixed one from the command line, else DEBUG when the config asks
    for debug or trace, else INFO."""
    global _LOG_LEVEL_FIXED
    if fixed is not None:
        _LOG_LEVEL_FIXED = True
        logging.getLogger().setLevel(fixed.upper())
    elif not _LOG_LEVEL_FIXED:
        logging.getLogger().setLevel(logging.DEBUG if cfg.debug or cfg.trace else logging.INFO)


class BridgeSet:
    """The in-process bridges, each under its own supervisor and cancel scope, so that a reload
    starts the new ones, stops the removed ones and restarts the changed ones and leaves the
    others running; shutdown stops them all first."""

    STOP_TIMEOUT = 10.0

    def __init__(self, tg: TaskGroup, own_url: str) -> None:
        self._tg = tg
        self._own_url = own_url
        self._running: dict[str, tuple[MqttBridgeConfig, anyio.CancelScope, anyio.Event]] = {}

    async def apply(self, configs: tuple[MqttBridgeConfig, ...]) -> bool:
        """Run exactly ``configs`` (matched by name); whether anything changed."""
        wanted = {b.name: replace(b, nats_url=self._own_url) for b in configs}
        changed = False
        for name, (cfg, scope, done) in list(self._running.items()):
            if wanted.get(name) != cfg:
                scope.cancel()
                with anyio.move_on_after(self.STOP_TIMEOUT):
                    await done.wait()  # its broker session is closed before a new one opens
                del self._running[name]
                log.info("stopped MQTT bridge %r", name)
                changed = True
        for name, cfg in wanted.items():
            if name not in self._running:
                scope, done = anyio.CancelScope(), anyio.Event()
                self._running[name] = (cfg, scope, done)
                await self._tg.start(self._run, cfg, scope, done)
                log.info("started MQTT bridge %r", name)
                changed = True
        return changed

    def stop_all(self) -> None:
        for _cfg, scope, _done in self._running.values():
            scope.cancel()

    @staticmethod
    async def _run(
        cfg: MqttBridgeConfig, scope: anyio.CancelScope, done: anyio.Event, *, task_status: TaskStatus[None]
    ) -> None:
        try:
            with scope:
                await _supervise_bridge(cfg, task_status=task_status)
        finally:
            done.set()


BRIDGE_RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits before restarting a failed bridge, the last one repeated: a bridge that fails at once on
every start (a bug its input triggers) costs a log line every 30 s, not a busy loop."""


async def _supervise_bridge(config: MqttBridgeConfig, *, task_status: TaskStatus[None]) -> None:
    """Run one in-process bridge; when it fails, log one line and restart it after a pause. The
    bridge reconnects to its peers by itself: what reaches here is a failure it did not expect."""
    from bridges.mqtt.bridge import run_bridge  # imported only when a bridge is configured

    failures = 0
    reported = False
    while True:
        try:
            async with anyio.create_task_group() as one:
                await one.start(run_bridge, config)
                if not reported:
                    task_status.started()
                    reported = True
            return
        except Exception as e:
            delay = BRIDGE_RESTART_DELAYS[min(failures, len(BRIDGE_RESTART_DELAYS) - 1)]
            failures += 1
            log.error(
                "mqtt bridge %r failed: %s; restarting in %.0f s", config.name, describe_failure(e), delay
            )
            log.debug("mqtt bridge %r failure", config.name, exc_info=e)
            if not reported:
                task_status.started()
                reported = True
            await anyio.sleep(delay)


def _have_uvloop() -> bool:
    # uvloop is a faster drop-in event loop (a dependency on Linux); plain asyncio otherwise.
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run_agent(
    cfg: ServerConfig,
    mqtt: tuple[MqttBridgeConfig, ...] = (),
    reload_source: ReloadSource | None = None,
    role: str = "agent",
) -> None:
    try:
        anyio.run(
            serve_agent,
            cfg,
            mqtt,
            reload_source,
            role,
            backend="asyncio",
            backend_options={"use_uvloop": _have_uvloop()},
        )
    except* StartupError as group:
        raise leaf_exception(group) from None


if __name__ == "__main__":
    sys.exit("use: leafjet agent ...")
