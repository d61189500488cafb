"""Helpers for tests/integration/test_leaf_security.py: hub and leaf servers of either kind
described once in the reference's config names, /leafz polling, and a raw leaf-port peer.

Both sides run JetStream in their own domain (HUB on the hub, EDGE on the leaf), as a real
deployment would; a leafjet server gets TOML, the reference the same dict as JSON.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.servers import RunningServer, free_port, start_leafjet, start_reference, wait_until

HUB_DOMAIN = "HUB"
EDGE_DOMAIN = "EDGE"


def start(kind: str, workdir: Path, config: dict[str, Any], *, debug: bool = False) -> RunningServer:
    """Start ``kind`` ("leafjet" or "reference") with ``config`` plus a monitoring port.

    The monitoring port is picked here and bound by the server a moment later: a test running
    beside this one (pytest -n) may take it in between. Then another is picked."""
    args = ("--log-level", "debug") if debug else ()
    for attempt in range(3):
        cfg = {"http_port": free_port(), **config}
        where = workdir if attempt == 0 else workdir.with_name(f"{workdir.name}-{attempt}")
        try:
            if kind == "reference":
                return start_reference(where, cfg, jetstream=True)
            return start_leafjet(where, cfg, extra_args=args)
        except RuntimeError as e:
            if "http_port" in config or "in use" not in str(e).lower() or attempt == 2:
                raise
    raise AssertionError("unreachable")


def hub_config(domain: str = HUB_DOMAIN, *, leaf_port: int, **leafnodes: Any) -> dict[str, Any]:
    """A hub: JetStream in ``domain`` and a leaf listener on ``leaf_port`` with ``leafnodes``
    (authorization, tls, ...)."""
    return {
        "server_name": "hub",
        "jetstream": {"domain": domain},
        "leafnodes": {"port": leaf_port, **leafnodes},
    }


def leaf_config(*remotes: dict[str, Any], name: str = "edge", domain: str = EDGE_DOMAIN) -> dict[str, Any]:
    """A leaf: JetStream in ``domain`` and one ``leafnodes.remotes`` entry per ``remotes``."""
    return {
        "server_name": name,
        "jetstream": {"domain": domain},
        "leafnodes": {"remotes": list(remotes)},
    }


def http_json(server: RunningServer, path: str) -> dict[str, Any]:
    port = server.config["http_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def leafz(server: RunningServer) -> dict[str, Any]:
    return http_json(server, "/leafz")


def links(server: RunningServer) -> list[dict[str, Any]]:
    return leafz(server).get("leafs") or []


def wait_links(server: RunningServer, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Wait until ``server`` has exactly ``count`` leaf links; they."""

    def check() -> list[dict[str, Any]] | None:
        found = links(server)
        return found if len(found) == count else None

    if count == 0:
        wait_until(lambda: not links(server), timeout, what=f"no leaf links on {server.kind}")
        return []
    return wait_until(check, timeout, what=f"{count} leaf link(s) on {server.kind}")


def wait_log(server: RunningServer, text: str, timeout: float = 10.0) -> str:
    """Wait until ``text`` appears in ``server``'s log; the log."""
    return wait_until(lambda: text in server.log() and server.log(), timeout, what=f"{text!r} in the log")


class RawLeaf:
    """A hand-driven peer on a leaf port: reads the INFO, then sends whatever a test says."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        line = self.read_line()
        assert line.startswith(b"INFO "), line
        self.info: dict[str, Any] = json.loads(line[5:])

    def read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, **fields: Any) -> None:
        opts = {"name": "raw", "headers": True, "protocol": 1, "compress_mode": "off", **fields}
        self.send(b"CONNECT " + json.dumps(opts).encode() + b"\r\n")

    def until_closed(self, timeout: float = 5.0) -> tuple[bytes, bool]:
        """Everything received until the server closes (True) or ``timeout`` passes (False)."""
        out, self.buf = self.buf, b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            except (ConnectionResetError, BrokenPipeError):
                return out, True
            if not chunk:
                return out, True
            out += chunk
        return out, False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawLeaf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
