"""The ``leafjet`` command.

Exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error, 3 start-up failure.
Flags and LEAFJET_* variables map one-to-one onto config fields; flags win over variables,
variables over the config file, the file over the defaults.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from core.errors import ConfigError, StartupError

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_STARTUP = 0, 1, 2, 3

# flag dest -> (config field, environment variable)
_OVERRIDES = {
    "host": ("host", "LEAFJET_HOST"),
    "port": ("port", "LEAFJET_PORT"),
    "data_dir": ("data_dir", "LEAFJET_DATA_DIR"),
    "server_name": ("server_name", "LEAFJET_SERVER_NAME"),
    "http_port": ("http_port", "LEAFJET_HTTP_PORT"),
}
_PORTS = ("port", "http_port")
DEFAULT_HUB_LEAF_PORT = 7422  # the reference's leaf port


def _leaf_port(args: argparse.Namespace) -> int | None:
    value = args.leaf_port
    if value is None and "LEAFJET_LEAF_PORT" in os.environ:
        text = os.environ["LEAFJET_LEAF_PORT"]
        if not text.isdigit():
            raise ConfigError("LEAFJET_LEAF_PORT", f"expected a port number, got {text!r}")
        value = int(text)
    if value is not None and not 0 <= value <= 65535:
        raise ConfigError("leaf_port", f"must be between 0 and 65535, got {value}")
    return value


AGENT_EPILOG = """\
precedence: a flag, then its LEAFJET_* variable, then the config file, then the default.

signals: SIGTERM or SIGINT stop the agent in order (stop accepting, flush and close the
clients, close the streams) and it exits 0. SIGHUP (--signal reload) reads the config file
again and applies users, permissions, TLS certificates, limits, debug/trace and bridges without
a restart; a change that needs one (host, port, data or JetStream settings) refuses the whole
reload with one log line, and the running config stays.

