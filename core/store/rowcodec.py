"""How a message's headers and data are stored in a row: as is, zstd-compressed, and/or sealed.

Compression happens before sealing (ciphertext does not compress). Each row's ``flags`` say what was done,
so a store can change its compression setting without rewriting old rows. Subjects, sequences, timestamps
and sizes stay in the clear -- the indexes need them.
"""

from __future__ import annotations

import threading

import zstandard

from core.errors import StoreError
from core.store.crypto import Cipher, DecryptError

F_DATA_ZSTD = 1
F_HDR_ZSTD = 2
F_SEALED = 4
F_KNOWN = F_DATA_ZSTD | F_HDR_ZSTD | F_SEALED

COMPRESS_MIN = 64  # below this, a zstd frame's own overhead eats any gain
MAX_DECOMPRESSED = 256 << 20


class RowCodec:
    """Encode (writer thread) and decode (any thread) message blobs. Thread-safe: zstd contexts are
    per thread; the AEAD objects are stateless."""

    def __init__(self, *, compression: str = "none", cipher: Cipher | None = None, level: int = 3) -> None:
        if compression not in ("none", "zstd"):
            raise ValueError(f"unknown compression {compression!r}; use 'none' or 'zstd'")
        self.compress = compression == "zstd"
        self.cipher = cipher
        self.plain = not self.compress and cipher is None
        self._level = level
        self._local = threading.local()

    def _cctx(self) -> zstandard.ZstdCompressor:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = zstandard.ZstdCompressor(level=self._level)
        return c

    def _dctx(self) -> zstandard.ZstdDecompressor:
        d = getattr(self._local, "d", None)
        if d is None:
            d = self._local.d = zstandard.ZstdDecompressor()
        return d

    def _squeeze(self, b: bytes) -> bytes | None:
        if len(b) < COMPRESS_MIN:
            return None
        z = self._cctx().compress(b)
        return z if len(z) < len(b) else None

    def encode(self, seq: int, hdr: bytes | None, data: bytes) -> tuple[bytes | None, bytes, int]:
        flags = 0
        if self.compress:
            if (z := self._squeeze(data)) is not None:
                data, flags = z, flags | F_DATA_ZSTD
            if hdr and (z := self._squeeze(hdr)) is not None:
                hdr, flags = z, flags | F_HDR_ZSTD
        if self.cipher is not None:
            aad = seq.to_bytes(8, "big")
            data = self.cipher.seal(data, aad + b"d")
            if hdr is not None:
                hdr = self.cipher.seal(hdr, aad + b"h")
            flags |= F_SEALED
        return hdr, data, flags

    def decode(self, seq: int, hdr: bytes | None, data: bytes, flags: int) -> tuple[bytes | None, bytes]:
        if flags & ~F_KNOWN:
            raise StoreError(f"message {seq} has unknown storage flags {flags:#x}")
        if flags & F_SEALED:
            if self.cipher is None:
                raise StoreError(f"message {seq} is encrypted and no key is configured")
            aad = seq.to_bytes(8, "big")
            try:
                data = self.cipher.open(data, aad + b"d")
                if hdr is not None:
                    hdr = self.cipher.open(hdr, aad + b"h")
            except DecryptError:
                raise DecryptError(f"message {seq} failed authentication (tampered or corrupt)") from None
        try:
            if flags & F_DATA_ZSTD:
                data = self._dctx().decompress(data, max_output_size=MAX_DECOMPRESSED)
            if flags & F_HDR_ZSTD and hdr is not None:
                hdr = self._dctx().decompress(hdr, max_output_size=MAX_DECOMPRESSED)
        except zstandard.ZstdError as e:
            raise StoreError(f"message {seq} does not decompress: {e}") from None
        return hdr, data

    def seal_meta(self, key: str, value: bytes) -> bytes:
        return value if self.cipher is None else self.cipher.seal(value, b"meta:" + key.encode())

    def open_meta(self, key: str, value: bytes) -> bytes:
        if self.cipher is None:
            return value
        try:
            return self.cipher.open(value, b"meta:" + key.encode())
        except DecryptError:
            raise DecryptError(f"meta {key!r} failed authentication (tampered or corrupt)") from None
