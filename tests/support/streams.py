"""Reading and making streams through the raw JetStream API, for the sources and mirrors tests
(leafjet and the reference alike): create, info, wait for a state, every stored message."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import nats

from tests.support.jsapi import api


async def create_stream(
    nc: Any, cfg: dict[str, Any], prefix: str = "$JS.API", timeout: float = 15.0
) -> dict[str, Any]:
    """STREAM.CREATE, asserted to succeed. Retried while nobody answers: across a leaf link the
    other domain's API interest arrives with the link."""
    with anyio.fail_after(timeout):
        while True:
            try:
                reply = await api(nc, f"{prefix}.STREAM.CREATE.{cfg['name']}", cfg)
                break
            except nats.errors.NoRespondersError:
                await anyio.sleep(0.1)
    assert "error" not in reply, reply
    return reply


async def stream_info(nc: Any, name: str) -> dict[str, Any]:
    return await api(nc, f"$JS.API.STREAM.INFO.{name}")


async def wait_for_state(
    nc: Any, name: str, done: Callable[[dict[str, Any]], bool], timeout: float = 20.0
) -> dict[str, Any]:
    """Poll the stream's info until ``done(info["state"])``; the info."""
    with anyio.fail_after(timeout):
        while True:
            info = await stream_info(nc, name)
            if done(info["state"]):
                return info
            await anyio.sleep(0.05)


async def wait_msgs(nc: Any, name: str, n: int, timeout: float = 20.0) -> dict[str, Any]:
    return await wait_for_state(nc, name, lambda st: st["messages"] >= n, timeout)


async def wait_last(nc: Any, name: str, last_seq: int, timeout: float = 20.0) -> dict[str, Any]:
    return await wait_for_state(nc, name, lambda st: st["last_seq"] >= last_seq, timeout)


@dataclass(frozen=True)
class StoredMsg:
    seq: int
    subject: str
    data: bytes
    headers: bytes  # the raw header block, b"" without one
    time: str

    @property
    def source(self) -> str | None:
        """Its ``Nats-Stream-Source`` header, if any."""
        for line in self.headers.split(b"\r\n"):
            if line.startswith(b"Nats-Stream-Source:"):
                return line.split(b":", 1)[1].strip().decode()
        return None


async def stored_messages(nc: Any, name: str, first: int = 0, last: int = 0) -> list[StoredMsg]:
    """The stream's messages from ``first`` to ``last`` (all by default), by direct reads."""
    st = (await stream_info(nc, name))["state"]
    out = []
    for seq in range(first or st["first_seq"], (last or st["last_seq"]) + 1):
        r = await api(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
        if "error" in r:
            continue
        m = r["message"]
        hdrs = base64.b64decode(m["hdrs"]) if m.get("hdrs") else b""
        out.append(StoredMsg(m["seq"], m["subject"], base64.b64decode(m.get("data", "")), hdrs, m["time"]))
    return out


def counts(state: dict[str, Any]) -> tuple[int, int, int, int]:
    """(messages, first_seq, last_seq, num_deleted) of a stream state."""
    return state["messages"], state["first_seq"], state["last_seq"], state.get("num_deleted", 0)
