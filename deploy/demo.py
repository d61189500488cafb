"""The README's main command: the edge-to-hub pipeline, end to end, on this machine.

Three sites, each a ``leafjet agent`` (its own process, data dir and JetStream domain ``siteN``)
with its own mosquitto and an in-process MQTT bridge: simulated devices publish JSON readings at
QoS 1, the bridge stores them in the site's durable ``TELEMETRY`` stream. Every site dials one
``leafjet hub`` (domain ``hub``) as a leaf node with its own leaf credentials, all bound to the
hub account ``FLEET``, where the stream ``FLEET`` sources every site's ``TELEMETRY`` across the
domains (``external.api = "$JS.siteN.API"``). Site 2's uplink runs through a TCP proxy that the
demo cuts for a few seconds while its devices keep publishing; the source's lag drains once the
link is back. Spark then aggregates the hub's ``FLEET`` stream into a table and a PNG chart, a
final check reads the hub's stream and finds every acknowledged reading exactly once, and
everything is shut down. All of it runs as real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.leafnodes import leaf_count, leaf_subscriptions  # noqa: E402
from tests.support.mosquitto import Mosquitto  # noqa: E402
from tests.support.proxy import Proxy  # noqa: E402
from tests.support.servers import RunningServer, free_port, start_leafjet, wait_until  # noqa: E402

SITES = ("site1", "site2", "site3")
CUT_SITE = "site2"  # the site whose uplink runs through the proxy and is cut mid-run
DEVICES = 3  # per site
READINGS = 100  # per device
INTERVAL = 0.1  # seconds between a device's readings
CUT_AFTER = 2.0  # seconds into the publishing
CUT_FOR = 4.0  # seconds the link stays down
WINDOW = "5 seconds"
FLEET_USER, FLEET_PASSWORD = "fleet", "fleet-demo-pw"  # the hub account's client (and Spark's)
OUTPUT = REPO / "demo-output"

Reading = tuple[str, str, int]  # (site, device, n)


STARTED = time.monotonic()


def step(text: str) -> None:
    print(f"==> [{time.monotonic() - STARTED:4.1f} s] {text}", flush=True)


def leaf_password(site: str) -> str:
    return f"{site}-leaf-demo-pw"


# -- the processes --------------------------------------------------------------------------------


def hub_config(leaf_port: int, http_port: int, advertise: str) -> dict[str, Any]:
    """All sites bound to one account: one stream in it can source them all (leafjet has no
    account imports and exports, and a stream only sources what its own account can reach)."""
    return {
        "server_name": "hub",
        "http_port": http_port,
        "jetstream": {"domain": "hub"},
        "accounts": {
            "FLEET": {"users": [{"user": FLEET_USER, "password": FLEET_PASSWORD}], "jetstream": "enabled"}
        },
        "leafnodes": {
            "host": "127.0.0.1",
            "port": leaf_port,
            "advertise": advertise,  # leafs reconnect to what the hub advertises: the proxy
            "authorization": {
                "users": [
                    {"user": f"leaf-{s}", "password": leaf_password(s), "account": "FLEET"} for s in SITES
                ]
            },
        },
    }


def site_config(site: str, hub_leaf: str, broker: Mosquitto) -> dict[str, Any]:
    return {
        "server_name": f"edge-{site}",
        "jetstream": {"domain": site},
        "leafnodes": {
            "remotes": [
                {"urls": [f"nats-leaf://leaf-{site}:{leaf_password(site)}@{hub_leaf}"], "reconnect": 0.2}
            ]
        },
        "bridges": {
            "mqtt": [
                {
                    "name": "devices",
                    "url": broker.url,
                    "client_id": f"leafjet-{site}-bridge",
                    "inbound": [{"filter": "devices/#", "qos": 1, "subject_prefix": f"telemetry.{site}"}],
                }
            ]
        },
    }


def hub_url(hub: RunningServer) -> str:
    return f"nats://{FLEET_USER}:{FLEET_PASSWORD}@127.0.0.1:{hub.port}"


# -- the devices ----------------------------------------------------------------------------------


class Devices:
    """``DEVICES`` simulated devices per site, each publishing ``READINGS`` JSON readings at QoS 1 to
    its site's broker; ``acked`` holds every reading the broker acknowledged."""

    def __init__(self, brokers: dict[str, Mosquitto]) -> None:
        self.brokers = brokers
        self.acked: list[Reading] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._device, args=(site, i), name=f"{site}-dev-{i}")
            for site in brokers
            for i in range(DEVICES)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self) -> None:
        for t in self._threads:
            t.join()

    def count(self, site: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.acked if site is None or r[0] == site)

    def _device(self, site: str, i: int) -> None:
        from paho.mqtt.client import CallbackAPIVersion, Client

        c = Client(CallbackAPIVersion.VERSION2, client_id=f"demo-{site}-dev-{i}")
        c.connect("127.0.0.1", self.brokers[site].port)
        c.loop_start()
        rng = random.Random(f"{site}-{i}")
        base = 18 + 4 * SITES.index(site) + 1.5 * i
        try:
            for n in range(READINGS):
                temp = base + 2 * math.sin(n / 8) + rng.uniform(-0.3, 0.3)
                body = json.dumps({"site": site, "device": f"dev-{i}", "n": n, "temp": round(temp, 2)})
                c.publish(f"devices/dev-{i}/temp", body, qos=1).wait_for_publish(10)
                with self._lock:
                    self.acked.append((site, f"dev-{i}", n))
                time.sleep(INTERVAL)
        finally:
            c.disconnect()
            c.loop_stop()


