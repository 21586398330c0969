"""A thread as JSONL, in the record format of 000's session store.

Every line is one record:

    {"type": "thread", "thread": {"id", "user_id", "metadata", "created_at", "forked_from"}}   (first; ours)
    {"type": "node", "node": {"id", "parent", "turn", "createdAt", ...}}                        (one per entry, seq order)
    {"type": "head", "leaf": "<entry id>"}                                                       (last: the active leaf)

A node carries 000's fields (`id`, `parent`, `turn` = {role, content, toolCalls?, toolCallId?},
`createdAt` in epoch milliseconds) and ours beside them: `seq`, `entryType`, `toolName`,
`senderName`, `tokenCount`, `event`, `metadata`, `hash` (the content hash), `createdAtIso`
(microseconds, so a round trip is exact) and `redactedAt`. As in 000, the last head wins;
records of other types are skipped, so a newer file still loads.

`hash` is 000's hashNode over the entry as stored: the first 32 hex digits of SHA-256 over
JSON({"parent", "turn", "createdAt"}) with sorted keys and no spaces, where this `turn` is the
node's `turn` plus `type` (= `entryType`) and, for an event, `event`. Keys are sorted because
PostgreSQL's JSONB keeps its own key order, and the hash must come out the same when computed
again from a stored entry (services.threads.content_hash).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from memoryapp.errors import DomainError
from memoryapp.ids import entry_id_check, thread_id_check
from memoryapp.models import Agent, Entry, Thread
from memoryapp.storable import json_text_may_hold_unstorable, storable_text_check, time_in_range
from memoryapp.threads.selectors import thread_entries_all
from memoryapp.threads.services import thread_import

MAX_IMPORT_LINES = 200_000
MAX_SEQ = 2**62


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def node_record(entry: Entry) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": entry.role, "content": entry.content}
    if entry.tool_calls:
        turn["toolCalls"] = entry.tool_calls
    if entry.tool_call_id:
        turn["toolCallId"] = entry.tool_call_id
    node: dict[str, Any] = {
        "id": entry.id,
        "parent": entry.parent_id,
        "turn": turn,
        "createdAt": int(entry.created_at.timestamp() * 1000),
        "createdAtIso": entry.created_at.isoformat(),
        "seq": entry.seq,
        "entryType": entry.type,
        "tokenCount": entry.token_count,
        "metadata": entry.metadata or {},
        "hash": entry.content_hash,
    }
    if entry.tool_name:
        node["toolName"] = entry.tool_name
    if entry.sender_name:
        node["senderName"] = entry.sender_name
    if entry.event is not None:
        node["event"] = entry.event
    if entry.redacted_at is not None:
        node["redactedAt"] = entry.redacted_at.isoformat()
    return {"type": "node", "node": node}


def thread_export_lines(*, thread: Thread) -> Iterator[str]:
    """The thread's records, one JSON document per line (no newline at the ends)."""
    forked_from = thread.forked_from.external_id if thread.forked_from_id and thread.forked_from else None
    yield _dumps(
        {
            "type": "thread",
            "thread": {
                "id": thread.external_id,
                "user_id": thread.user_id,
                "metadata": thread.metadata or {},
                "created_at": thread.created_at.isoformat(),
                "forked_from": forked_from,
            },
        }
    )
    for entry in thread_entries_all(thread=thread):
        yield _dumps(node_record(entry))
    if thread.active_leaf_id:
        yield _dumps({"type": "head", "leaf": thread.active_leaf_id})


