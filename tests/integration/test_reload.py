"""Config reload on SIGHUP, against leafjet and the reference: users and permissions change under
live clients, a change that cannot apply at runtime is refused whole, and the agent's own parts
(log level, --signal) work from the command line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from tests.support.servers import REPO, wait_until

pytestmark = pytest.mark.integration

ALICE = {"user": "alice", "password": "s3cret"}


def _users(*users: dict) -> dict:
    return {"authorization": {"users": list(users)}}


class Client:
    """A raw client that keeps reading what the server sends."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self._until(b"\r\n")  # INFO
        connect = f'{{"verbose":false,"pedantic":false,"user":"{user}","pass":"{password}"}}'
        self.send(f"CONNECT {connect}\r\nPING\r\n".encode())
        self.expect(b"PONG\r\n")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _until(self, token: bytes, timeout: float = 10) -> bytes:
        deadline = time.monotonic() + timeout
        while token not in self.buf:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed; got {self.buf!r}")
            self.buf += chunk
        head, _, self.buf = self.buf.partition(token)
        return head + token

    def expect(self, token: bytes, timeout: float = 10) -> bytes:
        return self._until(token, timeout)

    def ping(self) -> bytes:
        """Everything up to the PONG of a new PING."""
        self.send(b"PING\r\n")
        return self.expect(b"PONG\r\n")

    def closed(self, timeout: float = 10) -> bytes:
        """What arrives until the server closes the connection."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return self.buf
            if not chunk:
                return self.buf
            self.buf += chunk
        raise TimeoutError(f"still open; got {self.buf!r}")

    def close(self) -> None:
        self.sock.close()


def _reload_and_wait(srv, config: dict, probe) -> None:
    srv.rewrite_config(config)
    srv.reload()
    wait_until(probe, 10, what="the reload to take effect")


def test_a_reload_narrows_a_live_clients_permissions_without_closing_it(make_server):
    wide = {**ALICE, "permissions": {"publish": [">"], "subscribe": [">"]}}
    narrow = {**ALICE, "permissions": {"publish": ["foo"], "subscribe": ["foo"]}}
    srv = make_server(_users(wide))
    c = Client(srv.port, "alice", "s3cret")
    try:
        c.send(b"SUB bar.> 1\r\nSUB foo 2\r\n")
        c.ping()
        srv.rewrite_config(_users(narrow))
        srv.reload()
        err = c.expect(b"\r\n", timeout=10)
        assert err == b'-ERR \'Permissions Violation for Subscription to "bar.>" (sid "1")\'\r\n'
        # still connected, with the new rules: bar is refused, foo goes on
        c.send(b"PUB bar.x 1\r\nx\r\nPUB foo 2\r\nok\r\n")
        out = c.ping()
        assert b'Permissions Violation for Publish to "bar.x"' in out
        assert b"MSG foo 2 2\r\nok\r\n" in out
    finally:
        c.close()


def test_a_reload_that_removes_a_user_closes_that_users_clients_only(make_server):
    bob = {"user": "bob", "password": "b0b"}
    srv = make_server(_users(ALICE, bob))
    alice, bobc = Client(srv.port, "alice", "s3cret"), Client(srv.port, "bob", "b0b")
    try:
        srv.rewrite_config(_users(ALICE))
        srv.reload()
        assert bobc.closed() == b"", "closed without a word, as the reference does"
        assert alice.ping().endswith(b"PONG\r\n")
    finally:
        alice.close()
        bobc.close()


def test_a_reload_that_changes_a_password_closes_clients_of_the_old_one(make_server):
    srv = make_server(_users(ALICE))
    c = Client(srv.port, "alice", "s3cret")
    try:
        srv.rewrite_config(_users({"user": "alice", "password": "n3w"}))
        srv.reload()
        assert c.closed() == b"-ERR 'Authorization Violation'\r\n"
        Client(srv.port, "alice", "n3w").close()
    finally:
        c.close()


def test_a_reload_that_changes_the_server_name_is_refused_whole(make_server):
    wide = {**ALICE, "permissions": {"publish": [">"], "subscribe": [">"]}}
    srv = make_server(_users(wide))
    c = Client(srv.port, "alice", "s3cret")
    try:
        c.send(b"SUB bar.> 1\r\n")
        c.ping()
        narrow = {**ALICE, "permissions": {"publish": ["foo"], "subscribe": ["foo"]}}
        srv.rewrite_config({**_users(narrow), "server_name": "renamed"})
        srv.reload()
        wait_until(lambda: "reload not supported for servername" in srv.log().lower().replace("_", ""), 10)
        # nothing of the new file applied: the subscription stays, bar is still allowed
        c.send(b"PUB bar.x 1\r\nx\r\n")
        assert b"MSG bar.x 1 1\r\nx\r\n" in c.ping()
    finally:
        c.close()


def test_a_reload_applies_a_new_max_payload_to_new_clients(make_server):
    srv = make_server(_users(ALICE))

    def info_max_payload() -> int:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            line = s.recv(65536)
        return int(line.split(b'"max_payload":')[1].split(b",")[0].split(b"}")[0])

    assert info_max_payload() == 1024 * 1024
    _reload_and_wait(srv, {**_users(ALICE), "max_payload": 4096}, lambda: info_max_payload() == 4096)


def test_the_agent_reloads_its_log_level_and_answers_signal_reload(tmp_path):
    from tests.support.servers import start_leafjet

    srv = start_leafjet(tmp_path, {"max_payload": "1MB"})
    try:
        assert " DEBUG " not in srv.log()
        srv.rewrite_config({"max_payload": "1MB", "debug": True})
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent.cli",
                "agent",
                "--signal",
                "reload",
                "--data-dir",
                str(tmp_path / "data"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert sent.returncode == 0, sent.stderr
        assert f"sent SIGHUP to {srv.pid}" in sent.stdout
        wait_until(lambda: "reloaded configuration: debug" in srv.log(), 10, what="the reload")
        Client(srv.port, "x", "y").close()  # a client's close is logged; at debug its details too
        wait_until(lambda: " DEBUG " in srv.log(), 10, what="a debug line")
    finally:
        assert srv.stop() == 0


def test_signal_without_a_running_agent_fails_with_a_message(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "agent.cli", "agent", "--signal", "reload", "--data-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1
    assert "no running agent holds" in r.stderr


def test_a_reload_of_a_broken_config_file_keeps_the_running_config(make_server, server_kind):
    srv = make_server(_users(ALICE))
    c = Client(srv.port, "alice", "s3cret")
    try:
        cfg = srv.workdir / ("leafjet.toml" if server_kind == "leafjet" else "nats-server.conf")
        cfg.write_text("this is = = not a config {")
        srv.reload()
        if server_kind == "leafjet":
            wait_until(lambda: "config reload refused" in srv.log(), 10, what="the refusal")
        assert c.ping().endswith(b"PONG\r\n")
        Client(srv.port, "alice", "s3cret").close()  # the users in force are still the old ones
        assert srv.proc.poll() is None
    finally:
        c.close()
