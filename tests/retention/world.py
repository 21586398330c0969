"""A small world of memory at known ages, for the retention tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from governance.models import JobRun
from memoryapp.models import Agent, Entry, MemoryItem, RetentionPolicy, Thread
from tests.kit.factories import EntryFactory, ThreadFactory

NOW = timezone.now().replace(microsecond=0)


def days_ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def aged_thread(agent: Agent, external_id: str, *, days: float, turns: int = 3, user_id: str = "u-ana") -> Thread:
    """A thread created, and last written to, `days` ago."""
    thread = ThreadFactory(agent=agent, external_id=external_id, user_id=user_id)
    for n in range(turns):
        EntryFactory(thread=thread, role="user" if n % 2 == 0 else "assistant", created_at=days_ago(days))
    Thread.objects.filter(pk=thread.pk).update(updated_at=days_ago(days), created_at=days_ago(days))
    thread.refresh_from_db()
    return thread


def compaction(thread: Thread, *, first_kept: Entry, at: datetime | None = None) -> Entry:
    """A compaction entry whose summary stands in for the branch before `first_kept`."""
    return EntryFactory(
        thread=thread,
        type="compaction",
        event={"summary": "what was said", "first_kept_entry_id": first_kept.id, "first_kept_seq": first_kept.seq},
        created_at=at,
    )


def policy(agent: Agent | None = None, **rules: Any) -> RetentionPolicy:
    return RetentionPolicy.objects.create(agent=agent, **rules)


def age_item(item: MemoryItem, days: float, **fields: Any) -> MemoryItem:
    MemoryItem.objects.filter(pk=item.pk).update(recorded_at=days_ago(days), **fields)
    item.refresh_from_db()
    return item


def finished_run(*, days: float, agent: Agent | None = None) -> JobRun:
    run = JobRun.objects.create(kind="test", agent_id=agent.pk if agent else None, status=JobRun.Status.SUCCEEDED)
    JobRun.objects.filter(pk=run.pk).update(finished_at=days_ago(days))
    return run


def path_texts(thread: Thread) -> list[str]:
    """The active branch, root first, as `type:text` (what a reader of the path gets)."""
    thread.refresh_from_db()
    rows = {e.id: e for e in Entry.objects.filter(thread=thread)}
    path: list[Entry] = []
    at = thread.active_leaf_id
    while at is not None:
        path.append(rows[at])
        at = rows[at].parent_id
    return [f"{e.type}:{e.text}" for e in reversed(path)]