def _time(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        if isinstance(value, str):
            at = datetime.fromisoformat(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            at = datetime.fromtimestamp(value / 1000, tz=UTC)
        else:
            raise ValueError(value)
    except (ValueError, OverflowError, OSError) as exc:
        raise DomainError("invalid_value", f"{field} is not a time.", field=field) from exc
    return time_in_range(at if at.tzinfo else at.replace(tzinfo=UTC), field=field)


def _node_spec(node: Any, line: int, order: int) -> dict[str, Any]:
    """The entry fields of one node record (checked further by the import service)."""
    where = f"line {line}"
    if not isinstance(node, dict):
        raise DomainError("invalid_record", "A node record needs a `node` object.", field=where)
    turn = node.get("turn") or {}
    if not isinstance(turn, dict):
        raise DomainError("invalid_record", "A node's turn must be an object.", field=f"{where}.turn")
    metadata = node.get("metadata") if "metadata" in node else {}
    seq = node.get("seq", order)
    if isinstance(seq, int) and not isinstance(seq, bool) and seq > MAX_SEQ:
        # The column is a bigint, and the thread's next seq follows the largest one.
        raise DomainError("invalid_value", f"A node's seq is at most {MAX_SEQ}.", field=f"{where}.seq")
    return {
        # Checked here to name the line; the import service checks it again for other callers.
        "id": entry_id_check(node.get("id"), field=f"{where}.id"),
        "parent_id": node.get("parent"),
        # A file of 000 itself has no seq: its order is the file's order.
        "seq": seq,
        "type": node.get("entryType") or turn.get("type") or "message",
        "role": turn.get("role") or "",
        "content": turn.get("content"),
        "tool_calls": turn.get("toolCalls"),
        "tool_call_id": turn.get("toolCallId") or "",
        "tool_name": node.get("toolName") or turn.get("toolName") or "",
        "sender_name": node.get("senderName") or "",
        "token_count": node.get("tokenCount"),
        "event": node.get("event"),
        "metadata": metadata,
        "created_at": _time(node.get("createdAtIso") or node.get("createdAt"), f"{where}.createdAt"),
        "redacted_at": _time(node.get("redactedAt"), f"{where}.redactedAt"),
    }


def thread_import_lines(
    *, agent: Agent, lines: Iterable[str], external_id: str | None = None, actor: str = ""
) -> Thread:
    """A new thread of `agent` from JSONL lines (`external_id` overrides the file's own id).

    Malformed lines are a 400 naming the line; nothing is written unless every line is good.
    """
    header: dict[str, Any] = {}
    header_line = 0
    nodes: list[dict[str, Any]] = []
    leaf: str | None = None
    for number, raw in enumerate(lines, start=1):
        if number > MAX_IMPORT_LINES:
            raise DomainError(
                "import_too_large", f"An import holds at most {MAX_IMPORT_LINES} lines.", field="body", status=413
            )
        text = raw.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise DomainError("malformed_jsonl", f"Line {number} is not JSON.", field=f"line {number}") from exc
        if json_text_may_hold_unstorable(text):
            storable_text_check(record, field=f"line {number}")
        if not isinstance(record, dict):
            raise DomainError("invalid_record", f"Line {number} is not a record.", field=f"line {number}")
        kind = record.get("type")
        if kind == "thread" and isinstance(record.get("thread"), dict):
            header, header_line = record["thread"], number
        elif kind == "node":
            nodes.append(_node_spec(record.get("node"), number, len(nodes) + 1))
        elif kind == "head":
            leaf = record.get("leaf")
            if leaf is not None and not isinstance(leaf, str):
                raise DomainError("invalid_record", "A head names its leaf by id.", field=f"line {number}")
    thread_id = external_id or header.get("id")
    if not external_id and isinstance(thread_id, str) and thread_id:
        # The file's own id: an error names its line (an `external_id` given is checked as `id`).
        thread_id_check(thread_id, field=f"line {header_line}.thread.id")
    metadata = header.get("metadata") if isinstance(header.get("metadata"), dict) else {}
    raw_user = header.get("user_id")
    user_id = raw_user if isinstance(raw_user, str) else ""
    return thread_import(
        agent=agent,
        external_id=thread_id if isinstance(thread_id, str) else None,
        user_id=user_id,
        metadata=metadata,
        nodes=nodes,
        leaf_id=leaf,
        actor=actor,
        created_at=_time(header.get("created_at"), "thread.created_at"),
    )
