"""Leaf-node security per domain, and bad input on the leaf port, differential against nats-server.

Every scenario runs with the reference at both ends (the baseline), leafjet as the hub (a
nats-server leaf dials it), leafjet as the leaf (it dials a nats-server hub) and leafjet at both
ends, and asserts the baseline's outcome: whether a link comes up (seen in ``/leafz``), the error
the other side reports, which messages cross. The hub runs JetStream in domain HUB, each leaf in
EDGE. Raw-socket cases depend only on the hub's kind; they run once per combination anyway, since
a well-behaved leaf of the other kind must stay linked through them.

Secrets: every leafjet process here logs at debug level, and each test checks, when its servers
stop, that no password or nkey seed appears in any leafjet log (scenario 5).
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import nats
import nkeys
import pytest
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout

from core.certs import make_ca, make_client_cert, make_server_cert
from tests.support.barrier import subscriptions_sent
from tests.support.leafsec import RawLeaf, hub_config, leaf_config, leafz, links, start, wait_log
from tests.support.servers import RunningServer, free_port, wait_until_async

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    # nats-py leaves the socket of a refused connection for the garbage collector.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

# (hub kind, leaf kind)
COMBOS = [
    ("reference", "reference"),
    ("leafjet", "reference"),
    ("reference", "leafjet"),
    ("leafjet", "leafjet"),
]
COMBO_IDS = [f"hub={h}-leaf={leaf}" for h, leaf in COMBOS]
HUB_KINDS = ["reference", "leafjet"]


def _seed() -> str:
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()


def _public(seed: str) -> str:
    return nkeys.from_seed(bytearray(seed.encode())).public_key.decode()


LEAF1_PW = "leaf1-pw-Zq8sVw"
LEAF2_PW = "leaf2-pw-Kx3vNp"
WRONG_PW = "wrong-pw-Tt5mRb"
CLIENT_PW = "client-pw-Hh2wQe"
SEED = _seed()
WRONG_SEED = _seed()
SECRETS = (LEAF1_PW, LEAF2_PW, WRONG_PW, CLIENT_PW, SEED, WRONG_SEED)

# One log line per failed attempt of a soliciting leaf (TLS, auth, wrong port...), per kind.
LEAF_ATTEMPT_FAILED = {"reference": "Leafnode connection closed", "leafjet": "handshake failed"}
# One log line per refused credential on the hub, per kind.
HUB_AUTH_FAILED = {
    "reference": re.compile(r"\[ERR\] .*authentication error"),
    "leafjet": re.compile(r" WARNING leafjet\.leafnode: .*authorization violation"),
}
NO_RETRY = {"allow_reconnect": False, "max_reconnect_attempts": 0, "connect_timeout": 3}


# ---------------------------------------------------------------------------- fixtures and helpers


class Servers:
    """Starts servers for one test (leafjet at debug level), stops them, and checks the logs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[RunningServer] = []

    def start(self, kind: str, name: str, config: dict[str, Any]) -> RunningServer:
        srv = start(kind, self.root / name, config, debug=True)
        self.started.append(srv)
        return srv

    def start_many(self, *specs: tuple[str, str, dict[str, Any]]) -> list[RunningServer]:
        """Start several at once (leafjet takes about half a second to start)."""
        with ThreadPoolExecutor(len(specs)) as pool:
            futures = [
                pool.submit(start, kind, self.root / name, cfg, debug=True) for kind, name, cfg in specs
            ]
            servers = []
            for f in futures:
                servers.append(f.result())
                self.started.append(servers[-1])
        return servers

    def stop_and_check_secrets(self) -> None:
        for srv in self.started:
            srv.stop()
        for srv in self.started:
            if srv.kind == "leafjet":
                log = srv.log()
                leaked = [s[:6] + "..." for s in SECRETS if s in log]
                assert not leaked, f"secrets in {srv.log_path}: {leaked}"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    s = Servers(tmp_path)
    try:
        yield s
    finally:
        s.stop_and_check_secrets()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    srv = make_server_cert(d, ca)
    client = make_client_cert(d, ca, "edge")
    return {
        "ca": str(ca.cert),
        "cert": str(srv.cert),
        "key": str(srv.key),
        "client_cert": str(client.cert),
        "client_key": str(client.key),
    }


