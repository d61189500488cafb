"""TLS settings and the ``ssl.SSLContext``s built from them (no sockets here).

The server speaks TLS 1.2 or newer. ``verify`` turns on mutual TLS: clients must present a
certificate signed by ``ca_file``. Unreadable, malformed or mismatched files raise
StartupError with a one-line reason naming the file.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from core.errors import ConfigError, StartupError


@dataclass(frozen=True, slots=True)
class TLSConfig:
    cert_file: str
    key_file: str
    ca_file: str | None = None
    verify: bool = False  # require and verify client certificates (mTLS)
    timeout: float = 2.0  # seconds allowed for the handshake

    def __post_init__(self) -> None:
        if not self.cert_file or not self.key_file:
            raise ConfigError("tls", "cert_file and key_file are both required")
        if self.verify and not self.ca_file:
            raise ConfigError("tls.verify", "verifying client certificates needs tls.ca_file")
        if not self.timeout > 0:
            raise ConfigError("tls.timeout", "must be positive")


def _check_readable(kind: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise StartupError(f"tls: cannot read {kind} {path}: {e.strerror or e}") from None


def _load_chain(ctx: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    _check_readable("cert_file", cert_file)
    _check_readable("key_file", key_file)
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e):
            raise StartupError(f"tls: key_file {key_file} does not match cert_file {cert_file}") from None
        raise StartupError(
            f"tls: cannot load certificate {cert_file} with key {key_file}: {e.reason or e}"
        ) from None


def _load_ca(ctx: ssl.SSLContext, ca_file: str) -> None:
    _check_readable("ca_file", ca_file)
    try:
        ctx.load_verify_locations(cafile=ca_file)
    except ssl.SSLError as e:
        raise StartupError(f"tls: cannot load ca_file {ca_file}: {e.reason or e}") from None


def server_ssl_context(cfg: TLSConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cfg.cert_file, cfg.key_file)
    if cfg.ca_file:
        _load_ca(ctx, cfg.ca_file)
    ctx.verify_mode = ssl.CERT_REQUIRED if cfg.verify else ssl.CERT_NONE
    return ctx


def client_ssl_context(
    ca_file: str | None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client context that verifies the server against ``ca_file`` (and its host name),
    optionally presenting a client certificate. Used by tests and internal clients."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file:
        _load_ca(ctx, ca_file)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cert_file:
        _load_chain(ctx, cert_file, key_file or cert_file)
    return ctx
