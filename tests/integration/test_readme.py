"""The README's "Use it" snippets run as written against an agent started with the example config,
so the README stays true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.support.servers import REPO, start_leafjet

pytestmark = pytest.mark.integration

SNIPPET = re.compile(r"<!-- readme-snippet -->\n```python\n(.*?)```", re.S)
# what each snippet prints, in order
EXPECTED = [
    ["greet.joe b'hello'", "b'PING'"],
    ["stored as sequence 3", "telemetry.dev1.temp b'20'", "telemetry.dev1.temp b'22'", "b'10s'"],
]


def _snippets() -> list[str]:
    return SNIPPET.findall((REPO / "README.md").read_text())


def test_the_readme_has_the_snippets_this_test_expects():
    assert len(_snippets()) == len(EXPECTED)


def test_the_readme_snippets_run_against_an_agent_with_the_example_config(tmp_path):
    config = tmp_path / "agent.toml"
    shutil.copy(REPO / "deploy" / "agent.example.toml", config)
    srv = start_leafjet(tmp_path, extra_args=("--config", str(config)))
    try:
        for code, expected in zip(_snippets(), EXPECTED, strict=True):
            done = subprocess.run(
                [sys.executable, "-c", code],
                env={"NATS_URL": f"nats://app:change-me@127.0.0.1:{srv.port}", "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
            for line in expected:
                assert line in done.stdout, (line, done.stdout)
    finally:
        srv.stop()