# -- NATS, JetStream ----------------------------------------------------------------------------


async def api(
    nc: Any, subject: str, body: dict[str, Any] | None = None, timeout: float = 5
) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body or {}).encode(), timeout=timeout)
    return json.loads(msg.data)


async def retry(what: Callable[[], Any], timeout: float = 15) -> Any:
    """``what()`` until it stops raising NoResponders (an interest that is still crossing a link)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await what()
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def make_streams(hub: RunningServer, sites: dict[str, RunningServer]) -> None:
    for site, agent in sites.items():
        nc = await nats.connect(agent.url)
        try:
            await nc.jetstream().add_stream(
                name="TELEMETRY", subjects=[f"telemetry.{site}.>"], allow_direct=True
            )
        finally:
            await nc.close()
        print(f"    {site}: stream TELEMETRY on telemetry.{site}.> (domain {site})")
    nc = await nats.connect(hub_url(hub))
    try:
        for site in sites:  # each site's JetStream answers through the link before it is sourced
            subject = f"$JS.{site}.API.STREAM.INFO.TELEMETRY"
            await retry(lambda: api(nc, subject, timeout=1))  # noqa: B023 (awaited at once)
        sources = [{"name": "TELEMETRY", "external": {"api": f"$JS.{s}.API", "deliver": ""}} for s in sites]
        reply = await api(nc, "$JS.API.STREAM.CREATE.FLEET", {"name": "FLEET", "sources": sources})
        if "error" in reply:
            raise RuntimeError(f"creating FLEET on the hub: {reply['error']}")
        print(f"    hub: stream FLEET (account FLEET, domain hub) sources {', '.join(sites)}")
    finally:
        await nc.close()


async def core_tour(hub: RunningServer, sites: dict[str, RunningServer]) -> None:
    """Core NATS across the links: a hub client asks a service on site1, and a queue group with
    one worker on site1 and one on site3 shares jobs published on the hub."""
    hub_nc = await nats.connect(hub_url(hub))
    svc = await nats.connect(sites["site1"].url, name="svc")
    workers = [await nats.connect(sites[s].url, name=f"worker-{s}") for s in ("site1", "site3")]
    try:

        async def answer(msg: Any) -> None:
            await msg.respond(b"interval=0.1s from " + msg.subject.split(".")[0].encode())

        await svc.subscribe("site1.config.get", cb=answer)
        reply = await retry(lambda: hub_nc.request("site1.config.get", b"", timeout=1))
        print(f"    hub -> site1 request/reply: {reply.data.decode()}")
        counts = [0, 0]

        def counter(i: int) -> Callable[[Any], Any]:
            async def cb(_msg: Any) -> None:
                counts[i] += 1

            return cb

        for i, w in enumerate(workers):
            await w.subscribe("jobs.resize", queue="resizers", cb=counter(i))
            await w.flush()
        await asyncio.to_thread(
            wait_until,
            lambda: sum("jobs.resize" in subs for subs in leaf_subscriptions(hub)) == 2,
            10,
            0.02,
            "the queue group's interest to reach the hub",
        )
        for i in range(100):
            await hub_nc.publish("jobs.resize", str(i).encode())
        await hub_nc.flush()
        for _ in range(200):
            if sum(counts) == 100:
                break
            await asyncio.sleep(0.02)
        print(f"    queue group across site1 and site3 shared 100 jobs from the hub: {counts}")
    finally:
        for c in (hub_nc, svc, *workers):
            await c.close()


async def stream_counts(nc: Any, stream: str, filt: str | None = None) -> tuple[int, dict[str, Any]]:
    """Messages in ``stream`` (those matching ``filt`` when given) and the whole stream info."""
    info = await api(nc, f"$JS.API.STREAM.INFO.{stream}", {"subjects_filter": filt} if filt else {})
    if filt:
        return sum((info["state"].get("subjects") or {}).values()), info
    return info["state"]["messages"], info


def source_state(info: dict[str, Any], site: str) -> tuple[int, float]:
    """(lag, seconds since the hub last heard from it) of ``site``'s source in FLEET's info."""
    for s in info.get("sources") or []:
        if s.get("external", {}).get("api") == f"$JS.{site}.API":
            active = s.get("active", -1)
            return s.get("lag", 0), active / 1e9 if active >= 0 else math.inf
    return 0, math.inf


async def cut_and_restore(
    hub: RunningServer, site_agent: RunningServer, proxy: Proxy, devices: Devices
) -> None:
    """Cut ``CUT_SITE``'s uplink while its devices publish; show the hub falling behind, then the
    source's lag draining after the link is restored."""
    hub_nc = await nats.connect(hub_url(hub), max_reconnect_attempts=-1)
    site_nc = await nats.connect(site_agent.url)
    filt = f"telemetry.{CUT_SITE}.>"

    last: tuple[int, int] | None = None

    async def show(label: str, *, changes_only: bool = False) -> tuple[int, int, int]:
        nonlocal last
        on_site, _ = await stream_counts(site_nc, "TELEMETRY")
        on_hub, info = await stream_counts(hub_nc, "FLEET", filt)
        lag, heard = source_state(info, CUT_SITE)
        if changes_only and last == (on_hub, lag):
            return on_site, on_hub, lag
        last = (on_hub, lag)
        heard_text = f"{heard:4.1f} s ago" if heard != math.inf else "never"
        print(
            f"    {label:14s} {CUT_SITE} stored {on_site:3d} | hub: {on_hub:3d} of them,"
            f" {on_site - on_hub:3d} behind; source lag {lag:3d}, last heard {heard_text}",
            flush=True,
        )
        return on_site, on_hub, lag

    try:
        await asyncio.sleep(CUT_AFTER)
        await show("before the cut")
        proxy.cut()
        t0 = time.monotonic()
        await asyncio.to_thread(wait_until, lambda: leaf_count(hub) == len(SITES) - 1, 10, 0.02, "the cut")
        step(f"{CUT_SITE}'s uplink is cut for {CUT_FOR:.0f} s (its devices keep publishing; the site stores)")
        print(
            "    (lag is the hub's stream info: what the site said was still pending with its last delivery)"
        )
        while time.monotonic() - t0 < CUT_FOR:
            await asyncio.sleep(0.8)
            await show(f"cut, +{time.monotonic() - t0:3.1f} s")
        proxy.restore()
        t1 = time.monotonic()
        step(f"{CUT_SITE}'s uplink restored: the leaf redials through the proxy and the source catches up")
        while True:  # a line each time the hub's count or the source's lag moves
            await asyncio.sleep(0.05)
            on_site, on_hub, lag = await show(f"up, +{time.monotonic() - t1:3.2f} s", changes_only=True)
            if on_hub >= on_site and lag == 0:
                break
            if time.monotonic() - t1 > 30:
                raise RuntimeError(f"the hub did not catch up with {CUT_SITE} within 30 s")
        print(f"    caught up {time.monotonic() - t1:.2f} s after the restore")
    finally:
        await hub_nc.close()
        await site_nc.close()


