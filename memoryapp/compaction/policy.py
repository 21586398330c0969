"""When to compact and where to cut (000 `shouldCompact`, `findCutPoint`, `CompactionPolicy`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memoryapp.compaction.history import HISTORY_AND_COMPACTION, CompactedHistory, compacted_history
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import EntryType, Role
from memoryapp.threads.selectors import path_entries
from memoryapp.tokens import count_message_tokens

DEFAULT_TRIGGER_RATIO = 0.8
DEFAULT_KEEP_RECENT = 8
# The window a strategy assumes when the request names none (a common model size today).
DEFAULT_CONTEXT_WINDOW = 128_000


@dataclass(frozen=True)
class CompactionPolicy:
    trigger_ratio: float = DEFAULT_TRIGGER_RATIO  # fraction of the window at which to compact
    keep_recent: int = DEFAULT_KEEP_RECENT  # trailing entries kept untouched


def entry_tokens(entry: Entry) -> int:
    """Tokens of one entry as the model sees it (its content and tool calls, not its saved count)."""
    return count_message_tokens(entry.content, entry.tool_calls)


def history_tokens(history: CompactedHistory) -> int:
    summary = count_message_tokens(history.summary) if history.summary else 0
    return summary + sum(entry_tokens(e) for e in history.entries)


def should_compact_tokens(tokens: int, window: int, trigger_ratio: float = DEFAULT_TRIGGER_RATIO) -> bool:
    """True at `window * trigger_ratio` tokens or more; never for a window of 0 or less."""
    if window <= 0:
        return False
    return tokens >= window * trigger_ratio


def thread_branch(thread: Thread) -> list[Entry]:
    """The active branch with the entries compaction reads: messages, tool results, compactions. A
    turn screening held (memoryapp.screening) is left out: no summarizer reads it until released."""

    return [e for e in path_entries(thread=thread, types=HISTORY_AND_COMPACTION) if e.held_at is None]


def should_compact(thread: Thread, window: int, trigger_ratio: float = DEFAULT_TRIGGER_RATIO) -> bool:
    """Whether the thread's active branch, as the model sees it now, fills the trigger share."""
    if window <= 0:
        return False
    return should_compact_tokens(history_tokens(compacted_history(thread_branch(thread))), window, trigger_ratio)


def is_tool_result(entry: Entry) -> bool:
    return entry.type == EntryType.TOOL_RESULT or entry.role == Role.TOOL


def find_cut_point(entries: Sequence[Entry], keep_recent: int) -> int:
    """Index of the first entry kept verbatim; 0 condenses nothing, len(entries) everything.

    1. Start the kept tail `keep_recent` entries from the end (clamped to the list).
    2. While the first kept entry is a tool result, move the cut forward past it: its call is in
       the condensed part, and a tool call and its result are never split.
    """
    cut = min(max(len(entries) - max(keep_recent, 0), 0), len(entries))
    while cut < len(entries) and is_tool_result(entries[cut]):
        cut += 1
    return cut


def cut_keeping_recent_tokens(entries: Sequence[Entry], keep_tokens: int) -> int:
    """Index of the first kept entry when the newest `keep_tokens` are kept in whole turns.

    A turn opens with a user message, so a tool call always keeps its result. The kept tail is
    the longest run of whole turns at the end that fits; when not even the last turn fits,
    nothing is kept (the cut is at the end).
    """
    cut = len(entries)
    total = 0
    for index in range(len(entries) - 1, -1, -1):
        total += entry_tokens(entries[index])
        if total > keep_tokens:
            break
        entry = entries[index]
        if entry.type == EntryType.MESSAGE and entry.role == Role.USER:
            cut = index
    return cut