def leaf_url(
    port: int, user: str | None = None, password: str | None = None, scheme: str = "nats-leaf"
) -> str:
    auth = f"{user}:{password}@" if user else ""
    return f"{scheme}://{auth}127.0.0.1:{port}"


def client_url(srv: RunningServer, user: str | None = None) -> str:
    auth = f"{user}:{CLIENT_PW}@" if user else ""
    return f"nats://{auth}127.0.0.1:{srv.port}"


def tenant_accounts(*extra: dict[str, Any]) -> dict[str, Any]:
    """Accounts SITE1 and SITE2, each with a client user (c1, c2); ``extra`` users go in SITE1."""
    return {
        "accounts": {
            "SITE1": {"users": [{"user": "c1", "password": CLIENT_PW}, *extra]},
            "SITE2": {"users": [{"user": "c2", "password": CLIENT_PW}]},
        }
    }


def failed_attempts(leaf: RunningServer) -> int:
    marker = LEAF_ATTEMPT_FAILED[leaf.kind]
    return sum(marker in line for line in leaf.log().splitlines())


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    return await wait_until_async(predicate, timeout, 0.05, what)


async def wait_links(srv: RunningServer, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def check() -> bool:
        nonlocal found
        found = links(srv)
        return len(found) == count

    await eventually(check, timeout, f"{count} leaf link(s) on the {srv.kind} server")
    return found


async def refused_for_good(leaf: RunningServer, hub: RunningServer, hub_links: int) -> None:
    """``leaf`` failed twice (it keeps retrying) and the hub still has exactly ``hub_links``."""
    await eventually(lambda: failed_attempts(leaf) >= 2, 10, f"two failed attempts of the {leaf.kind} leaf")
    assert len(links(hub)) == hub_links
    assert not links(leaf)


async def serving(*servers: RunningServer, user: str | None = "c1") -> None:
    """Each server is alive and answers a client round trip."""
    for srv in servers:
        assert srv.proc.poll() is None, f"{srv.kind} exited"
        nc = await nats.connect(client_url(srv, user if srv.config.get("accounts") else None), **NO_RETRY)
        try:
            await nc.flush(timeout=3)
        finally:
            await nc.close()


async def crosses(pub: Any, sub_nc: Any, subject: str, payload: bytes, timeout: float = 8.0) -> None:
    """Publish ``payload`` on ``pub`` until ``sub_nc`` (subscribed here) receives it: interest
    takes a moment to cross the link."""
    sub = await sub_nc.subscribe(subject)
    await subscriptions_sent(sub_nc)
    try:
        with anyio.fail_after(timeout):
            while True:
                await pub.publish(subject, payload)
                await pub.flush()
                try:
                    msg = await sub.next_msg(timeout=0.1)
                except NatsTimeout:
                    continue
                assert msg.data == payload
                return
    finally:
        await sub.unsubscribe()


# ---------------------------------------------------------------------------- 1 + 4: passwords, tenants


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), COMBOS, ids=COMBO_IDS)
async def test_passwords_bind_each_leaf_to_its_tenant_and_a_wrong_one_retries_calmly(
    servers: Servers, hub_kind: str, leaf_kind: str
) -> None:
    lp = free_port()
    users = [
        {"user": "leaf1", "password": LEAF1_PW, "account": "SITE1"},
        {"user": "leaf2", "password": LEAF2_PW, "account": "SITE2"},
    ]
    hub = servers.start(
        hub_kind, "hub", hub_config(leaf_port=lp, authorization={"users": users}) | tenant_accounts()
    )
    since = time.monotonic()
    bad, site1, site2 = servers.start_many(
        (leaf_kind, "bad", leaf_config({"urls": [leaf_url(lp, "leaf1", WRONG_PW)]}, name="bad")),
        (leaf_kind, "site1", leaf_config({"urls": [leaf_url(lp, "leaf1", LEAF1_PW)]}, name="site1")),
        (leaf_kind, "site2", leaf_config({"urls": [leaf_url(lp, "leaf2", LEAF2_PW)]}, name="site2")),
    )
    rows = await wait_links(hub, 2)
    assert sorted(r["account"] for r in rows) == ["SITE1", "SITE2"]

    h1 = await nats.connect(client_url(hub, "c1"), **NO_RETRY)
    h2 = await nats.connect(client_url(hub, "c2"), **NO_RETRY)
    e1 = await nats.connect(site1.url, **NO_RETRY)
    e2 = await nats.connect(site2.url, **NO_RETRY)
    try:
        # Both sites use the same subjects; each hub tenant sees only its own site, both ways.
        seen: dict[str, list[bytes]] = {"h1": [], "h2": [], "e1": [], "e2": []}

        def keep(key: str) -> Callable[[Any], Any]:
            async def cb(msg: Any) -> None:
                seen[key].append(msg.data)

            return cb

        for key, nc, subject in (
            ("h1", h1, "up.>"),
            ("h2", h2, "up.>"),
            ("e1", e1, "down.>"),
            ("e2", e2, "down.>"),
        ):
            await nc.subscribe(subject, cb=keep(key))
            await subscriptions_sent(nc)

        async def until_seen(pairs: list[tuple[Any, str, bytes, str]]) -> None:
            with anyio.fail_after(10):
                while not all(data in seen[key] for _, _, data, key in pairs):
                    for nc, subject, data, key in pairs:
                        if data not in seen[key]:
                            await nc.publish(subject, data)
                            await nc.flush()
                    await anyio.sleep(0.05)

        await until_seen([(e1, "up.x", b"site1", "h1"), (e2, "up.x", b"site2", "h2")])
        await until_seen([(h1, "down.x", b"hub-site1", "e1"), (h2, "down.x", b"hub-site2", "e2")])
        # End markers ride the same paths after everything above; then nothing foreign arrived.
        await until_seen([(e1, "up.end", b"site1-end", "h1"), (e2, "up.end", b"site2-end", "h2")])
        await until_seen([(h1, "down.end", b"hub-site1-end", "e1"), (h2, "down.end", b"hub-site2-end", "e2")])
        for nc in (h1, h2, e1, e2):
            await nc.flush()
        assert set(seen["h1"]) == {b"site1", b"site1-end"}
        assert set(seen["h2"]) == {b"site2", b"site2-end"}
        assert set(seen["e1"]) == {b"hub-site1", b"hub-site1-end"}
        assert set(seen["e2"]) == {b"hub-site2", b"hub-site2-end"}
    finally:
        for nc in (h1, h2, e1, e2):
            await nc.close()

    # The wrong password: no link; the hub logs each refusal; the leaf says what the hub said
    # and keeps retrying at its reconnect pace (1 s plus jitter), never storming.
    await eventually(lambda: "Authorization Violation" in bad.log(), 10, "the bad leaf to log the refusal")
    await eventually(lambda: failed_attempts(bad) >= 2, 10, "the bad leaf to retry")
    window = max(0.0, 3.0 - (time.monotonic() - since))
    await anyio.sleep(window)  # a measuring window, not a wait for an outcome
    elapsed = time.monotonic() - since
    refusals = len(HUB_AUTH_FAILED[hub_kind].findall(hub.log()))
    assert 2 <= refusals <= elapsed / 1.0 + 2, (refusals, elapsed)
    assert len(links(hub)) == 2
    assert not links(bad)


