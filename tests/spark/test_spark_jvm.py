"""The JVM reader (bridges/spark/jvm): the same rows as the Python source, and its bad inputs.

The batch semantics shared with the Python source are also run against it by the ``reader``
parametrization of test_spark_source.py; this file holds what is the JVM reader's own: rows compared
with the Python source's on the same stream, JSON against the per-row rules, the hand-over to the
Python source, and the errors. Skipped without a JDK (no jar).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import socket
import struct
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bridges.spark.json_columns import parse_json_columns
from tests.spark.conftest import (
    api,
    assert_read_by,
    create_stream,
    error_on_a_forged_frame,
    jvm_reader_loaded,
    publish,
)
from tests.spark.fake_nats import FakeServer, Scripted
from tests.support.servers import RunningServer, start_leafjet, start_reference

pytestmark = pytest.mark.spark


@pytest.fixture
def jvm(spark: Any) -> Any:
    if not jvm_reader_loaded(spark):
        pytest.skip("the JVM reader is not built (no JDK: scripts/build_spark_reader)")
    return spark


def _read(spark: Any, url: str, stream: str, **options: Any) -> Any:
    r = spark.read.format("leafjet").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _rows(df: Any) -> list[tuple]:
    return [tuple(r) for r in sorted(df.collect(), key=lambda r: r.seq)]


def test_jvm_rows_equal_the_python_sources(jvm: Any, leafjet: RunningServer) -> None:
    """Several frames per partition (rowsPerArrowBatch), headers (repeated names, a Nats-* name the
    source drops), a non-UTF-8 payload, interior deletes, subject filters and ranges, nullHeaders."""
    url, stream = leafjet.url, "same_rows"
    create_stream(url, stream, [f"{stream}.>"])
    msgs: list[Any] = []
    for i in range(1, 1201):
        subject, data = f"{stream}.d{i % 4}", b"payload-%d" % i
        if i % 7 == 0:
            msgs.append((subject, data, {"K": f"v{i}", "Other": "x", "Nats-Sequence": "99"}))
        elif i % 11 == 0:
            msgs.append((subject, b"\xff\xfe" + data))
        else:
            msgs.append((subject, data))
    publish(url, msgs)
    for seq in (5, 300, 301, 1200):
        api(url, f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq})
    cases: list[dict[str, Any]] = [
        {"numPartitions": 3, "minPartitionSize": 100, "rowsPerArrowBatch": 97},
        {"numPartitions": 2, "nullHeaders": "true"},
        {"subject": f"{stream}.d1", "startSeq": 100, "endSeq": 900, "rowsPerArrowBatch": 50},
        {"subject": f"{stream}.*", "endSeq": 10},
        {"startSeq": 1190, "numPartitions": 4},
    ]
    for options in cases:
        df = _read(jvm, url, stream, reader="jvm", **options)
        got = _rows(df)
        assert_read_by(df, "jvm")
        want = _rows(_read(jvm, url, stream, reader="python", **options))
        assert got == want, options
        assert got, options
    everything = _rows(_read(jvm, url, stream, reader="jvm"))
    assert len(everything) == 1196
    by_seq = {r[1]: r for r in everything}
    assert by_seq[7][4] == {"K": "v7", "Other": "x"}  # its own headers, not the Nats-* one


_JSON_SCHEMA = "s STRING, d DOUBLE, f FLOAT, l BIGINT, i INT, h SMALLINT, b BOOLEAN, t TIMESTAMP"
_JSON_FIELDS = (
    ("s", "string"), ("d", "double"), ("f", "float"), ("l", "long"), ("i", "int"), ("h", "short"),
    ("b", "boolean"), ("t", "timestamp"),
)  # fmt: skip


def test_jvm_json_columns_follow_the_per_row_rules(jvm: Any, leafjet: RunningServer) -> None:
    """Every supported type, against parse_json_columns (the reference for the semantics)."""
    odd = [
        b'{"d": "hot"}', b"not json", b"[1]", b"", b"null", b"3", b'{"i": 3.0}', b'{"i": 2147483648}',
        b'{"h": 32767}', b'{"h": -32769}', b'{"l": 9223372036854775807}', b'{"l": 9223372036854775808}',
        b'{"s": 5}', b'{"s": true}', b'{"s": {"a": [1, "x"]}}', b'{"f": 1e300}', b'{"d": 1e400}',
        b'{"s":"a"}{"s":"b"}', b'{\n "d": 1.25\n}', b'{"d":1,"d":2}', b'{"d":"x","d":2}',
        b'{"x": "\xff", "d": 1}', b' {"d": 2} ', b'{"d": NaN}', b'{"s": "a\\u00e9\\n"}', b'{"b": 1}',
        b'{"b": null, "d": null}', b'{"t": "2024-05-01T10:00:00.123456Z"}', b'{"t": "2024-05-01T10:00:00"}',
        b'{"t": "2024-05-01T12:00:00+02:00"}', b'{"t": "2024-05-01"}', b'{"t": 1714557600}',
        b'{"t": 1714557600.5}', b'{"t": "yesterday"}', b'{"t": true}', b'{"unknown": [1, {"a": 2}], "i": 4}',
        b'{"d": 1', b'{"i": -0.0}', b'{"d": [1, 2]}', b'{"i": "7"}',
    ]  # fmt: skip
    rng = random.Random(11)
    payloads = [b'{"s": "d%d", "d": %d.5, "i": %d, "b": false}' % (i, i, i) for i in range(600)]
    for p in odd:
        payloads[rng.randrange(len(payloads))] = p
    payloads += odd
    _assert_json_columns_as_per_row(jvm, leafjet.url, "jvm_json", payloads)


def test_jvm_json_scanner_and_jackson_agree_on_random_payloads(jvm: Any, leafjet: RunningServer) -> None:
    """The JVM reader's byte scanner takes the plain payloads and leaves the rest to Jackson: on
    random numbers (every width around its 15/18-digit limits, exponents, signs, leading zeros),
    strings (escapes, non-ASCII, control bytes), literals, spacing, repeated and unknown fields,
    both together give the per-row rules' values."""
    rng = random.Random(2026)

    def number() -> str:
        sign = rng.choice(["", "", "-"])
        whole = rng.choice(["0", "00", str(rng.randrange(10 ** rng.randrange(1, 21)))])
        text = sign + whole
        if rng.random() < 0.5:
            text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 25)))
        if rng.random() < 0.1:
            text += rng.choice(["e", "E"]) + rng.choice(["", "-", "+"]) + str(rng.randrange(400))
        return text

    def scalar() -> str:
        kind = rng.randrange(10)
        if kind < 6:
            return number()
        if kind == 6:
            return rng.choice(["true", "false", "null", "nul", "truex", "NaN", "-Infinity"])
        if kind == 7:
            return rng.choice(['"x"', '"a"b"', '"\u00e9"', '"é"', '""', '"2024-05-01T10:00:00Z"', '""'])
        if kind == 8:
            return rng.choice(["[1, 2]", '{"a": {"b": 1}}', "[]", "{}"])
        return json.dumps(rng.choice(["1714557600", "2024-05-01", "plain text"]))

    def field() -> str:
        name = rng.choice([n for n, _k in _JSON_FIELDS] + ["other", "d"])
        value = scalar()
        if name == "t" and value[:1] in "-0123456789":  # epoch seconds Python's datetime can hold
            value = str(rng.randrange(-(10**9), 10**10)) + rng.choice(["", ".5", ".000001"])
        if name == "s" and value[:1] in "-0123456789":  # a number's text differs (DESIGN.md): "-0", "0.10"
            value = json.dumps(value)
        return f'"{name}"{rng.choice(["", " "])}:{rng.choice(["", " ", chr(10)])}{value}'

    def payload() -> bytes:
        body = "{" + rng.choice([",", ", "]).join(field() for _ in range(rng.randrange(0, 5))) + "}"
        if rng.random() < 0.03:
            body = rng.choice([body[:-1], body + "}", " " + body + "\n", body + "x", "[" + body + "]"])
        return body.encode()

    _assert_json_columns_as_per_row(jvm, leafjet.url, "jvm_json_random", [payload() for _ in range(3000)])


