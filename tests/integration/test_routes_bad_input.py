"""Bad input on leafjet's route port: a clear error, that connection closed, the cluster working.

A server of another cluster, bad route credentials, a peer speaking garbage, a config whose
routes point at the server itself. leafjet's route protocol is its own (nats-server cannot join
a leafjet cluster), so these run against leafjet only; the reference's equivalents are the
texts the errors follow.
"""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.request

import anyio
import nats
import pytest

from tests.support.cluster import Cluster, wait_for_interest
from tests.support.servers import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(180)]

AUTH = {"user": "route", "password": "s3cret-route"}


async def _assert_cluster_works(c: Cluster) -> None:
    """A request from node 0 is answered on node 1: the two routes' interest and messages flow."""
    a = await nats.connect(c.url(0), allow_reconnect=False)
    b = await nats.connect(c.url(1), allow_reconnect=False)
    try:

        async def answer(msg):
            await b.publish(msg.reply, b"ok")

        await b.subscribe("health.check", cb=answer)
        await b.flush()
        await wait_for_interest(a, "health.check")
        assert (await a.request("health.check", b"", timeout=5)).data == b"ok"
    finally:
        await a.close()
        await b.close()


def _wait_log(c: Cluster, i: int, text: str, timeout: float = 20.0) -> None:
    try:
        wait_until(lambda: text in c.log(i), timeout, interval=0.05, what=f"{text!r} in the log")
    except TimeoutError as e:
        raise AssertionError(f"{e}\n--- log ---\n{c.log(i)[-3000:]}") from None


def _hello(server_id: str, server_name: str) -> bytes:
    """The CONNECT of a fake leafjet peer of cluster C that knows the route credentials."""
    connect = {
        "leafjet_route": 1,
        "server_id": server_id,
        "server_name": server_name,
        "cluster": "C",
        **{"user": AUTH["user"], "pass": AUTH["password"]},
    }
    return b"CONNECT " + json.dumps(connect).encode() + b"\r\n"


@pytest.fixture
def pair(tmp_path):
    c = Cluster(tmp_path / "main", "leafjet", size=2, authorization=AUTH)
    try:
        c.start()
        c.wait_for_mesh()
        yield c
    finally:
        c.close()


async def test_a_server_of_another_cluster_is_refused(pair, tmp_path):
    stranger = Cluster(tmp_path / "other", "leafjet", size=1, name="OTHER", authorization=AUTH)
    stranger.nodes[0].cluster_port = free_port()
    cfg = stranger.config(0, routes=[pair.route_url(0)])
    try:
        await anyio.to_thread.run_sync(lambda: stranger.start_node(0, cfg))
        # The dialling side reads the cluster name in INFO, refuses, and tells the other side why.
        text = 'Rejecting connection, cluster name "C" does not match "OTHER"'
        await anyio.to_thread.run_sync(lambda: _wait_log(stranger, 0, "the peer is in cluster 'C'"))
        await anyio.to_thread.run_sync(lambda: _wait_log(pair, 0, text))
        assert {r["remote_name"] for r in (pair.routez(0) or {})["routes"]} == {pair.nodes[1].name}
        await _assert_cluster_works(pair)
    finally:
        stranger.close()


async def test_bad_route_credentials_are_refused(pair, tmp_path):
    # It knows neither the password in its route URL nor the cluster's: it never learns who the
    # other members are either (the INFO before the CONNECT lists no peers).
    intruder = Cluster(tmp_path / "bad", "leafjet", size=1, authorization={**AUTH, "password": "wrong"})
    cfg = intruder.config(0, routes=[pair.route_url(0, user="route", password="wrong")])
    try:
        await anyio.to_thread.run_sync(lambda: intruder.start_node(0, cfg))
        await anyio.to_thread.run_sync(lambda: _wait_log(pair, 0, "bad route credentials (user 'route')"))
        await anyio.to_thread.run_sync(lambda: _wait_log(intruder, 0, "Authorization Violation"))
        assert "wrong" not in pair.log(0) and "wrong" not in intruder.log(0)  # no secret in a log
        assert (pair.routez(0) or {})["num_routes"] == 1
        await _assert_cluster_works(pair)
    finally:
        intruder.close()


