"""Deleting and redacting threads and entries (004 "Forgetting, Redacting and Rewinding").

Each cascade takes what memory derived from the entries first (`lineage.derived_forget`), then
the entries, then their copies in forks. Lock order, the same in every cascade: the thread, its
forks level by level, the advisory locks of `derived_forget`, then the rows, in id order."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import QuerySet
from django.utils import timezone

from governance.audit import audit_append
from memoryapp.errors import DomainError, NotFound
from memoryapp.events.services import event_record
from memoryapp.forgetting.lineage import AUDIT_IDS, derived_forget
from memoryapp.models import Entry, Thread
from memoryapp.retry import atomic_retrying
from memoryapp.threads.hashing import reparent
from memoryapp.threads.redaction import REDACTED_FIELDS, redaction_apply
from memoryapp.threads.services import thread_lock, thread_sync
from memoryapp.threads.validation import EVENT_TYPE_VALUES, short_text_check


@atomic_retrying
def thread_delete(*, thread: Thread, actor: str = "") -> None:
    """Delete a thread and every entry of it, first what memory derived from them (`derived_forget`),
    and the copies of its entries in its forks (004: they go with their originals).

    Lock order, the same in every cascade: the thread, its forks level by level (`fork_copies`),
    `derived_forget`'s advisory locks, then the rows that go, in id order, just before they go.
    A deadlock victim is run again (`atomic_retrying`).
    """
    locked = thread_lock(thread)
    doomed = list(Entry.objects.filter(thread=locked).only("id", "agent_id", "thread_id"))
    copies = fork_copies(doomed)
    derived_forget(
        agent=locked.agent, entries=[*doomed, *copies], reason="thread.delete", actor=actor, entries_deleted=True
    )
    count = len(doomed)
    _lock_rows(Entry.objects.filter(thread=locked))
    # Children point at their parents with DO_NOTHING; the parent constraint is checked at
    # commit, when the whole tree is gone, so the cascade may delete in any order.
    audit_append(
        action="thread.delete",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=locked.external_id,
        outcome="deleted",
        details={"entries": count, "fork_copies": len(copies)},
    )
    locked.delete()
    event_record(agent_id=locked.agent_id, type="thread.deleted", thread_id=locked.external_id)
    _delete_fork_copies(copies, reason="thread.delete", actor=actor)


def fork_copies(entries: Sequence[Entry]) -> list[Entry]:
    """The copies of these entries in the threads forked from theirs, forks of forks followed
    (a copy names its original in `metadata.forkOf`): what goes, or is redacted, with them.

    Call with the entries' own threads locked. Each level of forks is locked (in pk order) before
    its copies are read, so no fork made meanwhile escapes, and every cascade locks a thread before
    its forks, all of them before `derived_forget`'s advisory locks, and those before the entry rows
    it changes (`_lock_rows`, in id order): cascades never deadlock with each other.
    """
    found: list[Entry] = []
    agent_ids = {e.agent_id for e in entries}
    threads = {e.thread_id for e in entries}
    ids = [e.id for e in entries]
    while ids:
        forks = list(
            Thread.objects.select_for_update()
            .filter(agent_id__in=agent_ids, forked_from_id__in=threads)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if not forks:
            break
        level = list(Entry.objects.select_related("thread").filter(thread_id__in=forks, metadata__forkOf__in=ids))
        found.extend(level)
        threads = {e.thread_id for e in level}
        ids = [e.id for e in level]
    return found


def _lock_rows(entries: QuerySet[Entry]) -> None:
    """Lock the entry rows a cascade is about to change or delete, in id order.

    A multi-row UPDATE or DELETE locks rows in the order of its plan; two of them over the same
    rows in different orders wait for each other. Taken first in one order, they cannot.
    """
    list(entries.select_for_update().order_by("pk").values_list("pk", flat=True))


def _splice_many(locked: Thread, doomed: set[str]) -> int:
    """Delete these entries of a locked thread; children and the leaf go to the nearest survivor."""
    parents = dict(Entry.objects.filter(thread=locked).values_list("id", "parent_id"))

    def survivor(entry_id: str | None) -> str | None:
        while entry_id is not None and entry_id in doomed:
            entry_id = parents.get(entry_id)
        return entry_id

    moves = {eid: survivor(pid) for eid, pid in parents.items() if eid not in doomed and pid in doomed}
    _lock_rows(Entry.objects.filter(thread=locked, pk__in=[*doomed, *moves]))
    reparent(moves)
    if locked.active_leaf_id in doomed:
        locked.active_leaf_id = survivor(locked.active_leaf_id)
        Thread.objects.filter(pk=locked.pk).update(active_leaf_id=locked.active_leaf_id)
    Entry.objects.filter(thread=locked, pk__in=doomed).delete()
    # What the model sees of the thread changed (a deleted compaction shows what it summarized
    # again): its running count of history tokens is counted by the next automatic compaction check.
    Thread.objects.filter(pk=locked.pk).update(history_tokens=None)
    return len(moves)


def _delete_fork_copies(copies: Sequence[Entry], *, reason: str, actor: str) -> None:
    """Splice out the fork copies of deleted entries (their threads locked, `derived_forget` done)."""
    by_thread: dict[int, list[Entry]] = {}
    for copy in copies:
        by_thread.setdefault(copy.thread_id, []).append(copy)
    for thread_pk in sorted(by_thread):
        locked = thread_lock(by_thread[thread_pk][0].thread)
        doomed = {c.id for c in by_thread[thread_pk]}
        respliced = _splice_many(locked, doomed)
        event_record(agent_id=locked.agent_id, type="entry.deleted", thread_id=locked.external_id, ids=sorted(doomed))
        audit_append(
            action="entry.delete",
            actor=actor,
            agent_id=locked.agent_id,
            thread_id=locked.external_id,
            subject=sorted(doomed)[0] if len(doomed) == 1 else f"{len(doomed)} fork copies",
            outcome="deleted",
            details={
                "fork_copies": len(doomed),
                "entry_ids": sorted(doomed)[:AUDIT_IDS],
                "children_respliced": respliced,
                "because": reason,
            },
        )


@atomic_retrying
def entry_delete(*, entry: Entry, actor: str = "") -> None:
    """Splice an entry out of its branch: its children go under its parent.

    1. Lock the thread, then its forks, reading the entry's copies there (`fork_copies`).
    2. Take what memory derived from the entry and its copies (`derived_forget`: items, quotes,
    file versions, the compactions covering them). 3. Re-parent the children to the entry's
    parent; if the entry was the active leaf, the leaf moves to its parent. 4. Delete the row; audit.
    5. Splice the copies out of the forks the same way.
    """
    thread = entry.thread
    locked = thread_lock(thread)
    copies = fork_copies([entry])
    derived_forget(
        agent=thread.agent, entries=[entry, *copies], reason="entry.delete", actor=actor, entries_deleted=True
    )
    current = Entry.objects.filter(pk=entry.pk, thread=locked).values_list("parent_id", flat=True)
    if not current.exists():
        raise NotFound("Entry")
    parent_id = current.first()
    child_ids = list(Entry.objects.filter(thread=locked, parent_id=entry.pk).values_list("id", flat=True))
    _lock_rows(Entry.objects.filter(thread=locked, pk__in=[entry.pk, *child_ids]))
    children = reparent(dict.fromkeys(child_ids, parent_id))
    if locked.active_leaf_id == entry.pk:
        locked.active_leaf_id = parent_id
        locked.save(update_fields=["active_leaf"])
    Entry.objects.filter(pk=entry.pk).delete()
    # What the model sees changed (a deleted compaction shows what it summarized again): the running
    # count of history tokens is counted by the next automatic compaction check.
    locked.history_tokens = None
    Thread.objects.filter(pk=locked.pk).update(history_tokens=None)
    event_record(agent_id=locked.agent_id, type="entry.deleted", thread_id=locked.external_id, ids=[entry.pk])
    audit_append(
        action="entry.delete",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=entry.pk,
        outcome="deleted",
        details={"children_respliced": children, "fork_copies": len(copies)},
    )
    _delete_fork_copies(copies, reason="entry.delete", actor=actor)
    thread_sync(thread, locked)


@atomic_retrying
def entry_redact(*, entry: Entry, reason: str = "", actor: str = "") -> Entry:
    """Replace what an entry said with `[redacted]`, keeping its place in the tree.

    Text, content blocks, tool call arguments and tool results become `[redacted]`; id, parent,
    seq, role, type, call ids and tool names stay; a user's sender name goes; the embedding is
    dropped and the content hash computed anew; `metadata.redacted` = {at, reason}. Event entries are refused (400).
    Its copies in forks are redacted the same way.
    """
    if entry.type in EVENT_TYPE_VALUES:
        raise DomainError("not_redactable", "Event entries cannot be redacted.", field="entry_id")
    reason = short_text_check(reason, "reason", max_length=500)
    thread_lock(entry.thread)
    # Its copies in forks (and forks of forks) say the same words: they are redacted too.
    copies = [c for c in fork_copies([entry]) if c.redacted_at is None]
    # What memory derived from them goes first; see `derived_forget`.
    derived_forget(agent=entry.thread.agent, entries=[entry, *copies], reason="entry.redact", actor=actor)
    row = _redact_row(entry=entry, reason=reason, actor=actor)
    for copy in copies:
        _redact_row(entry=copy, reason=reason, actor=actor, copy_of=entry.id)
    return row


def _redact_row(*, entry: Entry, reason: str, actor: str, copy_of: str | None = None) -> Entry:
    """Redact one entry whose thread the caller locked and whose derived memory it took."""
    locked = thread_lock(entry.thread)
    row = Entry.objects.select_for_update().filter(pk=entry.pk, thread=locked).first()
    if row is None:
        raise NotFound("Entry")
    now = timezone.now()
    redaction_apply(row, at=now, record={"at": now.isoformat(), "reason": reason})
    row.save(update_fields=REDACTED_FIELDS)
    event_record(agent_id=locked.agent_id, type="entry.redacted", thread_id=locked.external_id, ids=[row.pk])
    audit_append(
        action="entry.redact",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=row.pk,
        outcome="redacted",
        details={"reason_given": bool(reason), **({"fork_copy_of": copy_of} if copy_of else {})},
    )
    return row
