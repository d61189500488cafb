"""A NATS server that misbehaves on purpose, for the JVM reader's bad-input tests.

A real listening socket on 127.0.0.1 and a thread per connection; ``behave(conn)`` scripts what the
server says. ``Scripted`` speaks just enough of the client protocol for a reader to get to its
first bulk request (INFO, PONG to the handshake's PING, STREAM.INFO answered) and hands every
``$JS.API.LEAFJET.READ.`` request to a callback that writes whatever it likes back.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

INFO = {
    "server_id": "FAKE",
    "server_name": "fake",
    "version": "2.10.0",
    "go": "python3 leafjet/0",
    "host": "127.0.0.1",
    "port": 0,
    "headers": True,
    "max_payload": 1048576,
    "proto": 1,
}


class FakeServer:
    """Accepts connections until closed; each one runs ``behave(conn)`` in a daemon thread."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self._behave = behave
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"nats://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client hung up: what most scripts end with
            self._behave(conn)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for c in self._conns:
            c.close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def info_line(**changes: Any) -> bytes:
    return b"INFO " + json.dumps({**INFO, **changes}).encode() + b"\r\n"


class Scripted:
    """A protocol loop: ``on_read(conn, reply_subject, sid, body)`` answers each bulk read request."""

    def __init__(self, on_read: Callable[[socket.socket, str, str, bytes], None], last_seq: int = 10) -> None:
        self.on_read = on_read
        self.last_seq = last_seq

    def __call__(self, conn: socket.socket) -> None:
        conn.sendall(info_line())
        f = conn.makefile("rb")
        sid = "1"
        while line := f.readline():
            words = line.decode().split()
            if not words:
                continue
            op = words[0].upper()
            if op == "PING":
                conn.sendall(b"PONG\r\n")
            elif op == "SUB":
                sid = words[-1]
            elif op == "PUB":
                subject, reply, size = words[1], words[2], int(words[3])
                body = f.read(size + 2)[:size]
                if subject.startswith("$JS.API.STREAM.INFO."):
                    answer = json.dumps(
                        {"config": {}, "state": {"first_seq": 1, "last_seq": self.last_seq, "messages": 10}}
                    ).encode()
                    head = b"MSG %s %s %d\r\n" % (reply.encode(), sid.encode(), len(answer))
                    conn.sendall(head + answer + b"\r\n")
                elif subject.startswith("$JS.API.LEAFJET.READ."):
                    self.on_read(conn, reply, sid, body)
