"""The README's main command: the single-node pipeline, end to end, on this machine.

simulated MQTT devices -> mosquitto -> MQTT bridge (inside the agent) -> the agent's durable
stream (SQLite-WAL) -> Spark aggregation -> a printed table and a PNG chart. Along the way it
shows the agent serving stock NATS clients (request/reply, a queue group). Everything runs as real
processes and is shut down cleanly at the end.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import nats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.mosquitto import Mosquitto  # noqa: E402
from tests.support.servers import free_port, start_leafjet  # noqa: E402

DEVICES = 5
READINGS = 40  # per device
INTERVAL = 0.1  # seconds between a device's readings
OUTPUT = REPO / "demo-output"


def step(text: str) -> None:
    print(f"==> {text}", flush=True)


def run_devices(port: int) -> int:
    """Each device publishes JSON temperature readings at QoS 1 over a few seconds."""
    from paho.mqtt.client import CallbackAPIVersion, Client

    sent = 0
    lock = threading.Lock()

    def device(i: int) -> None:
        nonlocal sent
        c = Client(CallbackAPIVersion.VERSION2, client_id=f"demo-device-{i}")
        c.connect("127.0.0.1", port)
        c.loop_start()
        rng = random.Random(i)
        try:
            for n in range(READINGS):
                temp = 20 + 3 * i + 2 * math.sin(n / 6) + rng.uniform(-0.3, 0.3)
                body = json.dumps({"device": f"dev-{i}", "temp": round(temp, 2)})
                c.publish(f"devices/dev-{i}/temp", body, qos=1).wait_for_publish(10)
                with lock:
                    sent += 1
                time.sleep(INTERVAL)
        finally:
            c.disconnect()
            c.loop_stop()

    threads = [threading.Thread(target=device, args=(i,)) for i in range(DEVICES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


async def core_tour(url: str) -> None:
    """A glimpse of core NATS on the agent: request/reply and a queue group."""
    svc, client = await nats.connect(url, name="svc"), await nats.connect(url, name="client")
    workers = [await nats.connect(url, name=f"worker-{i}") for i in range(2)]
    try:

        async def answer(msg):
            await msg.respond(b"ok:" + msg.data)

        await svc.subscribe("device.config.get", cb=answer)
        counts = [0, 0]

        def counter(i):
            async def cb(_msg):
                counts[i] += 1

            return cb

        for i, w in enumerate(workers):
            await w.subscribe("jobs.resize", queue="resizers", cb=counter(i))
            # twice: nats-py writes flush()'s PING ahead of a SUB still pending
            await w.flush()
            await w.flush()
        await svc.flush()
        await svc.flush()
        reply = await client.request("device.config.get", b"interval", timeout=5)
        print(f"    request/reply: {reply.data.decode()}")
        for i in range(100):
            await client.publish("jobs.resize", str(i).encode())
        await client.flush()
        for _ in range(100):
            if sum(counts) == 100:
                break
            await asyncio.sleep(0.02)
        print(f"    queue group of 2 shared 100 jobs: {counts}")
    finally:
        for c in (svc, client, *workers):
            await c.close()


async def make_stream(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(name="TELEMETRY", subjects=["telemetry.>"], allow_direct=True)
    finally:
        await nc.close()


async def wait_stored(url: str, expected: int, timeout: float = 60) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + timeout
        while True:
            n = (await js.stream_info("TELEMETRY")).state.messages
            if n >= expected or time.monotonic() > deadline:
                return n
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


def main() -> int:
    OUTPUT.mkdir(exist_ok=True)
    chart = OUTPUT / "telemetry.png"
    with tempfile.TemporaryDirectory(prefix="leafjet-demo-") as tmp:
        step("starting mosquitto (the devices' MQTT broker)")
        broker = Mosquitto(Path(tmp) / "mosquitto", free_port()).start()
        agent = None
        try:
            step("starting the leafjet agent with an MQTT bridge in its config")
            agent = start_leafjet(
                Path(tmp) / "agent",
                {
                    "server_name": "edge-demo",
                    "bridges": {
                        "mqtt": [
                            {
                                "name": "devices",
                                "url": broker.url,
                                "client_id": "leafjet-demo-bridge",
                                "inbound": [{"filter": "devices/#", "qos": 1, "subject_prefix": "telemetry"}],
                            }
                        ]
                    },
                },
            )
            print(f"    agent pid {agent.pid} on {agent.url}; broker on {broker.url}")
            asyncio.run(core_tour(agent.url))
            asyncio.run(make_stream(agent.url))
            step(f"{DEVICES} simulated devices publish {READINGS} readings each over MQTT (QoS 1)")
            sent = run_devices(broker.port)
            stored = asyncio.run(wait_stored(agent.url, sent))
            print(f"    devices sent {sent}; the stream TELEMETRY holds {stored}")
            step("Spark aggregates the stream per device and 1-second window (count, min, max, mean)")
            from bridges.spark.demo import run_demo

            rows = run_demo(agent.url, "TELEMETRY", chart, field="temp", window="1 second")
            print(f"    {len(rows)} aggregate rows; chart written to {chart}")
        finally:
            step("shutting down")
            code = agent.stop(signal.SIGTERM) if agent is not None else 0
            broker.stop()
            print(f"    agent exited with {code}")
    step("demo finished")
    return 0 if code == 0 and stored == sent else 1


if __name__ == "__main__":
    sys.exit(main())
