"""The bulk read API (``$JS.API.LEAFJET.READ.<stream>``) against a real leafjet server, with
stock nats-py: ranges, filters, the long poll, deleted ranges, bounds and errors. The reference
answers it as any unknown API subject (400 / 10003): what a reader falls back on."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import nats.errors
import pytest

from core.protocol.readframe import decode_frame, decompress_frame
from tests.support.fill import fill_stream
from tests.support.jsapi import api, jetstream
from tests.support.servers import RunningServer, start_server
from tests.support.streams import create_stream as create
from tests.support.streams import stored_messages, wait_msgs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

READ = "$JS.API.LEAFJET.READ."


@pytest.fixture
def lj(tmp_path: Path) -> Iterator[RunningServer]:
    # column blocks as on a hub, where analytics read (an agent has none by default)
    srv = start_server("leafjet", tmp_path / "lj", {"jetstream": {"column_blocks": True}}, jetstream=True)
    try:
        yield srv
    finally:
        srv.stop()


async def read(nc: Any, stream: str, timeout: float = 10, **body: Any) -> tuple[dict[str, str], Any]:
    """One read: the reply's headers, and its decoded frame's rows (or the error JSON)."""
    body.setdefault("v", 1)
    msg = await nc.request(READ + stream, json.dumps(body).encode(), timeout=timeout)
    if not msg.headers or "Leafjet-Read" not in msg.headers:
        return {}, json.loads(msg.data)
    data = msg.data
    if msg.headers.get("Leafjet-Read-Encoding") == "zstd":
        data = decompress_frame(data)
    return msg.headers, list(decode_frame(data).rows())


def span(headers: dict[str, str]) -> tuple[int, int, int]:
    return tuple(int(headers[k]) for k in ("Leafjet-Read-First", "Leafjet-Read-Last", "Leafjet-Stream-Last"))  # type: ignore[return-value]


async def fill(js: Any, n: int, subject: str = "orders.{i}", size: int = 10) -> None:
    for i in range(n):
        await js.publish(subject.format(i=i % 3), (b"%05d" % i).ljust(size, b"."))


async def test_a_read_returns_the_range_with_sequences_timestamps_and_identity(lj):
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "ORDERS", "subjects": ["orders.>"]})
        await js.publish("orders.a", b"one", headers={"X-K": "v"})
        await fill(js, 9)
        h, rows = await read(nc, "ORDERS", seq=1, max_msgs=4)
        assert span(h) == (1, 4, 10)
        assert [r[0] for r in rows] == [1, 2, 3, 4]
        _seq, subject, headers, data, ts = rows[0]
        assert (subject, data) == ("orders.a", b"one")
        assert headers is not None and b"X-K: v\r\n" in headers
        assert rows[1][2] is None
        got = await api(nc, "$JS.API.STREAM.MSG.GET.ORDERS", {"seq": 1})
        assert got["message"]["time"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(ts / 1e9)))
        # the identity is the one a consumer create answers
        create_reply = await nc.request(
            "$JS.API.CONSUMER.CREATE.ORDERS",
            json.dumps(
                {"stream_name": "ORDERS", "config": {"direct": True, "deliver_subject": "x.y"}}
            ).encode(),
        )
        assert create_reply.headers["Nats-Stream-Identity"] == h["Nats-Stream-Identity"]
        h, rows = await read(nc, "ORDERS", seq=5)
        assert span(h) == (5, 10, 10) and [r[0] for r in rows] == list(range(5, 11))
        h, rows = await read(nc, "ORDERS", seq=11)
        assert span(h) == (11, 10, 10) and rows == []


async def test_deleted_and_filtered_ranges_are_covered_so_the_next_read_starts_after_them(lj):
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "S", "subjects": ["s.>"]})
        for i in range(1, 21):
            await js.publish("s.even" if i % 2 == 0 else "s.odd", b"%d" % i)
        for seq in (2, 3, 4, 18, 19, 20):
            assert (await api(nc, "$JS.API.STREAM.MSG.DELETE.S", {"seq": seq})).get("success")
        h, rows = await read(nc, "S", seq=1)
        assert [r[0] for r in rows] == [1, *range(5, 18)] and span(h) == (1, 20, 20)
        h, rows = await read(nc, "S", seq=1, filter=["s.even"])
        assert [r[0] for r in rows] == [6, 8, 10, 12, 14, 16] and span(h)[1] == 20
        h, rows = await read(nc, "S", seq=1, filter=["s.even", "s.nothing"], max_msgs=2)
        assert [r[0] for r in rows] == [6, 8] and span(h)[1] == 8
        h, rows = await read(nc, "S", seq=1, filter=["s.*"], max_msgs=3)
        assert [r[0] for r in rows] == [1, 5, 6] and span(h)[1] == 6
        await api(nc, "$JS.API.STREAM.PURGE.S", {})
        h, rows = await read(nc, "S", seq=1)
        assert rows == [] and span(h) == (1, 20, 20)


async def test_max_bytes_bounds_the_reply_but_one_large_message_still_goes(lj):
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "B", "subjects": ["b"]})
        await fill(js, 20, subject="b", size=1000)
        h, rows = await read(nc, "B", seq=1, max_bytes=3000)
        assert len(rows) == 2 and span(h)[:2] == (1, 2)
        h, rows = await read(nc, "B", seq=3, max_bytes=10)
        assert len(rows) == 1 and span(h)[:2] == (3, 3)
        # max_bytes is clamped to what the server's max_payload allows
        h, rows = await read(nc, "B", seq=1, max_bytes=1 << 40)
        assert len(rows) == 20


# a small reply is built on the event loop, one past bulk_read.OFFLOAD_BYTES on a worker thread
@pytest.mark.parametrize(("n", "size"), [(50, 500), (400, 1000)], ids=["small", "large"])
async def test_a_compressed_frame_decodes_to_the_same_rows(lj, n, size):
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "Z", "subjects": ["z"]})
        await fill(js, n, subject="z", size=size)
        h1, plain = await read(nc, "Z", seq=1)
        h2, packed = await read(nc, "Z", seq=1, compress="zstd")
        assert h2["Leafjet-Read-Encoding"] == "zstd" and "Leafjet-Read-Encoding" not in h1
        assert plain == packed and len(plain) == n


async def test_a_long_poll_is_answered_when_a_message_arrives(lj):
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "W", "subjects": ["w"]})
        await js.publish("w", b"1")
        result: list[Any] = []

        async def poll() -> None:
            result.append(await read(nc, "W", seq=2, wait_ms=30_000, timeout=40))

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            # the request is parked before the publish: the API still serves others meanwhile
            await anyio.sleep(0.3)
            assert (await api(nc, "$JS.API.STREAM.INFO.W"))["state"]["messages"] == 1
            assert not result
            await js.publish("w", b"2")
        h, rows = result[0]
        assert [(r[0], r[3]) for r in rows] == [(2, b"2")] and span(h)[:2] == (2, 2)


async def test_a_long_poll_that_runs_out_is_answered_empty(lj):
    async with jetstream(lj) as (nc, _js):
        await create(nc, {"name": "W", "subjects": ["w"]})
        h, rows = await read(nc, "W", seq=1, wait_ms=200)
        assert rows == [] and span(h) == (1, 0, 0)


async def test_a_long_poll_ends_when_its_stream_is_deleted(lj):
    async with jetstream(lj) as (nc, _js):
        await create(nc, {"name": "W", "subjects": ["w"]})
        result: list[Any] = []

        async def poll() -> None:
            result.append(await read(nc, "W", seq=1, wait_ms=30_000, timeout=40))

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await anyio.sleep(0.3)
            assert (await api(nc, "$JS.API.STREAM.DELETE.W"))["success"]
        assert result[0][1]["error"]["err_code"] == 10059


async def test_a_followed_read_sends_each_commit_as_another_reply_to_the_one_request(lj):
    """``follow``: one request, a reply per commit, each starting where the last ended, with
    ``Leafjet-Read-More`` on all but the request's last: the one that reaches the follow count,
    or an empty one when the request's time runs out."""
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "W", "subjects": ["w"]})
        await js.publish("w", b"1")
        replies = await nc.subscribe("_INBOX.follow.>")

        async def next_reply() -> tuple[tuple[int, int, int], str | None, list[int]]:
            msg = await replies.next_msg(timeout=20)
            h = msg.headers or {}
            return span(h), h.get("Leafjet-Read-More"), [r[0] for r in decode_frame(msg.data).rows()]

        body = {"v": 1, "seq": 1, "wait_ms": 30_000, "follow": 2}
        await nc.publish(READ + "W", json.dumps(body).encode(), reply="_INBOX.follow.1")
        assert await next_reply() == ((1, 1, 1), "1", [1])
        await js.publish("w", b"2")  # committed after the reply: the request's second (and last)
        assert await next_reply() == ((2, 2, 2), None, [2])

        body = {"v": 1, "seq": 3, "wait_ms": 1000, "follow": 10}
        await nc.publish(READ + "W", json.dumps(body).encode(), reply="_INBOX.follow.2")
        await js.publish("w", b"3")
        assert await next_reply() == ((3, 3, 3), "1", [3])
        # nothing more within the request's time: it ends with an empty reply, no More
        assert await next_reply() == ((4, 3, 3), None, [])


