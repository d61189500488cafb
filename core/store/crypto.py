"""Encryption at rest for stream stores: a small Cipher interface and its AEAD implementations.

The configured secret (a passphrase, or high-entropy key material) is never used directly: each store
keeps a random salt and the key-derivation parameters in its ``info`` table, and the per-store key is
derived from the secret and that salt (scrypt for passphrases, HKDF-SHA256 for key material). A sealed
"key check" value, also in ``info``, lets ``open`` tell a wrong key from corruption before any message is
read. Every sealed blob is ``nonce(12) || ciphertext || tag(16)`` with a random nonce; the caller binds it
to its place with the associated data (the message sequence), so blobs cannot be swapped between rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from core.errors import StoreError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

# ``cryptography`` is imported where a cipher is made, not here: it costs an idle agent about
# 8 MB of memory, and only an agent with encryption at rest (or nkey users) needs it.

Algorithm = Literal["aes-256-gcm", "chacha20-poly1305"]
Kdf = Literal["scrypt", "hkdf"]
ALGORITHMS: tuple[str, ...] = ("aes-256-gcm", "chacha20-poly1305")
NONCE = 12
TAG = 16
SALT = 16
KEY_CHECK_PLAINTEXT = b"leafjet stream key check v1"
KEY_CHECK_AAD = b"leafjet:key-check"
# scrypt cost for passphrases: about 16 MiB and tens of milliseconds, once per store open.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1


class DecryptError(StoreError):
    """A sealed blob failed authentication: wrong key, tampering, or corruption."""


class Cipher(Protocol):
    name: str

    def seal(self, plaintext: bytes, aad: bytes) -> bytes: ...

    def open(self, ciphertext: bytes, aad: bytes) -> bytes: ...


class AeadCipher:
    """AES-256-GCM or ChaCha20-Poly1305 with a 32-byte key and random 96-bit nonces."""

    __slots__ = ("_aead", "name")

    def __init__(self, algorithm: str, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

        if len(key) != 32:
            raise ValueError("key must be 32 bytes")
        if algorithm == "aes-256-gcm":
            self._aead: AESGCM | ChaCha20Poly1305 = AESGCM(key)
        elif algorithm == "chacha20-poly1305":
            self._aead = ChaCha20Poly1305(key)
        else:
            raise ValueError(f"unknown cipher {algorithm!r}; use one of {ALGORITHMS}")
        self.name = algorithm

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(NONCE)
        return nonce + self._aead.encrypt(nonce, plaintext, aad)

    def open(self, ciphertext: bytes, aad: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        if len(ciphertext) < NONCE + TAG:
            raise DecryptError("sealed blob is too short")
        try:
            return self._aead.decrypt(ciphertext[:NONCE], ciphertext[NONCE:], aad)
        except InvalidTag:
            raise DecryptError("sealed blob failed authentication") from None


@dataclass(frozen=True, slots=True)
class KdfParams:
    """How a store's key was derived; kept (with the salt) in the store so later default changes do not
    lock old stores out. Encoded as ``scrypt:n=16384,r=8,p=1`` or ``hkdf:sha256``."""

    kdf: Kdf
    salt: bytes
    n: int = SCRYPT_N
    r: int = SCRYPT_R
    p: int = SCRYPT_P

    def encode(self) -> bytes:
        if self.kdf == "scrypt":
            return f"scrypt:n={self.n},r={self.r},p={self.p}".encode()
        return b"hkdf:sha256"

    @classmethod
    def decode(cls, raw: bytes, salt: bytes) -> KdfParams:
        text = raw.decode("ascii", "replace")
        if text == "hkdf:sha256":
            return cls("hkdf", salt)
        name, _, rest = text.partition(":")
        if name != "scrypt":
            raise StoreError(f"unknown key derivation {text!r}")
        try:
            kv = dict(part.split("=", 1) for part in rest.split(","))
            n, r, p = int(kv["n"]), int(kv["r"]), int(kv["p"])
        except (ValueError, KeyError):
            raise StoreError(f"malformed key derivation parameters {text!r}") from None
        if n < 2 or n & (n - 1) or n > 1 << 20 or not (1 <= r <= 32) or not (1 <= p <= 16):
            raise StoreError(f"key derivation parameters out of range {text!r}")
        return cls("scrypt", salt, n, r, p)


@dataclass(frozen=True, slots=True)
class CipherSpec:
    """The configured encryption: algorithm, secret and how to stretch it.

    ``kdf="scrypt"`` for a passphrase (slow on purpose); ``kdf="hkdf"`` for random key material of at
    least 16 bytes. The secret never reaches the disk; ``repr`` hides it.
    """

    secret: bytes | str = field(repr=False)
    algorithm: Algorithm = "aes-256-gcm"
    kdf: Kdf = "scrypt"

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown cipher {self.algorithm!r}; use one of {ALGORITHMS}")
        if self.kdf not in ("scrypt", "hkdf"):
            raise ValueError(f"unknown key derivation {self.kdf!r}")
        if not self.secret:
            raise ValueError("encryption secret is empty")
        if self.kdf == "hkdf" and len(self._secret()) < 16:
            raise ValueError("hkdf needs at least 16 bytes of key material; use scrypt for passphrases")

    def _secret(self) -> bytes:
        return self.secret.encode() if isinstance(self.secret, str) else self.secret

    def new_params(self) -> KdfParams:
        return KdfParams(self.kdf, os.urandom(SALT))

    def derive(self, params: KdfParams, algorithm: str | None = None) -> AeadCipher:
        """The store's cipher for these parameters (``algorithm`` as recorded in the store)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

        algorithm = algorithm or self.algorithm
        info = b"leafjet stream store " + algorithm.encode()
        if params.kdf == "scrypt":
            key = Scrypt(salt=params.salt, length=32, n=params.n, r=params.r, p=params.p).derive(
                self._secret()
            )
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)
        else:
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=params.salt, info=info).derive(
                self._secret()
            )
        return AeadCipher(algorithm, key)


def make_key_check(cipher: Cipher) -> bytes:
    return cipher.seal(KEY_CHECK_PLAINTEXT, KEY_CHECK_AAD)


def key_matches(cipher: Cipher, check: bytes) -> bool:
    try:
        return cipher.open(check, KEY_CHECK_AAD) == KEY_CHECK_PLAINTEXT
    except DecryptError:
        return False
