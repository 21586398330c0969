"""Signed receipts: a document (an erasure report, say) signed with the service's Ed25519 key, so a
person or a regulator can check it offline, years later, with nothing but the public key.

A receipt is the document wrapped with what signs it::

    {"receipt_version": 1, "alg": "Ed25519", "key_id": "ed25519:3f2a...", "signed_at": "...",
     "document": {...}, "signature": "<base64 of the 64-byte signature>"}

1. The signed bytes are the canonical JSON of the receipt without its `signature` member: keys
   sorted, no whitespace, non-ASCII escaped (`json.dumps(x, sort_keys=True, separators=(",", ":"))`
   in Python). So the document, the key id and the time are all covered: changing any of them,
   or the signature, makes verification fail; re-indenting the file does not.
2. The key id is "ed25519:" and the first 16 hex digits of the sha256 of the raw 32-byte public
   key: a receipt names the key that signed it, and a verifier with the wrong key says so.
3. The signing key comes from RECEIPT_SIGNING_KEY (a PEM private key, or the 32-byte seed as 64
   hex digits), else from the file RECEIPT_SIGNING_KEY_FILE, else from RECEIPT_KEY_DEFAULT_FILE
   under VAR_DIR, generated there on first use (mode 0600; two processes generating at once keep
   the first one written). The public key is served at /.well-known/memory-receipt-key (JSON) and
   /.well-known/memory-receipt-key.pem.

This module is a leaf like the audit chain: any part of the service may sign with it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

RECEIPT_VERSION = 1
ALG = "Ed25519"
# Under VAR_DIR, when neither RECEIPT_SIGNING_KEY nor RECEIPT_SIGNING_KEY_FILE is set.
RECEIPT_KEY_DEFAULT_FILE = "receipt-signing-key.pem"


def canonical_json(value: Any) -> bytes:
    """The bytes that are signed: sorted keys, no whitespace, ASCII only; NaN and infinities refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def key_id_of(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


# --- keys -------------------------------------------------------------------------------------


def _private_key_parse(text: str, *, source: str) -> Ed25519PrivateKey:
    """A PEM private key (PKCS#8, as `openssl genpkey -algorithm ed25519` writes) or a 64-hex seed."""
    text = text.strip()
    if len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text):
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(text))
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            f"{source} must hold an Ed25519 private key (PEM, or its 32-byte seed as 64 hex digits): {exc}"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ImproperlyConfigured(f"{source} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def _key_file_create(path: Path) -> None:
    """Write a new key to `path` unless one is there: written whole to a temporary file (0600),
    then linked into place, which fails if another process got there first (theirs is kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process's key is the one
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def signing_key_source() -> tuple[str, Path | None]:
    """Where the signing key comes from: ("env", None), ("file", path) or ("generated", path)."""
    if settings.RECEIPT_SIGNING_KEY:
        return "env", None
    if settings.RECEIPT_SIGNING_KEY_FILE:
        return "file", Path(settings.RECEIPT_SIGNING_KEY_FILE)
    return "generated", Path(settings.VAR_DIR) / RECEIPT_KEY_DEFAULT_FILE


@functools.cache
def _signing_key_load(kind: str, path: Path | None, inline: str) -> Ed25519PrivateKey:
    if kind == "env":
        return _private_key_parse(inline, source="RECEIPT_SIGNING_KEY")
    assert path is not None
    if kind == "generated" and not path.exists():
        _key_file_create(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ImproperlyConfigured(f"RECEIPT_SIGNING_KEY_FILE {path} cannot be read: {exc.strerror}") from None
    return _private_key_parse(text, source=f"the receipt signing key file {path}")


def signing_key() -> Ed25519PrivateKey:
    """The service's signing key (loaded once per process and source; see the module's docstring)."""
    kind, path = signing_key_source()
    return _signing_key_load(kind, path, settings.RECEIPT_SIGNING_KEY if kind == "env" else "")


def public_key() -> Ed25519PublicKey:
    return signing_key().public_key()


def public_key_pem(key: Ed25519PublicKey | None = None) -> str:
    key = key or public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def public_key_document() -> dict[str, str]:
    """What /.well-known/memory-receipt-key answers: the key id, the raw key (base64 and hex), the PEM."""
    key = public_key()
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {
        "alg": ALG,
        "key_id": key_id_of(key),
        "public_key": base64.b64encode(raw).decode(),
        "public_key_hex": raw.hex(),
        "public_key_pem": public_key_pem(key),
    }


def public_key_parse(text: str) -> Ed25519PublicKey:
    """A public key as a verifier may hold it: PEM, the well-known URL's JSON, or the raw 32 bytes
    as 64 hex digits or base64. ValueError naming the problem otherwise."""
    text = text.strip()
    if text.startswith("{"):
        try:
            published = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the public key file is not valid JSON: {exc}") from None
        if not isinstance(published, dict):
            raise ValueError("the public key JSON is not an object")
        for field in ("public_key_pem", "public_key_hex", "public_key"):
            if isinstance(published.get(field), str):
                return public_key_parse(published[field])
        raise ValueError("the public key JSON has no public_key, public_key_hex or public_key_pem")
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode())
        except ValueError as exc:
            raise ValueError(f"the PEM public key cannot be read: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"the PEM holds a {type(key).__name__}, not an Ed25519 public key")
        return key
    raw: bytes | None = None
    if len(text) == 64:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = None
    if raw is None:
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError:
            raise ValueError("the public key is neither PEM, JSON, 64 hex digits nor base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, this one {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


# --- sign and verify --------------------------------------------------------------------------


def receipt_sign(document: Mapping[str, Any], *, key: Ed25519PrivateKey | None = None) -> dict[str, Any]:
    """The signed receipt of `document` (a JSON object of ids, counts and hashes: never content).

    ValueError when the document is not JSON (a set, a NaN, a datetime): convert before signing.
    """
    key = key or signing_key()
    receipt: dict[str, Any] = {
        "receipt_version": RECEIPT_VERSION,
        "alg": ALG,
        "key_id": key_id_of(key.public_key()),
        "signed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "document": dict(document),
    }
    try:
        signed = canonical_json(receipt)
    except TypeError as exc:
        raise ValueError(f"a receipt's document must be plain JSON: {exc}") from None
    # A document read back from its own JSON signs the same bytes: keep the round-tripped copy.
    receipt["document"] = json.loads(signed)["document"]
    receipt["signature"] = base64.b64encode(key.sign(signed)).decode()
    return receipt


@dataclass(frozen=True)
class ReceiptCheck:
    ok: bool
    reason: str  # why not, or "" when it verified
    key_id: str = ""


def receipt_check(receipt: Any, *, public: Ed25519PublicKey | None = None) -> ReceiptCheck:
    """Verify `receipt` against `public` (default: this service's own key), saying why not.

    1. It must be a JSON object with the members receipt_sign writes, alg Ed25519, version 1.
    2. Its key_id must be the key's id (another key's receipt says which key it needs).
    3. The signature must verify over the canonical JSON of everything but the signature.
    """
    if not isinstance(receipt, dict):
        return ReceiptCheck(False, "a receipt is a JSON object")
    missing = [m for m in ("receipt_version", "alg", "key_id", "document", "signature") if m not in receipt]
    if missing:
        return ReceiptCheck(False, f"the receipt has no {', '.join(missing)}")
    if receipt["receipt_version"] != RECEIPT_VERSION:
        return ReceiptCheck(False, f"receipt_version {receipt['receipt_version']!r} is not {RECEIPT_VERSION}")
    if receipt["alg"] != ALG:
        return ReceiptCheck(False, f"alg {receipt['alg']!r} is not {ALG}")
    public = public or public_key()
    expected = key_id_of(public)
    if receipt["key_id"] != expected:
        return ReceiptCheck(
            False, f"the receipt was signed by key {receipt['key_id']!r}, not by this public key ({expected})"
        )
    signature_text = receipt["signature"]
    try:
        signature = base64.b64decode(signature_text, validate=True) if isinstance(signature_text, str) else b""
    except ValueError:
        signature = b""
    # Only the one encoding of the signature: base64's unused bits would let a changed text pass.
    if len(signature) != 64 or base64.b64encode(signature).decode() != signature_text:
        return ReceiptCheck(False, "the signature is not 64 bytes of base64 (it was changed)", expected)
    try:
        signed = canonical_json({k: v for k, v in receipt.items() if k != "signature"})
    except (TypeError, ValueError) as exc:
        return ReceiptCheck(False, f"the receipt is not plain JSON: {exc}", expected)
    try:
        public.verify(signature, signed)
    except InvalidSignature:
        return ReceiptCheck(False, "the signature does not match the receipt: it was changed after signing", expected)
    return ReceiptCheck(True, "", expected)


def receipt_verify(receipt: Any, *, public: Ed25519PublicKey | None = None) -> bool:
    """True when `receipt` is signed by `public` (default: this service's key) and unchanged."""
    return receipt_check(receipt, public=public).ok
