"""Stream backups (``STREAM.SNAPSHOT`` / ``STREAM.RESTORE``, core/jetstream/backup.py) on the
reference's wire protocol, the same scenarios against leafjet and nats-server: what a backup
restores (messages, deleted sequences, consumers and their positions), its flow control, and
bad input (bytes that are no backup, a client that stops acknowledging or stops sending).

Each server restores its own backups only (the bytes are each one's own format)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import anyio
import cramjam
import nats
import pytest

from tests.support.backup import WHOLE, restore, send_backup, take_snapshot
from tests.support.jsapi import api, jetstream
from tests.support.jscluster import api_until, publish_until
from tests.support.servers import start_leafjet, start_server

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

RESTORE_TYPE = "io.nats.jetstream.api.v1.stream_restore_response"
CREATE_TYPE = "io.nats.jetstream.api.v1.stream_create_response"


async def fill(js: Any, nc: Any) -> None:
    """A stream ``S`` with 300 messages on five subjects, one deleted in the middle, and a
    durable consumer ``C`` that has 40 acknowledged and 10 more delivered, not acknowledged."""
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(300):
        await js.publish(
            f"s.{i % 5}", f"m{i}".encode() * (1 + i % 7), headers={"N": str(i)} if i % 3 else None
        )
    await js.delete_msg("S", 150)
    sub = await js.pull_subscribe("s.>", durable="C", stream="S")
    msgs = await sub.fetch(50, timeout=5)
    for m in msgs[:40]:
        await m.ack_sync()


async def random_stream(js: Any, n: int, size: int) -> None:
    """A stream ``S`` on ``s`` of ``n`` messages of ``size`` random bytes (nothing to compress)."""
    await js.add_stream(name="S", subjects=["s"])
    for _ in range(n):
        await js.publish("s", os.urandom(size))


def _state(info: dict) -> dict:
    s = info["state"]
    return {
        k: s.get(k) for k in ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "num_subjects")
    }


async def test_a_backup_restores_messages_deleted_sequences_and_consumers(js_server):
    async with jetstream(js_server) as (nc, js):
        await fill(js, nc)
        before = await api(nc, "$JS.API.STREAM.INFO.S")
        consumer_before = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
        answer, data, status = await take_snapshot(nc, "S", chunk_size=4096)
        assert answer["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response", answer
        assert answer["config"]["name"] == "S" and answer["state"]["messages"] == 299
        assert status == WHOLE and data
        await js.delete_stream("S")

        restored = await restore(nc, "S", answer, data)
        assert restored["type"] == CREATE_TYPE and "error" not in restored, restored
        assert _state(restored) == _state(before)
        info = await api(nc, "$JS.API.STREAM.INFO.S")
        assert _state(info) == _state(before)
        for seq in (1, 2, 149, 151, 300):
            got = await js.get_msg("S", seq)
            assert (got.subject, got.data) == (
                f"s.{(seq - 1) % 5}",
                f"m{seq - 1}".encode() * (1 + (seq - 1) % 7),
            )
            assert (got.headers or {}).get("N") == (str(seq - 1) if (seq - 1) % 3 else None)
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.get_msg("S", 150)

        consumer = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
        assert consumer["ack_floor"]["stream_seq"] == consumer_before["ack_floor"]["stream_seq"] == 40
        assert consumer["delivered"]["stream_seq"] == consumer_before["delivered"]["stream_seq"] == 50
        ack = await js.publish("s.9", b"after")
        assert ack.seq == 301  # the stream goes on after its last sequence


async def test_a_backup_without_consumers_restores_none(js_server):
    async with jetstream(js_server) as (nc, js):
        await fill(js, nc)
        answer, data, status = await take_snapshot(nc, "S", no_consumers=True)
        assert status == WHOLE
        await js.delete_stream("S")
        restored = await restore(nc, "S", answer, data)
        assert restored["state"]["messages"] == 299 and restored["state"]["consumer_count"] == 0, restored
        names = await api(nc, "$JS.API.CONSUMER.NAMES.S")
        assert not names["consumers"]


async def test_a_snapshot_nobody_acknowledges_ends_with_408(js_server):
    """With a window of two chunks and no acknowledgement the snapshot stops after two chunks
    and ends, 5 s later, with 408 (the reference's "No Flow Response")."""
    async with jetstream(js_server) as (nc, js):
        await random_stream(js, 200, 1000)  # nothing to compress
        answer, data, status = await take_snapshot(
            nc, "S", ack=False, timeout=20, chunk_size=1024, window_size=2048
        )
        assert "error" not in answer, answer
        assert status == "408" and len(data) == 2048


async def test_bytes_that_are_no_backup_are_refused_and_the_name_stays_free(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s"])
        await js.publish("s", b"x")
        answer, _data, status = await take_snapshot(nc, "S")
        assert status == WHOLE
        await js.delete_stream("S")
        refused = await restore(nc, "S", answer, b"this is not a backup at all" * 100)
        assert refused["error"]["err_code"] == 10062, refused
        info = await api(nc, "$JS.API.STREAM.INFO.S")
        assert info["error"]["err_code"] == 10059
        await js.add_stream(name="S", subjects=["s"])  # the name is free again


async def test_a_restore_checks_the_config_as_a_create_does(js_server):
    """Both servers refuse a config a create would refuse before taking any byte; leafjet also
    refuses subjects another stream holds then (the reference finds out at the end, after the
    whole backup was sent)."""
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="T", subjects=["t.>"])
        bad = await api(
            nc, "$JS.API.STREAM.RESTORE.S", {"config": {"name": "S", "subjects": ["s"], "max_age": -5}}
        )
        assert bad["type"] == RESTORE_TYPE and bad["error"]["err_code"] == 10052, bad  # invalid config
        if js_server.kind == "leafjet":
            overlap = await api(
                nc, "$JS.API.STREAM.RESTORE.S", {"config": {"name": "S", "subjects": ["t.x"]}}
            )
            assert overlap["error"]["err_code"] == 10065, overlap  # subjects overlap


async def test_a_restore_whose_client_goes_away_frees_its_name(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="S", subjects=["s"])
        await js.publish("s", b"x")
        answer, data, _status = await take_snapshot(nc, "S")
        await js.delete_stream("S")
        started = await api(
            nc, "$JS.API.STREAM.RESTORE.S", {"config": answer["config"], "state": answer["state"]}
        )
        await nc.request(started["deliver_subject"], data[:10], timeout=5)
        # the client stops here; after the server's idle time the name can be restored again
        for _ in range(100):
            again = await api(nc, "$JS.API.STREAM.RESTORE.S", {"config": answer["config"]})
            if "error" not in again:
                break
            await asyncio.sleep(0.2)
        assert "error" not in again, again
        done = await send_backup(nc, again["deliver_subject"], data)
        assert done["state"]["messages"] == 1, done


@pytest.mark.cluster
@pytest.mark.timeout(180)
async def test_a_backup_and_restore_through_another_server_of_a_cluster(tagged_cluster):
    """The stream lives on server 0 (placed by tag); the client asks through server 1: the
    snapshot comes across the route with its flow control, and the restore is placed as a
    create would be (on server 0 again, by the config's tags), takes the backup there and
    brings back the messages and the consumer, seen through server 2."""
    c = tagged_cluster
    nc = await nats.connect(c.url(1))
    other = await nats.connect(c.url(2))
    try:
        cfg = {"name": "S1", "subjects": ["s1.>"], "placement": {"tags": ["az:1"]}}
        created = await api_until(nc, "$JS.API.STREAM.CREATE.S1", cfg, retry_on=(10008, 10005))
        assert created["cluster"]["leader"] == c.nodes[0].name, created
        js = nc.jetstream()
        # the reference's cluster answers 503 for a moment after a create: retried as ADR-22 says
        await publish_until(js, "s1.0", os.urandom(900))
        for i in range(1, 100):
            await js.publish(f"s1.{i % 3}", os.urandom(900))
        durable = {"stream_name": "S1", "config": {"durable_name": "C", "ack_policy": "explicit"}}
        made = await api_until(nc, "$JS.API.CONSUMER.DURABLE.CREATE.S1.C", durable, retry_on=(10008,))
        assert "error" not in made, made
        sub = await js.pull_subscribe_bind("C", stream="S1")
        for m in await sub.fetch(30, timeout=10):
            await m.ack_sync()
        before = await api(other, "$JS.API.STREAM.INFO.S1")
        answer, data, status = await take_snapshot(nc, "S1", chunk_size=8192, window_size=16384)
        assert answer["state"]["messages"] == 100 and status == WHOLE, answer
        assert len(data) > 90_000  # random payloads: about as large as the stream
        deleted = await api_until(nc, "$JS.API.STREAM.DELETE.S1", retry_on=(10008,))
        assert deleted.get("success") is True, deleted
        restored = await restore(nc, "S1", answer, data)
        assert "error" not in restored, restored
        after = await api(other, "$JS.API.STREAM.INFO.S1")
        assert _state(after) == _state(before)
        assert after["cluster"]["leader"] == c.nodes[0].name, after
        # the reference restores the consumer by an assignment of its own, a moment later
        consumer = await api_until(other, "$JS.API.CONSUMER.INFO.S1.C", retry_on=(10014,))
        assert consumer["ack_floor"]["stream_seq"] == 30, consumer
        taken = await api(nc, "$JS.API.STREAM.RESTORE.S1", {"config": answer["config"]})
        assert taken["error"]["err_code"] == 10130, taken
    finally:
        await nc.close()
        await other.close()


async def test_a_memory_stream_restores(js_server):
    async with jetstream(js_server) as (nc, js):
        await js.add_stream(name="M", subjects=["m.*"], storage="memory")
        for i in range(50):
            await js.publish(f"m.{i % 2}", f"v{i}".encode())
        answer, data, status = await take_snapshot(nc, "M")
        assert status == WHOLE
        await js.delete_stream("M")
        restored = await restore(nc, "M", answer, data)
        assert restored["config"]["storage"] == "memory" and restored["state"]["messages"] == 50, restored
        assert (await js.get_msg("M", 50)).data == b"v49"


async def test_a_restore_cut_short_by_a_restart_leaves_nothing(tmp_path):
    """leafjet: the staging folder of a restore that a stop ended is gone after the restart,
    the name is free, and the other streams are there."""
    srv = start_leafjet(tmp_path)
    try:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["k"])
        await js.publish("k", b"kept")
        answer, data, _ = await take_snapshot(nc, "KEEP")
        started = await api(
            nc, "$JS.API.STREAM.RESTORE.R", {"config": {**answer["config"], "name": "R", "subjects": ["r"]}}
        )
        await nc.request(started["deliver_subject"], data[:5], timeout=5)
        staging = [d for d in (tmp_path / "data").rglob("R.restoring-*") if d.is_dir()]
        assert len(staging) == 1
        await nc.close()
    finally:
        srv.stop(signal.SIGKILL)
    srv = srv.start_again()
    try:
        assert not staging[0].exists()
        async with jetstream(srv) as (nc, js):
            assert (await js.get_msg("KEEP", 1)).data == b"kept"
            assert (await api(nc, "$JS.API.STREAM.INFO.R"))["error"]["err_code"] == 10059
            await js.add_stream(name="R", subjects=["r"])
    finally:
        srv.stop()


