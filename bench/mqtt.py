"""MQTT device -> durable stream throughput: mosquitto + the leafjet bridge vs the reference's MQTT listener.

    python -m bench mqtt [--msgs 20000] [--size 128] [--inflight 100] [--profile DIR]
    python -m bench mqtt --commands [--msgs 20000]   (commands out: stream -> bridge -> a device)

Columns (same run, fresh servers each):
  leafjet    device -QoS1-> mosquitto -> bridge (its own process, a NATS client) -> leafjet agent stream
  bridge+ref device -QoS1-> mosquitto -> bridge -> reference nats-server stream (isolates the bridge's cost)
  reference  device -QoS1-> nats-server's own MQTT listener (jetstream + mqtt {port}) -> stream
Devices speak MQTT 3.1.1 (the reference's listener has no MQTT 5). The figure is messages stored in
the stream per second, from the first publish until the stream holds N.
Benchmarks never assert.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import nats
from paho.mqtt.client import CallbackAPIVersion, Client, MQTTv311

from bench.procstat import cpu_seconds
from tests.support.mosquitto import MOSQUITTO, Mosquitto
from tests.support.servers import REPO, free_port, start_server


@dataclass(frozen=True, slots=True)
class MqttFigures:
    msgs_per_s: float
    device_acks_per_s: float
    seconds: float
    # CPU microseconds per message of each process on the path, over the measured interval
    # ("device" is this benchmark's own process: the paho device plus the stream polling).
    cpu_us: dict[str, float]


def _flood(port: int, n: int, size: int, inflight: int, topic: str) -> float:
    """Publish n QoS 1 messages; return the time when the broker had acknowledged them all.

    At most ``20 * inflight`` are queued in paho at once, so a million messages do not sit in memory.
    """
    done = threading.Event()
    acks = 0
    room = threading.Condition()
    ahead = 20 * inflight

    def on_publish(*_a: object) -> None:
        nonlocal acks
        with room:
            acks += 1
            room.notify()
            if acks == n:
                done.set()

    c = Client(CallbackAPIVersion.VERSION2, client_id=f"bench-device-{port}", protocol=MQTTv311)
    c.max_inflight_messages_set(inflight)
    c.max_queued_messages_set(0)
    c.on_publish = on_publish
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        payload = b"x" * size
        for i in range(n):
            if i - acks >= ahead:
                with room:
                    while i - acks >= ahead:
                        room.wait(60)
            c.publish(topic, payload, 1)
        done.wait(max(600, n / 100))
        return time.perf_counter()
    finally:
        c.disconnect()
        c.loop_stop()


def _cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    own = os.times()
    return {"device": own.user + own.system, **{role: cpu_seconds(pid) for role, pid in pids.items()}}


async def _measure(
    nats_url: str,
    mqtt_port: int,
    n: int,
    size: int,
    inflight: int,
    subject_prefix: str,
    pids: dict[str, int],
) -> MqttFigures:
    nc = await nats.connect(nats_url)
    js = nc.jetstream(timeout=10)
    try:
        await js.add_stream(name="BENCH", subjects=[f"{subject_prefix}.>"])
        loop = asyncio.get_running_loop()
        cpu0 = _cpu_snapshot(pids)
        t0 = time.perf_counter()
        device = loop.run_in_executor(None, _flood, mqtt_port, n, size, inflight, "bench/device")
        limit = max(300.0, n / 200)  # 1M messages may take a while on a loaded machine
        deadline = t0 + limit
        seen, since = -1, t0
        while (stored := (await js.stream_info("BENCH")).state.messages) < n:
            now = time.perf_counter()
            if stored != seen:
                seen, since = stored, now
            elif device.done() and now - since > 60:  # the device is done and nothing moves
                raise RuntimeError(f"the stream stopped at {stored} of {n} messages: some were lost")
            if now > deadline:
                raise TimeoutError(f"the stream did not reach {n} messages in {limit:.0f}s")
            await asyncio.sleep(0.05 if n < 100_000 else 0.25)
        t1 = time.perf_counter()
        cpu1 = _cpu_snapshot(pids)
        t_acked = await device
        cpu_us = {role: (cpu1[role] - cpu0[role]) * 1e6 / n for role in cpu0}
        return MqttFigures(n / (t1 - t0), n / (t_acked - t0), t1 - t0, cpu_us)
    finally:
        await nc.close()


def _bridge_process(workdir: Path, broker: Mosquitto, nats_url: str, inflight: int) -> subprocess.Popen:
    cfg = workdir / "bridge.toml"
    cfg.write_text(
        "[[bridges.mqtt]]\n"
        f'url = "{broker.url}"\nclient_id = "leafjet-bench"\nnats_url = "{nats_url}"\n'
        f"max_inflight = {max(inflight, 256)}\n"
        '[[bridges.mqtt.inbound]]\nfilter = "bench/#"\nqos = 1\nsubject_prefix = "mqtt"\n'
    )
    log = open(workdir / "bridge.log", "wb")  # noqa: SIM115 - closed by the caller via proc.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridges.mqtt.cli", "--config", str(cfg), "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "leafjet mqtt bridge running"
    log.close()
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    if proc.stdout is not None:
        proc.stdout.close()


def _profiler(pid: int, out: Path) -> subprocess.Popen:
    """py-spy sampling the bridge process until it exits (it then writes ``out``, collapsed stacks)."""
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _via_bridge(
    tmp: Path, kind: str, n: int, size: int, inflight: int, profile: Path | None = None
) -> MqttFigures:
    srv = start_server(kind, tmp / f"{kind}-server", jetstream=True)
    broker = Mosquitto(tmp / f"{kind}-mosquitto", free_port())
    broker.workdir.mkdir(parents=True)
    broker.start()
    bridge = spy = server_spy = None
    try:
        bridge = _bridge_process(tmp, broker, srv.url, inflight)
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            spy = _profiler(bridge.pid, profile / f"bridge-{kind}.txt")
            if kind == "leafjet":  # the agent too: its share of the path is the stream's work
                server_spy = _profiler(srv.pid, profile / "server-leafjet.txt")
        time.sleep(0.5)  # the bridge subscribes right after it connects; the device must not beat it
        assert broker.proc is not None
        pids = {"bridge": bridge.pid, "server": srv.pid, "broker": broker.proc.pid}
        return asyncio.run(_measure(srv.url, broker.port, n, size, inflight, "mqtt", pids))
    finally:
        if bridge is not None:
            _stop(bridge)
        if spy is not None:
            spy.wait(30)  # it writes its file once the bridge has exited
        if profile is not None and (tmp / "bridge.log").exists():
            shutil.copy(tmp / "bridge.log", profile / f"bridge-{kind}.log")
        broker.stop()
        srv.stop()
        if server_spy is not None:
            server_spy.wait(30)


def _reference_listener(tmp: Path, n: int, size: int, inflight: int) -> MqttFigures:
    mqtt_port = free_port()
    srv = start_server(
        "reference",
        tmp / "ref-mqtt",
        {"server_name": "bench-ref", "mqtt": {"port": mqtt_port}},
        jetstream=True,
    )
    try:
        return asyncio.run(_measure(srv.url, mqtt_port, n, size, inflight, "bench", {"server": srv.pid}))
    finally:
        srv.stop()


def _median_figures(runs: list[MqttFigures]) -> MqttFigures:
    """Each figure's median over the runs (CPU per role likewise)."""
    roles = {role for f in runs for role in f.cpu_us}
    return MqttFigures(
        msgs_per_s=statistics.median(f.msgs_per_s for f in runs),
        device_acks_per_s=statistics.median(f.device_acks_per_s for f in runs),
        seconds=statistics.median(f.seconds for f in runs),
        cpu_us={role: statistics.median(f.cpu_us[role] for f in runs if role in f.cpu_us) for role in roles},
    )


