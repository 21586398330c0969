"""Lineage: whether a quote stands in the entry it names (004 "Lineage")."""

from __future__ import annotations

import re
from typing import Protocol

from memoryapp.models.choices import EvidenceStatus

_SPACE = re.compile(r"\s+")


class HasText(Protocol):
    id: str
    text: str
    redacted_at: object


def squash(text: str) -> str:
    """The text with all whitespace removed: quotes compare whitespace aside."""
    return _SPACE.sub("", text)


def verify_evidence(quote: str, entry: HasText | None) -> str:
    """`verified` when the quote is in the entry's text, whitespace aside; else `suggested`.

    A missing entry, a redacted one and an empty quote never verify.
    """
    if entry is None or getattr(entry, "redacted_at", None) is not None:
        return EvidenceStatus.SUGGESTED
    needle = squash(quote or "")
    if not needle:
        return EvidenceStatus.SUGGESTED
    return EvidenceStatus.VERIFIED if needle in squash(entry.text or "") else EvidenceStatus.SUGGESTED
