"""An idle agent's memory: what the agent imports at start is what every agent needs. Heavy
packages that only some configurations use (encryption and nkeys, MQTT, Spark, monitoring, backups) are
imported where they are first used; this test keeps it so (each one is megabytes of RSS)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.servers import REPO

OPTIONAL = (
    "cryptography",
    "paho",
    "pyspark",
    "pyarrow",
    "prometheus_client",
    "h11",
    "nats",
    "matplotlib",
    "cramjam",
)


def test_starting_the_agent_imports_no_optional_package():
    code = (
        "import sys, agent.cli, agent.app, agent.config\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({OPTIONAL!r}))\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported at start: {done.stdout.strip()}"