async def test_backups_are_advised_as_the_reference_advises_them(js_server):
    async with jetstream(js_server) as (nc, js):
        seen: list[dict] = []

        async def on_advisory(msg: Any) -> None:
            seen.append({"subject": msg.subject, **json.loads(msg.data)})

        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.*.S", cb=on_advisory)
        await js.add_stream(name="S", subjects=["s"])
        await js.publish("s", b"x")
        answer, data, _ = await take_snapshot(nc, "S")
        await js.delete_stream("S")
        await restore(nc, "S", answer, data)
        wanted = ["SNAPSHOT_CREATE", "SNAPSHOT_COMPLETE", "RESTORE_CREATE", "RESTORE_COMPLETE"]
        for _ in range(100):
            kinds = [a["subject"].split(".")[-2] for a in seen]
            if all(k in kinds for k in wanted):
                break
            await asyncio.sleep(0.05)
        by_kind = {a["subject"].split(".")[-2]: a for a in seen}
        for kind in wanted:
            assert by_kind[kind]["type"] == f"io.nats.jetstream.advisory.v1.{kind.lower()}", seen
            assert by_kind[kind]["stream"] == "S"
        assert by_kind["SNAPSHOT_CREATE"]["state"]["messages"] == 1
        assert by_kind["RESTORE_COMPLETE"]["bytes"] == len(data)
        assert by_kind["SNAPSHOT_COMPLETE"]["start"] and by_kind["SNAPSHOT_COMPLETE"]["end"]


