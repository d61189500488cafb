"""Column blocks (core/store/colblocks.py) are kept where analytics read: a hub builds them for
its streams, an agent does not (they cost an ingesting agent ~30 MiB of RSS), and either role
follows ``jetstream.column_blocks`` when it is set."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.support.fill import fill_stream
from tests.support.servers import free_port, start_leafjet

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MSGS = 4096 + 100  # one block's range sealed


def _blocks(data_dir: Path) -> int:
    db = next(data_dir.rglob("S/msgs.db"))
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM colblocks").fetchone()[0])
    except sqlite3.OperationalError:  # no table: never had blocks
        return 0
    finally:
        conn.close()


async def _fill(port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        await fill_stream(nc, lambda i: f"s.{i % 8}", MSGS, lambda i: b"%032d" % i)
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("role", "config", "built"),
    [
        ("agent", {}, False),
        ("hub", {}, True),
        ("agent", {"jetstream": {"column_blocks": True}}, True),
        ("hub", {"jetstream": {"column_blocks": False}}, False),
    ],
    ids=["agent", "hub", "agent_on", "hub_off"],
)
async def test_blocks_are_built_by_role_unless_configured(
    tmp_path: Path, role: str, config: dict[str, Any], built: bool
):
    # a hub listens for leafs, on 7422 unless told: a free port, so tests run side by side
    extra = ("--leaf-port", str(free_port())) if role == "hub" else ()
    srv = start_leafjet(tmp_path, config, role=role, extra_args=extra)
    try:
        await _fill(srv.port)
        deadline = time.monotonic() + (30 if built else 1.0)  # built in the background, at once
        while _blocks(tmp_path / "data") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (_blocks(tmp_path / "data") > 0) is built
    finally:
        srv.stop()
