"""Reading a branch as the model sees it after compaction (004 `readCompactedHistory`).

Contract used by the context builder:

    compacted_history(path) -> CompactedHistory

`path` is one branch, oldest first, read with the history types plus `compaction`. Nothing is
saved: cleared entries are copies, the rows stay as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memoryapp.models import Entry
from memoryapp.models.choices import EntryType
from memoryapp.tokens import count_message_tokens

HISTORY_AND_COMPACTION = (EntryType.MESSAGE, EntryType.TOOL_RESULT, EntryType.COMPACTION)
SUMMARY_HEADING = "[condensed earlier context]"


@dataclass
class CompactedHistory:
    summary: str | None = None
    compaction_id: str | None = None
    entries: list[Entry] = field(default_factory=list)


def _event(entry: Entry) -> dict[str, Any]:
    return entry.event if isinstance(entry.event, dict) else {}


def compacted_history(path: Sequence[Entry]) -> CompactedHistory:
    """The branch as summary + kept entries, with cleared tool results replaced by placeholders.

    1. The newest compaction entry on the path decides the cut: entries before its
       `first_kept_entry_id` are replaced by its summary (None for pure clearing, which names
       the first entry and carries the summary of an earlier compaction when there is one).
       Should the first kept entry be gone, its recorded seq (`first_kept_seq`) places the cut.
    2. The `cleared` and `cleared_inputs` of EVERY compaction on the path apply to the kept
       entries (on copies): content -> placeholder, cleared tool call arguments -> {}.
    3. Only messages and tool results are returned, oldest first.
    """
    compactions = [e for e in path if e.type == EntryType.COMPACTION]
    history = [e for e in path if e.type in (EntryType.MESSAGE, EntryType.TOOL_RESULT)]
    if not compactions:
        return CompactedHistory(entries=history)
    newest = compactions[-1]
    event = _event(newest)
    first_kept_id = event.get("first_kept_entry_id")
    start = 0
    if not first_kept_id and event.get("summary"):
        # The summary covers everything before the compaction: only later entries are kept.
        start = next((i for i, e in enumerate(history) if e.seq > newest.seq), len(history))
    elif first_kept_id:
        index = next((i for i, e in enumerate(history) if e.id == first_kept_id), None)
        if index is None:
            first_kept_seq = event.get("first_kept_seq")
            if isinstance(first_kept_seq, int):
                index = next((i for i, e in enumerate(history) if e.seq >= first_kept_seq), len(history))
            else:
                # Without a place to cut, keep what came after the compaction itself.
                index = next((i for i, e in enumerate(history) if e.seq > newest.seq), len(history))
        start = index
    kept = history[start:]

    cleared: dict[str, str] = {}
    cleared_inputs: dict[str, set[str]] = {}
    for compaction in compactions:
        ev = _event(compaction)
        for entry_id, placeholder in (ev.get("cleared") or {}).items():
            cleared[str(entry_id)] = str(placeholder)
        for entry_id, call_ids in (ev.get("cleared_inputs") or {}).items():
            cleared_inputs.setdefault(str(entry_id), set()).update(str(c) for c in call_ids or [])

    entries: list[Entry] = []
    for entry in kept:
        if entry.id in cleared or entry.id in cleared_inputs:
            entry = copy.copy(entry)
            if entry.id in cleared:
                entry.content = cleared[entry.id]
                entry.text = cleared[entry.id]
            if entry.id in cleared_inputs and isinstance(entry.tool_calls, list):
                ids = cleared_inputs[entry.id]
                entry.tool_calls = [
                    {**call, "arguments": {}} if isinstance(call, dict) and str(call.get("id")) in ids else call
                    for call in entry.tool_calls
                ]
            entry.token_count = count_message_tokens(entry.content, entry.tool_calls)
        entries.append(entry)
    summary = event.get("summary")
    return CompactedHistory(
        summary=str(summary) if summary else None,
        compaction_id=newest.id,
        entries=entries,
    )