exit codes:
  0  clean exit
  1  runtime failure
  2  usage or configuration error (bad flag, invalid config, no data directory)
  3  start-up failure (port in use, data directory not writable or held by another agent)
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep the message to one line
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="leafjet", description="leafjet: NATS/JetStream-compatible edge-to-cloud streaming")
    p.add_argument("--version", action="version", version="leafjet 0.1.0")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser(
        "agent",
        help="run the leaf agent (a NATS server with JetStream on SQLite)",
        description="Run the leaf agent: a NATS server with JetStream, its streams in SQLite-WAL files;"
        " it dials its hubs as a leaf node ([[leafnodes.remotes]]) and may accept leafs of its own.",
        epilog=AGENT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_server_flags(a)
    h = sub.add_parser(
        "hub",
        help="run a hub (the same server, accepting leaf nodes on port 7422 by default)",
        description="Run a hub: the same server core as the agent, with the leaf-node listener on"
        f" (port {DEFAULT_HUB_LEAF_PORT} unless leafnodes.port or --leaf-port says otherwise)."
        " A [cluster] table in the config (name, listen or host/port, default 6222, routes ="
        ' ["nats-route://host:6222", ...], authorization, tls) joins this hub to the other servers'
        " of its cluster by routes: deploy/hub-cluster/ has three such configs.",
        epilog=AGENT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_server_flags(h)
    c = sub.add_parser("certs", help="generate development TLS certificates", add_help=False)
    c.add_argument("rest", nargs=argparse.REMAINDER)
    b = sub.add_parser("bridge", help="run a bridge as a NATS client: leafjet bridge mqtt --config FILE")
    b.add_argument("kind", choices=["mqtt"])
    b.add_argument("rest", nargs=argparse.REMAINDER)
    s = sub.add_parser(
        "spark", help="Spark jobs over streams: leafjet spark aggregate --help", add_help=False
    )
    s.add_argument("rest", nargs=argparse.REMAINDER)
    st = sub.add_parser(
        "stream",
        help="back a stream up to a folder and restore it: leafjet stream backup STREAM DIR, leafjet stream"
        " restore DIR (the folder `nats stream backup` writes)",
        add_help=False,
    )
    st.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def _add_server_flags(a: argparse.ArgumentParser) -> None:
    """The flags of the server roles (agent, hub): the same for both."""
    a.add_argument("--host", help="address to listen on (default 0.0.0.0; env LEAFJET_HOST)")
    a.add_argument(
        "--port", type=int, help="client port (default 4222; 0 picks a free port; env LEAFJET_PORT)"
    )
    a.add_argument(
        "--http-port",
        "-m",
        type=int,
        help="monitoring HTTP port: /varz, /connz, /jsz, /healthz, /metrics... (default off;"
        " env LEAFJET_HTTP_PORT)",
    )
    a.add_argument(
        "--data-dir",
        help="where streams are stored; required, here, in LEAFJET_DATA_DIR or as data_dir in the"
        " config. One agent at a time owns it",
    )
    a.add_argument("--server-name", help="server name reported in INFO (env LEAFJET_SERVER_NAME)")
    a.add_argument(
        "--leaf-port",
        type=int,
        help="accept leaf nodes on this port (leafnodes.port; 0 picks a free port; env LEAFJET_LEAF_PORT)",
    )
    a.add_argument("--config", help="TOML config file, nats-server's field names (env LEAFJET_CONFIG)")
    a.add_argument(
        "--check-config", metavar="FILE", help="validate a config file, print the verdict and exit"
    )
    a.add_argument(
        "--log-level",
        default=os.environ.get("LEAFJET_LOG_LEVEL"),
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr (env LEAFJET_LOG_LEVEL; default: debug when the config sets"
        " debug or trace, else info; the config's choice follows a reload, this one does not)",
    )
    a.add_argument(
        "--signal",
        metavar="SIGNAL[=PID]",
        help="send a signal to a running agent and exit: reload (SIGHUP: apply the config file"
        " again), stop or term (SIGTERM), quit (SIGINT). The agent is PID, or the one that holds"
        " --data-dir (its pid is in <data-dir>/LOCK)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["certs"]:
        from core.certs import main as certs_main

        return certs_main(args_list[1:])
    if args_list[:2] == ["bridge", "mqtt"]:
        from bridges.mqtt.cli import main as mqtt_main

        return mqtt_main(args_list[2:])
    if args_list[:1] == ["spark"]:
        from bridges.spark.cli import main as spark_main

        return spark_main(args_list[1:])  # e.g. ["aggregate", "--servers", ...]
    if args_list[:1] == ["stream"]:
        from agent.backup import main as stream_main

        return stream_main(args_list[1:])
    try:
        args = _build_parser().parse_args(args_list)
    except SystemExit as e:
        return int(e.code or 0)
    if args.command in ("agent", "hub"):
        return _agent(args)
    return EXIT_USAGE


def _fail(code: int, message: str) -> int:
    print(f"leafjet: {message}", file=sys.stderr)
    return code


def _agent(args: argparse.Namespace) -> int:
    from agent.config import AgentConfig, load_agent_config

    logging.basicConfig(
        level=(args.log_level or "info").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.signal:
        return _send_signal(args)
    config_path = args.config or os.environ.get("LEAFJET_CONFIG")

    def load() -> AgentConfig:
        """The config as given at start: the file (read again on reload), then flags and variables."""
        agent_cfg = load_agent_config(config_path) if config_path else AgentConfig()
        server = _apply_overrides(agent_cfg.server, args)
        leaf_port = _leaf_port(args)
        if leaf_port is None and args.command == "hub" and server.leafnodes.port is None:
            leaf_port = DEFAULT_HUB_LEAF_PORT
        if leaf_port is not None:
            server = server.replace(leafnodes=replace(server.leafnodes, port=leaf_port))
        if server.jetstream.column_blocks is None:  # analytics read hubs: blocks there only
            server = server.replace(jetstream=replace(server.jetstream, column_blocks=args.command == "hub"))
        return replace(agent_cfg, server=server)

    try:
        if args.check_config:
            load_agent_config(args.check_config)
            print(f"{args.check_config}: configuration is valid")
            return EXIT_OK
        agent_cfg = load()
        cfg = agent_cfg.server
    except ConfigError as e:
        return _fail(EXIT_USAGE, f"invalid configuration: {e}")
    if not cfg.data_dir:
        return _fail(EXIT_USAGE, "a data directory is required (--data-dir, LEAFJET_DATA_DIR or data_dir)")
    from agent.app import run_agent, set_log_level
    from core.malloc_tuning import tune_malloc

    set_log_level(cfg, fixed=args.log_level)
    tune_malloc()
    try:
        run_agent(cfg, agent_cfg.mqtt, load, role=args.command)
    except StartupError as e:
        return _fail(EXIT_STARTUP, f"cannot start: {e}")
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_OK


_SIGNALS = {"reload": signal.SIGHUP, "stop": signal.SIGTERM, "term": signal.SIGTERM, "quit": signal.SIGINT}


def _send_signal(args: argparse.Namespace) -> int:
    """``--signal NAME[=PID]``, as the reference's: the pid given, or the data directory's holder."""
    name, _, pid_text = args.signal.partition("=")
    sig = _SIGNALS.get(name)
    if sig is None:
        return _fail(EXIT_USAGE, f"unknown signal {name!r} (use one of: {', '.join(_SIGNALS)})")
    if pid_text:
        if not pid_text.isdigit():
            return _fail(EXIT_USAGE, f"not a process id: {pid_text!r}")
        pid = int(pid_text)
    else:
        from core.datadir import holder_pid

        data_dir = args.data_dir or os.environ.get("LEAFJET_DATA_DIR")
        if not data_dir:
            return _fail(EXIT_USAGE, "--signal needs a process id (reload=PID) or the agent's --data-dir")
        found = holder_pid(Path(data_dir))
        if found is None:
            return _fail(EXIT_RUNTIME, f"no running agent holds {data_dir}")
        pid = found
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return _fail(EXIT_RUNTIME, f"no process {pid}")
    except PermissionError:
        return _fail(EXIT_RUNTIME, f"not allowed to signal process {pid}")
    print(f"sent {signal.Signals(sig).name} to {pid}")
    return EXIT_OK


def _apply_overrides(cfg, args: argparse.Namespace):
    changes = {}
    for dest, (field, env) in _OVERRIDES.items():
        value = getattr(args, dest, None)
        if value is None and env in os.environ:
            value = os.environ[env]
            if field in _PORTS:
                try:
                    value = int(value)
                except ValueError:
                    raise ConfigError(env, f"expected a port number, got {value!r}") from None
        if value is not None:
            changes[field] = value
    for field in _PORTS:
        if field in changes and not 0 <= changes[field] <= 65535:
            raise ConfigError(field, f"must be between 0 and 65535, got {changes[field]}")
    return cfg.replace(**changes) if changes else cfg


if __name__ == "__main__":
    raise SystemExit(main())
