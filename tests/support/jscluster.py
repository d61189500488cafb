"""Clustered JetStream helpers: a 3-server cluster of either implementation with JetStream and
server tags, raw API requests, and waits on the meta group (no sleeping)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import anyio
import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.cluster import Cluster

TRANSIENT = (10008,)  # the meta group has no leader yet (or is changing it)


# Server tags of a three-server test cluster: one server with "ssd", each in its own zone.
THREE_TAGGED = [["az:1", "ssd"], ["az:2"], ["az:3"]]


def start_js_cluster(c: Cluster, tags: list[list[str]] | None = None) -> None:
    """Start every node with JetStream on and the given ``server_tags`` per node."""
    for i in range(c.size):
        start_js_node(c, i, tags)


def start_js_node(c: Cluster, i: int, tags: list[list[str]] | None = None) -> None:
    """Start (or start again) node ``i`` with JetStream on (the reference needs a store dir
    each) and its ``server_tags``, if any."""

    def config() -> dict[str, Any]:  # built again if the node's ports must be picked again
        cfg = c.config(i)
        if c.kind == "reference":
            cfg["jetstream"] = {"store_dir": str(c.workdir / c.nodes[i].name / "js")}
        if tags is not None and tags[i]:
            cfg["server_tags"] = tags[i]
        return cfg

    c.start_node(i, config)


restart_js_node = start_js_node  # the same call: a node's store dir and tags do not change


async def api(nc: nats.NATS, subject: str, body: Any = None, timeout: float = 10.0) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(subject, payload, timeout=timeout)
    out = json.loads(msg.data)
    assert isinstance(out, dict)
    return out


def err_code(resp: dict[str, Any]) -> int | None:
    e = resp.get("error")
    return e.get("err_code") if isinstance(e, dict) else None


async def api_until(
    nc: nats.NATS,
    subject: str,
    body: Any = None,
    *,
    retry_on: tuple[int, ...] = TRANSIENT,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """``api`` again while it times out, finds no responder or answers one of ``retry_on``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            resp = await api(nc, subject, body, timeout=5.0)
            if err_code(resp) not in retry_on:
                return resp
            last = resp
        except (NatsTimeout, NoRespondersError) as e:
            last = e
        await anyio.sleep(0.2)
    raise TimeoutError(f"{subject}: still {last!r} after {timeout}s")


def raftz(c: Cluster, i: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{c.nodes[i].http_port}/raftz", timeout=2.0) as r:
            body = json.loads(r.read())
            return body.get("meta")
    except (OSError, ValueError, urllib.error.URLError):
        return None


def meta_leader(c: Cluster, running: list[int]) -> str | None:
    """The leader every running leafjet node agrees on, itself running (and every server
    registered), or None."""
    leaders = set()
    for i in running:
        z = raftz(c, i)
        if z is None or not z.get("leader") or len(z.get("servers") or {}) < c.size:
            return None
        leaders.add(z["leader"])
    names = {c.nodes[i].name for i in running}
    return leaders.pop() if len(leaders) == 1 and leaders <= names else None


async def until_true(check: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    """Until ``await check()`` is true (each check is bounded by its own request timeout)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await anyio.sleep(interval)


async def publish_until(js: Any, subject: str, data: bytes, timeout: float = 30.0) -> Any:
    """``js.publish`` again while no stream answers: the stream's interest crosses the routes
    from its server a moment after the create (ADR-22: clients retry a 503)."""
    import nats.js.errors

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await js.publish(subject, data, timeout=5)
        except (nats.js.errors.NoStreamResponseError, NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.1)


async def fetch_until(sub: Any, batch: int = 1, timeout: float = 30.0) -> list[Any]:
    """``sub.fetch`` again while the consumer's server gives no answer (a 503 status): a new
    consumer's interest crosses the routes a moment after the create, as a stream's does."""
    import nats.js.errors

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await sub.fetch(batch, timeout=10)
        except nats.js.errors.ServiceUnavailableError:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.1)
