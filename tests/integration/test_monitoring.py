"""The monitoring port: the reference's endpoints and field names, compared with a running
reference on the same scenario; /metrics parsed as Prometheus text; abuse of the port."""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import RunningServer, free_port, start_leafjet, start_server, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ENDPOINTS = (
    "/varz",
    "/connz?subs=1",
    "/connz?subs=detail",
    "/subsz?subs=1",
    "/accountz",
    "/accountz?acc=$G",
    "/jsz?accounts=1&streams=1&consumers=1&config=1",
    "/leafz",
    "/routez",
)

# Keys leafjet writes that the reference omits in this scenario: its JetStream syncs on an
# interval (sync_interval), leafjet's after each commit (the reference's sync_always).
LEAFJET_ONLY = {"sync_always"}


def get(port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def get_json(port: int, path: str) -> Any:
    status, body, _ = get(port, path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def start_with_monitor(kind: str, workdir: Path, **kw: Any) -> tuple[RunningServer, int]:
    http_port = free_port()
    srv = start_server(kind, workdir, {"http_port": http_port}, **kw)
    wait_until(lambda: _answers(http_port), 10, what="the monitoring port")
    return srv, http_port


def _answers(port: int) -> bool:
    try:
        return get(port, "/healthz", timeout=2)[0] in (200, 503)
    except OSError:
        return False


async def run_scenario(url: str) -> list[Any]:
    """Two named clients with subscriptions (one a queue member), a stream with three messages
    and a pull consumer that fetched one of them (unacked), five core messages on ``foo``."""
    c1 = await nats.connect(url, name="c1")
    c2 = await nats.connect(url, name="c2")
    js = c1.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(3):
        await js.publish("s.a", f"m{i}".encode())
    await c1.subscribe("foo")
    await c1.subscribe("bar.*")
    await c2.subscribe("foo", queue="q")
    await c2.flush()
    await c1.flush()
    psub = await js.pull_subscribe("s.>", durable="D", stream="S")
    msgs = await psub.fetch(1, timeout=5)
    assert len(msgs) == 1
    for _ in range(5):
        await c1.publish("foo", b"hello")
    await c1.flush()
    await c2.flush()
    return [c1, c2]


def _jtype(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return type(v).__name__


def _compare(ours: Any, ref: Any, path: str, missing: list[str], problems: list[str]) -> None:
    """Every key of ours exists in the reference's answer with the same JSON type; what the
    reference has and we do not goes to ``missing`` (left out on purpose: reported, not failed)."""
    if isinstance(ours, dict) and isinstance(ref, dict):
        for k, v in ours.items():
            if k not in ref:
                if k not in LEAFJET_ONLY and not (isinstance(v, dict) and path.endswith("http_req_stats")):
                    problems.append(f"{path}.{k}: not in the reference's answer")
                continue
            if path.endswith("http_req_stats"):
                continue
            if _jtype(v) != _jtype(ref[k]) and not (v == {} or ref[k] == {}):
                problems.append(f"{path}.{k}: {_jtype(v)} here, {_jtype(ref[k])} on the reference")
                continue
            _compare(v, ref[k], f"{path}.{k}", missing, problems)
        missing.extend(f"{path}.{k}" for k in ref if k not in ours)
    elif isinstance(ours, list) and isinstance(ref, list) and ours and ref:
        _compare(ours[0], ref[0], f"{path}[]", missing, problems)


@pytest.fixture
async def both(tmp_path: Path):
    out = {}
    clients: list[Any] = []
    servers = []
    try:
        for kind in ("leafjet", "reference"):
            srv, port = start_with_monitor(kind, tmp_path / kind, jetstream=True)
            servers.append(srv)
            clients += await run_scenario(srv.url)
            out[kind] = port
        yield out
    finally:
        for c in clients:
            await c.close()
        for srv in servers:
            srv.stop()


async def test_endpoints_answer_with_the_reference_fields_and_types(both):
    missing: list[str] = []
    problems: list[str] = []
    for ep in ENDPOINTS:
        ours = get_json(both["leafjet"], ep)
        ref = get_json(both["reference"], ep)
        if ep.startswith("/subsz"):
            # the reference lists its system account's subscriptions first: compare a client's
            ref["subscriptions_list"] = [s for s in ref["subscriptions_list"] if s["account"] == "$G"]
            ours["subscriptions_list"] = [s for s in ours["subscriptions_list"] if s["account"] == "$G"]
        _compare(ours, ref, ep, missing, problems)
    assert not problems, problems
    print("left out (the reference has them):", sorted(missing))


def figures(port: int) -> dict[str, Any]:
    """The deterministic figures of the scenario, as one endpoint or another reports them."""
    varz = get_json(port, "/varz")
    connz = get_json(port, "/connz?subs=1")
    by_name = {c["name"]: c for c in connz["connections"]}
    c1, c2 = by_name["c1"], by_name["c2"]
    jsz = get_json(port, "/jsz?accounts=1&streams=1&consumers=1")
    [acc] = jsz["account_details"]
    [stream] = acc["stream_detail"]
    [cons] = stream["consumer_detail"]
    st = stream["state"]
    page = get_json(port, "/connz?offset=1&limit=1&sort=cid")
    health = [get(port, p)[:2] for p in ("/healthz", "/healthz?js-enabled-only=true")]
    leafz, routez = get_json(port, "/leafz"), get_json(port, "/routez")
    return {
        "connections": (varz["connections"], connz["num_connections"], connz["total"]),
        "varz in": (varz["in_msgs"], varz["in_bytes"]),
        "varz out_msgs": varz["out_msgs"],
        "slow_consumers": varz["slow_consumers"],
        "c1 in": (c1["in_msgs"], c1["in_bytes"]),
        "c2": (c2["in_msgs"], c2["out_msgs"], c2["out_bytes"], c2["subscriptions"]),
        "c2 subs": c2["subscriptions_list"],
        "c1 subs": sorted(s for s in c1["subscriptions_list"] if not s.startswith("_INBOX.")),
        "c1 subscriptions": c1["subscriptions"],
        "c1 out_msgs": c1["out_msgs"],
        "jsz": (jsz["streams"], jsz["consumers"], jsz["messages"], jsz["bytes"]),
        "stream": (stream["name"], st["messages"], st["bytes"], st["first_seq"], st["last_seq"]),
        "consumer_count": st["consumer_count"],
        "consumer": (cons["name"], cons["num_pending"], cons["num_ack_pending"], cons["num_redelivered"]),
        "consumer config shown": "config" in cons,
        "delivered": (cons["delivered"]["stream_seq"], cons["delivered"]["consumer_seq"]),
        "page": (page["offset"], page["limit"], page["total"], len(page["connections"])),
        "page cid is the larger": page["connections"][0]["cid"] == max(c1["cid"], c2["cid"]),
        "health": [(code, json.loads(body)) for code, body in health],
        "leafz": (leafz["leafnodes"], leafz["leafs"]),
        "routez": (routez["num_routes"], routez["routes"]),
        "bad sort": get(port, "/connz?sort=bogus")[0],
        "unknown path": get(port, "/no-such-endpoint")[0],
    }


async def test_counts_mean_what_the_reference_means(both):
    """The deterministic figures after the same scenario are the reference's."""
    ours, ref = figures(both["leafjet"]), figures(both["reference"])
    assert ours == ref
    # and they are what the scenario did, so the comparison cannot pass on two empty answers
    assert ours["connections"] == (2, 2, 2)
    assert ours["c2"][:2] == (0, 5) and ours["c2 subs"] == ["foo"]
    assert ours["c1 subs"] == ["bar.*", "foo"]
    assert ours["stream"][:2] == ("S", 3) and ours["consumer"] == ("D", 2, 1, 0)
    assert ours["health"] == [(200, {"status": "ok"})] * 2
    assert ours["bad sort"] == 400 and ours["unknown path"] == 404


async def test_metrics_are_prometheus_text_with_the_scenario_figures(tmp_path: Path):
    srv, port = start_with_monitor("leafjet", tmp_path / "lj", jetstream=True)
    clients = []
    try:
        clients = await run_scenario(srv.url)
        status, body, headers = get(port, "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        samples: dict[str, list[Any]] = {}
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                samples.setdefault(s.name, []).append(s)

        def one(name: str, **labels: str) -> float:
            hits = [s for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
            assert len(hits) == 1, (name, labels, samples.get(name))
            return hits[0].value

        varz = get_json(port, "/varz")  # after the scrape: the scrape is no message
        assert one("gnatsd_varz_connections") == 2
        assert one("gnatsd_varz_in_msgs") == varz["in_msgs"] >= 3 + 5
        assert one("gnatsd_varz_in_bytes") == varz["in_bytes"] > 0
        assert one("gnatsd_varz_out_msgs") == varz["out_msgs"] >= 5 + 5 + 1 + 5
        assert one("gnatsd_varz_slow_consumers") == 0
        assert one("gnatsd_varz_subscriptions") >= 4
        assert one("gnatsd_connz_num_connections") == 2
        assert one("jetstream_server_total_streams") == 1
        assert one("jetstream_server_total_messages") == 3
        assert one("jetstream_stream_total_messages", stream_name="S", account="$G") == 3
        assert one("jetstream_stream_first_seq", stream_name="S") == 1
        assert one("jetstream_stream_last_seq", stream_name="S") == 3
        assert one("jetstream_stream_consumer_count", stream_name="S") == 1
        assert one("jetstream_consumer_num_pending", stream_name="S", consumer_name="D") == 2
        assert one("jetstream_consumer_num_ack_pending", consumer_name="D") == 1
        assert one("jetstream_consumer_num_redelivered", consumer_name="D") == 0
        assert one("jetstream_consumer_num_waiting", consumer_name="D") == 0
        assert one("jetstream_consumer_delivered_stream_seq", consumer_name="D") == 1
        # a scrape reads the state of the moment: another publish shows at the next one
        await clients[0].jetstream().publish("s.b", b"x")
        text = get(port, "/metrics")[1].decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        [msgs] = [s for s in fams["jetstream_stream_total_messages"].samples]
        assert msgs.value == 4
    finally:
        for c in clients:
            await c.close()
        srv.stop()


async def _ping_rtt(nc: Any) -> float:
    t0 = time.monotonic()
    await nc.flush(timeout=5)
    return time.monotonic() - t0


async def test_abuse_of_the_monitoring_port_never_stalls_clients(tmp_path: Path):
    srv, port = start_with_monitor("leafjet", tmp_path / "lj", jetstream=True)
    nc = await nats.connect(srv.url)
    worst = 0.0
    stop = anyio.Event()

    async def pinger() -> None:
        nonlocal worst
        while not stop.is_set():
            worst = max(worst, await _ping_rtt(nc))
            await anyio.sleep(0.05)

    def raw(data: bytes, timeout: float = 10.0) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(data)
            chunks = []
            try:
                while chunk := s.recv(65536):
                    chunks.append(chunk)
            except (ConnectionResetError, TimeoutError):
                pass
            return b"".join(chunks)

    def slowloris() -> tuple[float, bytes]:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            try:
                for b in b"GET /varz HTTP/1.1\r\nHost: x\r\n":
                    s.sendall(bytes([b]))
                    time.sleep(1)
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - t0, b""
            try:
                return time.monotonic() - t0, s.recv(100)
            except (ConnectionResetError, TimeoutError):
                return time.monotonic() - t0, b""

    def crowd() -> int:
        socks = []
        try:
            for _ in range(200):
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            ok = 0
            for s in socks:
                try:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    if s.recv(100).startswith(b"HTTP/1.1 200"):
                        ok += 1
                except OSError:
                    pass  # closed at accept: over the bound
            return ok
        finally:
            for s in socks:
                s.close()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pinger)
            big = raw(b"GET /varz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
            assert big.startswith(b"HTTP/1.1 431 "), big[:80]
            post = raw(b"POST /varz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
            assert post.startswith(b"HTTP/1.1 405"), post[:80]
            garbage = raw(bytes(range(256)) * 4 + b"\r\n\r\n")
            assert garbage.startswith(b"HTTP/1.1 400 ") and b"\x01" not in garbage, garbage[:80]
            body = raw(b"GET /varz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            assert body.startswith(b"HTTP/1.1 413 "), body[:80]
            took, answer = await anyio.to_thread.run_sync(slowloris)
            assert answer == b"" and took < 20, (took, answer)
            served = await anyio.to_thread.run_sync(crowd)
            assert 1 <= served <= 32  # the bound on concurrent monitoring connections
            stop.set()
        assert worst < 2.0, worst
        assert srv.proc.poll() is None
        # and the port still serves
        assert get(port, "/healthz")[0] == 200
    finally:
        await nc.close()
        srv.stop()


async def test_http_port_flag_and_env_and_off_by_default(tmp_path: Path, monkeypatch):
    port = free_port()
    srv = start_leafjet(tmp_path / "flag", extra_args=("--http-port", str(port)))
    try:
        wait_until(lambda: _answers(port), 10, what="monitoring via --http-port")
        assert get_json(port, "/varz")["http_port"] == port
    finally:
        srv.stop()
    monkeypatch.setenv("LEAFJET_HTTP_PORT", str(port))
    srv = start_leafjet(tmp_path / "env")
    try:
        wait_until(lambda: _answers(port), 10, what="monitoring via LEAFJET_HTTP_PORT")
    finally:
        srv.stop()
    monkeypatch.delenv("LEAFJET_HTTP_PORT")
    srv = start_leafjet(tmp_path / "off")
    try:
        assert "monitoring" not in srv.log()
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        srv.stop()
    host_port = free_port()
    srv = start_leafjet(tmp_path / "http", {"http": f"127.0.0.1:{host_port}"})
    try:
        wait_until(lambda: _answers(host_port), 10, what="monitoring via http = host:port")
        assert get_json(host_port, "/varz")["http_host"] == "127.0.0.1"
    finally:
        srv.stop()


HEALTHZ_QUERIES = (
    "",
    "?details=true",
    "?js-meta-only=true",
    "?account=$G",
    "?account=$G&stream=S",
    "?account=$G&stream=S&consumer=D&details=true",
    "?account=$G&stream=NOPE",
    "?account=$G&stream=NOPE&details=true",
    "?account=$G&stream=S&consumer=NOPE",
    "?account=NOPE",
    "?account=NOPE&details=true",
    "?stream=S",
    "?stream=S&details=true",
    "?account=$G&consumer=D",
)


async def test_healthz_options_answer_as_the_reference(both):
    """Status and body of /healthz for each option the reference takes: details, the
    account/stream/consumer checks (404 when absent, 400 when asked without their parent)."""
    answers = {}
    for kind, port in both.items():
        answers[kind] = [(q, *get(port, "/healthz" + q)[:2]) for q in HEALTHZ_QUERIES]
    differ = [
        (q, ours[1:], ref[1:])
        for q, ours, ref in zip(HEALTHZ_QUERIES, answers["leafjet"], answers["reference"], strict=True)
        if (ours[1], json.loads(ours[2])) != (ref[1], json.loads(ref[2]))
    ]
    assert not differ, differ