async def test_backups_are_s2_readable_and_each_server_refuses_the_others(tmp_path):
    """`nats stream backup` reads the bytes as an S2 stream as they come (its progress): a
    leafjet backup is a Snappy-framed stream, which S2 readers read (checked here with another
    framed-Snappy decoder, checksums included). A nats-server backup sent to leafjet, and a
    leafjet backup sent to nats-server, are refused with 10062."""
    lj = start_server("leafjet", tmp_path / "lj", jetstream=True)
    ref = start_server("reference", tmp_path / "ref", jetstream=True)
    try:
        backups = {}
        for name, srv in (("leafjet", lj), ("reference", ref)):
            async with jetstream(srv) as (nc, js):
                await js.add_stream(name="S", subjects=["s"])
                for i in range(100):
                    await js.publish("s", f"message {i}".encode() * 20)
                answer, data, status = await take_snapshot(nc, "S", chunk_size=2048)
                assert status == WHOLE
                backups[name] = (answer, data)
        snapshot = bytes(cramjam.snappy.decompress(backups["leafjet"][1]))
        assert snapshot.startswith(b"LJSNAP\x00")
        for name, srv, other in (("leafjet", lj, "reference"), ("reference", ref, "leafjet")):
            async with jetstream(srv) as (nc, js):
                await js.delete_stream("S")
                answer, data = backups[other]
                refused = await restore(nc, "S", answer, data)
                assert refused["error"]["err_code"] == 10062, (name, refused)
                if name == "leafjet":
                    assert "not a leafjet stream backup" in refused["error"]["description"]
    finally:
        lj.stop()
        ref.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "stream", *args], capture_output=True, text=True, timeout=120
    )


