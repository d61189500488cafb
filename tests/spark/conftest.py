"""A session-scoped quiet SparkSession and helpers that fill and inspect real leafjet streams."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from tests.support.servers import RunningServer, start_leafjet, start_reference


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from bridges.spark.session import build_jvm_reader, quiet_session

    build_jvm_reader()
    session = quiet_session("leafjet-tests", master="local[2]", tmp_dir=tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


def jvm_reader_loaded(spark: Any) -> bool:
    return "leafjet-spark.jar" in spark.sparkContext.getConf().get("spark.jars", "")


@pytest.fixture(params=["python", "jvm"])
def reader(request: pytest.FixtureRequest, spark: Any) -> str:
    """Which reader a batch read goes through (option ``reader``); the JVM one when its jar is built."""
    if request.param == "jvm" and not jvm_reader_loaded(spark):
        pytest.skip("the JVM reader is not built (no JDK: scripts/build_spark_reader)")
    return str(request.param)


def assert_read_by(df: Any, reader: str) -> None:
    """The executed plan names the reader that ran (LeafjetScan's description)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert f"reader={reader}" in plan, plan


@pytest.fixture(scope="module")
def leafjet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_leafjet(tmp_path_factory.mktemp("leafjet"))
    yield srv
    srv.stop()


@dataclass(frozen=True)
class StoredMessage:
    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]
    ts: datetime  # microsecond precision, UTC


def _ts(text: str) -> datetime:
    """RFC3339 with nanoseconds -> datetime (truncated to microseconds), independently of the source."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head).replace(tzinfo=UTC, microsecond=int((frac + "000000")[:6]))


async def _with_nc(url: str, fn: Any, **connect: Any) -> Any:
    import nats

    nc = await nats.connect(url, allow_reconnect=False, **connect)
    try:
        return await fn(nc)
    finally:
        await nc.close()


def create_stream(url: str, name: str, subjects: Sequence[str], *, allow_direct: bool = True) -> None:
    async def go(nc: Any) -> None:
        cfg = {"name": name, "subjects": list(subjects), "storage": "file", "allow_direct": allow_direct}
        resp = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode())).data)
        assert "error" not in resp, resp

    asyncio.run(_with_nc(url, go))


def publish(
    url: str, messages: Sequence[tuple[str, bytes] | tuple[str, bytes, dict[str, str]]], window: int = 500
) -> None:
    """Publish with JetStream acks, ``window`` outstanding at a time, in order."""

    async def go(nc: Any) -> None:
        js = nc.jetstream()
        for i in range(0, len(messages), window):
            futs = []
            for m in messages[i : i + window]:
                headers = m[2] if len(m) > 2 else None  # type: ignore[misc]
                futs.append(await js.publish_async(m[0], m[1], headers=headers))
            await asyncio.gather(*futs)

    asyncio.run(_with_nc(url, go))


def api(url: str, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    async def go(nc: Any) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else b""
        return json.loads((await nc.request(subject, payload, timeout=5)).data)

    return asyncio.run(_with_nc(url, go))


def stored_messages(url: str, stream: str) -> list[StoredMessage]:
    """Every message of the stream via STREAM.MSG.GET: the ground truth the source is compared with."""

    async def go(nc: Any) -> list[StoredMessage]:
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)).data)
        out = []
        for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
            body = json.dumps({"seq": seq}).encode()
            resp = json.loads((await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", body, timeout=5)).data)
            if "error" in resp:
                continue
            m = resp["message"]
            headers: dict[str, str] = {}
            if m.get("hdrs"):
                for line in base64.b64decode(m["hdrs"]).decode().split("\r\n")[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip()] = v.strip()
            data = base64.b64decode(m["data"]) if m.get("data") else b""
            out.append(StoredMessage(m["seq"], m["subject"], data, headers, _ts(m["time"])))
        return out

    return asyncio.run(_with_nc(url, go))


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    return tmp_path


def error_on_a_forged_frame(tmp_path: Path, frame: bytes, read: Callable[[str], str]) -> str:
    """``read(url)``'s error text (it returns it) when a responder on the reference answers the bulk
    read API of stream 'forged' (sequences 1..2) with ``frame``: a reader's bad-frame check, real
    server and sockets, only the reply forged."""
    import nats

    ref = start_reference(tmp_path / "ref", jetstream=True)
    try:
        create_stream(ref.url, "forged", ["forged.>"])
        publish(ref.url, [("forged.a", b"1"), ("forged.a", b"2")])

        async def scenario() -> str:
            nc = await nats.connect(ref.url)

            async def answer(msg: Any) -> None:
                headers = {"Leafjet-Read": "1", "Leafjet-Read-First": "1", "Leafjet-Read-Last": "2"}
                await nc.publish(msg.reply, frame, headers=headers)

            await nc.subscribe("$JS.API.LEAFJET.READ.forged", cb=answer)
            await nc.flush()
            try:
                return await asyncio.to_thread(read, ref.url)
            finally:
                await nc.close()

        return asyncio.run(scenario())
    finally:
        ref.stop()
