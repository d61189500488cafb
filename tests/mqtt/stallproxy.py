"""A TCP proxy in front of a broker that can stall: it stops reading both ways, so TCP buffers fill and
neither side hears from the other, as with a hung broker or a black-holed link."""

from __future__ import annotations

import contextlib
import socket
import threading


class StallingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> StallingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                down, _ = self._listener.accept()
                up = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                return
            with self._lock:
                self._socks += [down, up]
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                self._flowing.wait()  # stalled: read nothing, so the sender's buffers fill up
                data = src.recv(65536)
                if not data or self._closed:
                    break
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