async def test_the_stream_backup_command_backs_up_and_restores(js_server, tmp_path):
    """`leafjet stream backup` writes the folder `nats stream backup` writes; `leafjet stream
    restore` brings the stream back; errors exit 1 (the server's) or 2 (usage) with a message."""
    folder = tmp_path / "bk"
    async with jetstream(js_server) as (nc, js):
        await fill(js, nc)
        before = await api(nc, "$JS.API.STREAM.INFO.S")
        done = await anyio.to_thread.run_sync(_cli, "backup", "S", str(folder), "--server", js_server.url)
        assert done.returncode == 0, done.stderr
        assert "backed up stream S: 299 messages" in done.stdout
        meta = json.loads((folder / "backup.json").read_text())
        assert meta["config"]["name"] == "S" and meta["state"]["messages"] == 299
        assert (folder / "stream.tar.s2").stat().st_size > 0

        again = await anyio.to_thread.run_sync(_cli, "backup", "S", str(folder), "--server", js_server.url)
        assert again.returncode == 2 and "already holds a backup" in again.stderr
        missing = await anyio.to_thread.run_sync(
            _cli, "backup", "NOPE", str(tmp_path / "x"), "--server", js_server.url
        )
        assert missing.returncode == 1 and "(10059)" in missing.stderr, missing.stderr
        taken = await anyio.to_thread.run_sync(_cli, "restore", str(folder), "--server", js_server.url)
        assert taken.returncode == 1 and "(10130)" in taken.stderr, taken.stderr

        await js.delete_stream("S")
        back = await anyio.to_thread.run_sync(_cli, "restore", str(folder), "--server", js_server.url)
        assert back.returncode == 0, back.stderr
        assert "restored stream S: 299 messages" in back.stdout
        assert _state(await api(nc, "$JS.API.STREAM.INFO.S")) == _state(before)
        consumer = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
        assert consumer["ack_floor"]["stream_seq"] == 40


