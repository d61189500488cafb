"""The Spark source's bulk read path (leafjet's READ API) and its fallback (direct get, the reference).

Most tests drive one partition's read (``read_partition``, what a Spark task runs) directly: the same
code as under Spark, without a Spark job per case, so a purge can land between two batches of one read.
Each runs against both servers: leafjet answers the bulk read API, nats-server does not and is read
by batched direct gets.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridges.spark.datasource import plan
from bridges.spark.json_columns import _per_row, json_columns
from bridges.spark.options import BASE_COLUMNS, CORRUPT_COLUMN, OptionError, parse_options
from bridges.spark.partition import GapTracker, read_partition
from bridges.spark.reader import DataLossError, LeafjetSourceError
from tests.spark.conftest import api, create_stream, error_on_a_forged_frame, publish, stored_messages
from tests.support.servers import RunningServer, start_leafjet, start_reference

pytestmark = pytest.mark.spark

KINDS = ("leafjet", "reference")


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    work = tmp_path_factory.mktemp(request.param)
    srv = start_leafjet(work) if request.param == "leafjet" else start_reference(work, jetstream=True)
    yield srv
    srv.stop()


def _options(url: str, stream: str, **options: Any) -> dict[str, str]:
    return {"servers": url, "stream": stream, "timeout": "10", **{k: str(v) for k, v in options.items()}}


def _fields(json_schema: str | None) -> tuple[tuple[str, str], ...]:
    if not json_schema:
        return ()
    kinds = {"STRING": "string", "DOUBLE": "double", "BIGINT": "long", "BOOLEAN": "boolean"}
    return tuple((n, kinds[t]) for n, t in (part.split() for part in json_schema.split(",")))


def read_batches(url: str, stream: str, **options: Any) -> tuple[bool, Iterator[pa.RecordBatch]]:
    """Plan as the driver does, then read the whole range as one partition: (bulk?, batches)."""
    opts = parse_options(_options(url, stream, **options))
    first, last, bulk = plan(opts)
    fields = _fields(opts.json_schema)
    names = [*BASE_COLUMNS, *(n for n, _k in fields), *([CORRUPT_COLUMN] if fields else [])]
    return bulk, read_partition(opts, first, last, bulk, fields, names)


def read_table(url: str, stream: str, **options: Any) -> tuple[bool, pa.Table]:
    bulk, batches = read_batches(url, stream, **options)
    got = list(batches)
    return bulk, pa.Table.from_batches(got) if got else pa.table({})


def _unique(server: RunningServer, name: str) -> str:
    return f"{name}_{server.kind}"


def test_bulk_path_on_leafjet_direct_get_on_the_reference_same_rows(server: RunningServer) -> None:
    url, stream = server.url, _unique(server, "rows")
    create_stream(url, stream, [f"{stream}.>"])
    msgs = [
        (f"{stream}.dev{i % 3}", json.dumps({"i": i}).encode(), {"X-Trace": f"t{i}"} if i % 7 == 0 else None)
        for i in range(1, 1201)
    ]
    publish(url, [m if m[2] else m[:2] for m in msgs])
    api(url, f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": 300})  # an interior gap is not data loss
    truth = stored_messages(url, stream)

    bulk, table = read_table(url, stream, rowsPerArrowBatch=256)
    assert bulk is (server.kind == "leafjet")
    rows = table.to_pylist()
    assert [r["seq"] for r in rows] == [m.seq for m in truth]
    for r, m in zip(rows, truth, strict=True):
        assert (r["stream"], r["subject"], r["data"], dict(r["headers"])) == (
            stream,
            m.subject,
            m.data,
            m.headers,
        )
        assert r["timestamp"] == m.ts
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    _bulk, zstd = read_table(url, stream, rowsPerArrowBatch=256, compression="zstd")  # frames compressed
    assert zstd.equals(table)

    # a subject filter and an explicit range, with ranges that end inside a frame
    _bulk, part = read_table(
        url, stream, subject=f"{stream}.dev1", startSeq=100, endSeq=650, rowsPerArrowBatch=50
    )
    want = [m.seq for m in truth if m.subject.endswith("dev1") and 100 <= m.seq <= 650]
    assert part.column("seq").to_pylist() == want


def test_malformed_payloads_in_the_middle_of_a_batch_follow_the_per_row_rules(server: RunningServer) -> None:
    url, stream = server.url, _unique(server, "mixed")
    create_stream(url, stream, [f"{stream}.>"])
    payloads = [b'{"device": "d%d", "temp": %d.5, "n": %d}' % (i % 5, i % 40, i) for i in range(3000)]
    bad = {
        1100: b"not json at all",
        1101: b'{"device": "d9", "temp": "hot"}',
        1500: b"",
        1501: b"null",
        1502: b"[1, 2]",
        2000: b'{"temp": 1, "x": "\xff"}',
        2001: b'{"device": 7, "temp": 2}',  # a number for STRING: its JSON text, not corrupt
        2002: b'{\n  "device": "pretty",\n  "temp": 3.25\n}',
        2003: b'{"temp": true}',
        2999: b'{"n": 3.0}',
    }
    for i, p in bad.items():
        payloads[i] = p
    publish(url, [(f"{stream}.x", p) for p in payloads])
    schema = "device STRING, temp DOUBLE, n BIGINT"
    _bulk, table = read_table(url, stream, jsonSchema=schema, rowsPerArrowBatch=4096)
    assert table.num_rows == 3000
    want = _per_row(pa.array(payloads, pa.binary()), _fields(schema))
    for name, col in zip(["device", "temp", "n", "_corrupt"], want, strict=True):
        assert table.column(name).to_pylist() == col.to_pylist(), name
    corrupt = table.column("_corrupt").to_pylist()
    assert [i for i, c in enumerate(corrupt) if c] == [1100, 1101, 1500, 1501, 1502, 2000, 2003]
    assert table.column("device").to_pylist()[2001:2003] == ["7", "pretty"]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_purge_between_two_batches_of_one_read_is_data_loss(
    server: RunningServer, fail_on_data_loss: bool
) -> None:
    url, stream = server.url, _unique(server, f"purge{int(fail_on_data_loss)}")
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, [(f"{stream}.a", b"%d" % i) for i in range(2000)])
    _bulk, batches = read_batches(
        url, stream, rowsPerArrowBatch=100, batchSize=100, inFlight=2, failOnDataLoss=fail_on_data_loss
    )
    seqs = next(batches).column("seq").to_pylist()
    assert seqs == list(range(1, 101))
    assert api(url, f"$JS.API.STREAM.PURGE.{stream}", {"seq": 1500})["success"]  # 1..1499 go
    if fail_on_data_loss:
        with pytest.raises(
            DataLossError, match=rf"data loss on stream '{stream}'.*were removed.*failOnDataLoss"
        ):
            for batch in batches:
                seqs += batch.column("seq").to_pylist()
        return
    for batch in batches:
        seqs += batch.column("seq").to_pylist()
    assert seqs == sorted(set(seqs))
    assert seqs[-501:] == list(range(1500, 2001))  # what was read ahead before the purge stays


def test_absurd_batch_sizes_are_clamped_and_zero_is_refused(server: RunningServer) -> None:
    url, stream = server.url, _unique(server, "absurd")
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, [(f"{stream}.a", b"%d" % i) for i in range(500)])
    _bulk, table = read_table(url, stream, rowsPerArrowBatch=10**12, batchSize=10**9, inFlight=10**6)
    assert table.column("seq").to_pylist() == list(range(1, 501))
    for option in ("rowsPerArrowBatch", "batchSize", "inFlight"):
        with pytest.raises(OptionError, match=f"(?i){option}"):
            parse_options(_options(url, stream, **{option: 0}))
    with pytest.raises(OptionError, match="bulkRead"):
        parse_options(_options(url, stream, bulkRead="maybe"))


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_positive_seconds_is_refused(timeout: str) -> None:
    with pytest.raises(OptionError, match="option 'timeout' must be seconds"):
        parse_options({"servers": "nats://127.0.0.1:4222", "stream": "s", "timeout": timeout})


@pytest.mark.parametrize(
    "url",
    [
        "nats://127.0.0.1:notaport",
        "nats://127.0.0.1:99999",
        "nats://",
        "http://127.0.0.1:4222",
        "nats//x",
        "h:1/p",
    ],
)
def test_a_malformed_server_url_is_refused_naming_it(url: str) -> None:
    with pytest.raises(OptionError, match=f"option 'servers' has a malformed URL '{re.escape(url)}'"):
        parse_options({"servers": f"nats://127.0.0.1:4222,{url}", "stream": "s"})


@pytest.mark.parametrize("url", ["127.0.0.1:4222", "nats://u:p@localhost:4222", "tls://[::1]:4222", "ws://h"])
def test_server_urls_the_clients_take_are_accepted(url: str) -> None:
    assert parse_options({"servers": url, "stream": "s"}).conn.servers == (url,)


def test_message_too_large_for_a_bulk_reply_is_read_alone(tmp_path: Path) -> None:
    srv = start_leafjet(tmp_path / "big")
    try:
        create_stream(srv.url, "big", ["big.>"])
        big = b"x" * (1024 * 1024 - 2048)  # fits max_payload, not a reply (max_payload less 4 KiB)
        publish(srv.url, [("big.a", b"1"), ("big.a", b"2"), ("big.b", big), ("big.a", b"4")])
        bulk, table = read_table(srv.url, "big")
        assert bulk
        assert table.column("seq").to_pylist() == [1, 2, 3, 4]
        assert table.column("data").to_pylist() == [b"1", b"2", big, b"4"]
    finally:
        srv.stop()


def test_forced_bulk_read_against_a_server_without_it_fails_clearly(tmp_path: Path) -> None:
    ref = start_reference(tmp_path / "ref", jetstream=True)
    try:
        create_stream(ref.url, "plain", ["plain.>"])
        publish(ref.url, [("plain.a", b"1")])
        _bulk, batches = read_batches(ref.url, "plain", bulkRead="true", timeout=1)
        with pytest.raises(
            LeafjetSourceError, match=r"bulk read from 1 timed out after 1.0s for stream 'plain'"
        ):
            list(batches)
    finally:
        ref.stop()


def test_a_corrupt_frame_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    """A responder on the reference answers the read API with a forged frame."""

    def read(url: str) -> str:
        bulk, batches = read_batches(url, "forged", bulkRead="true")
        assert bulk
        with pytest.raises(LeafjetSourceError) as info:
            list(batches)
        return str(info.value)

    text = error_on_a_forged_frame(tmp_path, b"LJRF\x01\x00\x00\x00\x02\x00\x00\x00", read)
    assert "bad bulk read reply from 1 for stream 'forged'" in text


@pytest.mark.parametrize(
    "answer", [b"<html>not json</html>", b"[1, 2]", b'{"error": "a string"}', b'{"state": 5}', b"\xff\xfe"]
)
def test_a_garbage_api_answer_is_a_clear_error(tmp_path: Path, answer: bytes) -> None:
    """A responder on a plain NATS server answers STREAM.INFO with something that is no
    JetStream API answer: the read fails with LeafjetSourceError naming it, not a JSON error."""
    import nats

    ref = start_reference(tmp_path / "ref", jetstream=False)
    try:

        async def scenario() -> str:
            nc = await nats.connect(ref.url)

            async def respond(msg: Any) -> None:
                await nc.publish(msg.reply, answer)

            await nc.subscribe("$JS.API.STREAM.INFO.junk", cb=respond)
            await nc.flush()
            try:

                def read() -> str:
                    with pytest.raises(LeafjetSourceError) as info:
                        read_batches(ref.url, "junk")
                    return str(info.value)

                return await asyncio.to_thread(read)
            finally:
                await nc.close()

        text = asyncio.run(scenario())
        assert "unreadable" in text and "stream 'junk'" in text, text
    finally:
        ref.stop()


def test_bulk_json_decoding_equals_the_per_row_rules_on_random_blocks() -> None:
    fields = (("device", "string"), ("temp", "double"), ("ok", "boolean"), ("n", "int"), ("f", "float"))
    odd = [
        b'{"device": "d2", "temp": "hot"}', b"not json", b"[1]", b"", b"null", b"3", b'{"n": 3.0}',
        b'{"n": 2147483648}', b'{"device": 5}', b'{"f": 1e300}', b'{"device":"a"}{"device":"b"}',
        b'{\n "temp": 1.25\n}', b'{"temp":1,"temp":2}', b'{"x": "\xff", "temp": 1}', b' {"temp": 2} ',
        b'{"temp": NaN}', b'{"temp": 1e400}', b'{"device": "a\\u00e9"}', b'{"ok": 1}',
    ]  # fmt: skip
    rng = random.Random(7)
    for _trial in range(60):
        n = rng.randint(0, 1500)
        payloads = [
            b'{"device": "d%d", "temp": %d.5, "ok": false, "n": %d, "f": 0.5}' % (i, i, i) for i in range(n)
        ]
        for _ in range(rng.randint(0, 4)):
            if n:
                payloads[rng.randrange(n)] = rng.choice(odd)
        data = pa.array(payloads, pa.binary())
        for got, want in zip(json_columns(data, fields), _per_row(data, fields), strict=True):
            assert got.type == want.type
            assert [x if x == x else "nan" for x in got.to_pylist()] == [
                x if x == x else "nan" for x in want.to_pylist()
            ]


def test_null_headers_gives_null_for_a_message_without_headers(server: RunningServer) -> None:
    """``nullHeaders=true``: null where the default gives an empty map, the same maps elsewhere; a
    batch where no message has headers (the constant array) and one where some have (parsed)."""
    url, stream = server.url, _unique(server, "nullhdr")
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, [(f"{stream}.a", b"1"), (f"{stream}.a", b"2")])  # first batch: no headers at all
    publish(url, [(f"{stream}.b", b"3", {"K": "v"}), (f"{stream}.b", b"4")])  # second: some
    _bulk, default = read_table(url, stream, rowsPerArrowBatch=2)
    _bulk, nulls = read_table(url, stream, rowsPerArrowBatch=2, nullHeaders="true")
    assert [dict(h) for h in default.column("headers").to_pylist()] == [{}, {}, {"K": "v"}, {}]
    assert [h if h is None else dict(h) for h in nulls.column("headers").to_pylist()] == [
        None,
        None,
        {"K": "v"},
        None,
    ]
    assert nulls.drop_columns(["headers"]).equals(default.drop_columns(["headers"]))
    assert nulls.schema.equals(default.schema)
    with pytest.raises(OptionError, match="nullheaders"):
        parse_options(_options(url, stream, nullHeaders="maybe"))


def test_gap_tracker_finds_the_lowest_missing_sequence() -> None:
    t = GapTracker(10)
    t.see(pa.array([10, 11, 12], pa.int64()))
    t.see(pa.array([13, 15, 18], pa.int64()))
    assert t.finish(20) == 14
    t = GapTracker(1)
    t.see(pa.array([1, 2], pa.int64()))
    assert t.finish(2) is None
    assert GapTracker(5).finish(9) == 5
    t = GapTracker(1)
    t.see(pa.array([3], pa.int64()))
    assert t.finish(3) == 1


def df_options(url: str, stream: str) -> dict[str, str]:
    return {"servers": url, "stream": stream, "numPartitions": "2", "minPartitionSize": "100"}


def test_spark_reads_the_same_rows_from_both_servers(spark: Any, server: RunningServer) -> None:
    """Through Spark: leafjet in bulk, the reference by direct get (the fallback), same answer."""
    url, stream = server.url, _unique(server, "spark")
    create_stream(url, stream, [f"{stream}.>"])
    payloads = [json.dumps({"temp": i / 4}).encode() if i % 50 else b"broken" for i in range(1, 901)]
    publish(url, [(f"{stream}.d{i % 2}", p, {"K": "v"} if i % 9 == 0 else None)[: 3 if i % 9 == 0 else 2]
                  for i, p in enumerate(payloads, 1)])  # fmt: skip
    df = spark.read.format("leafjet").options(**df_options(url, stream), jsonSchema="temp DOUBLE").load()
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert [r.seq for r in rows] == list(range(1, 901))
    assert [bytes(r.data) for r in rows] == payloads
    assert [r.temp for r in rows] == [None if i % 50 == 0 else i / 4 for i in range(1, 901)]
    assert [r._corrupt for r in rows] == [i % 50 == 0 for i in range(1, 901)]
    assert [r.headers for r in rows] == [{"K": "v"} if i % 9 == 0 else {} for i in range(1, 901)]
    nulls = (
        df.sparkSession.read.format("leafjet").options(**df_options(url, stream), nullHeaders="true").load()
    )
    got = sorted(nulls.select("seq", "headers").collect(), key=lambda r: r.seq)
    assert [r.headers for r in got] == [{"K": "v"} if i % 9 == 0 else None for i in range(1, 901)]
