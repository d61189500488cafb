"""A development PKI: a CA, server and client certificates for TLS and mutual TLS.

Keys are EC P-256; certificates are signed with SHA-256. The CA is valid for 10 years and
may sign leaves only (path length 0); leaves are valid for 1 year. A server certificate
carries its hosts as DNS and IP subject alternative names and is usable for both server and
client authentication (a leaf agent can present it when dialling a hub). Key files are
written with mode 0600.

Files in the target directory: ``ca.pem``, ``ca-key.pem``, ``server.pem``,
``server-key.pem``, ``client-<name>.pem``, ``client-<name>-key.pem``. Existing files are
never overwritten unless ``force=True``; otherwise ``FileExistsError`` is raised before
anything is written.

``main(argv)`` is the ``leafjet certs`` command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_CA_NAME = "leafjet dev CA"
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
CA_DAYS = 3650
LEAF_DAYS = 365

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOST_RE = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*")

StrPath = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class CertFiles:
    cert: Path
    key: Path


def ca_files(dir: StrPath) -> CertFiles:
    """Where ``make_ca`` puts the CA in ``dir``."""
    d = Path(dir)
    return CertFiles(d / "ca.pem", d / "ca-key.pem")


# ---------------------------------------------------------------------- building blocks


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "leafjet"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            if not _HOST_RE.fullmatch(h):
                raise ValueError(f"invalid host name {h!r}") from None
            names.append(x509.DNSName(h))
    if not names:
        raise ValueError("a server certificate needs at least one host")
    return x509.SubjectAlternativeName(names)


def _key_usage(*, signs_certs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certs,
        crl_sign=signs_certs,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _check_targets(paths: Iterable[Path], force: bool) -> None:
    if force:
        return
    for p in paths:
        if p.exists():
            raise FileExistsError(f"refusing to overwrite {p} (use --force)")


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _save(files: CertFiles, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> CertFiles:
    _write(files.key, _key_pem(key), 0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def _load_ca(ca: CertFiles | StrPath) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    files = ca if isinstance(ca, CertFiles) else ca_files(ca)
    for p in (files.cert, files.key):
        if not p.is_file():
            raise FileNotFoundError(f"CA file {p} not found (create it with `leafjet certs ca`)")
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{files.key} is not an EC private key")
    pub = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*pub) != cert.public_key().public_bytes(*pub):
        raise ValueError(f"{files.key} does not match {files.cert}")
    return cert, key


def _leaf(
    ca: CertFiles | StrPath, common_name: str, extra: list[tuple[x509.ExtensionType, bool]]
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = _load_ca(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certs=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    for ext, critical in extra:
        builder = builder.add_extension(ext, critical=critical)
    return builder.sign(ca_key, hashes.SHA256()), key


# ---------------------------------------------------------------------- public API


def make_ca(dir: StrPath, name: str = DEFAULT_CA_NAME, *, force: bool = False) -> CertFiles:
    """Create ``ca.pem`` and ``ca-key.pem`` in ``dir``."""
    files = ca_files(dir)
    _check_targets((files.cert, files.key), force)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    subject = _name(name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certs=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _save(files, cert, key)


def make_server_cert(
    dir: StrPath,
    ca: CertFiles | StrPath,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    *,
    force: bool = False,
) -> CertFiles:
    """Create ``server.pem`` and ``server-key.pem`` in ``dir``, signed by ``ca``.

    ``ca`` is what ``make_ca`` returned, or a directory holding ``ca.pem`` and ``ca-key.pem``.
    """
    d = Path(dir)
    files = CertFiles(d / "server.pem", d / "server-key.pem")
    _check_targets((files.cert, files.key), force)
    san = _san(hosts)
    cert, key = _leaf(
        ca,
        hosts[0],
        [
            (san, False),
            (
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                False,
            ),
        ],
    )
    return _save(files, cert, key)


def make_client_cert(dir: StrPath, ca: CertFiles | StrPath, name: str, *, force: bool = False) -> CertFiles:
    """Create ``client-<name>.pem`` and ``client-<name>-key.pem`` (subject CN=<name>) in ``dir``."""
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid client name {name!r} (letters, digits, '_', '.', '-')")
    d = Path(dir)
    files = CertFiles(d / f"client-{name}.pem", d / f"client-{name}-key.pem")
    _check_targets((files.cert, files.key), force)
    cert, key = _leaf(ca, name, [(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)])
    return _save(files, cert, key)


# ---------------------------------------------------------------------- CLI

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _client_name(value: str) -> str:
    if not _NAME_RE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"invalid client name {value!r}")
    return value


def _host(value: str) -> str:
    try:
        _san([value])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="leafjet certs", description="generate development TLS certificates")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="{ca,server,client,dev}")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--dir", required=True, help="directory to write into (created if missing)")
        sp.add_argument("--force", action="store_true", help="overwrite existing files")

    ca = sub.add_parser("ca", help="create a CA (ca.pem, ca-key.pem)")
    common(ca)
    ca.add_argument("--name", default=DEFAULT_CA_NAME, help="CA common name")
    srv = sub.add_parser("server", help="create server.pem/server-key.pem signed by the CA in --dir")
    common(srv)
    srv.add_argument("--host", action="append", type=_host, help="DNS name or IP (repeatable)")
    cl = sub.add_parser("client", help="create client-NAME.pem/client-NAME-key.pem signed by the CA in --dir")
    common(cl)
    cl.add_argument("--name", type=_client_name, default="client", help="client name (certificate CN)")
    dev = sub.add_parser("dev", help="CA, server certificate and a client certificate in one go")
    common(dev)
    dev.add_argument("--host", action="append", type=_host, help="DNS name or IP (repeatable)")
    dev.add_argument("--name", type=_client_name, default="client", help="client name")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``leafjet certs {ca,server,client,dev} --dir DIR [--name N] [--host H ...] [--force]``.

    Exit codes: 0 ok, 1 runtime failure (existing files, missing CA, I/O), 2 usage error.
    """
    try:
        args = _build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    hosts = tuple(args.host) if getattr(args, "host", None) else DEFAULT_HOSTS
    written: list[CertFiles] = []
    try:
        if args.cmd == "ca":
            written.append(make_ca(args.dir, args.name, force=args.force))
        elif args.cmd == "server":
            written.append(make_server_cert(args.dir, args.dir, hosts, force=args.force))
        elif args.cmd == "client":
            written.append(make_client_cert(args.dir, args.dir, args.name, force=args.force))
        else:
            d = Path(args.dir)
            # Check every target first so that a refusal writes nothing at all.
            _check_targets(
                (
                    d / "ca.pem",
                    d / "ca-key.pem",
                    d / "server.pem",
                    d / "server-key.pem",
                    d / f"client-{args.name}.pem",
                    d / f"client-{args.name}-key.pem",
                ),
                args.force,
            )
            ca = make_ca(d, force=args.force)
            written.append(ca)
            written.append(make_server_cert(d, ca, hosts, force=args.force))
            written.append(make_client_cert(d, ca, args.name, force=args.force))
    except (OSError, ValueError) as e:
        for f in written:
            _report(f)
        print(f"leafjet certs: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_RUNTIME
    for f in written:
        _report(f)
    return EXIT_OK


def _report(files: CertFiles) -> None:
    print(f"wrote {files.cert}")
    print(f"wrote {files.key} (mode 0600)")


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror and e.filename:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or e.__class__.__name__
