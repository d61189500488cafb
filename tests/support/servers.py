"""Start leafjet and the reference nats-server as real processes, from one config description.

A test describes the server once as a dict using the reference's field names; it is written as
TOML for leafjet and as JSON (which the reference's config parser accepts) for nats-server.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[2]
NATS_SERVER = Path(sys.executable).parent / "nats-server"
READY = re.compile(r"listening on nats://[^:]+:(\d+)")


# Ports for the servers the tests start come from below the kernel's ephemeral range: a port
# found free inside it can be taken by any client's outgoing connection (they draw their local
# ports from that range) before the server binds it -- "address already in use" now and then
# in a full run. Each pytest-xdist worker scans a slice of its own, so two workers never pick
# the same port either; a port is still checked free (bound) before it is handed out.
_PORT_BASE = 10000
_PORT_SLICES = 16


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_slice() -> range | None:
    """This process's slice of ports below the ephemeral range (None: no room below it)."""
    width = (_ephemeral_low() - _PORT_BASE) // _PORT_SLICES
    if width < 100:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    k = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else os.getpid()
    lo = _PORT_BASE + (k % _PORT_SLICES) * width
    return range(lo, lo + width)


_SLICE = _port_slice()
_cursor = itertools.count(os.getpid())  # where this process's scan of its slice goes on


def _bound_socket() -> socket.socket:
    """A socket bound to a free port of this process's slice (or any free port)."""
    if _SLICE is not None:
        for _ in range(len(_SLICE)):
            port = _SLICE[next(_cursor) % len(_SLICE)]
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            return s
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def free_port() -> int:
    with _bound_socket() as s:
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are chosen (``free_port``
    called twice in a row may return the same port, and a server then cannot bind both)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(_bound_socket())
            ports.append(s.getsockname()[1])
        return ports


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def wait_until_async(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """``wait_until`` for async tests: polls ``predicate`` without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await anyio.sleep(interval)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {v!r} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def to_toml(config: dict[str, Any]) -> str:
    """A flat TOML document of inline values: enough for test configs."""
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in config.items())


@dataclass
class RunningServer:
    kind: str
    port: int
    proc: subprocess.Popen
    workdir: Path
    log_path: Path
    config: dict[str, Any] = field(default_factory=dict)
    jetstream: bool = False

    @property
    def url(self) -> str:
        scheme = "tls" if "tls" in self.config else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def restart(self, *, kill: bool = False) -> RunningServer:
        """Stop (SIGKILL when ``kill``) and start the same kind on the same port and data."""
        self.stop(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            fresh = self._start({**self.config, "port": self.port})
        except RuntimeError as e:
            if "address already in use" not in str(e):
                raise
            # a test running beside this one (pytest -n) took the port while it was free: a new
            # one (clients connect to ``url`` again; one kept open would not find it anyway)
            fresh = self._start({k: v for k, v in self.config.items() if k != "port"})
        self.proc, self.port = fresh.proc, fresh.port  # the fixture that owns self stops it
        return self

    def start_again(self) -> RunningServer:
        """A new server of the same kind on the same port, config and data, once this one's
        process has ended (the caller stopped it, and timed the stop)."""
        return self._start({**self.config, "port": self.port})

    def _start(self, config: dict[str, Any]) -> RunningServer:
        if self.kind == "leafjet":
            return start_leafjet(self.workdir, config)
        return start_reference(self.workdir, config, jetstream=self.jetstream)

    def rewrite_config(self, config: dict[str, Any]) -> None:
        """Write ``config`` where the running server reads its config file, for a reload."""
        self.config = dict(config)
        if self.kind == "leafjet":
            (self.workdir / "leafjet.toml").write_text(to_toml(config))
            return
        conf = {"host": "127.0.0.1", "port": self.port, **config}
        if self.jetstream:
            conf.setdefault("jetstream", {}).setdefault("store_dir", str(self.workdir / "data"))
        (self.workdir / "nats-server.conf").write_text(json.dumps(conf, indent=1))

    def reload(self) -> None:
        """SIGHUP: both servers read their config file again."""
        self.proc.send_signal(signal.SIGHUP)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def start_leafjet(
    workdir: Path,
    config: dict[str, Any] | None = None,
    *,
    timeout: float = 60.0,
    extra_args: tuple[str, ...] = (),
    role: str = "agent",
    nofile_soft: int | None = None,
) -> RunningServer:
    """Start a leafjet server in ``workdir``; ``nofile_soft`` lowers the child's soft
    RLIMIT_NOFILE only (the test process may hold more descriptors than that)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = dict(config or {})
    args = [
        sys.executable,
        "-m",
        "agent.cli",
        role,
        "--host",
        "127.0.0.1",
        "--port",
        str(config.pop("port", 0)),
        "--data-dir",
        str(workdir / "data"),
        *extra_args,
    ]
    if config:
        cfg_path = workdir / "leafjet.toml"
        cfg_path.write_text(to_toml(config))
        args += ["--config", str(cfg_path)]
    log_path = workdir / "leafjet.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO,
            env=env,
            preexec_fn=None if nofile_soft is None else functools.partial(_lower_nofile, nofile_soft),
        )
    try:
        ready = wait_for_output(
            proc,
            READY,
            timeout,
            "leafjet to be ready",
            lambda: f"leafjet exited with {proc.returncode}: {log_path.read_text()}",
        )
    except BaseException:
        proc.kill()
        proc.wait(5)
        if proc.stdout is not None:  # else an unclosed-file warning fails the test's teardown
            proc.stdout.close()
        raise
    return RunningServer("leafjet", int(ready.group(1)), proc, workdir, log_path, config)


