"""The disk under a running server: full (a small tmpfs) and turned read-only (an ext4 image on a
loop device, forced read-only by its own error handling, since the kernel refuses to remount a
file system read-only while the server holds files open for writing). Publishers get clear
errors, nothing acknowledged is lost, and the server recovers when the disk does."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.abuse.conftest import wait_for
from tests.abuse.wire import Raw, stored_payload

pytestmark = pytest.mark.integration


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def _data_dir(tmp_path: Path, kind: str) -> Path:
    d = tmp_path / f"{kind}-0" / "data"  # where make_server's first server keeps its data
    d.mkdir(parents=True)
    return d


@pytest.fixture
def small_tmpfs(server_kind: str, tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs as the first server's data directory (requested before the server)."""
    d = _data_dir(tmp_path, server_kind)
    if _run("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(d)).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    yield d
    _run("umount", "-l", str(d))


@pytest.fixture
def ext4_image(server_kind: str, tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB ext4 file system on a loop device (errors=remount-ro) as the data directory."""
    if shutil.which("mkfs.ext4") is None or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs mkfs.ext4 and loop devices")
    image = tmp_path / "data.img"
    with open(image, "wb") as f:
        f.truncate(64 * 1024 * 1024)
    assert _run("mkfs.ext4", "-q", "-F", str(image)).returncode == 0
    d = _data_dir(tmp_path, server_kind)
    if _run("mount", "-o", "loop,errors=remount-ro", str(image), str(d)).returncode != 0:
        pytest.skip("mounting a loop device is not permitted here")
    yield d
    _run("umount", "-l", str(d))


def _publish(c: Raw, subject: str, payload: bytes, timeout: float = 10.0) -> dict | None:
    """A JetStream publish; its PubAck or error JSON, None when no reply came in ``timeout``."""
    try:
        return json.loads(c.request(subject, payload, timeout).payload)
    except TimeoutError:
        return None


def _acked(reply: dict | None) -> bool:
    return reply is not None and "error" not in reply and reply.get("seq", 0) > 0


def _all_stored(c: Raw, stream: str, acked: dict[int, bytes]) -> None:
    for seq, payload in acked.items():
        got = c.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        assert "error" not in got, (seq, got)
        assert stored_payload(got) == payload, seq


@pytest.mark.timeout(120)
def test_full_disk_gives_publishers_errors_loses_nothing_acknowledged_and_recovers(small_tmpfs, make_target):
    target = make_target()
    c = target.client()
    assert "error" not in c.api("$JS.API.STREAM.CREATE.FILL", {"name": "FILL", "subjects": ["fill.>"]})
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"\0" * (2 * 1024 * 1024))  # room that comes back later
    acked: dict[int, bytes] = {}
    errors: list[dict] = []
    silent = 0
    for i in range(2000):
        payload = b"%06d" % i + os.urandom(8 * 1024).hex().encode()
        reply = _publish(c, f"fill.{i}", payload, timeout=5)
        if reply is None:
            silent += 1
        elif "error" in reply:
            errors.append(reply)
        else:
            acked[reply["seq"]] = payload
        if errors or silent:
            break
    target.assert_alive()
    assert acked, "nothing was acknowledged before the disk filled"
    if target.srv.kind == "leafjet":
        # the reference leaves such a publisher without a reply (it logs "no space left on
        # device"); leafjet's goal is a clear error
        assert errors and not silent, f"a publish on a full disk got no reply ({len(acked)} acked)"
    _all_stored(c, "FILL", acked)
    # space returns: a new stream takes publishes, and (leafjet's goal: the reference keeps
    # failing this stream's writes after ENOSPC) so does the one that filled the disk
    filler.unlink()
    assert "error" not in c.api("$JS.API.STREAM.CREATE.AFTER", {"name": "AFTER", "subjects": ["after.>"]})
    wait_for(lambda: _acked(_publish(c, "after.1", b"back", 5)), 30, "a publish to a new stream")
    if target.srv.kind == "leafjet":
        wait_for(lambda: _acked(_publish(c, "fill.again", b"back", 5)), 30, "the full stream to take one")
    target.assert_survived()


def _force_read_only(data: Path) -> None:
    source = _run("findmnt", "-n", "-o", "SOURCE", str(data)).stdout.strip()
    trigger = f"/sys/fs/ext4/{os.path.basename(source)}/trigger_fs_error"
    if not glob.glob(trigger):
        pytest.skip("ext4 trigger_fs_error is not available")
    Path(trigger).write_text("abuse test: turn read-only")

    def read_only() -> bool:
        options = _run("findmnt", "-n", "-o", "OPTIONS", str(data)).stdout.strip().split(",")
        return bool({"ro", "emergency_ro"} & set(options))

    wait_for(read_only, 10, "the file system to turn read-only")


@pytest.mark.timeout(120)
def test_read_only_disk_gives_publishers_errors_and_loses_nothing_acknowledged(ext4_image, make_target):
    target = make_target()
    c = target.client()
    assert "error" not in c.api("$JS.API.STREAM.CREATE.RO", {"name": "RO", "subjects": ["ro.>"]})
    acked: dict[int, bytes] = {}
    for i in range(50):
        payload = b"before-%d" % i
        reply = _publish(c, f"ro.{i}", payload)
        assert reply is not None and "error" not in reply, reply
        acked[reply["seq"]] = payload
    _force_read_only(ext4_image)
    replies = []
    for i in range(3):
        payload = b"after-%d" % i
        reply = _publish(c, f"ro.after.{i}", payload, timeout=2)
        replies.append(reply)
        if reply is not None and "error" not in reply:
            acked[reply["seq"]] = payload  # acknowledged: it must survive, wherever it is kept
    target.assert_alive()
    if target.srv.kind == "leafjet":  # the reference's own answer is checked below, if it has one
        assert all(r is not None for r in replies), "a publish to a read-only disk got no reply"
        assert any("error" in r for r in replies if r), f"no publish was refused: {replies[-1]}"
    _all_stored(c, "RO", acked)  # still served while the disk is read-only
    target.assert_survived()
    if target.srv.kind != "leafjet":
        return  # the reference acknowledges before fsync: what the aborted journal held is gone
    # the disk is repaired and the server restarted: every acknowledged message is there
    image = ext4_image.parent.parent / "data.img"
    target.srv.stop()
    assert _run("umount", str(ext4_image)).returncode == 0
    _run("e2fsck", "-fy", str(image))
    assert _run("mount", "-o", "loop", str(image), str(ext4_image)).returncode == 0
    target.srv.restart()
    c = Raw(target.port)
    _all_stored(c, "RO", acked)
    _all_stored(c, "GUARD", target.guarded)
