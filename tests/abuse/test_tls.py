"""A TLS client port under abuse: plain text, garbage instead of a ClientHello, a ClientHello and
then nothing or a close, closes before INFO, a finished handshake cut with RST. The server must
let go of each bad socket and keep serving its TLS clients (the bystander here speaks TLS)."""

from __future__ import annotations

import os
import socket
import ssl

import pytest

from core.certs import make_ca, make_server_cert
from tests.abuse.conftest import fds, wait_for
from tests.abuse.wire import Raw, rst_close

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("abuse-pki")
    make_server_cert(d, make_ca(d))
    return d


def _client_ctx(pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.check_hostname = False
    return ctx


@pytest.fixture
def tls_target(make_target, pki):
    config = {"tls": {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server-key.pem")}}
    return make_target(config, tls=_client_ctx(pki))


def _client_hello(pki) -> bytes:
    """The first flight of a real TLS client, without a socket."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = _client_ctx(pki).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def _open_after_info(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    assert s.recv(4096).startswith(b"INFO ")
    return s


def _server_lets_go(s: socket.socket) -> bytes:
    """What the server sends until it closes the socket; fails if it keeps it past the timeout."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept a bad TLS socket open (got {out[:80]!r})") from None
    finally:
        s.close()
    return out


def test_plain_text_to_a_tls_port_is_closed(tls_target):
    s = _open_after_info(tls_target.port)
    s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert b"PONG" not in _server_lets_go(s)
    tls_target.assert_survived()


def test_garbage_instead_of_a_client_hello_is_closed(tls_target):
    for size in (1, 5, 64, 4096, 70000):
        s = _open_after_info(tls_target.port)
        try:
            s.sendall(os.urandom(size))
        except OSError:
            s.close()
            continue  # already cut off
        _server_lets_go(s)
    tls_target.assert_survived()


def test_forged_tls_record_header_with_absurd_length_is_closed(tls_target):
    s = _open_after_info(tls_target.port)
    s.sendall(b"\x16\x03\x01\xff\xff" + os.urandom(200))  # a handshake record claiming 64 KiB
    s.shutdown(socket.SHUT_WR)
    _server_lets_go(s)
    tls_target.assert_survived()


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_client_hello_then_close(tls_target, pki, rst):
    hello = _client_hello(pki)
    for cut in (len(hello) // 2, len(hello)):
        for _ in range(20):
            s = _open_after_info(tls_target.port)
            s.sendall(hello[:cut])
            rst_close(s) if rst else s.close()
    tls_target.assert_alive()
    tls_target.assert_survived()


def test_client_hello_then_silence_is_timed_out(tls_target, pki):
    """A handshake that never finishes must not hold a socket (and its buffers) forever."""
    s = _open_after_info(tls_target.port)
    s.sendall(_client_hello(pki))
    s.settimeout(15)
    _server_lets_go(s)
    tls_target.assert_survived()


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_close_before_reading_info_on_a_tls_port(tls_target, rst):
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", tls_target.port), timeout=5)
        rst_close(s) if rst else s.close()
    tls_target.assert_survived()


def test_finished_handshake_then_rst(tls_target, pki):
    before = fds(tls_target.pid)
    for i in range(30):
        c = Raw(tls_target.port, tls=_client_ctx(pki), connect=None)
        if i % 2:
            c.send(b'CONNECT {"verbose":false}\r\nPUB guard.t')  # cut mid-frame too
        rst_close(c.sock)
    wait_for(lambda: fds(tls_target.pid) <= before + 5, 15, "the server to release the reset TLS sockets")
    tls_target.assert_survived()
