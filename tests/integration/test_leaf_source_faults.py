"""A hub's source of a leaf stream under faults: a link that flaps, an upstream that answers
garbage or stops mid-batch, and the hub's disk filling up in the middle of a catch-up. Each ends
with every message on the hub exactly once, the error shown in stream info while it lasted, and
no storm of consumer creates.

The flap test counts the creates the upstream (the leaf) answered, from its ``/jsz`` API count,
so it counts the same for either leaf; the hub's own count is its ``/jsz`` ``leafjet`` object.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.leafnodes import (
    Topology,
    leaf_count,
    monitor,
)
from tests.support.leafsources import SOURCE, connect, start_pair
from tests.support.proxy import Proxy
from tests.support.servers import RunningServer, wait_until, wait_until_async
from tests.support.streams import create_stream as create
from tests.support.streams import stored_messages, wait_msgs
from tests.support.streams import stream_info as info

pytestmark = [pytest.mark.integration, pytest.mark.federation, pytest.mark.anyio]

# flaps per phase: a leafjet leaf redials in 0.2 s here, the reference's every 1 s (five keep
# its test as short)
FLAPS = {"leafjet": 10, "reference": 5}
REQUEST_THROTTLE = 2.0  # the reference's: at most one consumer create per 2 s per source


async def flap(hub: RunningServer, proxy: Proxy) -> None:
    """Cut the link and wait until it is back: one detach and one attach on each side."""
    proxy.cut()
    await wait_until_async(lambda: leaf_count(hub) == 0, 15, what="the link to drop")
    proxy.restore()
    await wait_until_async(lambda: leaf_count(hub) == 1, 30, what="the link to come back")


def api_total(server: RunningServer) -> int:
    z = wait_until(lambda: monitor(server, "/jsz"), 10, what="/jsz")
    return int(z["api"]["total"])


def source_extras(hub: RunningServer, stream: str) -> dict[str, Any]:
    z = monitor(hub, "/jsz?streams=1") or {}
    for acc in z.get("account_details", []):
        for s in acc.get("stream_detail", []):
            if s["name"] == stream:
                return s["sources"][0]["leafjet"]
    raise AssertionError(f"{stream} not in /jsz")


async def payloads(nc: Any, name: str) -> list[bytes]:
    return [m.data for m in await stored_messages(nc, name)]


# ------------------------------------------------------------------------------ the link flaps


async def flap_and_count(hub: RunningServer, leaf: RunningServer, proxy: Proxy) -> tuple[int, int, float]:
    """Flap the link ``FLAPS[leaf.kind]`` times; the consumer creates the hub's source sent meanwhile,
    those the leaf's JetStream API answered (its /jsz count), and how long it took."""
    creates_before = source_extras(hub, "AGG")["consumer_creates"]
    answered_before = api_total(leaf)
    t0 = time.monotonic()
    flaps = FLAPS[leaf.kind]
    for _ in range(flaps):
        await flap(hub, proxy)
    elapsed = time.monotonic() - t0
    # what was sent just before the last attach may be answered after it
    await anyio.sleep(0.5)
    sent = source_extras(hub, "AGG")["consumer_creates"] - creates_before
    answered = api_total(leaf) - answered_before
    print(
        f"{flaps} flaps in {elapsed:.1f}s: the hub sent {sent} consumer creates, the leaf answered {answered}"
    )
    return sent, answered, elapsed