def test_the_stream_backup_command_without_a_server_exits_1(tmp_path):
    done = _cli("backup", "S", str(tmp_path / "bk"), "--server", "nats://127.0.0.1:1")
    assert done.returncode == 1 and "cannot connect" in done.stderr, done.stderr
    assert not (tmp_path / "bk" / "backup.json").exists()


async def test_a_stream_deleted_during_its_snapshot_ends_the_snapshot_not_the_server(js_server):
    """The receiver acknowledges slowly; the stream is deleted a few chunks in. The server goes on
    and the name takes a new stream: at once on leafjet, which ends the snapshot (whatever
    status); the reference (2.15.1) sent no end within 20 s here, and under load refused the new
    stream for a while (10049, "error creating store": the snapshot still held the old files)."""
    async with jetstream(js_server) as (nc, js):
        await random_stream(js, 300, 2000)
        inbox = nc.new_inbox()
        got: list[int] = []
        ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_chunk(msg: Any) -> None:
            if not msg.data:
                if not ended.done():
                    ended.set_result((msg.headers or {}).get("Status", WHOLE))
                return
            got.append(len(msg.data))
            await asyncio.sleep(0.02)
            if msg.reply:
                await msg.respond(b"")

        await nc.subscribe(inbox, cb=on_chunk)
        answer = await api(
            nc,
            "$JS.API.STREAM.SNAPSHOT.S",
            {"deliver_subject": inbox, "chunk_size": 4096, "window_size": 8192},
        )
        assert "error" not in answer, answer
        for _ in range(200):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.02)
        await js.delete_stream("S")
        if js_server.kind == "leafjet":
            await asyncio.wait_for(ended, 20)
            await js.add_stream(name="S", subjects=["s"])
        else:
            for _ in range(100):
                try:
                    await js.add_stream(name="S", subjects=["s"])
                    break
                except nats.js.errors.ServerError:
                    await asyncio.sleep(0.2)
        assert (await js.publish("s", b"again")).seq == 1
        assert (await api(nc, "$JS.API.INFO"))["streams"] == 1


