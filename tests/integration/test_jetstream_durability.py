"""What leafjet promises beyond the reference: an acknowledged publish is on disk.

These run against leafjet only: the reference's file store syncs every two minutes by default,
so after a SIGKILL it may lose acknowledged messages (see ../shared/guide/REFERENCE.md).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time

import anyio
import nats
import pytest
from nats.js.errors import APIError

from tests.support.servers import REPO, start_leafjet

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

NO_RETRY = {"allow_reconnect": False, "max_reconnect_attempts": 0, "connect_timeout": 3}


async def _publish_storm(url: str, acked: dict[int, bytes], counter: list[int], seconds: float) -> None:
    """Publish from 32 concurrent publishers until the time is up or the server goes away."""
    nc = await nats.connect(url, **NO_RETRY)
    js = nc.jetstream(timeout=2)

    async def publisher() -> None:
        while True:
            counter[0] += 1
            payload = b"msg-%d" % counter[0]
            try:
                ack = await js.publish("storm.data", payload)
            except Exception:
                return  # the server was killed: this publish was never acknowledged
            assert ack.seq not in acked, f"sequence {ack.seq} acknowledged twice"
            acked[ack.seq] = payload

    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tg:
            for _ in range(32):
                tg.start_soon(publisher)
    with contextlib.suppress(Exception):
        await nc.close()


async def test_acknowledged_messages_survive_repeated_sigkill(tmp_path):
    srv = start_leafjet(tmp_path)
    try:
        nc = await nats.connect(srv.url)
        await nc.jetstream().add_stream(name="STORM", subjects=["storm.>"])
        await nc.close()
        acked: dict[int, bytes] = {}
        counter = [0]
        rng = random.Random(7)
        for _round in range(4):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_publish_storm, srv.url, acked, counter, 5.0)
                await anyio.sleep(rng.uniform(0.4, 1.2))
                srv.proc.send_signal(signal.SIGKILL)  # mid-storm, with publishes in flight
                srv.proc.wait(5)
                tg.cancel_scope.cancel()  # whatever was in flight was never acknowledged
            srv.restart(kill=True)
        assert len(acked) > 200, "the storm should have acknowledged a good number of messages"
        nc = await nats.connect(srv.url)
        js = nc.jetstream(timeout=5)
        try:
            for seq, payload in sorted(acked.items()):
                msg = await js.get_msg("STORM", seq)
                assert msg.data == payload, f"acknowledged message {seq} lost or overwritten"
            info = await js.stream_info("STORM")
            assert info.state.last_seq >= max(acked)
            after = await js.publish("storm.data", b"after")
            assert after.seq == info.state.last_seq + 1, "no sequence is reused after a kill"
        finally:
            await nc.close()
    finally:
        srv.stop()


def _run_agent(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "agent",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


async def _make_stream(srv, name: str = "S", n: int = 3, **cfg) -> None:
    nc = await nats.connect(srv.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], **cfg)
        for i in range(n):
            await js.publish(f"{name.lower()}.x", b"payload-%d" % i)
    finally:
        await nc.close()


async def test_corrupt_database_is_reported_at_start_and_ends_only_its_stream(tmp_path):
    """The server starts; the damaged stream is logged (its path, no traceback) and held. The
    rest of the scenario (the other stream, the API, /healthz, delete and create again) is in
    test_jetstream_damaged.py."""
    srv = start_leafjet(tmp_path)
    await _make_stream(srv)
    await _make_stream(srv, "T")
    srv.stop()
    db = next((tmp_path / "data").rglob("S/msgs.db"))
    with open(db, "r+b") as f:
        f.write(b"this is not a sqlite database" * 10)
    srv = start_leafjet(tmp_path)
    try:
        assert str(db) in srv.log() and "Traceback" not in srv.log()
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream()
            assert (await js.get_msg("T", 3)).data == b"payload-2"
            with pytest.raises(APIError) as err:
                await js.stream_info("S")
            assert err.value.err_code == 10194
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_encrypted_store_round_trips_and_a_wrong_key_is_a_clear_startup_error(tmp_path):
    good = {"jetstream": {"key": "correct horse battery staple", "cipher": "aes"}}
    srv = start_leafjet(tmp_path, good)
    await _make_stream(srv, n=5)
    srv.stop()
    db = next((tmp_path / "data").rglob("msgs.db"))
    assert b"payload-" not in db.read_bytes(), "payloads are sealed at rest"
    srv = start_leafjet(tmp_path, good)
    nc = await nats.connect(srv.url)
    try:
        assert (await nc.jetstream().get_msg("S", 5)).data == b"payload-4"
    finally:
        await nc.close()
        srv.stop()
    bad = tmp_path / "bad.toml"
    bad.write_text('[jetstream]\nkey = "wrong key"\ncipher = "aes"\n')
    r = _run_agent(tmp_path, "--config", str(bad))
    assert r.returncode == 3
    assert "key" in r.stderr and "Traceback" not in r.stderr


async def test_compressed_stream_round_trips(tmp_path):
    srv = start_leafjet(tmp_path)
    try:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        info = await js.add_stream(name="Z", subjects=["z"], compression="s2")
        assert info.config.compression == "s2"
        body = json.dumps({"reading": [1.5] * 500}).encode()
        for _ in range(20):
            await js.publish("z", body)
        assert (await js.get_msg("Z", 20)).data == body
        await nc.close()
    finally:
        srv.stop()
    db = next((tmp_path / "data").rglob("msgs.db"))
    assert db.stat().st_size + (
        db.with_name("msgs.db-wal").stat().st_size if db.with_name("msgs.db-wal").exists() else 0
    ) < 20 * len(body), "compression should shrink repetitive payloads"


@contextlib.asynccontextmanager
async def agent(tmp_path):
    """A leafjet agent on ``tmp_path`` and a nats-py connection to it, for one block."""
    srv = start_leafjet(tmp_path)
    try:
        nc = await nats.connect(srv.url)
        try:
            yield nc, nc.jetstream()
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_a_set_first_sequence_survives_a_restart(tmp_path):
    """An empty stream whose first sequence was set reports it after a restart too (not 0)."""
    async with agent(tmp_path) as (_nc, js):
        await js.add_stream(name="P", subjects=["p"])
        await js.purge_stream("P")
        await js.add_stream(name="O", subjects=["o"])
    async with agent(tmp_path) as (_nc, js):
        assert (await js.stream_info("P")).state.first_seq == 1
        assert (await js.stream_info("O")).state.first_seq == 0


async def test_a_message_ttl_runs_out_after_a_restart(tmp_path):
    """TTLs are durable: a message stored with Nats-TTL before a restart still goes when its
    time comes, and one without a TTL stays."""
    async with agent(tmp_path) as (nc, js):
        await js.add_stream(name="T", subjects=["t.*"], allow_msg_ttl=True)
        await nc.request("t.short", b"x", headers={"Nats-TTL": "5s"}, timeout=5)
        stored_at = time.monotonic()
        await nc.request("t.kept", b"y", timeout=5)
    async with agent(tmp_path) as (_nc, js):
        messages = (await js.stream_info("T")).state.messages
        if time.monotonic() - stored_at < 4:  # a loaded machine may restart past the TTL
            assert messages == 2, "the message with a TTL survived the restart"
        with anyio.fail_after(15):
            while (await js.stream_info("T")).state.messages > 1:
                await anyio.sleep(0.1)
        assert (await js.get_msg("T", 2)).data == b"y"


async def test_a_paused_consumer_stays_paused_across_a_restart(tmp_path):
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
    async with agent(tmp_path) as (_nc, js):
        await js.add_stream(name="P", subjects=["p"])
        await js.publish("p", b"x")
        await js.pull_subscribe("p", durable="C", stream="P")
        assert (await js.pause_consumer("P", "C", until)).paused
    async with agent(tmp_path) as (nc, _js):
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.P.C", b"", timeout=5)).data)
        assert info["paused"] and info["config"]["pause_until"] == until
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.P.C", b'{"batch": 1, "no_wait": true}', reply=inbox)
        reply = await sub.next_msg(timeout=5)
        assert (reply.headers or {}).get("Status") == "404", "still paused: nothing delivered"


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs as the agent's data dir, to fill up for real (needs root, as CI has)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


async def test_full_disk_refuses_publishes_then_recovers_when_space_frees(small_disk):
    srv = start_leafjet(small_disk / "agent")
    try:
        nc = await nats.connect(srv.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="FULL", subjects=["full"])
        acked: dict[int, bytes] = {}
        refusal = None
        for i in range(2000):
            payload = b"%06d" % i + b"x" * 4000
            try:
                acked[(await js.publish("full", payload)).seq] = payload
            except APIError as e:
                refusal = e
                break
        assert refusal is not None, "a 2 MiB disk must fill up"
        assert refusal.err_code == 10077
        assert srv.proc.poll() is None, "the agent keeps running"
        assert (await js.get_msg("FULL", max(acked))).data == acked[max(acked)], "the store stays readable"
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
        ack = await js.publish("full", b"after space freed")
        assert ack.seq == max(acked) + 1, "nothing unacknowledged was reported stored"
        for seq, payload in acked.items():
            assert (await js.get_msg("FULL", seq)).data == payload
        await nc.close()
    finally:
        srv.stop()


async def test_a_memory_stored_consumer_is_never_written_to_the_store(tmp_path):
    """A consumer with mem_storage (every KV watch, keys() and history() makes one) costs no
    commit: neither its config nor its state reaches the stream's database; a file-stored one's
    do."""
    async with agent(tmp_path) as (nc, js):
        await js.add_stream(name="M", subjects=["m"])
        await js.publish("m", b"x")
        for name, mem in (("MEM", True), ("FILE", False)):
            config = {"durable_name": name, "ack_policy": "none", "mem_storage": mem}
            body = json.dumps({"stream_name": "M", "config": config}).encode()
            await nc.request(f"$JS.API.CONSUMER.CREATE.M.{name}", body, timeout=5)
            psub = await js.pull_subscribe_bind(name, stream="M")
            await psub.fetch(1, timeout=5)
        await anyio.sleep(1.5)  # the consumers' once-a-second state flush
    db = next((tmp_path / "data").rglob("M/msgs.db"))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        keys = sorted(k for (k,) in conn.execute("SELECT key FROM meta WHERE key LIKE 'consumer/%'"))
    assert keys == ["consumer/FILE/config", "consumer/FILE/state"]
