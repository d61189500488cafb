"""The edge composition root: config -> server (+ later the SQLite-backed JetStream and leaf remotes).

Start-up is a handshake: the readiness line is printed (and systemd notified) only after the
listener is bound. SIGTERM and SIGINT start the ordered shutdown.
"""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path

import anyio
from anyio.abc import TaskGroup, TaskStatus

from agent import systemd
from bridges.mqtt.config import MqttBridgeConfig
from core.config import ServerConfig
from core.datadir import DataDirLock, lock_data_dir
from core.errors import StartupError
from core.jetstream.engine import JetStream
from core.server.failures import describe_failure
from core.server.server import Server

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


async def serve_agent(cfg: ServerConfig, mqtt: tuple[MqttBridgeConfig, ...] = ()) -> None:
    """Start JetStream (recovering streams) before the listener, then the in-process bridges; stop
    in the reverse order: the bridges, then stop accepting, drain clients, then stop the streams
    and close their stores."""
    data_dir = prepare_data_dir(cfg.data_dir)
    locks = [lock_data_dir(data_dir)]  # held until the process exits
    try:
        await _serve(cfg, data_dir, locks, mqtt)
    finally:
        for lock in locks:
            lock.release()
    log.info("stopped")


async def _serve(
    cfg: ServerConfig, data_dir: Path, locks: list[DataDirLock], mqtt: tuple[MqttBridgeConfig, ...]
) -> None:
    server = Server(cfg)
    js: JetStream | None = None
    if cfg.jetstream.enabled:
        store_dir = Path(cfg.jetstream.store_dir) if cfg.jetstream.store_dir else data_dir
        if store_dir.resolve() != data_dir.resolve():
            locks.append(lock_data_dir(prepare_data_dir(str(store_dir))))
        js = JetStream(server, cfg.jetstream, store_dir)
        server.extra_info["jetstream"] = True
        if cfg.jetstream.domain:
            server.extra_info["domain"] = cfg.jetstream.domain
    js_scope = anyio.CancelScope()
    monitor_scope = anyio.CancelScope()

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
            js_scope.cancel()
            monitor_scope.cancel()

    async with anyio.create_task_group() as tg:
        if cfg.http_port is not None:
            # Before JetStream's recovery: /healthz answers 503 until every stream is loaded.
            await tg.start(run_monitor)
        if js is not None:
            await tg.start(run_jetstream)
        port = await tg.start(run_server)
        print(
            f"leafjet agent ready: listening on nats://{cfg.host}:{port} "
            f"(server {server.name}, data {cfg.data_dir})",
            flush=True,
        )
        bridges_scope = anyio.CancelScope()
        if mqtt:
            # In-process bridges are ordinary NATS clients of this agent's own listener.
            own_url = f"nats://127.0.0.1:{port}"
            await _start_bridges(tg, bridges_scope, [replace(b, nats_url=own_url) for b in mqtt])
            log.info("started %d MQTT bridge(s)", len(mqtt))
        systemd.notify("READY=1")
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s: shutting down", signal.Signals(signum).name)
                systemd.notify("STOPPING=1")
                bridges_scope.cancel()
                server.request_shutdown()
                break


async def _start_bridges(tg: TaskGroup, scope: anyio.CancelScope, configs: list[MqttBridgeConfig]) -> None:
    """The bridges run in one child task group under ``scope``, so shutdown cancels them first;
    each under its own supervisor, so a bridge that fails is restarted and never ends the agent."""

    async def run_all(*, task_status: TaskStatus[None]) -> None:
        with scope:
            async with anyio.create_task_group() as inner:
                for b in configs:
                    await inner.start(_supervise_bridge, b)
                task_status.started()

    await tg.start(run_all)


BRIDGE_RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits before restarting a failed bridge, the last one repeated: a bridge that fails at once on
every start (a bug its input triggers) costs a log line every 30 s, not a busy loop."""


async def _supervise_bridge(config: MqttBridgeConfig, *, task_status: TaskStatus[None]) -> None:
    """Run one in-process bridge; when it fails, log one line and restart it after a pause. The
    bridge reconnects to its peers by itself: what reaches here is a failure it did not expect."""
    from bridges.mqtt.bridge import run_bridge  # imported when a bridge is configured: paho is not small

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


def run_agent(cfg: ServerConfig, mqtt: tuple[MqttBridgeConfig, ...] = ()) -> None:
    try:
        anyio.run(serve_agent, cfg, mqtt, backend="asyncio", backend_options={"use_uvloop": _have_uvloop()})
    except* StartupError as group:
        raise _first_leaf(group) from None


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    """Task groups nest exception groups; the CLI reports the first real error as one line."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    sys.exit("use: leafjet agent ...")