async def test_jsck_refuses_to_back_up_a_damaged_store(tmp_path):
    """leafjet: with `jsck` the store's integrity check runs before the copy: a stream whose
    file was damaged under the running server gets 10064 naming the damage, not a backup. (Here
    the damaged page is one the copy itself does not read: without `jsck` the backup completes.)"""
    srv = start_leafjet(tmp_path)
    try:
        async with jetstream(srv) as (_nc, js):
            await random_stream(js, 400, 1000)
    finally:
        srv.stop()  # a clean stop: everything checkpointed into msgs.db
    srv = srv.start_again()
    try:
        async with jetstream(srv) as (nc, _js):
            db = next((tmp_path / "data").rglob("S/msgs.db"))
            with open(db, "r+b") as f:  # a page near the end of the file, overwritten
                f.seek((db.stat().st_size * 9 // 10) // 4096 * 4096)
                f.write(b"\xde\xad" * 2048)
            answer, _data, _status = await take_snapshot(nc, "S", jsck=True)
            assert answer["error"]["err_code"] == 10064, answer
            assert (
                "malformed" in answer["error"]["description"] or "corrupt" in answer["error"]["description"]
            )
    finally:
        srv.stop()


async def test_chunks_sent_without_waiting_for_answers_fail_the_restore_clearly(tmp_path):
    """leafjet: a client that sends the chunks without waiting for each answer (nats and jsm.go
    wait) overflows the restore's queue: the restore fails saying so, never with a stream built
    from part of the backup; the name stays free."""
    srv = start_leafjet(tmp_path)
    try:
        async with jetstream(srv) as (nc, js):
            await random_stream(js, 400, 2000)
            answer, data, _ = await take_snapshot(nc, "S")
            await js.delete_stream("S")
            started = await api(nc, "$JS.API.STREAM.RESTORE.S", {"config": answer["config"]})
            inbox = nc.new_inbox()
            await nc.subscribe(inbox)  # the answers, unread
            for i in range(0, len(data), 1024):  # ~800 chunks, none waiting for its answer
                await nc.publish(started["deliver_subject"], data[i : i + 1024], reply=inbox)
            end = json.loads((await nc.request(started["deliver_subject"], b"", timeout=30)).data)
            if "error" in end:
                assert end["error"]["err_code"] == 10062 and "faster" in end["error"]["description"], end
                assert (await api(nc, "$JS.API.STREAM.INFO.S"))["error"]["err_code"] == 10059
            else:  # this machine kept up with the sender: then the restore is whole
                assert end["state"]["messages"] == 400, end
    finally:
        srv.stop()


async def test_a_backup_of_an_encrypted_compressed_stream_restores_on_another_key(tmp_path):
    """leafjet: a backup holds the messages as clients see them (the store's encryption and
    compression are its own): taken from an agent with one key and `compression: s2`, restored
    on an agent with another key, every message reads back the same."""
    bodies = [json.dumps({"n": i, "reading": [1.5] * 20}).encode() for i in range(150)]
    one = start_leafjet(
        tmp_path / "one", {"jetstream": {"key": "first key of the first agent", "cipher": "aes"}}
    )
    try:
        async with jetstream(one) as (nc, js):
            await js.add_stream(name="Z", subjects=["z.*"], compression="s2")
            for i, body in enumerate(bodies):
                await js.publish(f"z.{i % 5}", body)
            answer, data, status = await take_snapshot(nc, "Z")
            assert status == WHOLE
    finally:
        one.stop()
    two = start_leafjet(
        tmp_path / "two", {"jetstream": {"key": "another key entirely", "cipher": "chachapoly"}}
    )
    try:
        async with jetstream(two) as (nc, js):
            restored = await restore(nc, "Z", answer, data)
            assert restored["state"]["messages"] == 150 and restored["config"]["compression"] == "s2"
            for seq in (1, 77, 150):
                got = await js.get_msg("Z", seq)
                assert (got.subject, got.data) == (f"z.{(seq - 1) % 5}", bodies[seq - 1])
    finally:
        two.stop()


async def test_a_backup_larger_than_the_servers_file_store_is_refused(tmp_path):
    """leafjet: the spooled backup is bounded by `jetstream.max_file_store`: the chunk that
    passes it is answered with the error that ends the restore, and the name stays free."""
    srv = start_leafjet(tmp_path, {"jetstream": {"max_file_store": 50_000}})
    try:
        async with jetstream(srv) as (nc, js):
            await random_stream(js, 40, 2000)  # ~80 KB that does not compress
            answer, data, status = await take_snapshot(nc, "S", chunk_size=8192)
            assert status == WHOLE and len(data) > 50_000
            await js.delete_stream("S")
            refused = await restore(nc, "S", answer, data, chunk=8192)
            assert refused["error"]["err_code"] == 10062, refused
            assert "max_file_store" in refused["error"]["description"], refused
            assert (await api(nc, "$JS.API.STREAM.INFO.S"))["error"]["err_code"] == 10059
    finally:
        srv.stop()


async def test_a_snapshot_waits_for_a_receiver_that_subscribes_after_asking(js_server):
    """The deliver subject's subscriber comes 0.3 s after the request: the snapshot waits for it
    (up to 2 s, as the reference) and sends everything."""
    async with jetstream(js_server) as (nc, js):
        await random_stream(js, 50, 1000)
        inbox = nc.new_inbox()
        answer = await api(nc, "$JS.API.STREAM.SNAPSHOT.S", {"deliver_subject": inbox})
        assert "error" not in answer, answer
        await asyncio.sleep(0.3)
        chunks: list[bytes] = []
        ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_chunk(msg: Any) -> None:
            if msg.data:
                chunks.append(msg.data)
                if msg.reply:
                    await msg.respond(b"")
            elif not ended.done():
                ended.set_result((msg.headers or {}).get("Status", WHOLE))

        await nc.subscribe(inbox, cb=on_chunk)
        assert await asyncio.wait_for(ended, 20) == WHOLE
        assert sum(len(c) for c in chunks) > 45_000  # the 50 KB of random payloads, all of them