# ---------------------------------------------------------------------------- 2: nkeys


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), COMBOS, ids=COMBO_IDS)
async def test_nkey_leaf_connects_and_a_wrong_seed_is_refused(
    servers: Servers, hub_kind: str, leaf_kind: str, tmp_path: Path
) -> None:
    lp = free_port()
    auth = {"nkey": _public(SEED), "account": "SITE1"}
    hub = servers.start(hub_kind, "hub", hub_config(leaf_port=lp, authorization=auth) | tenant_accounts())

    def remote(seed: str, name: str) -> dict[str, Any]:
        # leafjet reads the seed from a file (or inline); the reference takes it inline only.
        if leaf_kind == "leafjet":
            path = tmp_path / f"{name}.nk"
            path.write_text(seed + "\n")
            path.chmod(0o600)
            return {"urls": [leaf_url(lp)], "nkey": str(path)}
        return {"urls": [leaf_url(lp)], "nkey": seed}

    good, bad = servers.start_many(
        (leaf_kind, "good", leaf_config(remote(SEED, "good"), name="good")),
        (leaf_kind, "bad", leaf_config(remote(WRONG_SEED, "bad"), name="bad")),
    )
    rows = await wait_links(hub, 1)
    assert rows[0]["account"] == "SITE1"
    assert rows[0]["name"] == "good"
    await refused_for_good(bad, hub, 1)
    assert "Authorization Violation" in bad.log()
    assert len(links(good)) == 1


