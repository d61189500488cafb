"""Every attack runs against a *target*: a server (leafjet or the reference, with JetStream) that
holds a stream of acknowledged messages written before the attack, watched by a bystander client
in its own thread. ``target.assert_survived()`` ends every case: the process is alive and answers
PING, the bystander was never stalled past ``STALL_LIMIT``, and every acknowledged message is
still stored.

Soak variants (``@pytest.mark.soak``) run only when selected (``-m soak``) or with
``LEAFJET_SOAK=1``; the default run is the short, seeded version of each case.
"""

from __future__ import annotations

import gc
import os
import ssl
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.abuse.wire import CONNECT, Closed, Raw, close_all, stored_payload
from tests.support.servers import RunningServer, wait_until

STALL_LIMIT = 2.0  # seconds a bystander's PING may wait for its PONG
GUARD_STREAM = "GUARD"
GUARD_MESSAGES = 5


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    soak = "soak" in (config.option.markexpr or "") or os.environ.get("LEAFJET_SOAK") == "1"
    skip = pytest.mark.skip(reason="soak variant: select with -m soak or LEAFJET_SOAK=1")
    here = Path(__file__).parent
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        # a socket an attack left open when an assertion failed is the client's, not the server's
        item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
        item.add_marker(pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"))
        if item.get_closest_marker("soak") and not soak:
            item.add_marker(skip)


_TARGETS: list[Target] = []  # the current test's targets, for the failure report


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed case shows the end of each server's log (a leafjet traceback names the cause)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _TARGETS:
        for t in _TARGETS:
            state = "alive" if t.alive() else f"exited with {t.srv.proc.returncode}"
            report.sections.append((f"{t.srv.kind} log ({state})", t.log_tail(8000)))


@pytest.fixture(autouse=True)
def collect_client_leftovers() -> Iterator[None]:
    yield
    close_all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


# -- the process, from /proc ------------------------------------------------------------------------
def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (KiB), VmHWM (KiB) and Threads of a process."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
    return out


def rss_mib(pid: int) -> float:
    return proc_status(pid)["VmRSS"] / 1024


def threads(pid: int) -> int:
    return proc_status(pid)["Threads"]


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """``wait_until``, failing as an assertion (a case's verdict, not an error of the harness)."""
    try:
        return wait_until(predicate, timeout, interval, what)
    except TimeoutError as e:
        raise AssertionError(str(e)) from None


# -- the bystander ----------------------------------------------------------------------------------
class Bystander(threading.Thread):
    """PING/PONG round trips on its own connection, every ``interval``; records the worst."""

    def __init__(self, port: int, connect: bytes, tls: ssl.SSLContext | None, interval: float = 0.05):
        super().__init__(name="bystander", daemon=True)
        self.client = Raw(port, connect=connect, tls=tls, timeout=10)
        self.client.ping(10)
        self.interval = interval
        self.worst = 0.0
        self.rounds = 0
        self.error: str | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                rtt = self.client.ping(timeout=30)
                self.worst = max(self.worst, rtt)
                self.rounds += 1
                self._halt.wait(self.interval)  # pacing, not synchronisation
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            self.worst = max(self.worst, 30.0)

    def finish(self) -> None:
        self._halt.set()
        self.join(35)
        self.client.close()


# -- the target --------------------------------------------------------------------------------------
@dataclass
class Target:
    srv: RunningServer
    connect: bytes
    tls: ssl.SSLContext | None
    bystander: Bystander | None = None
    guarded: dict[int, bytes] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.srv.port

    @property
    def pid(self) -> int:
        return self.srv.pid

    def client(self, **kw: Any) -> Raw:
        kw.setdefault("connect", self.connect)
        kw.setdefault("tls", self.tls)
        return Raw(self.port, **kw)

    def alive(self) -> bool:
        return self.srv.proc.poll() is None

    def log_tail(self, n: int = 6000) -> str:
        return self.srv.log()[-n:]

    def _write_guard(self) -> None:
        c = self.client()
        try:
            created = c.api(
                f"$JS.API.STREAM.CREATE.{GUARD_STREAM}",
                {"name": GUARD_STREAM, "subjects": ["guard.>"], "storage": "file"},
            )
            assert "error" not in created, created
            for i in range(1, GUARD_MESSAGES + 1):
                payload = b"acknowledged-%d-" % i + os.urandom(8).hex().encode()
                ack = c.api(f"guard.{i}", payload)
                assert ack.get("stream") == GUARD_STREAM and ack.get("seq") == i, ack
                self.guarded[i] = payload
        finally:
            c.close()

    def start(self) -> Target:
        self._write_guard()
        self.bystander = Bystander(self.port, self.connect, self.tls)
        self.bystander.start()
        return self

    def answers_ping(self) -> bool:
        try:
            c = self.client(timeout=5)
            try:
                c.ping(5)
            finally:
                c.close()
            return True
        except (OSError, Closed, TimeoutError):
            return False

    def revive(self) -> None:
        """Start a dead (or hung) server again on its data, with a new bystander: for loops of
        cases that go on after one of them killed the server, and report it."""
        if self.bystander is not None:
            self.bystander.finish()
        self.srv.restart(kill=True)
        self.bystander = Bystander(self.port, self.connect, self.tls)
        self.bystander.start()

    def assert_alive(self) -> None:
        assert self.alive(), f"the {self.srv.kind} process died:\n{self.log_tail()}"

    def assert_survived(self, stall_limit: float = STALL_LIMIT) -> None:
        """The end of every case: alive, answering, nobody stalled, nothing acknowledged lost."""
        self.assert_alive()
        c = self.client(timeout=10)
        try:
            c.ping(10)
            assert self.bystander is not None
            self.bystander.finish()
            assert self.bystander.error is None, f"the bystander was cut off: {self.bystander.error}"
            assert self.bystander.rounds > 0
            assert self.bystander.worst < stall_limit, (
                f"the bystander waited {self.bystander.worst:.2f}s for a PONG (limit {stall_limit}s)"
            )
            info = c.api(f"$JS.API.STREAM.INFO.{GUARD_STREAM}")
            assert "error" not in info, info
            assert info["state"]["messages"] >= len(self.guarded), info["state"]
            for seq, payload in self.guarded.items():
                got = c.api(f"$JS.API.STREAM.MSG.GET.{GUARD_STREAM}", {"seq": seq})
                assert "error" not in got, (seq, got)
                assert stored_payload(got) == payload, seq
        finally:
            c.close()
        self.assert_alive()


@pytest.fixture
def make_target(make_server: Any) -> Iterator[Callable[..., Target]]:
    """``make_target(config, connect=..., tls=...)``: a started, guarded, watched server."""
    made: list[Target] = []

    def factory(
        config: dict[str, Any] | None = None,
        *,
        connect: bytes = CONNECT,
        tls: ssl.SSLContext | None = None,
    ) -> Target:
        srv = make_server(config, jetstream=True)
        t = Target(srv, connect, tls)
        made.append(t)
        _TARGETS.append(t)
        return t.start()

    yield factory
    _TARGETS.clear()
    for t in made:
        if t.bystander is not None and t.bystander.is_alive():
            t.bystander.finish()


@pytest.fixture
def target(make_target: Callable[..., Target]) -> Target:
    return make_target()