@pytest.mark.parametrize(
    ("body", "err_code"),
    [
        (b"not json", 10025),
        (b'{"seq": 1}', 10003),  # no version
        (b'{"v": 2, "seq": 1}', 10003),
        (b'{"v": 1}', 10003),  # no seq
        (b'{"v": 1, "seq": 0}', 10003),
        (b'{"v": 1, "seq": "1"}', 10003),
        (b'{"v": 1, "seq": 1, "max_msgs": 0}', 10003),
        (b'{"v": 1, "seq": 1, "max_bytes": -5}', 10003),
        (b'{"v": 1, "seq": 1, "wait_ms": -1}', 10003),
        (b'{"v": 1, "seq": 1, "filter": "a"}', 10003),
        (b'{"v": 1, "seq": 1, "filter": ["a..b"]}', 10003),
        (b'{"v": 1, "seq": 1, "compress": "gzip"}', 10003),
        (b'{"v": 1, "seq": 1, "follow": -1}', 10003),
        (b'{"v": 1, "seq": 1, "follow": true}', 10003),
        (b"[1]", 10003),
    ],
)
async def test_bad_requests_get_the_apis_errors(lj, body, err_code):
    async with jetstream(lj) as (nc, _js):
        await create(nc, {"name": "E", "subjects": ["e"]})
        msg = await nc.request(READ + "E", body, timeout=5)
        reply = json.loads(msg.data)
        assert reply["error"]["err_code"] == err_code, reply
        assert reply["type"] == "io.nats.jetstream.api.v1.leafjet_read_response"
        # the server goes on serving
        _h, rows = await read(nc, "E", seq=1)
        assert rows == []


