"""A client's side of stream backups (``STREAM.SNAPSHOT`` / ``STREAM.RESTORE``), as `nats stream
backup` / `nats stream restore` speak them: for the tests and the backup bench."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.jsapi import api

WHOLE = "204"
RESTORE_TYPE = "io.nats.jetstream.api.v1.stream_restore_response"


async def take_snapshot(
    nc: Any, stream: str, *, ack: bool = True, timeout: float = 30.0, **opts: Any
) -> tuple[dict, bytes, str | None]:
    """A snapshot of ``stream`` as `nats stream backup` takes it: (the answer, the bytes, the
    status of the last message: "204", or none when the reference's snapshot fits in one chunk,
    when whole). ``ack=False``: chunks are not acknowledged."""
    inbox = nc.new_inbox()
    chunks: list[bytes] = []
    ended: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    async def on_chunk(msg: Any) -> None:
        if msg.data:
            chunks.append(msg.data)
            if ack and msg.reply:  # the reference sends its last chunk without one
                await msg.respond(b"")
        elif not ended.done():
            ended.set_result((msg.headers or {}).get("Status", WHOLE))

    sub = await nc.subscribe(inbox, cb=on_chunk)
    try:
        answer = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **opts})
        if "error" in answer:
            return answer, b"", None
        status = await asyncio.wait_for(ended, timeout)
    finally:
        await sub.unsubscribe()
    return answer, b"".join(chunks), status


async def restore(
    nc: Any, stream: str, snapshot_answer: dict, data: bytes, chunk: int = 64 << 10, end_timeout: float = 60.0
) -> dict:
    """`nats stream restore`: the request, each chunk as a request, then the empty end; the
    answer to the end (the restored stream's info, or the error)."""
    body = {"config": snapshot_answer["config"], "state": snapshot_answer["state"]}
    started = await api(nc, f"$JS.API.STREAM.RESTORE.{stream}", body)
    if started.get("type") != RESTORE_TYPE or not started.get("deliver_subject"):
        raise RuntimeError(f"restore of {stream} not started: {started}")
    return await send_backup(nc, started["deliver_subject"], data, chunk, end_timeout)


async def send_backup(
    nc: Any, deliver: str, data: bytes, chunk: int = 64 << 10, end_timeout: float = 60.0
) -> dict:
    for i in range(0, len(data), chunk):
        ack = await nc.request(deliver, data[i : i + chunk], timeout=10)
        if ack.data:  # an error answers a chunk the server could not take
            return json.loads(ack.data)
    end = await nc.request(deliver, b"", timeout=end_timeout)
    return json.loads(end.data)
