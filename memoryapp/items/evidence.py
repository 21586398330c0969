"""Lineage: whether a quote stands in the entry it names (004 "Lineage")."""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

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


# --- quotes of a tool call and of a memory file's lines (004 Evidence toolCallId, fileRange) ---------


def tool_call_text(entry: Any, tool_call_id: str) -> str | None:
    """What the tool call `tool_call_id` says in `entry`: the result's text when the entry answers it,
    the call's name and arguments when the entry makes it; None when the entry holds no such call."""
    if not tool_call_id or entry is None:
        return None
    if getattr(entry, "tool_call_id", "") == tool_call_id:
        return entry.text or ""
    for call in getattr(entry, "tool_calls", None) or []:
        if isinstance(call, dict) and call.get("id") == tool_call_id:
            arguments = call.get("arguments", call.get("input", ""))
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
            return f"{call.get('name', '')} {arguments}"
    return None


def file_lines(content: str | None, start: int, end: int) -> str | None:
    """Lines `start`..`end` (1-based, inclusive) of a version's content; None when they do not fit."""
    if content is None:
        return None
    lines = content.split("\n")
    if not 1 <= start <= end <= len(lines):
        return None
    return "\n".join(lines[start - 1 : end])


def _holds(quote: str, text: str | None) -> str:
    needle = squash(quote or "")
    if text is None or not needle:
        return EvidenceStatus.SUGGESTED
    return EvidenceStatus.VERIFIED if needle in squash(text) else EvidenceStatus.SUGGESTED


def evidence_status(evidence: Any) -> str:
    """Whether a stored quote still holds where it points: in its file version's lines (a redacted
    or deleted version holds nothing), in its tool call, or in its entry."""
    if evidence.line_start is not None:
        version = evidence.file_version
        if version is None or version.redacted_at is not None:
            return EvidenceStatus.SUGGESTED
        return _holds(evidence.quote, file_lines(version.content, evidence.line_start, evidence.line_end))
    if evidence.tool_call_id:
        entry = evidence.entry
        if entry is None or entry.redacted_at is not None:
            return EvidenceStatus.SUGGESTED
        return _holds(evidence.quote, tool_call_text(entry, evidence.tool_call_id))
    return verify_evidence(evidence.quote, evidence.entry)