def _lower_nofile(soft: int) -> None:
    """Run in the child between fork and exec: only setrlimit, nothing that takes a lock."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def wait_for_output(
    proc: subprocess.Popen, pattern: re.Pattern[str], timeout: float, what: str, exited: Callable[[], str]
) -> re.Match[str]:
    """Read ``proc``'s stdout (a pipe, made non-blocking) until ``pattern`` appears in it; the
    match. ``RuntimeError(exited())`` if the process ends first, TimeoutError after ``timeout``."""
    out = proc.stdout
    assert out is not None
    os.set_blocking(out.fileno(), False)
    buf = b""

    def ready() -> re.Match[str] | None:
        nonlocal buf
        chunk = out.read()
        if chunk:
            buf += chunk
        m = pattern.search(buf.decode(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError(exited())
        return None

    return wait_until(ready, timeout, what=what)


def start_reference(
    workdir: Path, config: dict[str, Any] | None = None, *, timeout: float = 60.0, jetstream: bool = False
) -> RunningServer:
    if config and config.get("port"):
        return _start_reference(workdir, config, timeout=timeout, jetstream=jetstream)
    # A free port is picked here and bound by the server a moment later: a test running beside
    # this one (pytest -n) may take it in between. Then pick another.
    for attempt in range(3):
        try:
            return _start_reference(workdir, config, timeout=timeout, jetstream=jetstream)
        except RuntimeError as e:
            if "address already in use" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_reference(
    workdir: Path, config: dict[str, Any] | None = None, *, timeout: float = 60.0, jetstream: bool = False
) -> RunningServer:
    workdir.mkdir(parents=True, exist_ok=True)
    config = dict(config or {})
    port = config.pop("port", None) or free_port()
    conf = {"host": "127.0.0.1", "port": port, **config}
    if jetstream:
        conf.setdefault("jetstream", {}).setdefault("store_dir", str(workdir / "data"))
    cfg_path = workdir / "nats-server.conf"
    cfg_path.write_text(json.dumps(conf, indent=1))
    log_path = workdir / "nats-server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(NATS_SERVER), "-c", str(cfg_path)], stdout=log, stderr=subprocess.STDOUT)

    listening = f"Listening for client connections on 127.0.0.1:{port}"

    def ready() -> bool:
        # The server's own word, as for leafjet: a TCP connect could be answered by something
        # else on the port (or by the probe's own socket), before this process listens.
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode}: {log_path.read_text()}")
        text = log_path.read_text(errors="replace")
        return listening in text and "Server is ready" in text

    try:
        wait_until(ready, timeout, what="nats-server to be ready")
    except BaseException:
        proc.kill()
        raise
    return RunningServer("reference", port, proc, workdir, log_path, dict(config), jetstream)


def start_server(kind: str, workdir: Path, config: dict[str, Any] | None = None, **kw: Any) -> RunningServer:
    if kind == "leafjet":
        return start_leafjet(workdir, config, **{k: v for k, v in kw.items() if k != "jetstream"})
    if kind == "reference":
        return start_reference(workdir, config, **kw)
    raise ValueError(kind)