# ---------------------------------------------------------------------------- 3: TLS


@pytest.mark.parametrize("mode", ["tls", "mtls", "plain-hub"])
@pytest.mark.parametrize(("hub_kind", "leaf_kind"), COMBOS, ids=COMBO_IDS)
async def test_tls_on_the_leaf_port(
    servers: Servers, pki: dict[str, str], hub_kind: str, leaf_kind: str, mode: str
) -> None:
    """``tls``: a TLS leaf connects, a plain leaf does not (it cannot verify the hub's
    certificate: the reference's leaf starts TLS when the hub requires it, with the system CAs).
    ``mtls``: a leaf presenting a certificate connects, one without is refused. ``plain-hub``: a
    plain leaf connects, a TLS leaf does not. In every case both servers keep serving."""
    lp = free_port()
    server_tls: dict[str, Any] = {"cert_file": pki["cert"], "key_file": pki["key"]}
    if mode == "mtls":
        server_tls |= {"verify": True, "ca_file": pki["ca"]}
    leafnodes: dict[str, Any] = {
        "authorization": {"users": [{"user": "leaf1", "password": LEAF1_PW, "account": "SITE1"}]}
    }
    if mode != "plain-hub":
        leafnodes["tls"] = server_tls
    hub = servers.start(hub_kind, "hub", hub_config(leaf_port=lp, **leafnodes) | tenant_accounts())

    tls_remote: dict[str, Any] = {
        "urls": [leaf_url(lp, "leaf1", LEAF1_PW, "tls")],
        "tls": {"ca_file": pki["ca"]},
    }
    plain_remote: dict[str, Any] = {"urls": [leaf_url(lp, "leaf1", LEAF1_PW)]}
    if mode == "tls":
        good_remote, bad_remote = tls_remote, plain_remote
    elif mode == "mtls":
        with_cert = {"ca_file": pki["ca"], "cert_file": pki["client_cert"], "key_file": pki["client_key"]}
        good_remote, bad_remote = {**tls_remote, "tls": with_cert}, tls_remote
    else:
        good_remote, bad_remote = plain_remote, tls_remote
    good, bad = servers.start_many(
        (leaf_kind, "good", leaf_config(good_remote, name="good")),
        (leaf_kind, "bad", leaf_config(bad_remote, name="bad")),
    )
    rows = await wait_links(hub, 1)
    assert rows[0]["name"] == "good"
    await refused_for_good(bad, hub, 1)
    await serving(hub)
    await serving(good, bad, user=None)


# ---------------------------------------------------------------------------- 6: bad input


def raw_exchange(port: int, data: bytes, connect: dict[str, Any] | None = None) -> tuple[bytes, bool]:
    with RawLeaf(port) as raw:
        if connect is not None:
            raw.connect(**connect)
        if data:
            raw.send(data)
        return raw.until_closed(3.0)


LEAF1 = {"user": "leaf1", "pass": CLIENT_PW}
DOWN_ONLY = {"user": "down", "pass": CLIENT_PW}

# (case, bytes after the INFO, CONNECT fields or None, the -ERR the reference sends before closing)
BAD_INPUT = [
    ("client CONNECT", b"", {"lang": "python", "version": "2.0", "verbose": False, **LEAF1},
     "attempted to connect to leaf node port"),
    ("garbage", b"\x00\xff\xfeGARBAGE GARBAGE\r\n", None, "Authorization Violation"),
    ("PING before CONNECT", b"PING\r\n", None, "Authorization Violation"),
    ("LS+ before CONNECT", b"LS+ foo\r\n", None, "Authorization Violation"),
    ("LMSG before CONNECT", b"LMSG foo 2\r\nhi\r\n", None, "Authorization Violation"),
    ("wrong password", b"", {"user": "leaf1", "pass": WRONG_PW}, "Authorization Violation"),
    ("LS+ of a subject it may not receive", b"LS+ secret.x\r\n", DOWN_ONLY,
     'Permissions Violation for Subscription to "secret.x"'),
    ("LMSG over max_payload", b"LMSG foo 2000000\r\n", LEAF1, "Maximum Payload Violation"),
    ("HMSG over max_payload", b"HMSG foo 12 2000000\r\n", LEAF1, "Maximum Payload Violation"),
    ("gateway CONNECT", b"", {"gateway": "GW", **LEAF1},
     'Rejecting connection from gateway "GW" on the leafnode port'),
    ("unknown operation", b"FOO bar\r\n", LEAF1, "Unknown Protocol Operation"),
]  # fmt: skip