async def test_an_unknown_stream_is_10059(lj):
    async with jetstream(lj) as (nc, _js):
        _h, reply = await read(nc, "NOPE", seq=1)
        assert reply["error"]["err_code"] == 10059


async def test_the_reference_does_not_answer_with_a_frame(tmp_path: Path):
    """What a source worker takes as "not leafjet". Measured: a client of the reference hears
    nothing (its API answers unknown subjects only to some connection kinds), and across a
    leaf link the subject has no responders (a reference leaf exports no interest in it);
    a 400 / 10003 reply is possible too. The worker falls back on each of the three."""
    srv = start_server("reference", tmp_path / "ref", jetstream=True)
    try:
        async with jetstream(srv) as (nc, _js):
            await create(nc, {"name": "ORDERS", "subjects": ["orders.>"]})
            try:
                _h, reply = await read(nc, "ORDERS", seq=1, timeout=2)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                return
            assert reply["error"]["err_code"] == 10003
    finally:
        srv.stop()


async def test_a_source_starts_over_when_its_upstream_is_made_again(lj):
    """Bulk mode sees the upstream's identity change in a reply and resets the source, as the
    consumer path does on 10225: the new stream's messages are taken from its first one."""
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for i in range(5):
            await js.publish("up.a", b"old%d" % i)
        await create(nc, {"name": "AGG", "sources": [{"name": "UP"}]})
        await wait_msgs(nc, "AGG", 5)
        assert (await api(nc, "$JS.API.STREAM.DELETE.UP"))["success"]
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for i in range(3):
            await js.publish("up.a", b"new%d" % i)
        await wait_msgs(nc, "AGG", 8, timeout=60)
        got = [m.data for m in await stored_messages(nc, "AGG")]
        assert got == [b"old0", b"old1", b"old2", b"old3", b"old4", b"new0", b"new1", b"new2"]


