"""AES-256-GCM for sealed content and wrapped data keys (the core's ``Aead`` port).

Format (also in docs/operations.md, "AEAD format"): AES-256-GCM, a fresh random 12-byte
nonce per seal, the 16-byte tag appended to the ciphertext (``cryptography``'s AESGCM
layout), associated data from :func:`sessionstream.core.privacy.associated_data`.
A data key is wrapped the same way by the tenant's key-encryption key, with the
associated data :func:`wrap_ad` (tenant, session, class), so a wrapped key cannot be
moved to another session or class either.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sessionstream.core.errors import MovedCiphertext

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
WRAP_MAGIC = b"sessionstream-dk-wrap-v1"


class AesGcm:
    """AES-256-GCM with one cached cipher object per key (building one costs ~1 µs)."""

    def __init__(self, cache_size: int = 4096) -> None:
        self._ciphers: dict[bytes, AESGCM] = {}
        self._cache_size = cache_size

    def _cipher(self, key: bytes) -> AESGCM:
        cipher = self._ciphers.get(key)
        if cipher is None:
            if len(key) != KEY_BYTES:
                raise MovedCiphertext(f"a data key must be {KEY_BYTES} bytes, got {len(key)}")
            if len(self._ciphers) >= self._cache_size:
                self._ciphers.clear()
            cipher = self._ciphers[key] = AESGCM(key)
        return cipher

    def seal(self, key: bytes, plaintext: bytes, ad: bytes) -> tuple[bytes, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        return nonce, self._cipher(key).encrypt(nonce, plaintext, ad)

    def open(self, key: bytes, nonce: bytes, ciphertext: bytes, ad: bytes) -> bytes:
        if len(nonce) != NONCE_BYTES or len(ciphertext) < TAG_BYTES:
            raise MovedCiphertext(
                f"sealed content has a {len(nonce)}-byte nonce and {len(ciphertext)} bytes: "
                f"expected a {NONCE_BYTES}-byte nonce and at least the {TAG_BYTES}-byte tag"
            )
        try:
            return self._cipher(key).decrypt(nonce, ciphertext, ad)
        except InvalidTag:
            raise MovedCiphertext(
                "sealed content failed authentication: it was tampered with, moved from "
                "another event, or sealed with another key"
            ) from None


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def wrap_ad(tenant: str, session_id: str, data_class: str, kek_version: int) -> bytes:
    out = bytearray(WRAP_MAGIC)
    for text in (tenant, session_id, data_class):
        raw = text.encode("utf-8")
        out += struct.pack(">I", len(raw)) + raw
    out += struct.pack(">I", kek_version)
    return bytes(out)


def wrap(kek: bytes, data_key: bytes, ad: bytes) -> tuple[bytes, bytes]:
    nonce = os.urandom(NONCE_BYTES)
    return nonce, AESGCM(kek).encrypt(nonce, data_key, ad)


def unwrap(kek: bytes, nonce: bytes, wrapped: bytes, ad: bytes) -> bytes:
    try:
        return AESGCM(kek).decrypt(nonce, wrapped, ad)
    except InvalidTag:
        raise MovedCiphertext(
            "a wrapped data key failed authentication: wrong tenant key, or the key record "
            "was moved from another session or class"
        ) from None
