"""A site's stream backed up from the hub across the leaf link, and restored the same way:
`leafjet stream backup|restore --js-domain EDGE` connected to the hub, for each (hub, leaf)
pair of kinds. The snapshot's chunks and acknowledgements, and the restore's chunks, cross the
link on `$JS.SNAPSHOT.>` subjects (no domain deny rule covers them)."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

from tests.support.jsapi import api
from tests.support.leafnodes import ALL_PAIRS, Topology, client_url, pair_ids
from tests.support.leafsources import client, start_pair
from tests.support.streams import create_stream as create

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "stream", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), ALL_PAIRS, ids=pair_ids(ALL_PAIRS))
async def test_a_sites_stream_is_backed_up_and_restored_from_the_hub(
    topo: Topology, hub_kind: str, leaf_kind: str, tmp_path
) -> None:
    hub, leaf, _proxy = start_pair(topo, hub_kind, leaf_kind)
    folder = tmp_path / "site-backup"
    hub_url = client_url(hub, "a", "a-pw")
    async with client(leaf) as leaf_nc:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        js = leaf_nc.jetstream()
        for i in range(200):
            await js.publish(f"orders.{i % 4}", json.dumps({"n": i, "pad": "x" * 200}).encode())
        before = await api(leaf_nc, "$JS.API.STREAM.INFO.ORDERS")
        args = ("--server", hub_url, "--js-domain", "EDGE")
        done = await anyio.to_thread.run_sync(lambda: _cli("backup", "ORDERS", str(folder), *args))
        assert done.returncode == 0, done.stderr
        await js.delete_stream("ORDERS")
        back = await anyio.to_thread.run_sync(lambda: _cli("restore", str(folder), *args))
        assert back.returncode == 0, back.stderr
        after = await api(leaf_nc, "$JS.API.STREAM.INFO.ORDERS")
        keys = ("messages", "bytes", "first_seq", "last_seq", "num_subjects")
        assert {k: after["state"][k] for k in keys} == {k: before["state"][k] for k in keys}
        assert (await js.get_msg("ORDERS", 200)).data == json.dumps({"n": 199, "pad": "x" * 200}).encode()