@pytest.mark.parametrize(("hub_kind", "leaf_kind"), COMBOS, ids=COMBO_IDS)
async def test_bad_input_on_the_leaf_port_ends_only_that_connection(
    servers: Servers, hub_kind: str, leaf_kind: str
) -> None:
    lp = free_port()
    # Leafs authenticate as the server's users (leafnodes.authorization has only a timeout):
    # users there may carry permissions; "down" may receive only down.>.
    down = {"user": "down", "password": CLIENT_PW, "permissions": {"subscribe": {"allow": ["down.>"]}}}
    leaf1 = {"user": "leaf1", "password": CLIENT_PW}
    cfg = hub_config(leaf_port=lp, authorization={"timeout": 0.5}) | tenant_accounts(leaf1, down)
    hub = servers.start(hub_kind, "hub", cfg)
    good, wrong_port = servers.start_many(
        (leaf_kind, "good", leaf_config({"urls": [leaf_url(lp, "leaf1", CLIENT_PW)]}, name="good")),
        # A leaf dialling the hub's *client* port.
        (
            leaf_kind,
            "wrong-port",
            leaf_config({"urls": [leaf_url(hub.port, "c1", CLIENT_PW)]}, name="wrong-port"),
        ),
    )
    (before,) = await wait_links(hub, 1)

    with RawLeaf(lp) as stalled:  # reads the INFO, then sends nothing
        opened = time.monotonic()
        with pytest.raises(NatsError, match="attempted to connect to leaf node port"):
            nc = await nats.connect(f"nats://c1:{CLIENT_PW}@127.0.0.1:{lp}", **NO_RETRY)
            await nc.close()
        for case, data, connect, err in BAD_INPUT:
            out, closed = raw_exchange(lp, data, connect)
            assert closed, case
            assert f"-ERR '{err}'\r\n".encode() in out, (case, out[-200:])
        out, closed = stalled.until_closed(5.0)
        assert closed
        assert out.endswith(b"-ERR 'Authentication Timeout'\r\n"), out
        assert time.monotonic() - opened >= 0.4

    # The leaf on the client port says so, keeps retrying, and the server keeps serving.
    await refused_for_good(wrong_port, hub, 1)
    assert "attempted to connect to wrong port" in wrong_port.log()
    await serving(hub)

    # The well-behaved leaf kept its link through all of it, and it still carries messages.
    (after,) = links(hub)
    assert (after["id"], after["name"]) == (before["id"], "good")
    hc = await nats.connect(client_url(hub, "c1"), **NO_RETRY)
    ec = await nats.connect(good.url, **NO_RETRY)
    try:
        await crosses(ec, hc, "up.after", b"from the leaf")
        await crosses(hc, ec, "down.after", b"from the hub")
    finally:
        await hc.close()
        await ec.close()


def _connected_raw_leaf(port: int, **fields: Any) -> RawLeaf:
    """A raw leaf past the handshake: CONNECT sent, the hub's connect_info INFO read."""
    raw = RawLeaf(port)
    raw.connect(**LEAF1, **fields)
    while b"connect_info" not in (line := raw.read_line()):
        assert not line.startswith(b"-ERR"), line
    return raw


@pytest.mark.parametrize("hub_kind", HUB_KINDS)
async def test_an_invalid_subject_in_ls_plus_is_refused_and_the_link_stays(
    servers: Servers, hub_kind: str
) -> None:
    lp = free_port()
    leaf1 = {"user": "leaf1", "password": CLIENT_PW}
    hub = servers.start(hub_kind, "hub", hub_config(leaf_port=lp) | tenant_accounts(leaf1))
    with _connected_raw_leaf(lp) as raw:
        raw.send(b"LS+ a..b\r\nPING\r\n")
        out, closed = raw.until_closed(2.0)
        assert not closed, out
        assert b"-ERR 'Invalid Subscription'\r\n" in out and b"PONG\r\n" in out, out
    await serving(hub)


