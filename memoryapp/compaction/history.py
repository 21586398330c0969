"""Reading a branch as the model sees it after compaction (004 `readCompactedHistory`).

Owned by the compaction area. Contract used by the context builder:

    compacted_history(path) -> CompactedHistory

`path` is one branch, oldest first, read with the history types plus `compaction`. The newest
compaction entry on it names its first kept entry (event["first_kept_entry_id"]); the summary
stands in for everything before that entry, and cleared tool results (event["cleared"], for
clear-old-tool-results) are replaced in memory by their placeholders. Nothing is saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memoryapp.models import Entry
from memoryapp.models.choices import EntryType


@dataclass
class CompactedHistory:
    summary: str | None = None
    compaction_id: str | None = None
    entries: list[Entry] = field(default_factory=list)


def compacted_history(path: list[Entry]) -> CompactedHistory:
    """Placeholder until the compaction area lands: no compaction applied, events left out."""
    return CompactedHistory(entries=[e for e in path if e.type in (EntryType.MESSAGE, EntryType.TOOL_RESULT)])
