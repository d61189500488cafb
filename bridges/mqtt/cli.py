"""``leafjet bridge mqtt --config FILE``: run every ``[[bridges.mqtt]]`` of FILE as a NATS client.

Exit codes: 0 stopped by SIGTERM/SIGINT, 1 runtime failure, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

import anyio

from core.errors import ConfigError

from .bridge import run_bridge
from .config import MqttBridgeConfig, load_file

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leafjet bridge mqtt", description="bridge MQTT brokers to JetStream")
    p.add_argument("--config", required=True, help="TOML file with [[bridges.mqtt]] tables")
    p.add_argument("--check-config", action="store_true", help="validate the config file and exit")
    p.add_argument(
        "--log-level",
        default=os.environ.get("LEAFJET_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
    )
    return p


async def _serve(configs: Sequence[MqttBridgeConfig]) -> None:
    async with anyio.create_task_group() as tg:
        for cfg in configs:
            await tg.start(run_bridge, cfg)
        print(f"leafjet mqtt bridge running ({len(configs)} broker(s))", flush=True)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                logging.getLogger("leafjet.bridge.mqtt").info("received %s; stopping", sig.name)
                tg.cancel_scope.cancel()
                return


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        configs = load_file(args.config)
    except ConfigError as e:
        print(f"leafjet: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.check_config:
        print(f"{args.config}: ok ({len(configs)} bridge(s))")
        return EXIT_OK
    try:
        anyio.run(_serve, configs, backend="asyncio", backend_options={"use_uvloop": _have_uvloop()})
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as e:
        logging.getLogger("leafjet.bridge.mqtt").exception("bridge failed: %s", e)
        return EXIT_RUNTIME
    return EXIT_OK


def _have_uvloop() -> bool:
    # As the agent does: uvloop (a dependency on Linux) when it is there, plain asyncio otherwise.
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