async def test_a_corrupt_zstd_stream_ends_that_link_only(servers: Servers) -> None:
    """leafjet's own compression: after the switch, bytes that are no zstd end the link as a
    protocol error (not an internal one), and the hub goes on serving."""
    lp = free_port()
    leaf1 = {"user": "leaf1", "password": CLIENT_PW}
    hub = servers.start("leafjet", "hub", hub_config(leaf_port=lp) | tenant_accounts(leaf1))
    with _connected_raw_leaf(lp, leafjet_compression="zstd") as raw:
        raw.send(b"this is not a zstd frame at all\r\n" * 4)
        _out, closed = raw.until_closed(5.0)
        assert closed
    log = await anyio.to_thread.run_sync(wait_log, hub, "compressed stream is corrupt")
    assert "internal error" not in log
    await serving(hub)


# ---------------------------------------------------------------------------- 7: a peer that stops reading


@pytest.mark.parametrize("hub_kind", HUB_KINDS)
async def test_a_leaf_that_stops_reading_is_cut_and_other_clients_carry_on(
    servers: Servers, hub_kind: str
) -> None:
    """The reference closes such a leaf after its write deadline passes repeatedly ("Slow
    Consumer (Write Deadline)"); leafjet when its pending bytes pass max_pending or a write
    misses the deadline. Both cut only that link."""
    lp = free_port()
    users = [{"user": "leaf1", "password": LEAF1_PW, "account": "SITE1"}]
    cfg = hub_config(leaf_port=lp, authorization={"users": users}) | tenant_accounts(
        {"user": "svc", "password": CLIENT_PW}, {"user": "req", "password": CLIENT_PW}
    )
    cfg |= {"write_deadline": "1s", "max_pending": 256 * 1024, "max_payload": 64 * 1024}
    hub = servers.start(hub_kind, "hub", cfg)

    with RawLeaf(lp) as raw:
        raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(user="leaf1", **{"pass": LEAF1_PW})
        raw.send(b"LS+ flood.>\r\n")
        await wait_links(hub, 1)
        await eventually(lambda: links(hub)[0]["subscriptions"] >= 1, 5, "the raw leaf's LS+")

        pub = await nats.connect(client_url(hub, "c1"), **NO_RETRY)
        svc = await nats.connect(client_url(hub, "svc"), **NO_RETRY)
        req = await nats.connect(client_url(hub, "req"), **NO_RETRY)
        try:

            async def answer(msg: Any) -> None:
                await msg.respond(b"pong")

            await svc.subscribe("svc.ping", cb=answer)
            await subscriptions_sent(svc)
            payload = b"x" * 16384
            flood_done = anyio.Event()

            async def flood() -> None:
                for _ in range(400):  # 6.5 MB toward a peer that reads nothing
                    await pub.publish("flood.x", payload)
                await pub.flush(timeout=30)
                flood_done.set()

            round_trips = 0
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(flood)
                    while not flood_done.is_set() or links(hub):
                        reply = await req.request("svc.ping", b"ping", timeout=2)
                        assert reply.data == b"pong"
                        round_trips += 1
                        await anyio.sleep(0.05)
            assert round_trips >= 2
            await wait_links(hub, 0, 1)
        finally:
            for nc in (pub, svc, req):
                await nc.close()
        # (Not drained: through a 4 KiB window the buffered megabytes would take a minute.)
    assert "slow consumer" in hub.log().lower()
    await serving(hub)


def test_leafz_shows_a_remote_without_its_credentials(tmp_path: Path) -> None:
    """leafjet's /leafz ``remotes`` rows carry URLs without userinfo (leafjet's own field)."""
    lp = free_port()
    leaf = start("leafjet", tmp_path / "leaf", leaf_config({"urls": [leaf_url(lp, "leaf1", LEAF1_PW)]}))
    try:
        body = leafz(leaf)
        assert body["remotes"][0]["urls"] == [f"nats-leaf://127.0.0.1:{lp}"]
        assert LEAF1_PW not in str(body)
    finally:
        leaf.stop()