def _assert_json_columns_as_per_row(jvm: Any, url: str, stream: str, payloads: list[bytes]) -> None:
    """``payloads`` read by the JVM reader with every jsonSchema type equal parse_json_columns."""
    schema, fields = _JSON_SCHEMA, _JSON_FIELDS
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, [(f"{stream}.a", p) for p in payloads])
    df = _read(jvm, url, stream, reader="jvm", jsonSchema=schema, rowsPerArrowBatch=128)
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert_read_by(df, "jvm")
    assert df.columns == [
        "stream",
        "seq",
        "subject",
        "timestamp",
        "headers",
        "data",
        *(n for n, _k in fields),
        "_corrupt",
    ]
    cols, corrupt = parse_json_columns(payloads, fields)
    assert [r._corrupt for r in rows] == corrupt
    for k, (name, kind) in enumerate(fields):
        got = [r[name] for r in rows]
        want = cols[k]
        if kind == "float":
            want = [
                None
                if v is None
                else struct.unpack("f", struct.pack("f", v))[0]
                if abs(v) < 3.4e38
                else v
                if v != v
                else math.copysign(math.inf, v)  # NaN stays, -Infinity stays negative
                for v in want
            ]
        if kind == "timestamp":
            got = [None if v is None else _micros(v) for v in got]
        if kind == "string":  # a nested value is re-serialised compactly by both
            assert [v for v in got] == [v for v in want], name
        same = [(g == w) or (g != g and w != w) for g, w in zip(got, want, strict=True)]
        assert all(same), (
            name,
            [(p, g, w) for p, g, w, ok in zip(payloads, got, want, same, strict=True) if not ok][:5],
        )


