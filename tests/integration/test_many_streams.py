"""Many streams under a low limit on open files: the agent keeps serving (issue 17).

Each stream is a SQLite store; the stores share a few threads and at most
``jetstream.max_open_stores`` of them hold files (by default from RLIMIT_NOFILE), so a soft
limit far below the number of streams neither fails a create nor locks new clients out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import nats.js.errors
import pytest

from tests.support.servers import RunningServer, start_leafjet

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def _proc(pid: int) -> tuple[int, int]:
    """(threads, open descriptors) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


async def _create_streams(url: str, names: list[str], timeout: float = 10) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=timeout)
        limiter = anyio.CapacityLimiter(16)

        async def one(name: str) -> None:
            async with limiter:
                await js.add_stream(name=name, subjects=[f"{name}.>"])
                await js.publish(f"{name}.x", name.encode())

        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(one, name)
    finally:
        await nc.close()


@pytest.fixture
def low_limit_agent(tmp_path: Path) -> Iterator[RunningServer]:
    srv = start_leafjet(tmp_path, nofile_soft=256)
    try:
        yield srv
    finally:
        srv.stop()


async def test_three_hundred_streams_under_a_soft_limit_of_256_files(low_limit_agent: RunningServer) -> None:
    srv = low_limit_agent
    names = [f"S{i}" for i in range(300)]
    await _create_streams(srv.url, names)
    threads, fds = _proc(srv.pid)
    assert fds < 256 and threads < 40, f"{threads} threads, {fds} descriptors for 300 streams"
    # a fresh client connects, and every stream answers, its message intact
    nc = await nats.connect(srv.url, allow_reconnect=False, connect_timeout=5)
    try:
        js = nc.jetstream(timeout=10)
        for name in names:
            info = await js.stream_info(name)
            assert info.state.messages == 1, name
        for name in names[::25]:  # reads and writes of stores closed for idleness
            msg = await js.get_msg(name, 1)
            assert msg.data == name.encode()
            ack = await js.publish(f"{name}.y", b"again")
            assert ack.seq == 2
    finally:
        await nc.close()
    assert srv.proc.poll() is None


async def _create_fails_with_10049(js, name: str, subject: str) -> None:
    """The create is refused with the reference's stream-create error (10049)."""
    with pytest.raises(nats.js.errors.APIError) as failed:
        await js.add_stream(name=name, subjects=[subject])
    assert failed.value.err_code == 10049, failed.value


async def test_a_stream_create_that_fails_after_its_store_opened_leaves_nothing(tmp_path: Path) -> None:
    """The create fails writing stream.json (a directory is in the way of its rename):
    the store it opened is closed, its folder removed, and the same create works afterwards."""
    srv = start_leafjet(tmp_path)
    try:
        folder = tmp_path / "data" / "jetstream" / "$G" / "streams" / "HALF"
        (folder / "stream.json" / "in-the-way").mkdir(parents=True)
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            await _create_fails_with_10049(js, "HALF", "half.>")
            held = [os.readlink(f"/proc/{srv.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{srv.pid}/fd")]
            assert not [f for f in held if str(folder) in f], "the failed create's store is still open"
            assert not folder.exists()
            await js.add_stream(name="HALF", subjects=["half.>"])
            assert (await js.publish("half.x", b"1")).seq == 1
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_a_stream_whose_store_cannot_open_leaves_no_config_to_recover(tmp_path: Path) -> None:
    """stream.json is written while the store is built; when the store then fails to open (a
    file that is no stream database is in its place), the config file is removed again, so a
    restart does not recover a stream whose create failed."""
    srv = start_leafjet(tmp_path)
    folder = tmp_path / "data" / "jetstream" / "$G" / "streams" / "BAD"
    try:
        folder.mkdir(parents=True)
        (folder / "msgs.db").write_bytes(b"not a database, and long enough to have a header" * 4)
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            await _create_fails_with_10049(js, "BAD", "bad.>")
            assert not (folder / "stream.json").exists()
        finally:
            await nc.close()
    finally:
        srv.stop()
    srv = start_leafjet(tmp_path)
    try:
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            assert (await js.account_info()).streams == 0
        finally:
            await nc.close()
    finally:
        srv.stop()


async def test_a_config_write_cut_short_by_a_crash_leaves_no_file_behind(tmp_path: Path) -> None:
    """A temporary config file a crash left in a stream's folder is removed when the stream is
    recovered, and the stream comes back as it was."""
    srv = start_leafjet(tmp_path)
    try:
        nc = await nats.connect(srv.url)
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="KEPT", subjects=["kept.>"])
            await js.publish("kept.x", b"1")
        finally:
            await nc.close()
    finally:
        srv.stop()
    left = tmp_path / "data" / "jetstream" / "$G" / "streams" / "KEPT" / ".stream.json.12345.tmp"
    left.write_text('{"half": ')
    srv = start_leafjet(tmp_path)
    try:
        assert not left.exists()
        nc = await nats.connect(srv.url)
        try:
            info = await nc.jetstream(timeout=10).stream_info("KEPT")
            assert info.state.messages == 1 and info.config.subjects == ["kept.>"]
        finally:
            await nc.close()
    finally:
        srv.stop()


@pytest.mark.soak
@pytest.mark.timeout(2400)
async def test_ten_thousand_streams_under_a_soft_limit_of_1024_files(tmp_path: Path) -> None:
    """systemd's default soft limit; minutes (each create fsyncs a new file and its folder)."""
    srv = start_leafjet(tmp_path, nofile_soft=1024)
    try:
        names = [f"S{i}" for i in range(10_000)]
        with anyio.fail_after(1800):
            # 60 s: past ~8,000 streams the agent's loop is busy with the streams' own timers
            # (not the stores'), and a create can wait its turn for seconds on a loaded machine
            await _create_streams(srv.url, names, timeout=60)
        threads, fds = _proc(srv.pid)
        assert fds < 1024 and threads < 40, f"{threads} threads, {fds} descriptors for 10,000 streams"
        nc = await nats.connect(srv.url, allow_reconnect=False, connect_timeout=5)
        try:
            js = nc.jetstream(timeout=10)
            for name in names[::97]:
                assert (await js.stream_info(name)).state.messages == 1, name
                assert (await js.get_msg(name, 1)).data == name.encode()
        finally:
            await nc.close()
    finally:
        srv.stop()
