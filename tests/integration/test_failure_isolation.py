"""A failure of one connection ends that connection only, never the server (issue 17).

Connections that close before the server said anything (health checks, port scans), and faults
injected into each of a connection's tasks through the test-only ``LEAFJET_FAULTS`` hook
(core/faults.py): the process keeps serving every other client.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys

import pytest

from tests.support.raw import exchange
from tests.support.servers import REPO, start_leafjet, wait_until

pytestmark = pytest.mark.integration


def _pong(port: int) -> bool:
    """A new client gets its PONG (server PINGs may come first)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        got = b""
        s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        while b"PONG\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                return False
            got += chunk
        return True


def _recv_all(s: socket.socket) -> bytes:
    """What arrives until the peer closes, or the first chunk when it stays open."""
    try:
        chunk = s.recv(4096)
    except ConnectionResetError:
        return b""
    if not chunk or chunk.endswith(b"\r\n"):
        return chunk
    return chunk + _recv_all(s)


def _close_at_once(port: int, how: str) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    if how == "rst":
        # SO_LINGER with a zero timeout: close() sends a RST instead of a FIN.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif how == "half":
        s.shutdown(socket.SHUT_WR)
    s.close()


@pytest.mark.parametrize("how", ["fin", "rst", "half"])
def test_clients_closing_before_info_leave_the_server_serving(server, how):
    for _ in range(150):
        _close_at_once(server.port, how)
    assert _pong(server.port)
    assert server.proc.poll() is None


@pytest.mark.parametrize("kind", ["client_reader", "client_writer"])
def test_a_fault_in_one_connection_task_closes_that_connection_only(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("LEAFJET_FAULTS", f"{kind}:victim")
    srv = start_leafjet(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as bystander:
            bystander.recv(4096)
            bystander.sendall(b'CONNECT {"verbose":false,"name":"bystander"}\r\nSUB x 1\r\n')
            with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as victim:
                victim.recv(4096)
                victim.sendall(b'CONNECT {"verbose":false,"name":"victim"}\r\nPING\r\n')
                if kind == "client_reader":
                    # The reader fails on its next chunk once the CONNECT named the client.
                    assert _recv_all(victim) == b"PONG\r\n"
                    victim.sendall(b"PING\r\n")
                # (the writer fails when it wakes for the PONG)
                assert _recv_all(victim) == b""
            wait_until(lambda: "InjectedFault" in srv.log(), 10, what="the fault's log line")
            bystander.sendall(b"PUB x 2\r\nhi\r\nPING\r\n")
            got = b""
            while not got.endswith(b"PONG\r\n"):
                got += bystander.recv(4096)
            assert got == b"MSG x 1 2\r\nhi\r\nPONG\r\n"
        assert _pong(srv.port)
        line = next(x for x in srv.log().splitlines() if "InjectedFault" in x)
        assert "internal error" in line and "127.0.0.1" in line
    finally:
        assert srv.stop() == 0


def test_a_fault_in_the_pinger_closes_that_connection_only(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAFJET_FAULTS", "client_pinger:victim")
    srv = start_leafjet(tmp_path, {"ping_interval": "200ms"})
    try:
        _, closed = exchange(
            srv.port, b"", connect=b'CONNECT {"verbose":false,"name":"victim"}\r\n', quiet=3, timeout=10
        )
        assert closed
        assert _pong(srv.port)
        assert "client_pinger:victim" in srv.log()
    finally:
        assert srv.stop() == 0


def _run_agent(data_dir, timeout: float = 20) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "agent.cli", "agent", "--host", "127.0.0.1", "--port", "0"]
    return subprocess.run(
        [*args, "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def test_a_second_agent_on_the_same_data_dir_exits_3_naming_the_holder(tmp_path):
    first = start_leafjet(tmp_path)
    try:
        second = _run_agent(tmp_path / "data")
        assert second.returncode == 3
        assert f"is in use by pid {first.pid}" in second.stderr
        assert second.stderr.count("\n") == 1, second.stderr
        assert _pong(first.port)
    finally:
        first.stop()


def test_the_data_dir_lock_dies_with_its_holder(tmp_path):
    first = start_leafjet(tmp_path)
    first.restart(kill=True)  # SIGKILL leaves the LOCK file behind; its flock went with the process
    try:
        assert _pong(first.port)
        assert (tmp_path / "data" / "LOCK").read_text().strip() == str(first.pid)
    finally:
        assert first.stop(signal.SIGTERM) == 0