async def test_sources_and_mirrors_of_a_leafjet_stream_read_it_in_bulk(lj):
    """No upstream consumer is made: both read through the API. The mirror keeps the upstream's
    sequences and timestamps, with what the upstream deleted as deleted sequences."""
    async with jetstream(lj) as (nc, js):
        await create(nc, {"name": "UP", "subjects": ["up.>"]})
        for i in range(10):
            await js.publish(f"up.{i % 2}", b"%d" % i)
        for seq in (3, 4, 10):
            assert (await api(nc, "$JS.API.STREAM.MSG.DELETE.UP", {"seq": seq})).get("success")
        await js.publish("up.0", b"10")
        await create(nc, {"name": "M", "mirror": {"name": "UP"}})
        await create(nc, {"name": "S", "sources": [{"name": "UP", "filter_subject": "up.1"}]})
        await wait_msgs(nc, "M", 8)
        await wait_msgs(nc, "S", 3)
        names = await api(nc, "$JS.API.CONSUMER.NAMES.UP")
        assert not names["consumers"], names
        up, mirror = await stored_messages(nc, "UP"), await stored_messages(nc, "M")
        assert [(m.seq, m.subject, m.data, m.time) for m in mirror] == [
            (m.seq, m.subject, m.data, m.time) for m in up
        ]
        m_state = (await api(nc, "$JS.API.STREAM.INFO.M"))["state"]
        assert (m_state["first_seq"], m_state["last_seq"], m_state["num_deleted"]) == (1, 11, 3)
        assert [m.data for m in await stored_messages(nc, "S")] == [b"1", b"5", b"7"]


async def test_a_message_too_large_for_a_reply_is_10054_and_a_source_takes_the_consumer_path(
    tmp_path: Path,
):
    """The reply must fit the link's max_payload: a message that alone does not (max_payload
    less 4 KiB) is refused by name, and a source reads on through the consumer path."""
    srv = start_server("leafjet", tmp_path / "small", {"max_payload": 65536}, jetstream=True)
    try:
        async with jetstream(srv) as (nc, js):
            await create(nc, {"name": "UP", "subjects": ["up"]})
            sizes = [10, 63_000, 10]
            for size in sizes:
                await js.publish("up", b"x" * size)
            _h, reply = await read(nc, "UP", seq=2)
            assert reply["error"]["err_code"] == 10054
            h, rows = await read(nc, "UP", seq=1)
            assert [r[0] for r in rows] == [1] and span(h)[1] == 1  # up to the large one
            await create(nc, {"name": "AGG", "sources": [{"name": "UP"}]})
            await wait_msgs(nc, "AGG", 3, timeout=30)
            assert [len(m.data) for m in await stored_messages(nc, "AGG")] == sizes
    finally:
        srv.stop()


async def test_a_following_read_catches_up_in_replies_of_one_ceiling_each_within_its_budget(
    tmp_path: Path,
):
    """A following request whose ``max_bytes`` is beyond the reply ceiling (max_payload less
    4 KiB) gets a run of replies, each within the ceiling and starting where the one before
    ended, with ``Leafjet-Read-More`` on all but the last: the one that spends the budget. A
    request that does not follow is still one reply. A source reads through such runs."""
    srv = start_server("leafjet", tmp_path / "small", {"max_payload": 65536}, jetstream=True)
    try:
        async with jetstream(srv) as (nc, js):
            await create(nc, {"name": "UP", "subjects": ["up"]})
            for i in range(200):
                await js.publish("up", (b"%05d" % i).ljust(1000, b"."))
            h, rows = await read(nc, "UP", seq=1, max_bytes=150_000)
            assert "Leafjet-Read-More" not in h and 0 < len(rows) < 65536 // 1000

            replies = await nc.subscribe("_INBOX.catchup.>")
            body = {"v": 1, "seq": 1, "max_bytes": 150_000, "wait_ms": 10_000, "follow": 50}
            await nc.publish(READ + "UP", json.dumps(body).encode(), reply="_INBOX.catchup.1")
            got: list[int] = []
            more: list[str | None] = []
            while not more or more[-1] == "1":
                msg = await replies.next_msg(timeout=20)
                assert len(msg.data) <= 65536
                first, last, _end = span(msg.headers or {})
                assert first == len(got) + 1  # each reply goes on where the last ended
                got += [r[0] for r in decode_frame(msg.data).rows()]
                assert got[-1] == last
                more.append((msg.headers or {}).get("Leafjet-Read-More"))
            assert len(more) >= 3 and more[:-1] == ["1"] * (len(more) - 1)
            assert got == list(range(1, len(got) + 1))
            # the budget ended the run, not the stream: 150 kB is ~145 rows of ~1 kB
            assert 140 <= len(got) < 200

            await create(nc, {"name": "AGG", "sources": [{"name": "UP"}]})
            await wait_msgs(nc, "AGG", 200, timeout=30)
            datas = [m.data[:5] for m in await stored_messages(nc, "AGG")]
            assert datas == [b"%05d" % i for i in range(200)]
    finally:
        srv.stop()


