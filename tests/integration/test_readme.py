"""The README's "Use it" snippets run as written against an agent started with the example config,
so the README stays true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.support.servers import REPO, free_port, start_leafjet, wait_until

pytestmark = pytest.mark.integration

SNIPPET = re.compile(r"<!-- readme-snippet -->\n```python\n(.*?)```", re.S)
# what each snippet prints, in order
EXPECTED = [
    ["greet.joe b'hello'", "b'PING'"],
    ["stored as sequence 3", "telemetry.dev1.temp b'20'", "telemetry.dev1.temp b'22'", "b'10s'"],
    ["hub got telemetry.dev7.temp b'21.5'", "stored on the agent: alarms.door b'open'"],
]
AGENT_SNIPPETS = 2  # the first ones run against an agent alone; the rest against a hub and an agent


def _snippets() -> list[str]:
    return SNIPPET.findall((REPO / "README.md").read_text())


def test_the_readme_has_the_snippets_this_test_expects():
    assert len(_snippets()) == len(EXPECTED)


def _run(code: str, expected: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for line in expected:
        assert line in done.stdout, (line, done.stdout)


def test_the_readme_snippets_run_against_an_agent_with_the_example_config(tmp_path):
    config = tmp_path / "agent.toml"
    shutil.copy(REPO / "deploy" / "agent.example.toml", config)
    srv = start_leafjet(tmp_path, extra_args=("--config", str(config)))
    try:
        for code, expected in list(zip(_snippets(), EXPECTED, strict=True))[:AGENT_SNIPPETS]:
            _run(code, expected, {"NATS_URL": f"nats://app:change-me@127.0.0.1:{srv.port}"})
    finally:
        srv.stop()


def test_the_leaf_snippet_runs_against_a_hub_and_an_agent_with_the_example_configs(tmp_path):
    """The README's hub and agent: the example configs, the agent's remote block uncommented."""
    leaf_port = free_port()
    hub_config = tmp_path / "hub.toml"
    shutil.copy(REPO / "deploy" / "hub.example.toml", hub_config)
    hub = start_leafjet(
        tmp_path / "hub", extra_args=("--config", str(hub_config), "--leaf-port", str(leaf_port)), role="hub"
    )
    agent_config = tmp_path / "agent.toml"
    text = (REPO / "deploy" / "agent.example.toml").read_text()
    remote = (
        f'[[leafnodes.remotes]]\nurls = ["nats-leaf://leaf-site1:change-me-leaf1@127.0.0.1:{leaf_port}"]\n'
    )
    agent_config.write_text(text + "\n" + remote + 'account = "APP"\n')
    agent = start_leafjet(tmp_path / "agent", extra_args=("--config", str(agent_config)))
    try:
        wait_until(lambda: "leafnode connection to hub" in agent.log(), 15, what="the agent's link")
        code, expected = list(zip(_snippets(), EXPECTED, strict=True))[AGENT_SNIPPETS]
        _run(
            code,
            expected,
            {
                "HUB_URL": f"nats://site1-ops:change-me@127.0.0.1:{hub.port}",
                "NATS_URL": f"nats://app:change-me@127.0.0.1:{agent.port}",
            },
        )
    finally:
        agent.stop()
        hub.stop()
