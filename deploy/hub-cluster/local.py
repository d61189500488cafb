"""Run the three-server hub cluster of deploy/hub-cluster/ on this machine.

Each ``nN.toml`` is read as written for its VM, and only its addresses are moved to this host:
the cluster listens on 127.0.0.1 with a free port per server, the routes point there, and the
client, leaf and monitoring ports are free ones too. Three ``leafjet hub`` processes start (each
with its own data directory under a temporary directory), the script waits until each has a
route to the other two (``/routez``), prints where to connect, and stops them all on Ctrl-C.

    python deploy/hub-cluster/local.py            # run until Ctrl-C
    python deploy/hub-cluster/local.py --smoke    # start, check a request across servers, stop
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from tests.support.servers import RunningServer, free_port, start_leafjet, wait_until  # noqa: E402

NODES = ("n1", "n2", "n3")


def local_configs(workdir: Path) -> list[dict[str, Any]]:
    """The three configs with every address moved to 127.0.0.1 and free ports."""
    cluster_ports = [free_port() for _ in NODES]
    configs = []
    for i, node in enumerate(NODES):
        cfg = tomllib.loads((HERE / f"{node}.toml").read_text())
        cfg["port"] = free_port()
        cfg["http_port"] = free_port()
        cfg["cluster"]["listen"] = f"127.0.0.1:{cluster_ports[i]}"
        cfg["cluster"]["routes"] = [f"nats-route://127.0.0.1:{p}" for p in cluster_ports]
        cfg["jetstream"]["store_dir"] = str(workdir / node / "jetstream")
        cfg["leafnodes"]["port"] = free_port()
        cfg["leafnodes"]["host"] = "127.0.0.1"
        configs.append(cfg)
    return configs


def routes_of(cfg: dict[str, Any]) -> set[str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cfg['http_port']}/routez", timeout=2) as r:
            return {route["remote_name"] for route in json.loads(r.read())["routes"]}
    except OSError:
        return set()


def start(workdir: Path) -> tuple[list[RunningServer], list[dict[str, Any]]]:
    configs = local_configs(workdir)
    servers: list[RunningServer] = []
    try:
        for node, cfg in zip(NODES, configs, strict=True):
            servers.append(start_leafjet(workdir / node, dict(cfg), role="hub"))
        names = {cfg["server_name"] for cfg in configs}
        wait_until(
            lambda: all(routes_of(cfg) == names - {cfg["server_name"]} for cfg in configs),
            60,
            interval=0.2,
            what="a full mesh of three routes",
        )
    except BaseException:
        for srv in servers:
            srv.stop()
        raise
    return servers, configs


async def smoke(configs: list[dict[str, Any]]) -> None:
    """A request from a client of n1, answered by a client of n3."""
    import nats

    user = next(iter(configs[0]["accounts"]["FLEET"]["users"]))
    urls = [f"nats://{user['user']}:{user['password']}@127.0.0.1:{cfg['port']}" for cfg in configs]
    a, c = await nats.connect(urls[0]), await nats.connect(urls[2])

    async def answer(msg: Any) -> None:
        await c.publish(msg.reply, b"answered by hub-3")

    await c.subscribe("smoke.check", cb=answer)
    await c.flush()
    for _ in range(100):
        try:
            reply = await a.request("smoke.check", b"", timeout=1)
            print(f"hub-1 -> hub-3: {reply.data.decode()}")
            break
        except Exception:  # interest still on its way: ask again
            await asyncio.sleep(0.1)
    else:
        raise SystemExit("no answer across the cluster")
    await a.close()
    await c.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="start, check a request across servers, stop")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="leafjet-hub-cluster-") as tmp:
        servers, configs = start(Path(tmp))
        try:
            for cfg in configs:
                print(
                    f"{cfg['server_name']}: nats://127.0.0.1:{cfg['port']}  routes "
                    f"{cfg['cluster']['listen']}  leafs 127.0.0.1:{cfg['leafnodes']['port']}  "
                    f"monitoring http://127.0.0.1:{cfg['http_port']}/routez",
                    flush=True,
                )
            if args.smoke:
                asyncio.run(smoke(configs))
                return 0
            print("cluster ready; Ctrl-C stops it", flush=True)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            for srv in servers:
                srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
