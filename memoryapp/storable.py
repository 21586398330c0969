"""What a client sends that the database can keep AND give back.

- Text: PostgreSQL keeps NUL (U+0000) neither in text nor in jsonb, and a lone surrogate
  (U+D800-U+DFFF, which JSON can write as `"\\ud800"`) is no character at all: no UTF-8 text
  holds it, so the driver fails to send it, as does any message echoing it.
- Times: PostgreSQL stores a timestamptz well past Python's range (years 4713 BC to 294276 AD),
  so 9999-12-31T23:59:59-05:00 (year 10000 in UTC) is written without complaint, and every
  later read of its row then fails in the driver ("timestamp too large"): one bad request would
  make a thread unreadable. Times are checked in UTC against Python's range before they are written.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from memoryapp.errors import DomainError

# A day of margin at each end, so that code adding or subtracting a little cannot overflow.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)

# In JSON text, a `\u` escape of NUL or of a surrogate half (D800-DFFF). Strict JSON refuses raw
# control characters and bytes that are not UTF-8, so only such an escape brings either in.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def time_in_range(at: datetime, *, field: str) -> datetime:
    """`at` (naive read as UTC) if it falls within years 1-9999 in UTC, else a 400 naming `field`."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    try:
        in_utc: datetime | None = aware.astimezone(UTC)
    except OverflowError:
        in_utc = None
    if in_utc is None or not EARLIEST <= in_utc <= LATEST:
        raise DomainError("invalid_value", f"{field} must fall within the years 1 to 9999 (UTC).", field=field)
    return at


def json_text_may_hold_unstorable(text: str) -> bool:
    """Whether JSON `text` may decode to a NUL or a lone surrogate (a pair is fine; the walk tells)."""
    return _SUSPECT_ESCAPE.search(text) is not None


def _has_lone_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def unstorable_text_field(value: Any, *, refuse_nul: bool = True) -> tuple[str, str] | None:
    """(field path, reason) of the first string or key in `value` that cannot be kept, else None.

    Iterative, so a deep value cannot exhaust the stack; paths read `entries[0].content`.
    """
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        path, node = pending.pop()
        if isinstance(node, str):
            if _has_lone_surrogate(node):
                return path, "holds a lone surrogate (\\ud800-\\udfff), which is not a character"
            if refuse_nul and "\x00" in node:
                return path, "must not hold NUL characters (\\u0000)"
        elif isinstance(node, dict):
            for key, inner in reversed(list(node.items())):
                if _has_lone_surrogate(key) or (refuse_nul and "\x00" in key):
                    return path or "body", "holds a key that is not storable text (NUL or a lone surrogate)"
                pending.append((f"{path}.{key}" if path else str(key), inner))
        elif isinstance(node, list):
            for index in reversed(range(len(node))):
                pending.append((f"{path}[{index}]", node[index]))
    return None


def _joined(field: str, inner: str) -> str:
    if not field or not inner:
        return field or inner
    return f"{field}{inner}" if inner.startswith("[") else f"{field}.{inner}"


def storable_text_check(value: Any, *, field: str = "") -> None:
    """A 400 naming the field (under `field`) when `value` holds a NUL or a lone surrogate anywhere."""
    found = unstorable_text_field(value)
    if found is None:
        return
    inner, reason = found
    path = _joined(field, inner)
    raise DomainError("invalid_text", f"{path or 'The body'} {reason}.", field=path or None)
