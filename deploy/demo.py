"""The README's main command: run an agent and show stock nats-py clients using it.

For now (foundation): start `leafjet agent` as a real process, then a device publishes
telemetry, a dashboard subscribes with a wildcard, a service answers requests, and a queue group
shares the work; finally SIGTERM shuts the agent down cleanly. Later issues grow this into the
full pipeline (MQTT devices -> bridge -> streams -> Spark).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from pathlib import Path

import nats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.servers import start_leafjet  # noqa: E402


def step(text: str) -> None:
    print(f"==> {text}", flush=True)


async def exercise(url: str) -> None:
    device = await nats.connect(url, name="device-1")
    dashboard = await nats.connect(url, name="dashboard")
    workers = [await nats.connect(url, name=f"worker-{i}") for i in range(2)]
    try:
        step("dashboard subscribes to sensors.>")
        seen = await dashboard.subscribe("sensors.>")

        async def answer(msg):
            await msg.respond(b"ok:" + msg.data)

        await dashboard.subscribe("device.config.get", cb=answer)
        per_worker = {i: 0 for i in range(len(workers))}

        def counter(i):
            async def cb(_msg):
                per_worker[i] += 1

            return cb

        for i, w in enumerate(workers):
            await w.subscribe("jobs.resize", queue="resizers", cb=counter(i))
            await w.flush()
        await dashboard.flush()

        step("device publishes 5 readings")
        for i in range(5):
            await device.publish(
                "sensors.device-1.temp", f"{20 + i * 0.5:.1f}".encode(), headers={"Unit": "C"}
            )
        await device.flush()
        for _ in range(5):
            msg = await seen.next_msg(timeout=5)
            print(f"    dashboard got {msg.subject} = {msg.data.decode()} {msg.headers}")

        step("device makes a request")
        reply = await device.request("device.config.get", b"interval", timeout=5)
        print(f"    reply: {reply.data.decode()}")

        step("100 jobs go to a queue group of 2 workers")
        for i in range(100):
            await device.publish("jobs.resize", str(i).encode())
        await device.flush()
        for _ in range(100):
            if sum(per_worker.values()) == 100:
                break
            await asyncio.sleep(0.05)
        print(f"    jobs per worker: {per_worker} (total {sum(per_worker.values())})")

        step("JetStream: a durable stream on SQLite-WAL captures telemetry.>")
        js = device.jetstream()
        await js.add_stream(name="TELEMETRY", subjects=["telemetry.>"], max_msgs_per_subject=100)
        for i in range(10):
            ack = await js.publish(
                f"telemetry.device-{i % 2}.temp",
                f"{20 + i}".encode(),
                headers={"Nats-Msg-Id": f"reading-{i}"},
            )
        again = await js.publish("telemetry.device-1.temp", b"29", headers={"Nats-Msg-Id": "reading-9"})
        print(
            f"    last ack: stream={ack.stream} seq={ack.seq}; a resend of reading-9 is a duplicate: "
            f"{bool(again.duplicate)}"
        )
        info = await js.stream_info("TELEMETRY", subjects_filter=">")
        print(
            f"    stream holds {info.state.messages} messages,"
            f" seq {info.state.first_seq}..{info.state.last_seq},"
            f" per subject {info.state.subjects}"
        )
        last = await js.get_last_msg("TELEMETRY", "telemetry.device-0.temp")
        print(f"    last reading of device-0: {last.data.decode()} (seq {last.seq})")
    finally:
        for c in (device, dashboard, *workers):
            await c.close()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="leafjet-demo-") as tmp:
        step("starting leafjet agent")
        srv = start_leafjet(Path(tmp))
        print(f"    agent pid {srv.pid} on {srv.url}")
        try:
            asyncio.run(exercise(srv.url))
        finally:
            step("stopping the agent with SIGTERM")
            code = srv.stop(signal.SIGTERM)
            print(f"    agent exited with {code}")
    step("demo finished")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