def run_mqtt(n: int, size: int, inflight: int, profile: Path | None = None, runs: int = 1) -> int:
    if MOSQUITTO is None:
        print("mosquitto is not installed (apt-get install -y mosquitto mosquitto-clients)", file=sys.stderr)
        return 3
    got: dict[str, list[MqttFigures]] = {"leafjet": [], "bridge+ref": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-mqtt-") as tmp_s:
        tmp = Path(tmp_s)
        for run in range(runs):
            where = tmp / f"run{run}"
            (where / "a").mkdir(parents=True)
            (where / "b").mkdir()
            measure = {
                "leafjet": partial(_via_bridge, where / "a", "leafjet", n, size, inflight, profile),
                "bridge+ref": partial(_via_bridge, where / "b", "reference", n, size, inflight),
                "reference": partial(_reference_listener, where, n, size, inflight),
            }
            # The order rotates from run to run: whatever the machine does early or late in a
            # run (page cache, CPU frequency, other work) does not always fall on one column.
            order = list(measure)[run % 3 :] + list(measure)[: run % 3]
            for column in order:
                got[column].append(measure[column]())
    lj, br, ref = (_median_figures(got[c]) for c in ("leafjet", "bridge+ref", "reference"))
    if runs > 1:
        per_run = ", ".join(
            f"{a.msgs_per_s / r.msgs_per_s:.2f}" if r.msgs_per_s else "nan"
            for a, r in zip(got["leafjet"], got["reference"], strict=True)
        )
        print(f"\nlj/ref device -> stream per run (order rotated each run): {per_run}")
    print(f"\nmqtt N={n},MsgSz={size}B,QoS=1,DeviceInflight={inflight},Storage=file,runs={runs} (medians)")
    print(
        "  leafjet = device -> mosquitto -> bridge process -> leafjet agent;\n"
        "  bridge+ref = the same bridge into the reference's JetStream;\n"
        "  reference = device -> nats-server's own MQTT listener. ratio = x/reference."
    )
    print(
        f"{'figure':34s} {'leafjet':>10s} {'bridge+ref':>10s} {'reference':>10s}"
        f" {'lj/ref':>7s} {'br/ref':>7s}"
    )
    rows = [
        ("device -> stream (msgs/s)", "msgs_per_s", "{:,.0f}"),
        ("device PUBACKs (msgs/s)", "device_acks_per_s", "{:,.0f}"),
        ("time to store N (s)", "seconds", "{:.2f}"),
    ]
    for label, key, fmt in rows:
        a, b, r = getattr(lj, key), getattr(br, key), getattr(ref, key)
        print(
            f"{label:34s} {fmt.format(a):>10s} {fmt.format(b):>10s} {fmt.format(r):>10s}"
            f" {a / r if r else float('nan'):7.2f} {b / r if r else float('nan'):7.2f}"
        )
    print("CPU per message (us; device = this process: the paho device and the stream polling)")
    for role in ("device", "broker", "bridge", "server"):
        cells = [f.cpu_us.get(role) for f in (lj, br, ref)]
        print(f"  {role:32s}" + "".join(f" {'-' if c is None else f'{c:,.1f}':>10s}" for c in cells))
    return 0


# ---------------------------------------------------------------------- commands out (stream -> devices)


def _commands_via_bridge(tmp: Path, kind: str, n: int, size: int) -> MqttFigures:
    """N commands already in a stream -> the bridge's outbound route -> mosquitto -> one device.

    Timed from the first command the device receives to the last (bridge start-up excluded); CPU
    over the same interval. The bridge acks each command to the stream after mosquitto's PUBACK.
    """
    srv = start_server(kind, tmp / f"{kind}-server", jetstream=True)
    broker = Mosquitto(tmp / f"{kind}-mosquitto", free_port())
    broker.workdir.mkdir(parents=True)
    broker.start()
    bridge = None
    received = 0
    first = last = 0.0
    cpu0: dict[str, float] = {}
    pids: dict[str, int] = {}
    done = threading.Event()

    def on_message(*_a: object) -> None:
        nonlocal received, first, last, cpu0
        received += 1
        last = time.perf_counter()
        if received == 1:
            first, cpu0 = last, _cpu_snapshot(pids)
        if received == n:
            done.set()

    device = Client(CallbackAPIVersion.VERSION2, client_id=f"bench-commands-{broker.port}", protocol=MQTTv311)
    device.on_message = on_message
    try:
        device.connect("127.0.0.1", broker.port)
        device.subscribe("devices/#", 1)
        device.loop_start()

        async def fill() -> None:
            nc = await nats.connect(srv.url)
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="COMMANDS", subjects=["cmd.>"])
            payload = b"x" * size
            acks = [js.publish(f"cmd.devices.{i % 100}.set", payload) for i in range(n)]
            for i in range(0, n, 1000):
                await asyncio.gather(*acks[i : i + 1000])
            await nc.close()

        asyncio.run(fill())
        cfg = tmp / f"{kind}-commands.toml"
        cfg.write_text(
            "[[bridges.mqtt]]\n"
            f'url = "{broker.url}"\nclient_id = "leafjet-bench-commands"\nnats_url = "{srv.url}"\n'
            "max_inflight = 256\n"
            '[[bridges.mqtt.outbound]]\nstream = "COMMANDS"\nsubject_prefix = "cmd"\ndurable = "out"\n'
            "batch = 256\n"
        )
        bridge = subprocess.Popen(
            [sys.executable, "-m", "bridges.mqtt.cli", "--config", str(cfg), "--log-level", "error"],
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert broker.proc is not None
        pids.update({"bridge": bridge.pid, "server": srv.pid, "broker": broker.proc.pid})
        if not done.wait(max(300.0, n / 200)):
            raise TimeoutError(f"the device received {received} of {n} commands")
        cpu1 = _cpu_snapshot(pids)
        cpu_us = {role: (cpu1[role] - cpu0[role]) * 1e6 / n for role in cpu0}
        rate = (n - 1) / (last - first) if last > first else float("nan")
        return MqttFigures(rate, rate, last - first, cpu_us)
    finally:
        device.disconnect()
        device.loop_stop()
        if bridge is not None:
            _stop(bridge)
        broker.stop()
        srv.stop()


def run_mqtt_commands(n: int, size: int) -> int:
    """Commands out, into devices: the bridge fed by a leafjet agent and by the reference server.
    (The reference has no counterpart: its MQTT listener does not consume a stream into a broker.)"""
    if MOSQUITTO is None:
        print("mosquitto is not installed (apt-get install -y mosquitto mosquitto-clients)", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="leafjet-bench-mqtt-cmd-") as tmp_s:
        tmp = Path(tmp_s)
        lj = _commands_via_bridge(tmp, "leafjet", n, size)
        br = _commands_via_bridge(tmp, "reference", n, size)
    print(f"\nmqtt commands N={n},MsgSz={size}B,QoS=1 (stream -> bridge -> mosquitto -> device)")
    print(f"{'figure':34s} {'leafjet':>10s} {'bridge+ref':>10s}")
    print(f"{'commands delivered (msgs/s)':34s} {lj.msgs_per_s:10,.0f} {br.msgs_per_s:10,.0f}")
    print("CPU per message (us; device = this process: the paho device)")
    for role in ("device", "broker", "bridge", "server"):
        cells = [f.cpu_us.get(role) for f in (lj, br)]
        print(f"  {role:32s}" + "".join(f" {'-' if c is None else f'{c:,.1f}':>10s}" for c in cells))
    return 0
