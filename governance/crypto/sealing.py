"""The sealed value: `enc:v1:<data key id>:<base64 of 12-byte nonce + AES-256-GCM ciphertext>`.

The associated data names the table and column (`memoryapp_entry.content`): a value copied into
another column does not open. The tag is checked on every open, so a wrong key or a changed byte
raises SealError, never returns garbage.
"""

from __future__ import annotations

import base64
import functools
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "enc:v1:"
NONCE_BYTES = 12


class SealError(Exception):
    """A sealed value that cannot be opened: its key is missing, destroyed or wrong, or it was changed."""


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


@functools.lru_cache(maxsize=4096)
def _cipher(key: bytes) -> AESGCM:
    """The cipher of a key, made once (its key schedule costs more than sealing a short value)."""
    return AESGCM(key)


def cipher_cache_clear() -> None:
    _cipher.cache_clear()


def seal(plaintext: bytes, *, key_id: str, key: bytes, aad: bytes) -> str:
    nonce = os.urandom(NONCE_BYTES)
    sealed = _cipher(key).encrypt(nonce, plaintext, aad)
    return f"{PREFIX}{key_id}:{base64.b64encode(nonce + sealed).decode('ascii')}"


def sealed_key_id(value: str) -> str:
    """The data key id a sealed value names."""
    key_id, sep, _ = value[len(PREFIX) :].partition(":")
    if not sep or not key_id:
        raise SealError("a sealed value without a key id")
    return key_id


def unseal(value: str, *, key: bytes, aad: bytes) -> bytes:
    _, _, body = value[len(PREFIX) :].partition(":")
    try:
        raw = base64.b64decode(body, validate=True)
        return _cipher(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad)
    except (InvalidTag, ValueError) as exc:
        raise SealError(
            f"a value sealed under data key {sealed_key_id(value)} does not open (wrong key or changed)"
        ) from exc


def wrap(data_key: bytes, *, master: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(master).encrypt(nonce, data_key, aad)


def unwrap(wrapped: bytes, *, master: bytes, aad: bytes) -> bytes:
    """The data key; InvalidTag when the master key is not the one it was wrapped with."""
    return AESGCM(master).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], aad)
