"""The leafjet Spark source and aggregation job against a real leafjet agent."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import api, assert_read_by, create_stream, publish, stored_messages
from tests.support.servers import free_port, start_leafjet, wait_until

pytestmark = pytest.mark.spark


def _read(spark: Any, url: str, stream: str, **options: Any) -> Any:
    r = spark.read.format("leafjet").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _payload(device: int, i: int) -> bytes:
    return json.dumps({"device": f"d{device}", "temp": round(15 + device * 2 + (i % 7) * 0.5, 2)}).encode()


def test_batch_read_returns_exactly_the_streams_messages_in_parallel_partitions(spark, leafjet, reader):
    url, orders = leafjet.url, f"orders_{reader}"
    create_stream(url, orders, [f"{orders}.>"])
    msgs = [
        (f"{orders}.dev{i % 3}", _payload(i % 3, i), {"X-Trace": f"t{i}"} if i % 5 == 0 else None)
        for i in range(2500)
    ]
    publish(url, [m if m[2] else m[:2] for m in msgs])
    api(url, f"$JS.API.STREAM.MSG.DELETE.{orders}", {"seq": 7})  # an interior gap is not data loss
    truth = stored_messages(url, orders)
    assert len(truth) == 2499

    from pyspark.sql import functions as F

    df = _read(spark, url, orders, numPartitions=3, minPartitionSize=500, reader=reader).withColumn(
        "part", F.spark_partition_id()
    )
    rows = df.collect()
    assert_read_by(df, reader)
    assert df.rdd.getNumPartitions() == 3
    got = sorted(rows, key=lambda r: r.seq)
    assert [r.seq for r in got] == [m.seq for m in truth]
    for r, m in zip(got, truth, strict=True):
        assert (r.stream, r.subject, bytes(r.data), r.headers) == (orders, m.subject, m.data, m.headers)
        assert r.timestamp.replace(tzinfo=UTC) == m.ts
    # each partition is one contiguous sub-range; together they cover the stream once
    ranges = sorted(
        (min(r.seq for r in rows if r.part == p), max(r.seq for r in rows if r.part == p)) for p in range(3)
    )
    assert ranges[0][0] == 1 and ranges[-1][1] == 2500
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
    assert len({r.seq for r in rows}) == len(rows)

    # without allow_direct the source falls back to STREAM.MSG.GET; the subject filter applies to both
    nodirect = f"nodirect_{reader}"
    create_stream(url, nodirect, [f"{nodirect}.>"], allow_direct=False)
    publish(url, [(f"{nodirect}.dev{i % 2}", _payload(i % 2, i)) for i in range(60)])
    fallback = _read(spark, url, nodirect, subject=f"{nodirect}.dev1", reader=reader).collect()
    assert sorted(r.seq for r in fallback) == list(range(2, 61, 2))
    filtered = _read(
        spark, url, orders, subject=f"{orders}.dev2", startSeq=100, endSeq=200, reader=reader
    ).collect()
    assert sorted(r.seq for r in filtered) == [
        m.seq for m in truth if m.subject == f"{orders}.dev2" and 100 <= m.seq <= 200
    ]


def _python_aggregate(truth: list[Any], field: str, window_s: int) -> dict[tuple[str, datetime], tuple]:
    groups: dict[tuple[str, datetime], list[float]] = defaultdict(list)
    bad: dict[tuple[str, datetime], int] = defaultdict(int)
    for m in truth:
        epoch = int(m.ts.timestamp() * 1_000_000) // 1_000_000
        key = (m.subject, datetime.fromtimestamp(epoch - epoch % window_s, UTC).replace(tzinfo=None))
        try:
            value = json.loads(m.data)[field]
            assert isinstance(value, int | float) and not isinstance(value, bool)
        except Exception:
            bad[key] += 1
            groups.setdefault(key, [])
            continue
        groups[key].append(float(value))
    return {
        k: (len(v), min(v, default=None), max(v, default=None), (sum(v) / len(v)) if v else None, bad[k])
        for k, v in groups.items()
    }


def _rows_by_key(rows: list[Any]) -> dict[tuple[str, datetime], tuple]:
    out = {}
    for r in rows:
        key = (r["subject"], r["window_start"])
        assert key not in out, f"duplicate aggregate row {key}"
        out[key] = (r["count"], r["min"], r["max"], r["mean"], r["bad_rows"])
    return out


def _assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        g, w = got[k], want[k]
        assert g[0] == w[0] and g[1] == w[1] and g[2] == w[2] and g[4] == w[4], (k, g, w)
        assert (g[3] is None and w[3] is None) or math.isclose(g[3], w[3], rel_tol=1e-9), (k, g, w)


def test_aggregate_job_matches_plain_python(spark, leafjet, out_dir: Path):
    from bridges.spark.cli import main

    url = leafjet.url
    create_stream(url, "telemetry", ["telemetry.>"])
    msgs = []
    for i in range(600):
        dev = i % 4
        data = _payload(dev, i) if i % 97 else b'{"temp": "broken"}'
        msgs.append((f"telemetry.dev{dev}", data))
        if i % 200 == 199:
            publish(url, msgs)
            msgs = []
            time.sleep(0.6)  # spread the messages over several 1-second windows
    truth = stored_messages(url, "telemetry")
    out = out_dir / "agg"
    rc = main(["aggregate", "--servers", url, "--stream", "telemetry", "--field", "temp",
               "--window", "1 second", "--output", str(out), "--mode", "batch"])  # fmt: skip
    assert rc == 0
    got = _rows_by_key([r.asDict() for r in spark.read.parquet(str(out)).collect()])
    want = _python_aggregate(truth, "temp", 1)
    assert len({k[1] for k in want}) >= 2
    _assert_same(got, want)

    from bridges.spark.demo import run_demo

    chart = out_dir / "chart.png"
    rows = run_demo(url, "telemetry", chart, window="1 second", spark=spark, print_table=False)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _assert_same(_rows_by_key(rows), want)


def _last_offset(checkpoint: Path) -> dict[str, int]:
    files = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    return json.loads(max(files, key=lambda p: int(p.name)).read_text().splitlines()[-1])


def test_streaming_resumes_from_checkpoint_with_exactly_once_output(spark, leafjet, out_dir: Path):
    from bridges.spark.aggregate import AggregateConfig, start_streaming

    url = leafjet.url
    create_stream(url, "stream1", ["s1.>"])
    publish(url, [(f"s1.dev{i % 3}", _payload(i % 3, i)) for i in range(400)])
    cfg = AggregateConfig(
        servers=url, stream="stream1", window="1 second", output=str(out_dir / "out"),
        checkpoint=str(out_dir / "ckpt"), trigger_interval="0 seconds",
        options={"maxRecordsPerBatch": "50"},
    )  # fmt: skip
    q = start_streaming(spark, cfg)
    try:

        def two_batches() -> bool:
            if q.exception() is not None:
                raise AssertionError(str(q.exception()))
            return bool(q.lastProgress and q.lastProgress["batchId"] >= 1)

        wait_until(two_batches, 60, what="two micro-batches")
    finally:
        q.stop()  # stopped mid-way: the rest of the backlog is unread
    assert _last_offset(out_dir / "ckpt")["stream1"] < 400

    publish(url, [(f"s1.dev{i % 3}", _payload(i % 3, i)) for i in range(400, 700)])
    time.sleep(1.1)
    publish(url, [("s1.flush", b'{"temp": 0}')])  # a later window: moves the watermark past the data
    truth = [m for m in stored_messages(url, "stream1") if m.subject != "s1.flush"]

    restarted = start_streaming(spark, dataclasses.replace(cfg, available_now=True))
    # generous: on a loaded machine each of its ~7 micro-batches may take seconds
    assert restarted.awaitTermination(600), "the available-now query did not finish"
    assert restarted.exception() is None
    end = _last_offset(out_dir / "ckpt")
    assert end == {"stream1": 701}
    rows = [r.asDict() for r in spark.read.parquet(cfg.output).collect()]
    got = _rows_by_key(rows)
    assert sum(r["count"] for r in rows if r["subject"] != "s1.flush") == 700
    _assert_same({k: v for k, v in got.items() if k[0] != "s1.flush"}, _python_aggregate(truth, "temp", 1))


def test_json_schema_gives_columns_nulls_for_bad_payloads_and_a_corrupt_flag(spark, leafjet, reader):
    url, js = leafjet.url, f"js_{reader}"
    create_stream(url, js, [f"{js}.>"])
    payloads = [
        b'{"device": "d1", "temp": 21.5, "ok": true}',
        b'{"device": "d2", "temp": "hot"}',
        b"not json at all",
        b'{"device": "d3"}',
        b"[1, 2, 3]",
        b'{"device": "d4", "temp": 3}',
        b"\xff\xfe",
    ]
    publish(url, [(f"{js}.x", p) for p in payloads])
    df = _read(spark, url, js, jsonSchema="device STRING, temp DOUBLE, ok BOOLEAN", reader=reader)
    assert df.columns[-4:] == ["device", "temp", "ok", "_corrupt"]
    rows = [(r.device, r.temp, r.ok, r._corrupt) for r in df.orderBy("seq").collect()]
    assert rows == [
        ("d1", 21.5, True, False),
        (None, None, None, True),
        (None, None, None, True),
        ("d3", None, None, False),
        (None, None, None, True),
        ("d4", 3.0, None, False),
        (None, None, None, True),
    ]
    assert df.filter("_corrupt").count() == 4
    assert_read_by(df, reader)


def test_purged_range_fails_by_default_and_is_skipped_on_request(spark, leafjet, reader):
    url, purged = leafjet.url, f"purged_{reader}"
    create_stream(url, purged, [f"{purged}.>"])
    publish(url, [(f"{purged}.a", b"%d" % i) for i in range(100)])
    assert api(url, f"$JS.API.STREAM.PURGE.{purged}", {"seq": 41})["success"]
    with pytest.raises(Exception, match=rf"data loss on stream '{purged}'.*1\.\.40.*failOnDataLoss"):
        _read(spark, url, purged, startSeq=1, reader=reader).collect()
    rows = _read(spark, url, purged, startSeq=1, failOnDataLoss="false", reader=reader).collect()
    assert sorted(r.seq for r in rows) == list(range(41, 101))
    assert len(_read(spark, url, purged, reader=reader).collect()) == 60  # no explicit start: what is stored


def test_missing_stream_bad_credentials_and_unreachable_server_are_named(
    spark, leafjet, tmp_path: Path, reader
):
    with pytest.raises(Exception, match=r"stream 'nope' on nats://127\.0\.0\.1:\d+ not found"):
        _read(spark, leafjet.url, "nope", reader=reader).collect()
    dead = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=rf"cannot reach leafjet server {dead} \(stream 'telemetry'\)"):
        _read(spark, dead, "telemetry", timeout=2, reader=reader).collect()
    secured = start_leafjet(
        tmp_path / "auth", {"authorization": {"users": [{"user": "alice", "password": "pw"}]}}
    )
    try:
        create_url = secured.url.replace("nats://", "nats://alice:pw@")
        create_stream(create_url, "t", ["t.>"])
        publish(create_url, [("t.a", b"1")])
        authed = _read(spark, secured.url, "t", user="alice", password="pw", reader=reader)
        assert len(authed.collect()) == 1
        assert_read_by(authed, reader)
        with pytest.raises(Exception, match=r"authentication failed at leafjet server .* user 'alice'"):
            _read(spark, secured.url, "t", user="alice", password="wrong", reader=reader).collect()
    finally:
        secured.stop()
