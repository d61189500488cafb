"""Accounts, users (password, token, nkey), permissions and TLS, against leafjet and the reference."""

from __future__ import annotations

import ssl

import anyio
import nats
import nkeys
import pytest
from nats.errors import Error as NatsError

from core.certs import make_ca, make_client_cert, make_server_cert
from tests.support.barrier import subscriptions_sent

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    # nats-py leaves the socket of a refused connection for the garbage collector (against
    # either server); that ResourceWarning is the client's, not something these tests check.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NO_RETRY = {"allow_reconnect": False, "max_reconnect_attempts": 0, "connect_timeout": 3}


def new_user_seed() -> bytes:
    import os

    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)


async def _connect(url: str, **kw):
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await nats.connect(url, error_cb=on_error, **NO_RETRY, **kw)
    nc.test_errors = errors  # type: ignore[attr-defined]
    return nc


async def _refused(url: str, **kw) -> str:
    with pytest.raises(NatsError) as info:
        nc = await nats.connect(url, **NO_RETRY, **kw)
        await nc.close()
    return str(info.value)


async def test_password_users_authenticate_and_wrong_password_is_refused(make_server):
    srv = make_server({"authorization": {"users": [{"user": "alice", "password": "s3cret!"}]}})
    nc = await _connect(srv.url, user="alice", password="s3cret!")
    await nc.close()
    assert "Authorization Violation" in await _refused(srv.url, user="alice", password="wrong")
    assert "Authorization Violation" in await _refused(srv.url)


async def test_token_authentication(make_server):
    srv = make_server({"authorization": {"token": "t0k3n-xyz"}})
    nc = await _connect(srv.url, token="t0k3n-xyz")
    await nc.close()
    assert "Authorization Violation" in await _refused(srv.url, token="nope")


async def test_nkey_authentication_signs_the_nonce(make_server):
    seed = new_user_seed()
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    srv = make_server({"authorization": {"users": [{"nkey": public}]}})
    nc = await _connect(srv.url, nkeys_seed_str=seed.decode())
    await nc.close()
    other = new_user_seed()
    assert "Authorization Violation" in await _refused(srv.url, nkeys_seed_str=other.decode())


async def test_accounts_isolate_subject_spaces(make_server):
    srv = make_server(
        {
            "accounts": {
                "A": {"users": [{"user": "a1", "password": "pa1"}, {"user": "a2", "password": "pa2"}]},
                "B": {"users": [{"user": "b1", "password": "pb1"}]},
            }
        }
    )
    a1 = await _connect(srv.url, user="a1", password="pa1")
    a2 = await _connect(srv.url, user="a2", password="pa2")
    b1 = await _connect(srv.url, user="b1", password="pb1")
    try:
        in_a = await a2.subscribe("shared.>")
        in_b = await b1.subscribe("shared.>")
        await subscriptions_sent(a2)
        await subscriptions_sent(b1)
        await a1.publish("shared.x", b"only for A")
        await a1.flush()
        msg = await in_a.next_msg(timeout=3)
        assert msg.data == b"only for A"
        await b1.flush()
        await anyio.sleep(0.2)
        assert in_b.pending_msgs == 0
    finally:
        for c in (a1, a2, b1):
            await c.close()


PERMS_CONFIG = {
    "authorization": {
        "users": [
            {
                "user": "dev",
                "password": "dev",
                "permissions": {
                    "publish": {"allow": ["telemetry.>", "_INBOX.>"], "deny": ["telemetry.secret"]},
                    "subscribe": {
                        "allow": ["cmd.>", "telemetry.>", "_INBOX.>"],
                        "deny": ["telemetry.secret"],
                    },
                },
            },
            {"user": "admin", "password": "admin"},
        ]
    }
}


async def test_publish_permission_violation_is_reported_and_not_delivered(make_server):
    srv = make_server(PERMS_CONFIG)
    admin = await _connect(srv.url, user="admin", password="admin")
    dev = await _connect(srv.url, user="dev", password="dev")
    try:
        watch = await admin.subscribe(">")
        await subscriptions_sent(admin)
        await dev.publish("cmd.reboot", b"nope")
        await dev.publish("telemetry.secret", b"nope")

        await dev.publish("telemetry.ok", b"fine")
        msg = await watch.next_msg(timeout=3)
        assert (msg.subject, msg.data) == ("telemetry.ok", b"fine")
        with anyio.fail_after(3):
            while len(dev.test_errors) < 2:
                await anyio.sleep(0.02)
        # nats-py lower-cases server errors; the exact text is checked on raw sockets below
        texts = sorted(str(e) for e in dev.test_errors)
        assert texts == [
            'nats: permissions violation for publish to "cmd.reboot"',
            'nats: permissions violation for publish to "telemetry.secret"',
        ]
        assert dev.is_connected, "a permissions violation does not close the connection"
    finally:
        await admin.close()
        await dev.close()