def _micros(v: datetime) -> int:
    delta = v.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def test_jvm_reader_bad_inputs_are_clear_errors(jvm: Any, leafjet: RunningServer, tmp_path: Path) -> None:
    url, stream = leafjet.url, "jvm_bad"
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, [(f"{stream}.a", b"%d" % i) for i in range(500)])
    # absurd sizes are clamped (the server caps a reply), 0 is refused naming the option
    got = _rows(_read(jvm, url, stream, reader="jvm", rowsPerArrowBatch=10**12, numPartitions=10**6))
    assert [r[1] for r in got] == list(range(1, 501))
    for option in ("rowsPerArrowBatch", "numPartitions", "minPartitionSize"):
        with pytest.raises(Exception, match=f"option '{option}' must be >= 1, got 0"):
            _read(jvm, url, stream, reader="jvm", **{option: 0}).collect()
    with pytest.raises(Exception, match="option 'reader' must be one of auto, jvm, python"):
        _read(jvm, url, stream, reader="maybe").collect()
    with pytest.raises(Exception, match="jsonSchema column 'x' has type decimal"):
        _read(jvm, url, stream, reader="jvm", jsonSchema="x DECIMAL(10,2)").collect()
    with pytest.raises(Exception, match="option 'timeout' must be seconds > 0, got '0'"):
        _read(jvm, url, stream, reader="jvm", timeout=0).collect()
    with pytest.raises(Exception, match="option 'servers' has a malformed URL 'nats://no such:4222'"):
        _read(jvm, "nats://no such:4222", stream, reader="jvm").collect()
    # what only the Python source does, asked of the JVM reader by name: refused, saying why
    with pytest.raises(Exception, match="JVM reader does not support options 'startTime'"):
        _read(jvm, url, stream, reader="jvm", startTime="2024-01-01T00:00:00").collect()
    ref = start_reference(tmp_path / "ref", jetstream=True)
    try:
        create_stream(ref.url, "plain", ["plain.>"])
        publish(ref.url, [("plain.a", b"1")])
        with pytest.raises(Exception, match="does not serve leafjet's bulk read API"):
            _read(jvm, ref.url, "plain", reader="jvm").collect()
        # reader=auto: the reference is read by the Python source's direct gets
        auto = _read(jvm, ref.url, "plain")
        assert [r.seq for r in auto.collect()] == [1]
        assert_read_by(auto, "python")
    finally:
        ref.stop()


def _jvm_partition(spark: Any, options: dict[str, str], first: int, last: int) -> Any:
    jmap = spark._jvm.java.util.HashMap()
    for k, v in options.items():
        jmap.put(k, v)
    return spark._jvm.dev.leafjet.spark.BulkReader.open(jmap, first, last)


def _seqs(batch: Any) -> list[int]:
    col, n = batch.column(1), batch.numRows()
    return [col.getLong(0), col.getLong(n - 1)] if n else []


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_jvm_purge_during_a_read_is_data_loss(
    jvm: Any, leafjet: RunningServer, fail_on_data_loss: bool
) -> None:
    """One partition's read driven by hand (BulkReader.open, what a task runs): a purge lands
    between two of its frames."""
    url, stream = leafjet.url, f"jvm_purge{int(fail_on_data_loss)}"
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, [(f"{stream}.a", b"%d" % i) for i in range(2000)])
    options = {
        "servers": url,
        "stream": stream,
        "rowsPerArrowBatch": "100",
        "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    r = _jvm_partition(jvm, options, 1, 2000)
    try:
        assert r.next()
        assert _seqs(r.get()) == [1, 100]
        assert api(url, f"$JS.API.STREAM.PURGE.{stream}", {"seq": 1500})["success"]  # 1..1499 go
        ends: list[list[int]] = []
        if fail_on_data_loss:
            with pytest.raises(
                Exception, match=rf"data loss on stream '{stream}'.*were removed.*failOnDataLoss"
            ):
                while r.next():
                    ends.append(_seqs(r.get()))
            return
        while r.next():
            ends.append(_seqs(r.get()))
        assert ends[-1][1] == 2000
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ends))
        assert any(e[0] == 1500 for e in ends)  # after the purge: from the stream's new first
    finally:
        r.close()


