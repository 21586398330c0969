"""Keyset pages and the opaque cursors that carry their position."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from memoryapp.errors import DomainError


@dataclass(frozen=True)
class Page:
    results: list[Any]
    next_cursor: str | None


def encode_cursor(values: dict[str, Any]) -> str:
    raw = json.dumps(values, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError) as exc:
        raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor") from exc
    if not isinstance(values, dict) or any(k not in values for k in keys):
        raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor")
    return values
