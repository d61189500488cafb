"""A bare NATS responder: the least any Python server can do for a JetStream publish.

    python -m bench.responder [--port P]

It answers every publish that carries a reply subject with a PubAck (``{"stream":…,"seq":n}``)
sent to that reply, at once, from the socket callback: no routing table, no stream, no store, no
task switch, one socket write per read. nats-py's ``js.publish`` and ``kv.put`` accept its answer.
Measured beside the reference and leafjet (``python -m bench putfloor``), its round trip is the
floor set by the client, the loopback and one read and one write on this machine: what is left of
a server's round trip above it is the server's own work.

Speaks only what nats-py needs for that: INFO, CONNECT, PING, SUB (to learn the inbox's sid),
PUB and HPUB. Everything else is ignored. Not a server: a measuring instrument.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

INFO = (
    b'INFO {"server_id":"RESPONDER","server_name":"responder","version":"2.15.1","proto":1,'
    b'"headers":true,"max_payload":1048576,"jetstream":true}\r\n'
)


class _Responder(asyncio.Protocol):
    def __init__(self) -> None:
        self._buf = b""
        self._inboxes: list[tuple[bytes, bytes]] = []  # (subscribed subject less its "*", sid)
        self._seq = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, so no isinstance narrowing
        self._transport: asyncio.Transport = transport  # type: ignore[assignment]
        self._transport.write(INFO)

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos = 0
        while (eol := buf.find(b"\r\n", pos)) >= 0:
            line = buf[pos:eol]
            op = line[:4].upper()
            if op in (b"PUB ", b"HPUB"):
                args = line.split()
                end = eol + 2 + int(args[-1]) + 2
                if end > len(buf):
                    break  # the payload is still on its way
                pos = end
                reply = args[2] if len(args) == (4 if op == b"PUB " else 5) else None
                if reply is not None:
                    out.append(self._puback(reply))
                continue
            pos = eol + 2
            if op == b"PING":
                out.append(b"PONG\r\n")
            elif op == b"SUB ":
                args = line.split()
                self._inboxes.append((args[1].rstrip(b"*>"), args[-1]))
        self._buf = buf[pos:]
        if out:
            self._transport.write(b"".join(out))

    def _puback(self, reply: bytes) -> bytes:
        self._seq += 1
        body = b'{"stream":"RESPONDER","seq":%d}' % self._seq
        for prefix, sid in self._inboxes:
            if reply.startswith(prefix):
                return b"MSG %s %s %d\r\n%s\r\n" % (reply, sid, len(body), body)
        return b""  # nobody listens on that reply: nothing to send


async def _serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Responder, "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    print(f"responder listening on nats://127.0.0.1:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.responder")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import uvloop  # the loop leafjet's agent runs on, so the floor is comparable

        uvloop.run(_serve(args.port))
    except ImportError:
        asyncio.run(_serve(args.port))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
