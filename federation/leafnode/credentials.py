"""A leaf's credentials toward its hub: user and password from the remote's URL, or an nkey seed
that signs the hub's nonce (pure; no IO).

Never log what these return: a URL is logged through ``redact_url``.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit

from core.server.auth import PREFIX_BYTE_USER, crc16_xmodem

_PREFIX_BYTE_SEED = 18 << 3  # base32-encodes to "S"


def url_credentials(url: str) -> tuple[str | None, str | None]:
    """``(user, password)`` from ``nats-leaf://user:pass@host:port`` (percent-decoded)."""
    parts = urlsplit(url if "://" in url else f"nats-leaf://{url}")
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return user, password


def redact_url(url: str) -> str:
    """The URL without its userinfo, for logs and monitoring."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "nats-leaf", url
    host = rest.split("/", 1)[0]
    if "@" in host:
        host = host.rsplit("@", 1)[1]
    return f"{scheme}://{host}"


def host_port(url: str, default_port: int = 7422) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"nats-leaf://{url}")
    return parts.hostname or "127.0.0.1", parts.port or default_port


def _seed_bytes(seed: str) -> bytes:
    """The 32-byte Ed25519 seed inside a user nkey seed (``SU...``); ValueError says what is wrong."""
    text = seed.strip()
    raw = base64.b32decode(text + "=" * (-len(text) % 8))
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if crc16_xmodem(body) != crc:
        raise ValueError("nkey seed checksum mismatch")
    b1, b2 = body[0], body[1]
    if b1 & 0xF8 != _PREFIX_BYTE_SEED or ((b1 & 7) << 5 | (b2 >> 3)) != PREFIX_BYTE_USER:
        raise ValueError("not a user nkey seed")
    return body[2:34]


def public_nkey(raw_public: bytes) -> str:
    body = bytes([PREFIX_BYTE_USER]) + raw_public
    return base64.b32encode(body + crc16_xmodem(body).to_bytes(2, "little")).decode().rstrip("=")


def sign_nonce(seed: str, nonce: str) -> tuple[str, str]:
    """``(public nkey, signature)`` for a CONNECT: the Ed25519 signature of the hub's nonce,
    base64url without padding (what nats-server expects)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(_seed_bytes(seed))
    raw_public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    sig = base64.urlsafe_b64encode(key.sign(nonce.encode())).decode().rstrip("=")
    return public_nkey(raw_public), sig