def _raw_route(port: int, data: bytes, quiet: float = 10.0) -> tuple[bytes, bytes, bool]:
    """Connect to a route port, read its INFO, send ``data``; (INFO, what came back, closed).
    Reads until the server closes, or until nothing arrives for ``quiet`` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=quiet) as s:
        info = b""
        while not info.endswith(b"\r\n"):
            chunk = s.recv(4096)
            assert chunk, "closed before INFO"
            info += chunk
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                return info, out, False
            if not chunk:
                return info, out, True
            out += chunk


@pytest.mark.parametrize(
    "garbage, error",
    [
        (b"PING\r\n", b"-ERR 'Authorization Violation'"),  # any op before CONNECT
        (b"HELLO THERE\r\n", b"-ERR 'Unknown Protocol Operation'"),
        (b"\x00\xff\x13garbage", b"-ERR 'Unknown Protocol Operation'"),
        # credentials first: who does not know them learns nothing more
        (b'CONNECT {"verbose":false,"lang":"python"}\r\n', b"-ERR 'Authorization Violation'"),
        (
            b'CONNECT {"lang":"python","user":"route","pass":"s3cret-route"}\r\n',
            b"-ERR 'attempted to connect to route port'",
        ),
        (  # a server that is not leafjet (nats-server's route CONNECT)
            b'CONNECT {"user":"route","pass":"s3cret-route","cluster":"C","name":"NXYZ"}\r\n',
            b"-ERR 'route protocol not supported: not a leafjet route'",
        ),
        (  # a leafjet route whose server id is not a string
            b'CONNECT {"user":"route","pass":"s3cret-route","cluster":"C",'
            b'"leafjet_route":1,"server_id":42}\r\n',
            b"-ERR 'route without a server id'",
        ),
    ],
    ids=[
        "ping-first",
        "text",
        "binary",
        "a-client",
        "a-client-with-route-credentials",
        "not-leafjet",
        "no-server-id",
    ],
)
async def test_a_peer_speaking_garbage_is_closed(pair, garbage, error):
    port = pair.nodes[0].cluster_port
    info, out, closed = await anyio.to_thread.run_sync(_raw_route, port, garbage)
    hello = json.loads(info[5:])
    assert hello["cluster"] == "C"
    assert "leafjet_peers" not in hello, "a stranger learns nothing of the other members"
    assert error in out and closed, out
    await _assert_cluster_works(pair)


async def test_garbage_after_the_handshake_ends_only_that_route(pair):
    """An authenticated peer that then sends garbage: its route closes with an error, others stay."""
    port = pair.nodes[0].cluster_port
    hello = _hello("NFAKEPEER", "fake")
    # Bad interest is refused and the route stays (the reference keeps a connection that sends
    # an invalid subscription): the PING after it is answered.
    data = hello + b"RS+ bad%account foo\r\nRS+ $G foo..bar\r\nPING\r\n"
    _info, out, closed = await anyio.to_thread.run_sync(_raw_route, port, data, 1.0)
    assert b"-ERR 'Invalid Account'" in out and b"-ERR 'Invalid Subscription'" in out, out
    assert b"PONG" in out and not closed, out
    # A size field that is not a size: a silent close of that route only.
    data = hello + b"RS+ $G ok.subject\r\nRMSG $G x 999999999999\r\n"
    _info, out, closed = await anyio.to_thread.run_sync(_raw_route, port, data)
    assert closed, out
    assert {r["remote_name"] for r in (pair.routez(0) or {})["routes"]} == {pair.nodes[1].name}
    await _assert_cluster_works(pair)


async def test_bad_gossip_is_ignored_and_an_oversized_message_closes_only_that_route(pair):
    """A peer's INFO whose route list is malformed changes nothing (the route stays: its PING is
    answered); a message over max_payload is a Maximum Payload Violation and a close."""
    port = pair.nodes[0].cluster_port
    hello = _hello("NFAKEGOSSIP", "gossip")
    peers = [1, "x", None, {"id": 5, "url": "nats-route://h:1"}, {"id": "NX", "url": "nats-route://:0"}]
    gossip = b"INFO " + json.dumps({"leafjet_peers": peers}).encode() + b"\r\n"
    not_a_list = b'INFO {"leafjet_peers":{"id":"NY"}}\r\n'
    _info, out, closed = await anyio.to_thread.run_sync(
        _raw_route, port, hello + gossip + not_a_list + b"PING\r\n", 1.0
    )
    assert b"PONG" in out and b"-ERR" not in out and not closed, out
    diallers = (pair.routez(0) or {})["diallers"]
    assert all("h:1" not in d["url"] for d in diallers), diallers

    _info, out, closed = await anyio.to_thread.run_sync(_raw_route, port, hello + b"RMSG $G x 2000000\r\n")
    assert b"-ERR 'Maximum Payload Violation'" in out and closed, out
    assert {r["remote_name"] for r in (pair.routez(0) or {})["routes"]} == {pair.nodes[1].name}
    await _assert_cluster_works(pair)


async def test_routes_pointing_at_the_server_itself_are_ignored(tmp_path):
    c = Cluster(tmp_path, "leafjet", size=2)
    try:
        # Each server lists every server of the cluster, itself included (one config for all).
        configs = [c.config(i, routes=[c.route_url(0), c.route_url(1)]) for i in range(2)]
        for i in range(2):
            await anyio.to_thread.run_sync(lambda i=i: c.start_node(i, configs[i]))
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        for i in range(2):
            await anyio.to_thread.run_sync(
                lambda i=i: _wait_log(
                    c, i, f"route nats-route://127.0.0.1:{c.nodes[i].cluster_port} leads to"
                )
            )
            assert (c.routez(i) or {})["num_routes"] == 1
        await _assert_cluster_works(c)
    finally:
        c.close()


@pytest.mark.parametrize("verify", [False, True], ids=["tls", "mtls"])
async def test_routes_run_over_tls_and_a_plain_peer_is_refused(tmp_path, verify):
    from core.certs import make_ca, make_server_cert

    pki = tmp_path / "pki"
    make_server_cert(pki, make_ca(pki))
    tls = {
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server-key.pem"),
        "ca_file": str(pki / "ca.pem"),
        "verify": verify,
    }
    c = Cluster(tmp_path / "tls", "leafjet", size=2)
    try:
        for i in range(2):
            cfg = c.config(i, tls=tls)
            await anyio.to_thread.run_sync(lambda i=i, cfg=cfg: c.start_node(i, cfg))
        await anyio.to_thread.run_sync(c.wait_for_mesh)
        await _assert_cluster_works(c)
        # A peer that speaks plain text to a TLS route port: that connection fails, nothing else.
        with socket.create_connection(("127.0.0.1", c.nodes[0].cluster_port), timeout=10) as s:
            s.sendall(b'CONNECT {"leafjet_route":1}\r\n')
            with contextlib.suppress(ConnectionResetError):
                while s.recv(4096):  # a TLS alert at most, then the server closes
                    pass
        await anyio.to_thread.run_sync(lambda: _wait_log(c, 0, "TLS handshake failed"))
        assert (c.routez(0) or {})["num_routes"] == 1
        await _assert_cluster_works(c)
    finally:
        c.close()


def _accounts(c: Cluster, i: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{c.nodes[i].http_port}/accountz", timeout=5) as r:
        return set(json.loads(r.read())["accounts"])


async def test_interest_for_an_unknown_account_is_ignored_not_made(pair):
    """A peer naming accounts this server does not have makes none of them (it could otherwise
    grow the server without bound, one account per name): the interest is ignored with a log
    line at powers of two, the route stays, and interest for the accounts it has still counts."""
    port = pair.nodes[0].cluster_port
    before = await anyio.to_thread.run_sync(_accounts, pair, 0)
    assert {"$G", "$SYS"} <= before, before  # routes carry $SYS (the meta group) from the start
    hello = _hello("NFAKEACCOUNTS", "accounts")
    strangers = b"".join(b"RS+ STRANGER%d foo\r\n" % i for i in range(100))
    _info, out, closed = await anyio.to_thread.run_sync(
        _raw_route, port, hello + strangers + b"RS+ $G known.subject\r\nPING\r\n", 1.0
    )
    assert b"PONG" in out and b"-ERR" not in out and not closed, out
    assert await anyio.to_thread.run_sync(_accounts, pair, 0) == before
    log = pair.log(0)
    assert "ignored interest for account 'STRANGER0'" in log, log[-3000:]
    assert log.count("ignored interest for account") <= 8, "one line per power of two, not per RS+"
    await _assert_cluster_works(pair)
