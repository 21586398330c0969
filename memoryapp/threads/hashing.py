"""The content hash of an entry (000 `hashNode`): what it covers, and re-parenting that keeps it true."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any

from memoryapp.models import Entry
from memoryapp.models.choices import EntryType
from memoryapp.threads.columns import ENTRY_LIGHT_DEFER


def _millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def content_hash(*, parent_id: str | None, turn: dict[str, Any], created_at: datetime) -> str:
    """000 `hashNode`: sha256 over JSON.stringify({parent, turn, createdAt}), first 32 hex digits.

    A root's parent is JSON null, so a root never hashes like a chained node. Keys are sorted:
    JSONB stores objects in its own key order, and the hash must come out the same when it is
    computed again from the stored entry (an import, a check).
    """
    before, after = content_hash_around_parent(turn=turn, created_at=created_at)
    raw = before + _json_id(parent_id) + after
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


# json.dumps with these options made an encoder each call: a third of hashing an entry (issue 26).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)


def _json(value: Any) -> str:
    return _ENCODER.encode(value)


def _json_id(value: str | None) -> str:
    """`_json` of an id or None, without the encoder's call (a string has no keys to sort)."""
    return "null" if value is None else encode_basestring(value)


def content_hash_around_parent(*, turn: dict[str, Any], created_at: datetime) -> tuple[str, str]:
    """The text `content_hash` hashes, without the parent: what comes before the parent's JSON (its
    id as a JSON string, or `null`) and what comes after it. The keys sorted, the object is
    `{"createdAt":...,"parent":...,"turn":...}`; a statement that learns the parent only as it runs
    (the single append's, memoryapp.threads.services) hashes the same text."""
    # The milliseconds are an int: its JSON is its decimal digits.
    return f'{{"createdAt":{_millis(created_at)},"parent":', f',"turn":{_json(turn)}}}'


def content_hash_plain(*, parent_id: str | None, role: str, content: str, created_at: datetime) -> str:
    """`content_hash` of a plain message (text content, no tool call or event: `hashed_turn` gives
    {"type": "message", "role", "content"}), its JSON written out: keys sorted, strings as the
    encoder writes them (ensure_ascii off: `encode_basestring`)."""
    raw = (
        f'{{"createdAt":{_millis(created_at)},"parent":{_json_id(parent_id)},"turn":'
        f'{{"content":{encode_basestring(content)},"role":{encode_basestring(role)},"type":"message"}}}}'
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def hashed_turn(entry: Entry) -> dict[str, Any]:
    """The part of an entry that the hash covers: what was said, by whom, in which form."""
    turn: dict[str, Any] = {"type": entry.type, "role": entry.role, "content": entry.content}
    if entry.tool_calls:
        turn["toolCalls"] = entry.tool_calls
    if entry.tool_call_id:
        turn["toolCallId"] = entry.tool_call_id
    if entry.event is not None:
        turn["event"] = entry.event
    return turn


def entry_hash(entry: Entry) -> str:
    """`content_hash` of the entry as it stands: a plain message (text content, no tool call, tool
    call id or event) by `content_hash_plain`, without the turn's dict and the encoder's call (4
    against 10 us, issue 25 §3: what screening redacts is mostly such turns); any other by its turn."""
    content = entry.content
    if (
        type(content) is str
        and entry.type == EntryType.MESSAGE
        and not entry.tool_calls
        and not entry.tool_call_id
        and entry.event is None
    ):
        return content_hash_plain(
            parent_id=entry.parent_id, role=entry.role, content=content, created_at=entry.created_at
        )
    return content_hash(parent_id=entry.parent_id, turn=hashed_turn(entry), created_at=entry.created_at)


def reparent(moves: dict[str, str | None]) -> int:
    """Give entries new parents (a splice), their content hash computed anew: the hash covers the
    parent, so a stored one would no longer match the entry (an export re-imported would differ)."""
    if not moves:
        return 0
    rows = list(Entry.objects.filter(id__in=list(moves)).defer(*ENTRY_LIGHT_DEFER))
    for row in rows:
        row.parent_id = moves[row.id]
        row.content_hash = entry_hash(row)
    Entry.objects.bulk_update(rows, ["parent_id", "content_hash"], batch_size=500)
    return len(rows)
