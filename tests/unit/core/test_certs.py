from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from core.certs import main, make_ca, make_client_cert, make_server_cert
from core.errors import ConfigError, StartupError
from core.tls import TLSConfig, client_ssl_context, server_ssl_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    make_server_cert(d, ca)
    make_client_cert(d, ca, "alice")
    return d


def _handshake(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, hostname: str = "localhost"
) -> tuple[BaseException | None, BaseException | None, bytes]:
    """Handshake over a socketpair and echo one message; returns (server error, client error, echo)."""
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    errors: list[BaseException | None] = [None, None]
    echoed = [b""]

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                data = s.recv(100)
                s.sendall(data)
        except (OSError, ssl.SSLError) as e:
            errors[0] = e
            a.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=hostname) as c:
            c.sendall(b"hello")
            echoed[0] = c.recv(100)
            if not echoed[0]:
                raise ConnectionError("closed by server")
    except (OSError, ssl.SSLError) as e:
        errors[1] = e
        b.close()
    t.join(10)
    return errors[0], errors[1], echoed[0]


def test_files_are_written_with_private_keys_0600(pki: Path) -> None:
    names = sorted(p.name for p in pki.iterdir())
    assert names == [
        "ca-key.pem",
        "ca.pem",
        "client-alice-key.pem",
        "client-alice.pem",
        "server-key.pem",
        "server.pem",
    ]
    for key in ("ca-key.pem", "server-key.pem", "client-alice-key.pem"):
        assert stat.S_IMODE((pki / key).stat().st_mode) == 0o600


def test_server_certificate_has_sans_and_one_year_validity(pki: Path) -> None:
    cert = x509.load_pem_x509_certificate((pki / "server.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert 364 <= days <= 366
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    ca = x509.load_pem_x509_certificate((pki / "ca.pem").read_bytes())
    assert cert.issuer == ca.subject
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (ca.not_valid_after_utc - ca.not_valid_before_utc).days >= 3650
    cert.verify_directly_issued_by(ca)


def test_existing_files_are_not_overwritten_without_force(tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    before = ca.cert.read_bytes()
    with pytest.raises(FileExistsError):
        make_ca(tmp_path)
    assert ca.cert.read_bytes() == before
    make_ca(tmp_path, force=True)
    assert ca.cert.read_bytes() != before


def test_tls_handshake_without_client_certificates(pki: Path) -> None:
    sctx = server_ssl_context(TLSConfig(str(pki / "server.pem"), str(pki / "server-key.pem")))
    for host in ("localhost", "127.0.0.1", "::1"):
        cctx = client_ssl_context(str(pki / "ca.pem"))
        server_err, client_err, echoed = _handshake(sctx, cctx, host)
        assert (server_err, client_err, echoed) == (None, None, b"hello")


def test_client_rejects_a_host_not_in_the_certificate(pki: Path) -> None:
    sctx = server_ssl_context(TLSConfig(str(pki / "server.pem"), str(pki / "server-key.pem")))
    _, client_err, _ = _handshake(sctx, client_ssl_context(str(pki / "ca.pem")), "example.com")
    assert isinstance(client_err, ssl.SSLCertVerificationError)


def test_mutual_tls_requires_a_client_certificate(pki: Path) -> None:
    cfg = TLSConfig(str(pki / "server.pem"), str(pki / "server-key.pem"), str(pki / "ca.pem"), verify=True)
    sctx = server_ssl_context(cfg)
    with_cert = client_ssl_context(
        str(pki / "ca.pem"), str(pki / "client-alice.pem"), str(pki / "client-alice-key.pem")
    )
    assert _handshake(sctx, with_cert) == (None, None, b"hello")
    server_err, client_err, echoed = _handshake(sctx, client_ssl_context(str(pki / "ca.pem")))
    assert isinstance(server_err, ssl.SSLError)
    assert client_err is not None
    assert echoed == b""


def test_mutual_tls_rejects_a_client_certificate_from_another_ca(pki: Path, tmp_path: Path) -> None:
    other = make_ca(tmp_path)
    make_client_cert(tmp_path, other, "eve")
    cfg = TLSConfig(str(pki / "server.pem"), str(pki / "server-key.pem"), str(pki / "ca.pem"), verify=True)
    eve = client_ssl_context(
        str(pki / "ca.pem"), str(tmp_path / "client-eve.pem"), str(tmp_path / "client-eve-key.pem")
    )
    server_err, _, echoed = _handshake(server_ssl_context(cfg), eve)
    assert isinstance(server_err, ssl.SSLError)
    assert echoed == b""


def test_bad_tls_files_are_startup_errors(pki: Path, tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="cannot read cert_file"):
        server_ssl_context(TLSConfig(str(tmp_path / "missing.pem"), str(pki / "server-key.pem")))
    with pytest.raises(StartupError, match="does not match"):
        server_ssl_context(TLSConfig(str(pki / "server.pem"), str(pki / "client-alice-key.pem")))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(StartupError, match="cannot load certificate"):
        server_ssl_context(TLSConfig(str(garbage), str(pki / "server-key.pem")))
    with pytest.raises(StartupError, match="cannot load ca_file"):
        server_ssl_context(TLSConfig(str(pki / "server.pem"), str(pki / "server-key.pem"), str(garbage)))
    with pytest.raises(StartupError) as e:
        server_ssl_context(TLSConfig(str(pki / "server.pem"), str(tmp_path / "missing-key.pem")))
    assert "\n" not in str(e.value) and "missing-key.pem" in str(e.value)


def test_tls_config_is_validated_on_construction() -> None:
    with pytest.raises(ConfigError):
        TLSConfig("c.pem", "k.pem", verify=True)
    with pytest.raises(ConfigError):
        TLSConfig("c.pem", "k.pem", timeout=0)


# ---------------------------------------------------------------------- CLI


def test_cli_dev_then_refuse_then_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "certs"
    assert main(["dev", "--dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "ca.pem" in out and "server.pem" in out and "client-client.pem" in out
    before = (d / "ca.pem").read_bytes()
    assert main(["dev", "--dir", str(d)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing to overwrite" in err
    assert (d / "ca.pem").read_bytes() == before
    assert main(["dev", "--dir", str(d), "--force"]) == 0
    assert (d / "ca.pem").read_bytes() != before


def test_cli_step_by_step(tmp_path: Path) -> None:
    assert main(["ca", "--dir", str(tmp_path), "--name", "My CA"]) == 0
    assert main(["server", "--dir", str(tmp_path), "--host", "hub.example", "--host", "10.0.0.1"]) == 0
    assert main(["client", "--dir", str(tmp_path), "--name", "edge-1"]) == 0
    assert (tmp_path / "client-edge-1.pem").is_file()
    cert = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["hub.example"]
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    assert "My CA" in ca.subject.rfc4514_string()


def test_cli_runtime_error_without_a_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["server", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found" in err


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["bogus", "--dir", str(tmp_path)]) == 2
    assert main(["ca"]) == 2  # --dir is required
    assert main(["client", "--dir", str(tmp_path), "--name", "../evil"]) == 2
    assert main(["server", "--dir", str(tmp_path), "--host", "bad host"]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()
    assert not any(tmp_path.iterdir())
