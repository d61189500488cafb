"""The monitor in process: /healthz through JetStream's recovery and a stream that is on disk but
not loaded; the HTTP shell answering a failing handler with 500 and one log line."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import anyio
import pytest

from core.config import JetStreamConfig, ServerConfig
from core.jetstream.engine import JetStream
from core.jetstream.models import StreamConfig
from core.server.http import HttpServer, Request, Response
from core.server.monitor import Monitor, go_duration_short
from core.server.server import Server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def healthz(monitor: Monitor, **q: str) -> tuple[int, dict]:
    resp = await monitor.handle(Request("GET", "/healthz", q))
    return resp.status, json.loads(resp.body)


async def test_healthz_is_unavailable_until_jetstream_recovered_and_when_a_stream_is_not_loaded(
    tmp_path: Path,
):
    server = Server(ServerConfig(port=0, http_port=0))
    js = JetStream(server, JetStreamConfig(store_dir=str(tmp_path)), tmp_path)
    monitor = Monitor(server)
    unavailable = {"status": "unavailable", "error": "JetStream not enabled (10076)"}
    assert await healthz(monitor) == (503, unavailable)
    assert await healthz(monitor, **{"js-enabled-only": "true"}) == (503, unavailable)
    assert await healthz(monitor, **{"js-server-only": "true"}) == (200, {"status": "ok"})
    async with anyio.create_task_group() as tg:
        await tg.start(js.run)
        try:
            assert await healthz(monitor) == (200, {"status": "ok"})
            ajs = js.accounts["$G"]
            await js.create_stream(ajs, StreamConfig.from_json({"name": "S", "subjects": ["s.>"]}))
            assert await healthz(monitor) == (200, {"status": "ok"})
            # a stream folder the server did not load (the reference: "could not be recovered")
            shutil.copytree(ajs.root / "S", ajs.root / "T", ignore=shutil.ignore_patterns("msgs.db*"))
            status, body = await healthz(monitor)
            assert status == 503
            error = "JetStream stream '$G > T' could not be recovered"
            assert body == {"status": "unavailable", "error": error}
            assert await healthz(monitor, **{"js-enabled-only": "1"}) == (200, {"status": "ok"})
            shutil.rmtree(ajs.root / "T")
            assert await healthz(monitor) == (200, {"status": "ok"})
            bad = await monitor.handle(Request("GET", "/healthz", {"js-enabled-only": "maybe"}))
            assert bad.status == 400
        finally:
            tg.cancel_scope.cancel()


async def test_a_failing_handler_answers_500_and_logs_one_line(caplog: pytest.LogCaptureFixture):
    async def handler(req: Request) -> Response:
        if req.path == "/boom":
            raise ValueError("kaput")
        return Response(200, b"{}")

    http = HttpServer("127.0.0.1", 0, handler)
    port = await http.serve_until_ready()
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve_forever)
        try:
            with caplog.at_level(logging.ERROR, logger="leafjet.monitor"):
                async with await anyio.connect_tcp("127.0.0.1", port) as s:
                    await s.send(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
                    data = b""
                    with anyio.fail_after(5):
                        while data.count(b"HTTP/1.1 ") < 2:
                            data += await s.receive()
            assert data.startswith(b"HTTP/1.1 500 ")
            assert b"HTTP/1.1 200 " in data  # the connection goes on serving
            lines = [r for r in caplog.records if r.name == "leafjet.monitor"]
            assert len(lines) == 1 and "kaput" in lines[0].getMessage()
        finally:
            tg.cancel_scope.cancel()


def test_uptime_is_written_as_the_reference_writes_it():
    assert go_duration_short(0) == "0s"
    assert go_duration_short(61) == "1m1s"
    assert go_duration_short(3600 * 25 + 2) == "1d1h0m2s"
    assert go_duration_short(365 * 86400 + 86400) == "1y1d0h0m0s"
