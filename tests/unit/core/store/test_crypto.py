"""The AEAD ciphers and key derivation behind encrypted stream stores."""

from __future__ import annotations

import os

import pytest

from core.errors import StoreError
from core.store.crypto import AeadCipher, CipherSpec, DecryptError, KdfParams, key_matches, make_key_check


@pytest.mark.parametrize("algorithm", ["aes-256-gcm", "chacha20-poly1305"])
def test_sealed_blobs_open_only_with_the_same_key_and_associated_data(algorithm: str) -> None:
    c = AeadCipher(algorithm, os.urandom(32))
    blob = c.seal(b"payload", b"seq-1")
    assert blob != c.seal(b"payload", b"seq-1")  # random nonce
    assert c.open(blob, b"seq-1") == b"payload"
    with pytest.raises(DecryptError):
        c.open(blob, b"seq-2")
    with pytest.raises(DecryptError):
        AeadCipher(algorithm, os.urandom(32)).open(blob, b"seq-1")
    with pytest.raises(DecryptError):
        c.open(blob[:-1] + bytes([blob[-1] ^ 1]), b"seq-1")
    with pytest.raises(DecryptError):
        c.open(b"short", b"seq-1")


def test_the_same_secret_and_salt_derive_the_same_key() -> None:
    spec = CipherSpec("a passphrase")
    params = spec.new_params()
    check = make_key_check(spec.derive(params))
    assert key_matches(spec.derive(KdfParams.decode(params.encode(), params.salt)), check)
    assert not key_matches(CipherSpec("another").derive(params), check)
    assert not key_matches(spec.derive(spec.new_params()), check)  # another store's salt


def test_kdf_parameters_are_parsed_strictly() -> None:
    assert KdfParams.decode(b"hkdf:sha256", b"s").kdf == "hkdf"
    assert KdfParams.decode(b"scrypt:n=1024,r=8,p=1", b"s").n == 1024
    for bad in [b"scrypt:n=1000,r=8,p=1", b"scrypt:n=1024", b"bcrypt:x", b"scrypt:n=1024,r=99,p=1"]:
        with pytest.raises(StoreError):
            KdfParams.decode(bad, b"s")


def test_cipher_spec_validates_and_hides_its_secret() -> None:
    with pytest.raises(ValueError):
        CipherSpec("")
    with pytest.raises(ValueError):
        CipherSpec("x", algorithm="des")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        CipherSpec(b"short", kdf="hkdf")
    assert "hunter2" not in repr(CipherSpec("hunter2"))