async def test_subscribe_permission_violation_is_reported_and_nothing_delivered(make_server):
    srv = make_server(PERMS_CONFIG)
    admin = await _connect(srv.url, user="admin", password="admin")
    dev = await _connect(srv.url, user="dev", password="dev")
    try:
        forbidden = await dev.subscribe("admin.events")
        await dev.flush()
        with anyio.fail_after(3):
            while not dev.test_errors:
                await anyio.sleep(0.02)
        assert str(dev.test_errors[0]) == 'nats: permissions violation for subscription to "admin.events"'
        # a wildcard allowed overall still does not deliver the denied subject
        wide = await dev.subscribe("telemetry.*")
        await subscriptions_sent(dev)

        await admin.publish("admin.events", b"x")
        await admin.publish("telemetry.secret", b"hidden")
        await admin.publish("telemetry.open", b"visible")
        msg = await wide.next_msg(timeout=3)
        assert msg.subject == "telemetry.open"
        await anyio.sleep(0.2)
        assert wide.pending_msgs == 0 and forbidden.pending_msgs == 0
    finally:
        await admin.close()
        await dev.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    make_server_cert(d, ca)
    make_client_cert(d, ca, "device1")
    return d


def _client_ctx(pki, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(str(pki / "client-device1.pem"), str(pki / "client-device1-key.pem"))
    return ctx


def _tls_config(pki, verify: bool) -> dict:
    tls = {
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server-key.pem"),
        "ca_file": str(pki / "ca.pem"),
    }
    if verify:
        tls["verify"] = True
    return {"tls": tls}


async def test_tls_client_port(make_server, pki):
    srv = make_server(_tls_config(pki, verify=False))
    nc = await _connect(srv.url, tls=_client_ctx(pki, with_cert=False))
    try:
        sub = await nc.subscribe("secure")
        await nc.publish("secure", b"over tls")
        assert (await sub.next_msg(timeout=3)).data == b"over tls"
    finally:
        await nc.close()


async def test_mtls_requires_a_verified_client_certificate(make_server, pki):
    srv = make_server(_tls_config(pki, verify=True))
    nc = await _connect(srv.url, tls=_client_ctx(pki, with_cert=True))
    await nc.close()
    with pytest.raises((NatsError, ssl.SSLError, OSError)):
        bad = await nats.connect(srv.url, tls=_client_ctx(pki, with_cert=False), **NO_RETRY)
        await bad.flush(timeout=2)
        await bad.close()


def test_garbage_during_tls_handshake_closes_cleanly(make_server, pki):
    import socket

    srv = make_server(_tls_config(pki, verify=False))
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        assert s.recv(4096).startswith(b"INFO ")
        s.sendall(b"this is not a TLS client hello\r\n" * 4)
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    # the server is still healthy for everybody else
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s2:
        assert s2.recv(4096).startswith(b"INFO ")


def test_permission_violations_have_the_reference_text_and_keep_the_connection(make_server):
    from tests.support.raw import exchange

    srv = make_server(PERMS_CONFIG)
    out, closed = exchange(
        srv.port,
        b"PUB cmd.x 1\r\nx\r\nSUB admin.> 1\r\nSUB admin.> q 2\r\nPING\r\n",
        connect=b'CONNECT {"verbose":false,"user":"dev","pass":"dev"}\r\n',
    )
    assert out == (
        b"-ERR 'Permissions Violation for Publish to \"cmd.x\"'\r\n"
        b"-ERR 'Permissions Violation for Subscription to \"admin.>\"'\r\n"
        b'-ERR \'Permissions Violation for Subscription to "admin.>" using queue "q"\'\r\n'
        b"PONG\r\n"
    )
    assert not closed


def test_operations_before_connect_on_an_auth_server_are_refused(make_server):
    from tests.support.raw import exchange

    srv = make_server(PERMS_CONFIG)
    out, closed = exchange(srv.port, b"PING\r\n", connect=None)
    assert (out, closed) == (b"-ERR 'Authorization Violation'\r\n", True)
