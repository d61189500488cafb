"""Clustered JetStream (leafjet hubs): a stream whose store is corrupt on the server it is placed
on is held there as damaged; the other servers answer about it with that server's 10194, a
delete through any server moves its data aside there, and the name can be created again."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_meta_group import TAGS, _tagged_leafjet
from tests.support.jscluster import (
    api,
    api_until,
    publish_until,
    restart_js_node,
    until_true,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(240)]


async def test_a_damaged_stream_in_a_cluster_is_held_then_deleted_everywhere(tmp_path):
    async with _tagged_leafjet(tmp_path) as (c, ncs):
        on_n3 = {"name": "FAR", "subjects": ["far.>"], "placement": {"tags": ["az:3"]}}
        far = await api_until(ncs[0], "$JS.API.STREAM.CREATE.FAR", on_n3, retry_on=(10008, 10005))
        assert "error" not in far, far
        await publish_until(ncs[0].jetstream(), "far.1", b"kept")
        await ncs[2].close()
        c.stop(2)
        folder = tmp_path / c.nodes[2].name / "data" / "jetstream" / "$G" / "streams" / "FAR"
        with open(folder / "msgs.db", "r+b") as f:
            f.write(b"not a database" * 20)
        restart_js_node(c, 2, TAGS)
        c.wait_for_mesh()

        async def offline() -> bool:
            r = await api(ncs[0], "$JS.API.STREAM.INFO.FAR")
            return r.get("error", {}).get("err_code") == 10194

        await until_true(offline, 60, what="the damaged stream reported from another server")

        # its server tries the assignment again and again, but logs it at the 1st, 2nd, 4th...
        # attempt only, each line with its count (the retries back off: 1, 2, 4 s...)
        def attempts_logged() -> list[int]:
            return [int(n) for n in re.findall(r"FAR: cannot apply its assignment \(attempt (\d+)", c.log(2))]

        async def two_attempts() -> bool:
            return len(attempts_logged()) >= 2

        await until_true(two_attempts, 60, what="the failing assignment logged twice")
        logged = attempts_logged()
        assert logged == [2**k for k in range(len(logged))], logged
        r = await api_until(ncs[1], "$JS.API.STREAM.DELETE.FAR")
        assert r.get("success") is True, r

        async def moved_aside() -> bool:
            return not folder.exists() and any(
                p.name.startswith("FAR.damaged-") for p in folder.parent.iterdir()
            )

        await until_true(moved_aside, 60, what="the damaged folder moved aside on its server")
        again = await api_until(ncs[0], "$JS.API.STREAM.CREATE.FAR", on_n3, retry_on=(10008, 10005))
        assert "error" not in again, again
        ack = await publish_until(ncs[0].jetstream(), "far.1", b"fresh")
        assert ack.seq == 1


async def test_a_folder_without_config_of_a_stream_deleted_while_down_is_removed(tmp_path):
    """A create is answered before its stream.json is in place (hub/meta/DESIGN.md): a crash in
    that window leaves the stream's folder, messages and all, without it, and the meta group
    makes the stream again from its assignment. If the stream is deleted while its server is
    down, the assignment is gone: the folder must go at the server's start, not stay for ever
    (a disk leak) nor be reused by a later create of the name (its old messages back)."""
    async with _tagged_leafjet(tmp_path) as (c, ncs):
        on_n3 = {"name": "GONE", "subjects": ["gone.>"], "placement": {"tags": ["az:3"]}}
        r = await api_until(ncs[0], "$JS.API.STREAM.CREATE.GONE", on_n3, retry_on=(10008, 10005))
        assert "error" not in r, r
        for k in range(3):
            await publish_until(ncs[0].jetstream(), "gone.1", b"old %d" % k)
        await ncs[2].close()
        folder = tmp_path / c.nodes[2].name / "data" / "jetstream" / "$G" / "streams" / "GONE"
        # still assigned: the start keeps the folder and the stream is made again on it
        c.stop(2, kill=True)
        (folder / "stream.json").unlink()  # the crash came before it was in place
        restart_js_node(c, 2, TAGS)
        c.wait_for_mesh()
        # (not "not found" while its restarted server is still starting its streams)
        info = await api_until(ncs[0], "$JS.API.STREAM.INFO.GONE", retry_on=(10008, 10118))
        assert info.get("state", {}).get("messages") == 3, info
        # deleted while its server is down: the start removes the folder
        c.stop(2, kill=True)
        (folder / "stream.json").unlink()
        r = await api_until(ncs[0], "$JS.API.STREAM.DELETE.GONE")
        assert r.get("success") is True, r
        restart_js_node(c, 2, TAGS)
        c.wait_for_mesh()

        async def removed() -> bool:
            return not folder.exists()

        await until_true(removed, 60, what="the folder of the deleted stream removed at the start")
        again = await api_until(ncs[0], "$JS.API.STREAM.CREATE.GONE", on_n3, retry_on=(10008, 10005))
        assert "error" not in again, again
        assert again["state"]["messages"] == 0, again
