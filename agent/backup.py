"""``leafjet stream backup`` / ``leafjet stream restore``: a stream's backup to a folder and back,
as a NATS client, against a leafjet server or nats-server.

The folder is the one `nats stream backup` writes: ``backup.json`` (the stream's config and state
as the snapshot answer gave them) and ``stream.tar.s2`` (the bytes as the server sent them), so a
folder written by one tool restores with the other. The bytes are the server's own: a backup
restores into the kind of server it came from (core/jetstream/backup.py).

    leafjet stream backup STREAM DIR [--server URL] [--js-domain D] [--no-consumers] [auth]
    leafjet stream restore DIR [--server URL] [--js-domain D] [auth]

``--js-domain`` reaches another JetStream domain through the server connected to: a hub backs up
a site's stream across its leaf link (``$JS.<domain>.API``), as `nats --js-domain` does.

Exit codes: 0 done; 1 the server refused or failed (its error printed), or the connection did;
2 a usage error (a bad flag, a folder that holds no backup, a folder that already holds one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nats

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
META_FILE = "backup.json"
DATA_FILE = "stream.tar.s2"
RESTORE_CHUNK = 128 << 10
API_TIMEOUT = 10.0
CONNECT_TIMEOUT = 5.0
CHUNK_TIMEOUT = 30.0  # a snapshot's next chunk, a restore chunk's acknowledgement
END_TIMEOUT = 3600.0  # the answer to a restore's last chunk: the server builds the stream first


class Failed(Exception):
    """What the server or the connection said: printed, exit 1."""


class Usage(Exception):
    """A usage error: printed, exit 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="leafjet stream", description="back a stream up to a folder, and restore it"
    )
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("backup", help="write STREAM's backup into DIR (backup.json, stream.tar.s2)")
    b.add_argument("stream")
    b.add_argument("dir")
    b.add_argument("--no-consumers", action="store_true", help="leave the stream's consumers out")
    r = sub.add_parser("restore", help="restore the stream backed up in DIR (it must not exist)")
    r.add_argument("dir")
    for s in (b, r):
        s.add_argument("--server", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
        s.add_argument("--user")
        s.add_argument("--password")
        s.add_argument("--token")
        s.add_argument("--creds", help="a credentials file (JWT and nkey seed)")
        s.add_argument("--js-domain", help="the JetStream domain of the stream ($JS.<domain>.API)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    try:
        if args.action == "backup":
            print(asyncio.run(backup(args, args.stream, Path(args.dir), args.no_consumers)))
        else:
            print(asyncio.run(restore(args, Path(args.dir))))
    except Usage as e:
        print(f"leafjet stream {args.action}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (Failed, nats.errors.Error, OSError) as e:
        print(f"leafjet stream {args.action}: {e or type(e).__name__}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def _connect(args: argparse.Namespace) -> Any:
    """Connect once: no reconnects (nats-py would try a refused server for ever), its errors
    collected for the message instead of logged."""
    errors: list[BaseException] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    opts: dict[str, Any] = {
        "servers": [args.server],
        "allow_reconnect": False,
        # nats-py reads 0 as "for ever" for the first connect: one more try, soon after
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.2,
        "connect_timeout": CONNECT_TIMEOUT,
        "error_cb": on_error,
        "name": "leafjet-stream-backup",
    }
    if args.user:
        opts.update(user=args.user, password=args.password or "")
    if args.token:
        opts["token"] = args.token
    if args.creds:
        opts["user_credentials"] = args.creds
    nc = nats.NATS()
    try:
        await asyncio.wait_for(nc.connect(**opts), CONNECT_TIMEOUT * 2 + 1)
    except Exception as e:  # nats-py raises several kinds for one "cannot connect"
        with contextlib.suppress(Exception):
            await nc.close()
        why = next((str(x) for x in (*errors, e) if str(x)), type(e).__name__)
        raise Failed(f"cannot connect to {args.server}: {why}") from None
    return nc


def _api_prefix(args: argparse.Namespace) -> str:
    return f"$JS.{args.js_domain}.API" if args.js_domain else "$JS.API"


async def _api(nc: Any, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        msg = await nc.request(subject, json.dumps(body).encode(), timeout=API_TIMEOUT)
    except nats.errors.NoRespondersError:
        raise Failed("no JetStream on this server (no responders)") from None
    except nats.errors.TimeoutError:
        raise Failed(f"no answer to {subject} within {API_TIMEOUT:g}s") from None
    answer = _decode(msg.data)
    if "error" in answer:
        raise Failed(_error(answer))
    return answer


def _decode(data: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(data)
    except ValueError:
        raise Failed(f"the server answered with something that is no JSON: {data[:80]!r}") from None
    if not isinstance(answer, dict):
        raise Failed(f"the server answered with something that is no JSON object: {data[:80]!r}")
    return answer


def _error(answer: dict[str, Any]) -> str:
    e = answer.get("error") or {}
    return f"{e.get('description', 'error')} ({e.get('err_code', '?')})"


async def backup(args: argparse.Namespace, stream: str, folder: Path, no_consumers: bool) -> str:
    """Write ``stream``'s backup into ``folder``; a line saying what was written."""
    data_path, meta_path = folder / DATA_FILE, folder / META_FILE
    if data_path.exists() or meta_path.exists():
        raise Usage(f"{folder} already holds a backup")
    began = time.monotonic()
    nc = await _connect(args)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        inbox = nc.new_inbox()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def on_chunk(msg: Any) -> None:
            await queue.put(msg)

        sub = await nc.subscribe(inbox, cb=on_chunk)
        written = 0
        try:
            request = {"deliver_subject": inbox, "no_consumers": no_consumers}
            answer = await _api(nc, f"{_api_prefix(args)}.STREAM.SNAPSHOT.{stream}", request)
            with open(data_path, "wb") as f:
                while True:
                    try:
                        msg = await asyncio.wait_for(queue.get(), CHUNK_TIMEOUT)
                    except TimeoutError:
                        raise Failed(f"no chunk from the server for {CHUNK_TIMEOUT:g}s") from None
                    if not msg.data:
                        status = (msg.headers or {}).get("Status", "204")
                        if status != "204":
                            why = (msg.headers or {}).get("Description", "")
                            raise Failed(f"the server ended the backup with {status} {why}".rstrip())
                        break
                    f.write(msg.data)
                    written += len(msg.data)
                    if msg.reply:  # acknowledged once it is in the file's buffer, as nats does
                        await nc.publish(msg.reply, b"")
                f.flush()
                os.fsync(f.fileno())
        finally:
            await sub.unsubscribe()
        meta = {"config": answer.get("config"), "state": answer.get("state")}
        meta_path.write_text(json.dumps(meta, indent=2))
    except BaseException:
        data_path.unlink(missing_ok=True)  # never a half backup that looks whole
        meta_path.unlink(missing_ok=True)
        raise
    finally:
        await nc.close()
    msgs = (answer.get("state") or {}).get("messages", 0)
    return (
        f"backed up stream {stream}: {msgs} messages, {written} bytes in "
        f"{time.monotonic() - began:.2f}s to {folder}"
    )


async def restore(args: argparse.Namespace, folder: Path) -> str:
    """Restore the stream backed up in ``folder``; a line saying what was restored."""
    data_path, meta_path = folder / DATA_FILE, folder / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
        config = meta["config"]
        stream = config["name"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Usage(f"{meta_path} is no backup's metadata: {e}") from None
    if not data_path.is_file():
        raise Usage(f"{data_path} is missing")
    began = time.monotonic()
    nc = await _connect(args)
    try:
        started = await _api(
            nc,
            f"{_api_prefix(args)}.STREAM.RESTORE.{stream}",
            {"config": config, "state": meta.get("state") or {}},
        )
        deliver = started.get("deliver_subject")
        if not deliver:
            raise Failed(f"the server gave no subject to send the backup to: {started}")
        sent = 0
        with open(data_path, "rb") as f:
            while chunk := f.read(RESTORE_CHUNK):
                ack = await _request(nc, deliver, chunk, CHUNK_TIMEOUT)
                if ack:
                    raise Failed(_error(_decode(ack)))
                sent += len(chunk)
        end = _decode(await _request(nc, deliver, b"", END_TIMEOUT))
        if "error" in end:
            raise Failed(_error(end))
    finally:
        await nc.close()
    msgs = (end.get("state") or {}).get("messages", 0)
    return f"restored stream {stream}: {msgs} messages from {sent} bytes in {time.monotonic() - began:.2f}s"


async def _request(nc: Any, subject: str, data: bytes, timeout: float) -> bytes:
    try:
        msg = await nc.request(subject, data, timeout=timeout)
    except nats.errors.TimeoutError:
        raise Failed(f"no answer from the server within {timeout:g}s") from None
    except nats.errors.NoRespondersError:
        raise Failed("the server stopped taking the restore (no responders)") from None
    return bytes(msg.data)