@pytest.mark.parametrize("leaf_kind", ["leafjet", "reference"])
async def test_a_flapping_link_costs_one_consumer_create_per_retry(topo: Topology, leaf_kind: str) -> None:
    """Each link attach kicks the source (the reference's leaf-connect kick), yet it asks at
    most once per 2 s: while its upstream stream is missing (every create refused, the backoff
    cut short by each kick) and while it reads a healthy one."""
    hub, leaf, proxy = start_pair(topo, "leafjet", leaf_kind)
    hub_nc, leaf_nc = await connect(hub), await connect(leaf)
    try:
        await create(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        await wait_source(hub_nc, lambda s: s.get("error", {}).get("err_code") == 10059)
        sent, answered, elapsed = await flap_and_count(hub, leaf, proxy)
        bound = int(elapsed / REQUEST_THROTTLE) + 2  # one per 2 s, and one in flight at each end
        assert 1 <= sent <= bound, (sent, elapsed)
        assert answered <= sent

        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders"]})
        for i in range(50):
            await leaf_nc.publish("orders", b"%d" % i)
        await wait_msgs(hub_nc, "AGG", 50, timeout=60)
        sent, answered, elapsed = await flap_and_count(hub, leaf, proxy)
        assert sent <= int(elapsed / REQUEST_THROTTLE) + 2, (sent, elapsed)
        assert answered <= sent

        for i in range(50, 100):
            await leaf_nc.publish("orders", b"%d" % i)
        await wait_msgs(hub_nc, "AGG", 100, timeout=60)
        await anyio.sleep(0.5)  # anything stored twice has had time to arrive
        assert await payloads(hub_nc, "AGG") == [b"%d" % i for i in range(100)]
        await wait_source(hub_nc, lambda s: "error" not in s and s["lag"] == 0)
    finally:
        await hub_nc.close()
        await leaf_nc.close()


# ------------------------------------------------------------------------------ a fake upstream


class FakeUpstream:
    """A plain client on the hub answering the source's consumer creates on ``$JS.FAKE.API``,
    as ``mode`` says: garbage JSON, a valid answer followed by deliveries with garbage ack
    subjects, or a valid answer followed by real-looking deliveries of ``to_send``."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.mode = "garbage-json"
        self.requests: list[dict[str, Any]] = []
        self.to_send: list[int] = []

    async def start(self) -> None:
        await self.nc.subscribe("$JS.FAKE.API.CONSUMER.CREATE.>", cb=self.on_create)

    async def on_create(self, msg: Any) -> None:
        req = json.loads(msg.data)
        self.requests.append(req)
        if self.mode == "garbage-json":
            await self.nc.publish(msg.reply, b'{"type": "io.nats.jetstream.api.v1.consumer_create_resp')
            return
        cfg = req["config"]
        start = cfg.get("opt_start_seq", 1)
        resp = {
            "type": "io.nats.jetstream.api.v1.consumer_create_response",
            "stream_name": "ORDERS",
            "name": cfg["name"],
            "config": cfg,
            "delivered": {"consumer_seq": 0, "stream_seq": start - 1},
            "ack_floor": {"consumer_seq": 0, "stream_seq": start - 1},
            "num_pending": 0,
        }
        await self.nc.publish(msg.reply, json.dumps(resp).encode())
        deliver = cfg["deliver_subject"]
        if self.mode == "garbage-acks":
            for i in range(3):
                await self.nc.publish(deliver, b"g%d" % i, reply=f"not.an.ack.{i}")
            return
        seqs = [s for s in self.to_send if s >= start]
        for dseq, sseq in enumerate(seqs, 1):
            ack = f"$JS.ACK.ORDERS.{cfg['name']}.1.{sseq}.{dseq}.{time.time_ns()}.{len(seqs) - dseq}"
            await self.nc.publish(deliver, b"%d" % sseq, reply=ack)
        # then nothing more: no heartbeat, no flow control (it stopped mid-batch)


async def wait_source(nc: Any, done: Any, timeout: float = 30.0) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            (src,) = (await info(nc, "AGG"))["sources"]
            if done(src):
                return src
            await anyio.sleep(0.05)


async def kick_until_asked(
    hub: RunningServer, proxy: Proxy, fake: FakeUpstream, timeout: float = 60.0
) -> None:
    """Flap the leaf link (a link attach cuts the source's backoff short) until the source
    sends its next consumer create."""
    asked = len(fake.requests)
    with anyio.fail_after(timeout):
        while len(fake.requests) == asked:
            await flap(hub, proxy)
            with anyio.move_on_after(4):
                while len(fake.requests) == asked:
                    await anyio.sleep(0.05)


async def test_an_upstream_that_answers_garbage_or_stops_mid_batch_is_an_error_and_stores_nothing_twice(
    topo: Topology,
) -> None:
    hub, _leaf, proxy = start_pair(topo, "leafjet", "leafjet")
    hub_nc, fake_nc = await connect(hub), await connect(hub)
    try:
        fake = FakeUpstream(fake_nc)
        await fake.start()
        await fake_nc.flush()
        spec = {"name": "ORDERS", "external": {"api": "$JS.FAKE.API", "deliver": ""}}
        await create(hub_nc, {"name": "AGG", "sources": [spec]})

        src = await wait_source(hub_nc, lambda s: "error" in s)
        assert src["error"]["err_code"] == 10045
        assert src["error"]["description"] == "invalid consumer create response"
        assert "invalid consumer create response (10045)" in hub.log()

        fake.mode = "garbage-acks"
        await kick_until_asked(hub, proxy, fake)
        src = await wait_source(
            hub_nc, lambda s: "invalid delivery" in s.get("error", {}).get("description", "")
        )
        assert src["error"]["err_code"] == 10045
        assert "is not an ack subject" in src["error"]["description"]
        assert (await info(hub_nc, "AGG"))["state"]["messages"] == 0

        fake.mode, fake.to_send = "deliver", [1, 2, 3, 4, 5]
        await kick_until_asked(hub, proxy, fake)
        await wait_msgs(hub_nc, "AGG", 5)
        await wait_source(hub_nc, lambda s: "error" not in s)  # it spoke: the error is gone

        # it stopped mid-batch; the next create (a stall, or a kick) asks after what was stored
        fake.to_send = list(range(1, 11))  # a broken upstream might send it all again
        await kick_until_asked(hub, proxy, fake)
        assert fake.requests[-1]["config"]["opt_start_seq"] == 6
        await wait_msgs(hub_nc, "AGG", 10)
        await anyio.sleep(0.5)
        assert await payloads(hub_nc, "AGG") == [b"%d" % i for i in range(1, 11)]
        assert len(fake.requests) <= 6  # one create per attempt: no storm
    finally:
        await hub_nc.close()
        await fake_nc.close()


# ------------------------------------------------------------------------------ a full disk


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.fixture
def hub_on_small_disk(topo: Topology) -> Iterator[Path]:
    """A 64 MiB tmpfs as the hub's data directory (its first start's)."""
    d = topo.workdir / "hub-0" / "data"
    d.mkdir(parents=True)
    if _run("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    yield d
    topo.close()  # the server first: it holds files there
    _run("umount", "-l", str(d))


def fill(d: Path, leave: int) -> Path:
    """Fill the file system of ``d`` but ``leave`` bytes; the filler file."""
    filler = d / "filler"
    free = shutil.disk_usage(d).free
    with open(filler, "wb") as f:
        f.truncate(0)
        chunk = b"\0" * (1 << 20)
        left = free - leave
        while left > 0:
            f.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
    return filler


async def test_a_full_disk_on_the_hub_mid_catch_up_is_an_error_then_every_message_once(
    topo: Topology, hub_on_small_disk: Path
) -> None:
    n, size = 4000, 2048
    hub, leaf, proxy = start_pair(topo, "leafjet", "leafjet")
    hub_nc, leaf_nc = await connect(hub), await connect(leaf)
    try:
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders"]})
        for i in range(n):
            await leaf_nc.publish("orders", b"%06d" % i + b"." * (size - 6))
        await wait_msgs(leaf_nc, "ORDERS", n)
        proxy.cut()  # the source waits while the disk fills
        await wait_until_async(lambda: leaf_count(hub) == 0, 15, what="the link to drop")
        await create(hub_nc, {"name": "AGG", "sources": [SOURCE]})
        filler = fill(hub_on_small_disk, leave=2 << 20)  # room for ~1/4 of the catch-up
        proxy.restore()
        src = await wait_source(
            hub_nc,
            lambda s: "no responders" not in s.get("error", {}).get("description", "no responders"),
            timeout=60,
        )
        print("the source's error with the disk full:", src["error"])
        stored = (await info(hub_nc, "AGG"))["state"]["messages"]
        # short of all of them (none at all when the first batch's transaction was already
        # larger than the room left: batches are bounded in bytes, not in messages)
        assert stored < n, stored
        assert src["error"]["err_code"] == 10045
        assert "stream AGG source ORDERS" in hub.log()

        filler.unlink()  # the disk has room again; a link attach cuts the backoff short
        await flap(hub, proxy)
        await wait_msgs(hub_nc, "AGG", n, timeout=120)
        await anyio.sleep(0.5)
        got = await payloads(hub_nc, "AGG")
        assert [p[:6] for p in got] == [b"%06d" % i for i in range(n)]
        await wait_source(hub_nc, lambda s: "error" not in s)
    finally:
        await hub_nc.close()
        await leaf_nc.close()


# ------------------------------------------------------------------------------ an upstream gap


@pytest.mark.parametrize("hub_kind", ["leafjet", "reference"])
async def test_a_mirror_that_misses_purged_messages_keeps_the_holes_and_leafjet_advises_them(
    topo: Topology, hub_kind: str
) -> None:
    """The leaf purges messages while its link is cut: the hub's mirror keeps the same holes on
    both servers (the reference's skip markers; leafjet's deleted sequences); leafjet also
    logs the gap and advises it once."""
    hub, leaf, proxy = start_pair(topo, hub_kind, "leafjet")
    hub_nc, leaf_nc = await connect(hub), await connect(leaf)
    try:
        advisories: list[dict[str, Any]] = []

        async def on_advisory(msg: Any) -> None:
            advisories.append(json.loads(msg.data))

        await hub_nc.subscribe("$JS.EVENT.ADVISORY.STREAM.SOURCE_GAP.M", cb=on_advisory)
        await create(leaf_nc, {"name": "ORDERS", "subjects": ["orders"]})
        for i in range(1, 6):
            await leaf_nc.publish("orders", b"%d" % i)
        await create(hub_nc, {"name": "M", "mirror": SOURCE})
        await wait_msgs(hub_nc, "M", 5)
        proxy.cut()
        await wait_until_async(lambda: leaf_count(hub) == 0, 15, what="the link to drop")
        for i in range(6, 16):
            await leaf_nc.publish("orders", b"%d" % i)
        r = await leaf_nc.request("$JS.API.STREAM.PURGE.ORDERS", json.dumps({"seq": 12}).encode(), timeout=5)
        assert json.loads(r.data)["success"]  # 6-11 are gone before the hub read them
        proxy.restore()
        st = (await wait_msgs(hub_nc, "M", 9, timeout=60))["state"]
        assert (st["first_seq"], st["last_seq"], st["messages"]) == (1, 15, 9)
        assert st["num_deleted"] == 6
        got = await payloads(hub_nc, "M")
        assert got == [b"%d" % i for i in (1, 2, 3, 4, 5, 12, 13, 14, 15)]
        if hub_kind != "leafjet":
            return
        await wait_until_async(lambda: advisories, 10, what="the gap advisory")
        (adv,) = advisories
        assert (adv["kind"], adv["first_seq"], adv["last_seq"], adv["missing"]) == ("mirror", 6, 11, 6)
        assert adv["source"] == {"name": "ORDERS", "external": {"api": "$JS.EDGE.API", "deliver": ""}}
        assert adv["domain"] == "HUB"
        assert "upstream sequences 6-11 (6 messages) were removed before they were read" in hub.log()
    finally:
        await hub_nc.close()
        await leaf_nc.close()
