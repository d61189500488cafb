"""systemd integration: readiness and stopping notifications over $NOTIFY_SOCKET (sd_notify).

Written from the protocol's documentation: a datagram of ``KEY=VALUE`` lines to the unix socket
named by NOTIFY_SOCKET (a leading ``@`` means the abstract namespace). No-op outside systemd.
"""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError:
        return False
    return True