async def wait_stored(url: str, stream: str, expected: int, timeout: float = 30) -> int:
    nc = await nats.connect(url)
    try:
        deadline = time.monotonic() + timeout
        while True:
            n, _ = await stream_counts(nc, stream)
            if n >= expected or time.monotonic() > deadline:
                return n
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def read_fleet(hub: RunningServer) -> tuple[list[Reading], dict[str, Any]]:
    """Every reading in the hub's FLEET stream (a pull consumer), and the stream's info."""
    nc = await nats.connect(hub_url(hub))
    try:
        js = nc.jetstream()
        total, info = await stream_counts(nc, "FLEET")
        await js.add_consumer("FLEET", durable_name="CHECK", ack_policy="none")
        psub = await js.pull_subscribe_bind("CHECK", stream="FLEET")
        out: list[Reading] = []
        while len(out) < total:
            for m in await psub.fetch(min(1000, total - len(out)), timeout=5):
                r = json.loads(m.data)
                out.append((r["site"], r["device"], r["n"]))
        await psub.unsubscribe()
        await js.delete_consumer("FLEET", "CHECK")
        return out, info
    finally:
        await nc.close()


class SparkStarter(threading.Thread):
    """Starts the Spark session (seconds of JVM start-up) while the devices publish. The JVM's
    start-up chatter on stderr goes to a file meanwhile, so it does not cut into the progress."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(name="spark-start", daemon=True)
        self.tmp = tmp
        self.session: Any = None
        self.error: BaseException | None = None
        tmp.mkdir(parents=True, exist_ok=True)
        self._saved_stderr = os.dup(2)
        chatter = os.open(tmp / "spark-start.log", os.O_WRONLY | os.O_CREAT, 0o644)
        os.dup2(chatter, 2)
        os.close(chatter)

    def run(self) -> None:
        try:
            from bridges.spark.session import quiet_session

            self.session = quiet_session("leafjet-demo", tmp_dir=self.tmp)
        except BaseException as e:  # reported by result()
            self.error = e
        finally:
            self.restore_stderr()

    def restore_stderr(self) -> None:
        if self._saved_stderr >= 0:
            sys.stderr.flush()
            os.dup2(self._saved_stderr, 2)
            os.close(self._saved_stderr)
            self._saved_stderr = -1

    def result(self) -> Any:
        self.join()
        if self.error is not None:
            raise RuntimeError(f"Spark did not start: {self.error}") from self.error
        return self.session


# -- the run ------------------------------------------------------------------------------------


def main() -> int:
    OUTPUT.mkdir(exist_ok=True)
    chart = OUTPUT / "telemetry.png"
    ok = False
    codes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="leafjet-demo-") as tmp_dir:
        tmp = Path(tmp_dir)
        brokers: dict[str, Mosquitto] = {}
        agents: dict[str, RunningServer] = {}
        hub: RunningServer | None = None
        proxy: Proxy | None = None
        spark: Any = None
        starter: SparkStarter | None = None
        try:
            step(f"starting {len(SITES)} mosquitto brokers, one per site")
            for site in SITES:
                brokers[site] = Mosquitto(tmp / f"mosquitto-{site}", free_port()).start()

            step("starting the hub (leafjet hub, domain hub) and the TCP proxy for site2's uplink")
            proxy = Proxy(None)  # the hub advertises it, so site2 redials through it after the cut
            leaf_port = free_port()
            hub = start_leafjet(tmp / "hub", hub_config(leaf_port, free_port(), proxy.address), role="hub")
            proxy.target = ("127.0.0.1", leaf_port)
            print(f"    hub pid {hub.pid} on {hub.url}, leaf port {leaf_port}, proxy on {proxy.address}")

            step(f"starting {len(SITES)} site agents (leafjet agent, each with an MQTT bridge inside)")
            direct = f"127.0.0.1:{leaf_port}"

            def start_site(site: str) -> RunningServer:
                via = proxy.address if site == CUT_SITE and proxy is not None else direct
                return start_leafjet(tmp / site, site_config(site, via, brokers[site]))

            with ThreadPoolExecutor(len(SITES)) as pool:
                for site, agent in zip(SITES, pool.map(start_site, SITES), strict=True):
                    agents[site] = agent
            for site, agent in agents.items():
                via = " through the proxy" if site == CUT_SITE else ""
                print(
                    f"    {site}: pid {agent.pid} on {agent.url}, broker {brokers[site].url}, leaf link{via}"
                )
            wait_until(lambda: leaf_count(hub) == len(SITES), 15, 0.05, "the sites' leaf links")
            print(f"    the hub has {len(SITES)} leaf links, each bound to the hub account FLEET")

            step("streams: TELEMETRY on each site, FLEET on the hub sourcing all of them")
            asyncio.run(make_streams(hub, agents))

            step("core NATS across the links")
            asyncio.run(core_tour(hub, agents))

            total = len(SITES) * DEVICES * READINGS
            step(
                f"{len(SITES) * DEVICES} devices ({DEVICES} per site) publish {READINGS} readings each"
                f" over MQTT (QoS 1), {total} in all"
            )
            devices = Devices(brokers)
            devices.start()
            starter = SparkStarter(tmp / "spark")  # meanwhile
            starter.start()
            asyncio.run(cut_and_restore(hub, agents[CUT_SITE], proxy, devices))
            devices.join()
            sent = devices.count()
            for site, agent in agents.items():
                n = asyncio.run(wait_stored(agent.url, "TELEMETRY", devices.count(site)))
                print(
                    f"    {site}: {devices.count(site)} readings acknowledged to the devices;"
                    f" TELEMETRY holds {n}"
                )
            on_hub = asyncio.run(wait_stored(hub_url(hub), "FLEET", sent))
            print(f"    hub: FLEET holds {on_hub}")

            step(f"Spark aggregates the hub's FLEET stream per device and {WINDOW} window")
            from bridges.spark.demo import run_demo

            spark = starter.result()
            rows = run_demo(
                hub.url,
                "FLEET",
                chart,
                field="temp",
                window=WINDOW,
                spark=spark,
                options={"user": FLEET_USER, "password": FLEET_PASSWORD},
            )
            spark_count = sum(r["count"] for r in rows)
            print(f"    {len(rows)} aggregate rows over {spark_count} readings; chart written to {chart}")

            step("checking the hub: every acknowledged reading exactly once")
            readings, info = asyncio.run(read_fleet(hub))
            dup = sum(c - 1 for c in Counter(readings).values() if c > 1)
            missing = len(set(devices.acked) - set(readings))
            extra = len(set(readings) - set(devices.acked))
            lags = {site: source_state(info, site)[0] for site in SITES}
            print(
                f"    devices: {sent} acknowledged; hub FLEET: {len(readings)} messages,"
                f" {missing} missing, {dup} duplicated, {extra} unknown; Spark counted {spark_count};"
                f" source lags {lags}"
            )
            ok = (
                len(readings) == sent == total == spark_count
                and not (dup or missing or extra)
                and not any(lags.values())
            )
            print(f"    {'OK' if ok else 'FAILED'}")
        finally:
            # Every process started above is stopped here, whatever ended the run. Printing may
            # fail itself (stdout piped into `head`, which has exited): that must not skip the
            # stops, or the agents, hub and brokers would outlive the demo.
            with contextlib.suppress(OSError):
                step("shutting down: Spark, devices' brokers, site agents and their bridges, hub, proxy")
            if starter is not None:
                with contextlib.suppress(RuntimeError):
                    spark = starter.result()
                starter.restore_stderr()
            if spark is not None:
                spark.stop()
            for site, agent in agents.items():
                codes[site] = agent.stop(signal.SIGTERM)
            if hub is not None:
                codes["hub"] = hub.stop(signal.SIGTERM)
            for broker in brokers.values():
                broker.stop()
            if proxy is not None:
                proxy.close()
            with contextlib.suppress(OSError):
                print(f"    exit codes: {codes}", flush=True)
    step("demo finished")
    return 0 if ok and not any(codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
