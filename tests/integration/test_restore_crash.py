"""A hub cluster's restore survives a crash of the server that takes it (leafjet only: the
reference gives no way to stop its process at these steps). The server builds the restored
store aside, marks it whole, asks the meta group to create the stream on itself, then moves the
store into place. A crash after the create committed and before the move used to leave the
stream created empty after the restart (the store removed as a restore's leftover); now the
store waits for that assignment and the restart brings the stream back whole. A crash before
the create was asked leaves nothing: the name is free and a restore of it works."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from tests.support.backup import WHOLE, restore, take_snapshot
from tests.support.cluster import Cluster
from tests.support.jsapi import api
from tests.support.jscluster import THREE_TAGGED, api_until, start_js_node

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(240)]


async def _backup(nc: nats.NATS) -> tuple[dict, bytes]:
    """Stream S1 on server 0 with 50 messages, backed up and deleted."""
    cfg = {"name": "S1", "subjects": ["s1.>"], "placement": {"tags": ["az:1"]}}
    created = await api_until(nc, "$JS.API.STREAM.CREATE.S1", cfg, retry_on=(10008, 10005))
    assert "error" not in created, created
    js = nc.jetstream()
    for i in range(50):
        await js.publish(f"s1.{i}", os.urandom(200))
    answer, data, status = await take_snapshot(nc, "S1")
    assert answer["state"]["messages"] == 50 and status == WHOLE, answer
    await js.delete_stream("S1")
    return answer, data


@contextlib.asynccontextmanager
async def _restore_cut_by_a_crash(
    tmp_path: Path, crash: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Cluster, nats.NATS, dict, bytes]]:
    """A cluster whose server 0 (where stream S1 is placed) ends at the crash point ``crash``;
    S1 with 50 messages backed up, deleted and restored through server 1 (the restore gets no
    success: its server died), then server 0 started again, unarmed. Yields the cluster, a
    client of server 1, the snapshot's answer and bytes."""
    c = Cluster(tmp_path, "leafjet", size=3)
    try:
        for i in (1, 2):
            start_js_node(c, i, THREE_TAGGED)
        with monkeypatch.context() as m:
            m.setenv("LEAFJET_FAULTS", f"crash:{crash}")
            start_js_node(c, 0, THREE_TAGGED)
        c.wait_for_mesh()
        nc = await nats.connect(c.url(1))
        try:
            answer, data = await _backup(nc)
            try:
                got = await restore(nc, "S1", answer, data, end_timeout=15)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                got = None
            assert got is None or "error" in got, got
            deadline = time.monotonic() + 30
            while c.server(0).proc.poll() is None:
                assert time.monotonic() < deadline, "server 0 did not reach its crash point"
                await asyncio.sleep(0.1)
            c.stop(0)
            await asyncio.to_thread(start_js_node, c, 0, THREE_TAGGED)
            yield c, nc, answer, data
        finally:
            await nc.close()
    finally:
        c.close()


def _staging_left(c: Cluster) -> list[Path]:
    return [p for p in (c.workdir / c.nodes[0].name).rglob("*.restoring-*")]


async def test_a_crash_between_the_create_and_the_move_keeps_the_restored_stream(tmp_path, monkeypatch):
    async with _restore_cut_by_a_crash(tmp_path, "restore_move", monkeypatch) as (c, nc, _answer, _data):
        deadline = time.monotonic() + 60
        while True:
            info = await api(nc, "$JS.API.STREAM.INFO.S1")
            if "error" not in info and info["state"]["messages"] == 50:
                break
            assert time.monotonic() < deadline, info
            await asyncio.sleep(0.3)
        assert info["state"]["last_seq"] == 50 and info["cluster"]["leader"] == c.nodes[0].name, info
        msg = await api(nc, "$JS.API.STREAM.MSG.GET.S1", {"seq": 50})
        assert msg["message"]["subject"] == "s1.49", msg
        assert _staging_left(c) == []
        assert list((c.workdir / c.nodes[0].name).rglob("restored.json")) == []  # the marker went


async def test_a_crash_before_the_create_is_asked_leaves_the_name_free(tmp_path, monkeypatch):
    async with _restore_cut_by_a_crash(tmp_path, "restore_ask", monkeypatch) as (c, nc, answer, data):
        deadline = time.monotonic() + 60
        while _staging_left(c):  # removed once server 0 has caught up with the leader
            assert time.monotonic() < deadline, _staging_left(c)
            await asyncio.sleep(0.3)
        info = await api(nc, "$JS.API.STREAM.INFO.S1")
        assert info["error"]["err_code"] == 10059, info
        again = await restore(nc, "S1", answer, data)
        assert again["state"]["messages"] == 50, again
