"""What a redaction does to an entry's row: its words replaced, its place in the tree and its ids kept."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memoryapp.content import REDACTED_TEXT
from memoryapp.models import Entry
from memoryapp.models.choices import Role
from memoryapp.threads.hashing import content_hash, hashed_turn
from memoryapp.tokens import count_message_tokens

# The fields `redaction_apply` changes: what a redaction saves, and nothing else.
REDACTED_FIELDS = (
    "content",
    "tool_calls",
    "text",
    "sender_name",
    "sender_name_hashes",
    "metadata",
    "redacted_at",
    "embedding",
    "embedded_at",
    "token_count",
    "content_hash",
)


def _redact_content(content: Any) -> Any:
    """Content with every text and tool payload replaced; block kinds and call ids kept."""
    if content is None:
        return None
    if isinstance(content, str):
        return REDACTED_TEXT
    if isinstance(content, list):
        blocks: list[Any] = []
        for block in content:
            if not isinstance(block, dict):
                blocks.append(REDACTED_TEXT)
                continue
            kind = block.get("type")
            kept = {k: block[k] for k in ("type", "id", "tool_use_id", "tool_call_id", "name") if k in block}
            if kind in ("text", "thinking"):
                kept["text"] = REDACTED_TEXT
            elif kind in ("tool_call", "tool_use"):
                kept["input" if "input" in block else "arguments"] = REDACTED_TEXT
            elif kind == "tool_result":
                kept["content" if "content" in block else "output"] = REDACTED_TEXT
            else:
                kept["text"] = REDACTED_TEXT
            blocks.append(kept)
        return blocks
    return REDACTED_TEXT


def redaction_apply(row: Entry, *, at: datetime, record: dict[str, Any]) -> None:
    """Make an entry (saved or not) say nothing: what a redaction changes, for `entry_redact` and
    for an import of an entry redacted before its export. `record` goes to `metadata.redacted`."""
    row.content = _redact_content(row.content)
    if row.tool_calls:
        row.tool_calls = [{**call, "arguments": REDACTED_TEXT} for call in row.tool_calls]
    row.text = REDACTED_TEXT
    if row.role == Role.USER:
        row.sender_name = ""
    row.metadata = {**(row.metadata or {}), "redacted": record}
    row.redacted_at = at
    row.embedding = None
    row.embedded_at = None
    row.token_count = count_message_tokens(row.content, row.tool_calls)
    # The old hash was computed from the words said: a guess could be checked against it.
    row.content_hash = content_hash(parent_id=row.parent_id, turn=hashed_turn(row), created_at=row.created_at)