async def test_a_catch_up_waits_for_a_slow_reader_instead_of_overflowing_its_connection(tmp_path: Path):
    """A following request's replies go out back to back; a reader that does not read for a
    while would take them past its max_pending (a slow-consumer close) if the server did not
    wait, between two replies, for a receiver past its high-water mark to drain."""
    cfg = {"max_payload": 65536, "max_pending": 2 << 20}
    srv = start_server("leafjet", tmp_path / "slow", cfg, jetstream=True)
    try:
        async with jetstream(srv) as (nc, _js):
            await create(nc, {"name": "BIG", "subjects": ["big.>"]})
            n = 12_000  # 12 MiB: past what the kernel's socket buffers hold besides max_pending
            await fill_stream(nc, lambda i: f"big.{i % 4}", n, lambda i: b"%06d" % i + b"." * 1018)
        body = {"v": 1, "seq": 1, "max_bytes": 32 << 20, "wait_ms": 30_000, "follow": 1000}
        request = json.dumps(body).encode()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.connect(("127.0.0.1", srv.port))
        sock.sendall(
            b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.slow.> 1\r\n'
            + b"PUB %s _INBOX.slow.1 %d\r\n%s\r\nPING\r\n" % (READ.encode() + b"BIG", len(request), request)
        )
        await anyio.sleep(3)  # not reading: the server's buffer for us fills, then it must wait
        seqs: list[int] = []
        buf = b""
        sock.settimeout(30)
        while len(seqs) < n:
            chunk = sock.recv(1 << 20)
            assert chunk, f"closed by the server after {len(seqs)} messages: {buf[-200:]!r}"
            buf += chunk
            while True:
                if buf.startswith((b"PING", b"PONG", b"INFO", b"+OK")):
                    end = buf.find(b"\r\n")
                    if end < 0:
                        break
                    buf = buf[end + 2 :]
                    continue
                assert not buf.startswith(b"-ERR"), buf[:200]
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                head = buf[:end].split()
                if head[0] != b"HMSG":
                    break
                hlen, total = int(head[-2]), int(head[-1])
                if len(buf) < end + 2 + total + 2:
                    break
                body_bytes = buf[end + 2 + hlen : end + 2 + total]
                seqs += [r[0] for r in decode_frame(body_bytes).rows()]
                buf = buf[end + 2 + total + 2 :]
        sock.close()
        assert seqs == list(range(1, n + 1))
    finally:
        srv.stop()


async def test_reads_of_sealed_ranges_stay_exact_across_deletes_and_purges(lj):
    """More than two column blocks' worth of messages (core/store/colblocks.py, 4096 each, built
    in the background): reads in steps that do not line up with the blocks return exactly what
    is stored, before and after deletes inside a sealed range, a purge up to a sequence and a
    purge of one subject -- whether the blocks are built yet or not (they are derived data)."""
    n = 9000
    async with jetstream(lj) as (nc, _js):
        await create(nc, {"name": "B", "subjects": ["b.>"]})
        await fill_stream(nc, lambda i: f"b.{i % 4}", n, lambda i: b"%06d" % i + b"." * (i % 23))

        def stored(seq: int) -> tuple[str, bytes]:
            i = seq - 1
            return f"b.{i % 4}", b"%06d" % i + b"." * (i % 23)

        async def read_all(step: int) -> list[tuple[int, str, bytes]]:
            out, seq = [], 1
            while seq <= n:
                h, rows = await read(nc, "B", seq=seq, max_msgs=step)
                out += [(r[0], r[1], r[3]) for r in rows]
                seq = span(h)[1] + 1
            return out

        alive = set(range(1, n + 1))
        for change in (
            None,
            ("$JS.API.STREAM.MSG.DELETE.B", {"seq": 5000}),
            ("$JS.API.STREAM.MSG.DELETE.B", {"seq": 5001}),
            ("$JS.API.STREAM.PURGE.B", {"seq": 1000}),
            ("$JS.API.STREAM.PURGE.B", {"filter": "b.1"}),
        ):
            if change is not None:
                assert (await api(nc, *change)).get("success")
                body = change[1]
                if "seq" in body and "PURGE" not in change[0]:
                    alive.discard(body["seq"])
                elif "seq" in body:
                    alive = {s for s in alive if s >= body["seq"]}
                else:
                    alive = {s for s in alive if (s - 1) % 4 != 1}
            want = [(s, *stored(s)) for s in sorted(alive)]
            for step in (3000, 7777):
                assert await read_all(step) == want
            await anyio.sleep(0.3)  # let the blocks' job run between the rounds