def test_jvm_message_too_large_for_a_reply_is_read_alone(jvm: Any, tmp_path: Path) -> None:
    srv = start_leafjet(tmp_path / "big")
    try:
        create_stream(srv.url, "big", ["big.>"])
        big = b"x" * (1024 * 1024 - 2048)  # fits max_payload, not a reply (max_payload less 4 KiB)
        publish(srv.url, [("big.a", b"1"), ("big.a", b"2"), ("big.b", big, {"H": "1"}), ("big.a", b"4")])
        df = _read(jvm, srv.url, "big", reader="jvm", numPartitions=1)
        rows = _rows(df)
        assert [r[1] for r in rows] == [1, 2, 3, 4]
        assert [bytes(r[5]) for r in rows] == [b"1", b"2", big, b"4"]
        assert [r[4] for r in rows] == [{}, {}, {"H": "1"}, {}]
    finally:
        srv.stop()


_HEADER = b"LJRF\x01\x00\x00\x00"


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (_HEADER + b"\x02\x00\x00\x00", "truncated frame"),
        # a count or an offset far past the bytes: refused before any allocation or index
        (_HEADER + b"\xff\xff\xff\xff" + bytes(4), "truncated frame: 4294967295 rows"),
        (_HEADER + struct.pack("<IIqqii", 1, 0, 1, 0, 0, 2**31 - 1), "truncated frame: subject bytes"),
    ],
)
def test_jvm_corrupt_frame_is_a_clear_error_not_a_hang(
    jvm: Any, tmp_path: Path, frame: bytes, why: str
) -> None:
    """A responder on the reference answers the read API with a forged frame (bulkRead=true)."""

    def read(url: str) -> str:
        with pytest.raises(Exception) as info:
            _read(jvm, url, "forged", reader="jvm", bulkRead="true", timeout=10).collect()
        return str(info.value)

    text = error_on_a_forged_frame(tmp_path, frame, read)
    assert "bad bulk read reply for stream 'forged'" in text and why in text, text


def test_reader_jvm_without_the_jar_is_an_option_error() -> None:
    """The Python source only sees ``reader=jvm`` when the JVM reader is not on the classpath."""
    from bridges.spark.options import OptionError, parse_options

    base = {"servers": "nats://127.0.0.1:4222", "stream": "s"}
    assert parse_options({**base, "reader": "python"}).reader == "python"
    with pytest.raises(OptionError, match="reader=jvm, but the JVM reader is not on Spark's classpath"):
        parse_options({**base, "reader": "jvm"})
    with pytest.raises(OptionError, match="option 'reader' must be one of auto, jvm, python"):
        parse_options({**base, "reader": "scala"})


def test_a_server_that_requires_tls_is_read_by_the_python_source(jvm: Any, tmp_path: Path) -> None:
    """The JVM reader speaks no TLS: with TLS options, format leafjet reads through the Python
    source; asked by name (reader=jvm) of a server whose INFO requires TLS, it says so."""
    import ssl

    import nats

    from core.certs import make_ca, make_server_cert

    ca = make_ca(tmp_path / "pki")
    cert = make_server_cert(tmp_path / "pki", ca)
    srv = start_leafjet(tmp_path / "tls", {"tls": {"cert_file": str(cert.cert), "key_file": str(cert.key)}})
    try:
        ctx = ssl.create_default_context(cafile=str(ca.cert))

        async def fill() -> None:
            nc = await nats.connect(srv.url, tls=ctx, allow_reconnect=False)
            try:
                cfg = b'{"name": "sec", "subjects": ["sec.>"], "storage": "file"}'
                await nc.request("$JS.API.STREAM.CREATE.sec", cfg, timeout=10)
                js = nc.jetstream()
                for i in range(3):
                    await js.publish("sec.a", b"%d" % i)
            finally:
                await nc.close()

        asyncio.run(fill())
        df = _read(jvm, srv.url, "sec", tlsCaFile=str(ca.cert))
        assert [r.seq for r in df.collect()] == [1, 2, 3]
        assert_read_by(df, "python")
        plain = srv.url.replace("tls://", "nats://")  # a URL that does not say TLS
        with pytest.raises(Exception, match="the server requires TLS, which the JVM reader does not speak"):
            _read(jvm, plain, "sec", reader="jvm").collect()
        with pytest.raises(Exception, match="option reader=jvm, but the JVM reader does not support TLS"):
            _read(jvm, srv.url, "sec", reader="jvm", tlsCaFile=str(ca.cert)).collect()
    finally:
        srv.stop()


