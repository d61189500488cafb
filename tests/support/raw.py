"""A raw socket client: send protocol bytes, collect what the server answers and whether it closed."""

from __future__ import annotations

import socket
import time


def exchange(
    port: int,
    data: bytes,
    *,
    connect: bytes | None = b'CONNECT {"verbose":false,"pedantic":false}\r\n',
    quiet: float = 0.4,
    timeout: float = 5.0,
) -> tuple[bytes, bool]:
    """Return (bytes received after INFO, closed by server).

    Reads until the server closes, or until nothing arrives for ``quiet`` seconds.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        info = b""
        while not info.endswith(b"\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                return b"", True
            info += chunk
        assert info.startswith(b"INFO "), info
        s.sendall((connect or b"") + data)
        out = b""
        s.settimeout(quiet)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return out, False
            except ConnectionResetError:
                return out, True
            if not chunk:
                return out, True
            out += chunk
        return out, False
