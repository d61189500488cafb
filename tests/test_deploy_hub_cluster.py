"""deploy/hub-cluster/: three configs for three VMs, valid, alike but for each server's own
names and addresses; and local.py runs them as one cluster on this machine."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

CLUSTER = Path(__file__).resolve().parents[1] / "deploy" / "hub-cluster"
NODES = ("n1", "n2", "n3")


@pytest.mark.parametrize("node", NODES)
def test_each_config_is_valid_for_the_hub(node):
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "hub", "--check-config", str(CLUSTER / f"{node}.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CLUSTER.parents[1],
    )
    assert done.returncode == 0, done.stderr


def test_the_configs_differ_only_in_each_servers_name_and_address():
    configs = [tomllib.loads((CLUSTER / f"{n}.toml").read_text()) for n in NODES]
    names = {c["server_name"] for c in configs}
    listens = {c["cluster"]["listen"] for c in configs}
    assert len(names) == len(listens) == 3
    routes = {tuple(c["cluster"]["routes"]) for c in configs}
    assert len(routes) == 1 and {u.split("//")[1] for u in next(iter(routes))} == listens
    for c in configs:
        del c["server_name"], c["cluster"]["listen"]
    assert configs[0] == configs[1] == configs[2]


@pytest.mark.timeout(180)
def test_local_py_runs_the_three_as_one_cluster():
    done = subprocess.run(
        [sys.executable, str(CLUSTER / "local.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=CLUSTER.parents[1],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hub-1 -> hub-3: answered by hub-3" in done.stdout
