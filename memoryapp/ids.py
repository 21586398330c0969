"""Identifiers of the objects agents see: a short prefix and a time-ordered random part."""

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford's base32, lower case


def new_id(prefix: str) -> str:
    """`<prefix>_` + 10 characters of milliseconds + 16 random characters (sortable by creation)."""
    millis = int(time.time() * 1000)
    head = ""
    for _ in range(10):
        head = _ALPHABET[millis & 31] + head
        millis >>= 5
    bits = int.from_bytes(os.urandom(10), "big")
    tail = ""
    for _ in range(16):
        tail += _ALPHABET[bits & 31]
        bits >>= 5
    return f"{prefix}_{head}{tail}"
