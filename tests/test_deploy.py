"""The systemd units in deploy/ are valid and supervise the agent and the hub the way the README
says; the example configs are valid for their role."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
UNITS = {role: DEPLOY / "systemd" / f"leafjet-{role}.service" for role in ("agent", "hub")}
ROLES = pytest.mark.parametrize("role", sorted(UNITS))


def _unit(role: str = "agent") -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNITS[role].read_text())
    return parser


@ROLES
def test_the_unit_runs_its_role_with_its_example_config(role):
    start = _unit(role)["Service"]["ExecStart"].split()
    assert start[1] == role and start[start.index("--config") + 1] == f"/etc/leafjet/{role}.toml"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", role, "--check-config", str(DEPLOY / f"{role}.example.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=DEPLOY.parent,
    )
    assert done.returncode == 0, done.stderr


@ROLES
def test_the_unit_restarts_on_failure_within_a_start_limit(role):
    unit = _unit(role)
    assert unit["Service"]["Restart"] == "on-failure"
    assert float(unit["Service"]["RestartSec"]) > 0
    assert int(unit["Unit"]["StartLimitBurst"]) >= 3
    assert int(unit["Unit"]["StartLimitIntervalSec"]) > 0
    assert unit["Service"]["RestartPreventExitStatus"].split() == ["2"], "a bad config is not retried"


@ROLES
def test_the_unit_raises_the_open_files_limit_past_the_default(role):
    assert int(_unit(role)["Service"]["LimitNOFILE"]) > 1024


@ROLES
def test_the_unit_is_valid_for_systemd(tmp_path, role):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's binary exists: point it at one that does
    unit = tmp_path / f"leafjet-{role}.service"
    unit.write_text(UNITS[role].read_text().replace("/usr/local/bin/leafjet", "/bin/true"))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Unknown key" not in done.stderr and "Unknown section" not in done.stderr, done.stderr
