"""The systemd unit in deploy/ is valid and supervises the agent the way the README says."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1] / "deploy" / "systemd" / "leafjet-agent.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_agent_unit_restarts_on_failure_within_a_start_limit():
    unit = _unit()
    assert unit["Service"]["Restart"] == "on-failure"
    assert float(unit["Service"]["RestartSec"]) > 0
    assert int(unit["Unit"]["StartLimitBurst"]) >= 3
    assert int(unit["Unit"]["StartLimitIntervalSec"]) > 0
    assert unit["Service"]["RestartPreventExitStatus"].split() == ["2"], "a bad config is not retried"


def test_the_agent_unit_raises_the_open_files_limit_past_the_default():
    assert int(_unit()["Service"]["LimitNOFILE"]) > 1024


def test_the_agent_unit_is_valid_for_systemd(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's binary exists: point it at one that does
    unit = tmp_path / "leafjet-agent.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/leafjet", "/bin/true"))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Unknown key" not in done.stderr and "Unknown section" not in done.stderr, done.stderr
