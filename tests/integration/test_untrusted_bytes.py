"""Bytes that are not UTF-8 in what a stream stores: a subject and a Nats-Msg-Id. The reference
stores them; so does leafjet, and neither the stream nor its neighbours in the batch fail."""

from __future__ import annotations

import json
import socket
import time

import anyio
import pytest

from tests.support.jsapi import jetstream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def _replies(port: int, frames: bytes, count: int) -> list[bytes]:
    """Send ``frames`` after a CONNECT and SUB _R; the payloads of the first ``count`` replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(65536)
        s.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R 1\r\n' + frames)
        buf, out = b"", []
        deadline = time.monotonic() + 10
        while len(out) < count and time.monotonic() < deadline:
            buf += s.recv(65536)
            while True:
                head, sep, rest = buf.partition(b"\r\n")
                if not sep or not head.startswith(b"MSG _R 1 "):
                    break
                size = int(head.rsplit(b" ", 1)[1])
                if len(rest) < size + 2:
                    break
                out.append(rest[:size])
                buf = rest[size + 2 :]
        return out


async def test_a_subject_that_is_not_utf8_is_stored_and_read_back(js_server):
    async with jetstream(js_server) as (_, js):
        await js.add_stream(name="O", subjects=["orders.>"])
    hdrs = b"NATS/1.0\r\nNats-Msg-Id: \xff\xfe\r\n\r\n"
    hpub = b"HPUB orders.a _R %d %d\r\n%sx\r\n" % (len(hdrs), len(hdrs) + 1, hdrs)
    frames = b"PUB orders.\xff\xfe _R 1\r\nx\r\n" + hpub + hpub + b"PUB orders.ok _R 1\r\ny\r\n"
    acks = [json.loads(r) for r in await anyio.to_thread.run_sync(_replies, js_server.port, frames, 4)]
    assert acks == [
        {"stream": "O", "seq": 1},
        {"stream": "O", "seq": 2},
        {"stream": "O", "seq": 2, "duplicate": True},
        {"stream": "O", "seq": 3},
    ]
    async with jetstream(js_server) as (_, js):
        first = await js.get_msg("O", 1)
        assert first.subject == "orders.\ufffd\ufffd"  # JSON shows what is not UTF-8 as U+FFFD
        assert (await js.stream_info("O")).state.messages == 3
        assert (await js.publish("orders.after", b"z")).seq == 4, "the stream goes on taking publishes"
