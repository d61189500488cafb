"""A stream (or consumer) that cannot be recovered at start ends only itself: the server starts,
every other stream works, the damaged one is held by name and reported, and a delete frees it.

Real processes and real files: the damage is done to the files on disk between two runs. The
part of the scenario the reference shares (a stream whose metadata is unreadable: the server
starts, the others work, /healthz says 503) runs against it too; what leafjet does beyond (the
name held, 10194, delete moving the data aside) runs against leafjet.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from tests.integration.test_monitoring import get, start_with_monitor
from tests.support.servers import RunningServer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

OFFLINE = 10194  # the reference's JSStreamOfflineReasonErrF, "stream is offline: {err}"
CONSUMER_OFFLINE = 10195


def _stream_dir(srv: RunningServer, name: str) -> Path:
    return srv.workdir / "data" / "jetstream" / "$G" / "streams" / name


async def _setup(srv: RunningServer) -> None:
    """Two streams with three messages each, and a durable consumer on each."""
    nc = await nats.connect(srv.url)
    try:
        js = nc.jetstream(timeout=10)
        for name in ("S", "T"):
            await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
            for i in range(3):
                await js.publish(f"{name.lower()}.x", b"%s-%d" % (name.encode(), i))
            await js.add_consumer(name, durable_name="C")
    finally:
        await nc.close()


async def _request(nc: nats.NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=10)
    result: dict[str, Any] = json.loads(msg.data)
    return result


async def _the_other_stream_works(srv: RunningServer) -> None:
    nc = await nats.connect(srv.url)
    try:
        js = nc.jetstream(timeout=10)
        assert (await js.get_msg("T", 3)).data == b"T-2"
        assert (await js.publish("t.x", b"after")).seq == 4
        sub = await js.pull_subscribe("t.x", durable="C", stream="T")
        got = await sub.fetch(4, timeout=10)
        assert [m.data for m in got] == [b"T-0", b"T-1", b"T-2", b"after"]
    finally:
        await nc.close()


def _health(port: int) -> tuple[int, dict[str, Any]]:
    status, body, _ = get(port, "/healthz")
    return status, json.loads(body)


def _corrupt_metadata(srv: RunningServer) -> Path:
    """Garbage where the stream's metadata is: leafjet's stream.json, the reference's meta.inf
    (which it checks against meta.sum)."""
    meta = _stream_dir(srv, "S") / ("stream.json" if srv.kind == "leafjet" else "meta.inf")
    meta.write_bytes(b"{this is not json")
    return meta


@pytest.mark.parametrize("kind", ["leafjet", "reference"])
async def test_unreadable_stream_metadata_ends_only_that_stream(tmp_path: Path, kind: str) -> None:
    srv, port = start_with_monitor(kind, tmp_path, jetstream=True)
    try:
        await _setup(srv)
        srv.stop()
        _corrupt_metadata(srv)
        srv.restart()
        wait_until(lambda: _health(port)[0] == 503, 30, what="healthz to report the stream")
        status, body = _health(port)
        assert status == 503 and body["status"] == "unavailable"
        assert "JetStream stream '$G > S' could not be recovered" in body["error"]
        await _the_other_stream_works(srv)
    finally:
        srv.stop()


async def test_corrupt_database_holds_only_its_stream_until_deleted(tmp_path: Path) -> None:
    srv, port = start_with_monitor("leafjet", tmp_path)
    try:
        await _setup(srv)
        srv.stop()
        folder = _stream_dir(srv, "S")
        db = folder / "msgs.db"
        garbage = b"this is not a sqlite database" * 10
        with open(db, "r+b") as f:
            f.write(garbage)
        srv.restart()
        await _the_other_stream_works(srv)

        # logged once, with the folder and the cause, no traceback
        log = srv.log()
        lines = [ln for ln in log.splitlines() if "could not be recovered" in ln]
        assert len(lines) == 1 and str(folder) in lines[0] and "stream S" in lines[0], log
        assert "Traceback" not in log

        status, body = _health(port)
        assert status == 503
        assert body["error"].startswith("JetStream stream '$G > S' could not be recovered"), body
        jsz = json.loads(get(port, "/jsz?streams=1")[1])
        details = {d["name"]: d for d in jsz["account_details"][0]["stream_detail"]}
        assert set(details) == {"S", "T"} and jsz["streams"] == 2
        assert str(db) in details["S"]["leafjet"]["damaged"]

        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            with pytest.raises(APIError) as info_err:
                await js.stream_info("S")
            assert info_err.value.err_code == OFFLINE and info_err.value.code == 500
            assert "stream is offline: damaged at recovery" in info_err.value.description
            with pytest.raises(APIError) as create_err:
                await js.add_stream(name="S", subjects=["s.>"])
            assert create_err.value.err_code == OFFLINE
            with pytest.raises(APIError) as consumer_err:
                await js.consumer_info("S", "C")
            assert consumer_err.value.err_code == OFFLINE
            assert db.read_bytes().startswith(garbage), "the damaged stream's files are not touched"

            # names hold it, list says it is offline (a stock client reads both)
            names = await _request(nc, "$JS.API.STREAM.NAMES")
            assert names["streams"] == ["S", "T"] and names["total"] == 2
            listed = await _request(nc, "$JS.API.STREAM.LIST")
            assert [s["config"]["name"] for s in listed["streams"]] == ["T"]
            assert listed["missing"] == ["S"] and "damaged at recovery" in listed["offline"]["S"]
            assert [s.config.name for s in await js.streams_info()] == ["T"]

            # a delete moves the data aside and frees the name
            assert await js.delete_stream("S")
            assert not folder.exists()
            (aside,) = [d for d in folder.parent.iterdir() if d.name.startswith("S.damaged-")]
            assert (aside / "msgs.db").read_bytes().startswith(garbage)
            assert str(aside) in srv.log()
            await js.add_stream(name="S", subjects=["s.>"])
            assert (await js.publish("s.x", b"fresh")).seq == 1
        finally:
            await nc.close()
        assert _health(port)[0] == 200

        # a restart brings back both streams, never the folder moved aside
        srv.restart()
        wait_until(lambda: _health(port)[0] == 200, 30, what="healthz")
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            assert (await js.get_msg("S", 1)).data == b"fresh"
            assert (await _request(nc, "$JS.API.STREAM.NAMES"))["streams"] == ["S", "T"]
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_unreadable_stream_metadata_holds_the_name_and_its_subjects(tmp_path: Path) -> None:
    srv, _port = start_with_monitor("leafjet", tmp_path)
    try:
        await _setup(srv)
        srv.stop()
        meta = _stream_dir(srv, "S") / "stream.json"
        meta.chmod(0o000)  # unreadable (the tests may run as root: then garbage instead)
        try:
            meta.read_bytes()
            _corrupt_metadata(srv)
        except PermissionError:
            pass
        srv.restart()
        await _the_other_stream_works(srv)
        assert str(meta) in srv.log() and "Traceback" not in srv.log()
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            with pytest.raises(APIError) as err:
                await js.add_stream(name="S", subjects=["other.>"])
            assert err.value.err_code == OFFLINE
            meta.chmod(0o600)
            assert await js.delete_stream("S")
            await js.add_stream(name="S", subjects=["s.>"])
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_a_damaged_stream_config_keeps_its_subjects_taken(tmp_path: Path) -> None:
    """A damaged store whose config was read: its subjects stay its own, so fixing the store
    and restarting cannot find them taken by a stream made meanwhile."""
    srv, _port = start_with_monitor("leafjet", tmp_path)
    try:
        await _setup(srv)
        srv.stop()
        with open(_stream_dir(srv, "S") / "msgs.db", "r+b") as f:
            f.write(b"garbage" * 50)
        srv.restart()
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            with pytest.raises(APIError) as err:
                await js.add_stream(name="U", subjects=["s.x"])
            assert err.value.err_code == 10065  # subjects overlap with an existing stream
            found = await _request(nc, "$JS.API.STREAM.NAMES", {"subject": "s.x"})
            assert found["streams"] == ["S"]
        finally:
            await nc.close()
    finally:
        srv.stop()


def _damage_consumer_row(srv: RunningServer, stream: str, consumer: str) -> None:
    db = sqlite3.connect(_stream_dir(srv, stream) / "msgs.db")
    try:
        n = db.execute(
            "UPDATE meta SET value = ? WHERE key = ?", (b"{not json", f"consumer/{consumer}/config")
        ).rowcount
        db.commit()
        assert n == 1
    finally:
        db.close()


async def test_a_damaged_consumer_ends_only_that_consumer(tmp_path: Path) -> None:
    srv, _port = start_with_monitor("leafjet", tmp_path)
    try:
        await _setup(srv)
        nc = await nats.connect(srv.url)
        try:
            await nc.jetstream().add_consumer("T", durable_name="D")
        finally:
            await nc.close()
        srv.stop()
        _damage_consumer_row(srv, "T", "C")
        srv.restart()
        log = srv.log()
        assert "consumer $G/T/C could not be recovered" in log and "Traceback" not in log
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            assert (await js.consumer_info("T", "D")).num_pending == 3
            assert (await js.stream_info("T")).state.messages == 3
            with pytest.raises(APIError) as err:
                await js.consumer_info("T", "C")
            assert err.value.err_code == CONSUMER_OFFLINE
            with pytest.raises(APIError) as err:
                await js.add_consumer("T", durable_name="C")
            assert err.value.err_code == CONSUMER_OFFLINE
            names = await _request(nc, "$JS.API.CONSUMER.NAMES.T")
            assert names["consumers"] == ["C", "D"]
            listed = await _request(nc, "$JS.API.CONSUMER.LIST.T")
            assert [c["name"] for c in listed["consumers"]] == ["D"] and listed["missing"] == ["C"]
            assert [c.name for c in await js.consumers_info("T")] == ["D"]
            assert await js.delete_consumer("T", "C")
            await js.add_consumer("T", durable_name="C")
            assert (await js.consumer_info("T", "C")).num_pending == 3
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_many_streams_are_recovered_at_once_with_damaged_ones_among_them(tmp_path: Path) -> None:
    """Streams are recovered several at a time (engine.RECOVERY_WORKERS): every one comes back
    with its messages, and the damaged ones among them are held, whichever worker met them."""
    srv, port = start_with_monitor("leafjet", tmp_path)
    names = [f"R{k:02d}" for k in range(30)]
    damaged = {"R03", "R17", "R29"}
    try:
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            for k, name in enumerate(names):
                await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
                for i in range(k % 4):
                    await js.publish(f"{name.lower()}.x", b"%d" % i)
        finally:
            await nc.close()
        srv.stop()
        for name in damaged:
            (_stream_dir(srv, name) / "stream.json").write_bytes(b"{not json")
        srv.restart()
        wait_until(lambda: _health(port)[0] == 503, 30, what="healthz to report the damaged streams")
        nc = await nats.connect(srv.url)
        try:
            for k, name in enumerate(names):
                info = await _request(nc, f"$JS.API.STREAM.INFO.{name}")
                if name in damaged:
                    assert info["error"]["err_code"] == OFFLINE, info
                else:
                    assert info["state"]["messages"] == k % 4, info
            listed = await _request(nc, "$JS.API.STREAM.NAMES")
            assert listed["streams"] == names  # by name, damaged ones included, as before
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_a_stream_folder_copied_under_another_name_is_held_not_run_twice(tmp_path: Path) -> None:
    """A folder whose config names another stream (copied or renamed by hand) would make two
    streams of one name: it is held as damaged by its folder's name, the real one runs."""
    srv, _port = start_with_monitor("leafjet", tmp_path)
    try:
        await _setup(srv)
        srv.stop()
        shutil.copytree(_stream_dir(srv, "S"), _stream_dir(srv, "COPY"))
        srv.restart()
        nc = await nats.connect(srv.url)
        try:
            copy = await _request(nc, "$JS.API.STREAM.INFO.COPY")
            assert copy["error"]["err_code"] == OFFLINE, copy
            assert "is the config of stream 'S'" in copy["error"]["description"], copy
            js = nc.jetstream(timeout=10)
            assert (await js.stream_info("S")).state.messages == 3
            assert (await js.publish("s.x", b"after")).seq == 4
        finally:
            await nc.close()
        await _the_other_stream_works(srv)
    finally:
        srv.stop()
