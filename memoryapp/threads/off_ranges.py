"""The seq ranges of a thread written while its memory was off (`Thread.extraction["memory_off"]`).

Kept apart from memoryapp.threads.memory_switch (which writes the switch through the thread
services) so that the services that copy a thread's entries (a fork) can carry the ranges too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memoryapp.models import Thread

OFF_RANGES_KEY = "memory_off"


def memory_off_ranges(thread: Thread) -> list[dict[str, Any]]:
    """The seq ranges written while the thread's memory was off ({"from_seq", "to_seq"}; the last
    one open, `to_seq` None, while it is off)."""
    progress = thread.extraction if isinstance(thread.extraction, dict) else {}
    return [dict(r) for r in progress.get(OFF_RANGES_KEY) or [] if isinstance(r, dict)]


def seq_was_off(seq: int, ranges: list[dict[str, Any]]) -> bool:
    for r in ranges:
        start, end = int(r.get("from_seq") or 0), r.get("to_seq")
        if seq >= start and (end is None or seq <= int(end)):
            return True
    return False


def off_ranges_of_copies(
    *, origin: Thread, copied_seqs: Sequence[int], next_seq: int | None = None
) -> list[dict[str, Any]]:
    """The off ranges of a copy of `origin` whose entries 1, 2, 3 ... are copies of the origin's
    entries `copied_seqs` (in that order): a copy of a turn said while memory was off is off too.
    While the origin's memory is off the last range stays open (from the copy's `next_seq`)."""
    ranges = memory_off_ranges(origin)
    copied: list[dict[str, Any]] = []
    for new_seq, old_seq in enumerate(copied_seqs, start=1):
        if not seq_was_off(old_seq, ranges):
            continue
        if copied and copied[-1]["to_seq"] == new_seq - 1:
            copied[-1]["to_seq"] = new_seq
        else:
            copied.append({"from_seq": new_seq, "to_seq": new_seq})
    if not origin.memory_enabled:
        start = next_seq if next_seq is not None else len(copied_seqs) + 1
        if copied and copied[-1]["to_seq"] == start - 1:
            copied[-1]["to_seq"] = None
        else:
            copied.append({"from_seq": start, "to_seq": None})
    return copied