def test_jvm_reply_larger_than_asked_is_refused_before_it_is_allocated(jvm: Any) -> None:
    """A server (fake: only the reply is forged) claims a 200 MiB bulk reply: more than the 8 MiB
    asked for plus framing. The read fails at once naming the sizes; it neither allocates the
    claimed bytes nor waits for them (the old bound, 256 MiB, did both until the timeout)."""

    def huge(conn: socket.socket, reply: str, sid: str, body: bytes) -> None:
        conn.sendall(b"HMSG %s %s 20 %d\r\n" % (reply.encode(), sid.encode(), 200 << 20))

    with FakeServer(Scripted(huge)) as fake:
        r = _jvm_partition(jvm, {"servers": fake.url, "stream": "fk", "timeout": "60"}, 1, 10)
        try:
            with pytest.raises(Exception, match=r"bad reply from stream 'fk'.*a reply of 209715200 bytes"):
                r.next()
        finally:
            r.close()


def test_jvm_handshake_has_one_deadline(jvm: Any) -> None:
    """A server that trickles its INFO a byte at a time makes progress on every socket read: only
    a deadline for the whole handshake (the ``timeout`` option) ends the wait."""

    def trickle(conn: socket.socket) -> None:
        conn.sendall(b'INFO {"server_id": "slow"')
        for _ in range(600):  # a minute at most: the test fails on the message, it does not hang
            time.sleep(0.1)
            conn.sendall(b" ")

    with (
        FakeServer(trickle) as fake,
        pytest.raises(Exception, match=r"cannot reach leafjet server .*no handshake.* within 1.0s"),
    ):
        _jvm_partition(jvm, {"servers": fake.url, "stream": "fk", "timeout": "1"}, 1, 10)


@pytest.mark.parametrize("reader", ["python", "jvm"])
def test_a_refused_first_bulk_request_is_read_another_way(jvm: Any, tmp_path: Path, reader: str) -> None:
    """Planned for bulk reads (bulkRead=true), but the server refuses the first request with an API
    error (a responder on the reference): each reader reads the partition another way (the Python
    source by direct get, the JVM reader by STREAM.MSG.GET) and gets every row, filtered or not."""
    import nats

    ref = start_reference(tmp_path / "ref", jetstream=True)
    try:
        create_stream(ref.url, "refused", ["refused.>"])
        publish(ref.url, [(f"refused.d{i % 3}", b"%d" % i) for i in range(1, 41)])
        api(ref.url, "$JS.API.STREAM.MSG.DELETE.refused", {"seq": 7})
        refusal = json.dumps({"error": {"code": 400, "err_code": 10003, "description": "bad request"}})

        async def scenario() -> tuple[list[tuple], list[tuple]]:
            nc = await nats.connect(ref.url)

            async def refuse(msg: Any) -> None:
                await nc.publish(msg.reply, refusal.encode())

            await nc.subscribe("$JS.API.LEAFJET.READ.refused", cb=refuse)
            await nc.flush()
            try:
                opts = {"reader": reader, "bulkRead": "true", "numPartitions": 2, "minPartitionSize": 1}
                every = await asyncio.to_thread(lambda: _rows(_read(jvm, ref.url, "refused", **opts)))
                some = await asyncio.to_thread(
                    lambda: _rows(_read(jvm, ref.url, "refused", subject="refused.d1", endSeq=30, **opts))
                )
                return every, some
            finally:
                await nc.close()

        every, some = asyncio.run(scenario())
        assert [r[1] for r in every] == [s for s in range(1, 41) if s != 7]
        assert [bytes(r[5]) for r in every][:3] == [b"1", b"2", b"3"]
        assert [r[1] for r in some] == [s for s in range(1, 31) if s % 3 == 1 and s != 7]
        assert {r[2] for r in some} == {"refused.d1"}
    finally:
        ref.stop()
