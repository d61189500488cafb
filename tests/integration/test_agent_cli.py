"""The `leafjet agent` command line: readiness, signals, and its errors as exit codes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from tests.support.servers import REPO, start_leafjet

pytestmark = pytest.mark.integration


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_agent_prints_ready_line_and_exits_zero_on_signal(tmp_path, sig):
    srv = start_leafjet(tmp_path)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        assert s.recv(4096).startswith(b"INFO ")
        assert srv.stop(sig) == 0
        s.settimeout(5)
        assert s.recv(4096) == b"", "clients are closed at shutdown"


def test_port_in_use_exits_with_startup_code_and_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_cli("agent", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(tmp_path))
    assert r.returncode == 3
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert r.stderr.strip().count("\n") == 0


def test_unwritable_data_dir_exits_with_startup_code(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("agent", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(blocker / "sub"))
    assert r.returncode == 3
    assert "data directory" in r.stderr and "not writable" in r.stderr


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("port = 'abc'\n", "port: expected an integer"),
        ("max_payload = -5\n", "max_payload: must be positive"),
        ("bogus = 1\n", "bogus: unknown field"),
        (
            "[authorization]\nusers = [{user = 'a'}]\n",
            "authorization.users[0]: a user needs user and password",
        ),
        ("[tls]\ncert_file = '/nope.pem'\nkey_file = '/nope-key.pem'\n", "tls.cert_file: file not found"),
        ("ping_interval = '2 fortnights'\n", "ping_interval: expected a duration"),
        ("this is not toml", "invalid TOML"),
    ],
    ids=[
        "bad_port",
        "negative_payload",
        "unknown_key",
        "incomplete_user",
        "missing_cert",
        "bad_duration",
        "not_toml",
    ],
)
def test_bad_config_exits_2_naming_the_field(tmp_path, toml, message):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(toml)
    checked = run_cli("agent", "--check-config", str(cfg))
    assert checked.returncode == 2
    assert message in checked.stderr
    started = run_cli("agent", "--port", "0", "--data-dir", str(tmp_path), "--config", str(cfg))
    assert started.returncode == 2
    assert message in started.stderr


def test_check_config_accepts_a_good_file(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        "port = 4333\nserver_name = 'edge-1'\nmax_payload = '2MB'\nping_interval = '30s'\n"
        "[authorization]\nusers = [{user = 'a', password = 'b'}]\n"
    )
    r = run_cli("agent", "--check-config", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout


def test_missing_data_dir_is_a_usage_error():
    r = run_cli("agent", "--port", "0")
    assert r.returncode == 2
    assert "data directory is required" in r.stderr


def test_unknown_flag_is_a_usage_error():
    r = run_cli("agent", "--frobnicate")
    assert r.returncode == 2


def test_secrets_never_reach_the_log(tmp_path):
    srv = start_leafjet(
        tmp_path,
        {"authorization": {"users": [{"user": "u", "password": "hunter2-secret"}]}},
        extra_args=("--log-level", "debug"),
    )
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.recv(4096)
        s.sendall(b'CONNECT {"user":"u","pass":"wrong-secret-pw"}\r\n')
        s.settimeout(5)
        assert b"Authorization Violation" in s.recv(4096)
    srv.stop()
    log = srv.log()
    assert "Authorization" in log or "authorization" in log
    assert "hunter2-secret" not in log and "wrong-secret-pw" not in log


def test_an_open_server_on_a_public_address_warns_and_a_loopback_one_does_not(tmp_path):
    public = start_leafjet(tmp_path / "public", extra_args=("--host", "0.0.0.0"))
    local = start_leafjet(tmp_path / "local")
    try:
        assert "no authentication is configured" in public.log()
        assert "no authentication is configured" not in local.log()
    finally:
        public.stop()
        local.stop()


def test_agent_help_names_every_variable_and_exit_code():
    r = run_cli("agent", "--help")
    assert r.returncode == 0
    for word in ("LEAFJET_HOST", "LEAFJET_PORT", "LEAFJET_DATA_DIR", "LEAFJET_CONFIG", "LEAFJET_LOG_LEVEL"):
        assert word in r.stdout, word
    assert "required" in r.stdout
    for code in ("0  clean exit", "1  runtime failure", "2  usage", "3  start-up failure"):
        assert code in r.stdout, code
