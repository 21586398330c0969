"""Deleting, redacting and rewinding threads and entries (004 "Forgetting, Redacting and Rewinding").

Each cascade takes what memory derived from the entries first (`lineage.derived_forget`), then
the entries, then their copies in forks, and answers with the counts 004 names (`COUNT_KEYS`).
A user message takes its replies (the entries after it on every branch up to the next user
message) unless `keep_replies`. Lock order, the same in every cascade: the threads (pk order),
their forks level by level, the advisory locks of `derived_forget`, then the rows, in id order.

Because derived memory goes first, in the same transaction as the entries, a cascade stopped part
way (an error, a lost connection) changed nothing or left only derived memory gone: run again, it
finds the entries still there and completes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection
from django.db.models import BooleanField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet
from django.utils import timezone

from governance.audit.chain import AuditEntry, audit_append, audit_append_many
from memoryapp.errors import DomainError, NotFound
from memoryapp.events.services import event_record, event_record_many
from memoryapp.files.access import FileAccess
from memoryapp.files.selectors import versions_unredacted
from memoryapp.files.services import files_lock, redacted_heads_delete, versions_redact
from memoryapp.forgetting.lineage import AUDIT_IDS, LineageReport, derived_forget, lineage_audit
from memoryapp.graph.services import entity_relations_delete, scope_relations_delete
from memoryapp.items.rules import Scope
from memoryapp.items.services import StaleMark, items_mark_stale
from memoryapp.models import (
    Agent,
    Entity,
    Entry,
    Evidence,
    ItemReview,
    MemoryFileVersion,
    MemoryItem,
    Relation,
    RelationEvidence,
    SubjectMention,
    Thread,
)
from memoryapp.models.choices import EntryType, ItemStatus, Role
from memoryapp.retry import atomic_retrying
from memoryapp.subjects.detect import mentions_record
from memoryapp.threads.columns import ENTRY_TABLE
from memoryapp.threads.hashing import reparent
from memoryapp.threads.redaction import REDACTED_FIELDS, redaction_apply
from memoryapp.threads.selectors import entry_on_branch, path_ids
from memoryapp.threads.services import thread_lock, thread_rewind, thread_sync
from memoryapp.threads.validation import EVENT_TYPE_VALUES, short_text_check

# What every cascade answers (004's names; `facts` and `job_runs` for the erasure of a person).
COUNT_KEYS = (
    "entries_deleted",
    "entries_redacted",
    "threads",
    "summaries",
    "items_purged",
    "items_trimmed",
    "items_stale",
    "entities",
    "facts",
    "file_versions",
    "playbook_rules",
    "vectors",
    "job_runs",
)
Counts = dict[str, int]
# A hook called between the steps of a cascade (tests stop a cascade part way through it).
_between_steps: list[Callable[[str], None]] = []


def counts_zero() -> Counts:
    return dict.fromkeys(COUNT_KEYS, 0)


def counts_add(total: Counts, more: Counts) -> Counts:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value
    return total


def cascade_step_hook(hook: Callable[[str], None] | None) -> None:
    """Have `hook(step)` called between a cascade's steps (None removes it); for fault tests."""
    _between_steps.clear()
    if hook is not None:
        _between_steps.append(hook)


def cascade_step(name: str) -> None:
    """A point between two steps of a cascade (or two batches of an erasure), where the hook runs."""
    for hook in _between_steps:
        hook(name)


@atomic_retrying
def thread_delete(*, thread: Thread, actor: str = "") -> Counts:
    """Delete a thread and every entry of it, what memory derived from them first, with the copies
    of its entries in its forks and what was kept for the thread alone (004 deleteThread): a batch
    of one (`threads_delete`). NotFound when it was deleted meanwhile.
    """
    return threads_delete(threads=[thread], actor=actor)[thread.pk]


@atomic_retrying
def threads_delete(*, threads: Sequence[Thread], actor: str = "") -> dict[int, Counts]:
    """Delete these threads (`thread_delete` each, in pk order) in one transaction: the counts of
    each by pk, the same audit records and change events as one at a time.

    1. Lock the threads, and the origins of the forks among them, in pk order (NotFound when one
       was deleted meanwhile).
    2. The origins of the forks among them forget their names (`origins_forget_forks`).
    3. Find those with memory derived outside their own rows (`_threads_plain`): forks, items
       quoting their entries, file versions placed at them, children elsewhere, items, entities
       or files of their scope. Each of those goes through the lineage on its own
       (`_thread_forget`), in pk order: what one leaves (an item quoting two of them, trimmed by
       the first, purged by the second) is what the next finds, as when deleted one at a time.
    4. The others, each run of them between those, under the agents' file locks (no version is
       placed at their entries meanwhile) and their entry rows' locks, are checked again: their
       rows go by one statement per table for all of them (`_threads_drop`), with the audit
       records and events each would have had. One found to have derived memory after all (written
       between the two looks) goes the first way.
    Lock order, as in every cascade: the threads, forks, advisory locks, then the entry rows. A
    thread of the first kind after a run of plain ones takes its locks after theirs, as every
    thread after the first did when the prune deleted its batch one thread after another: a
    deadlock that makes is run again (`atomic_retrying`, here or the prune's batch).
    """
    order = sorted({t.pk for t in threads})
    locked = threads_with_origins_lock(threads)
    if len(locked) != len(order):
        raise NotFound("Thread")
    counts: dict[int, Counts] = {}
    origins_forget_forks(locked)
    for plain, run in _runs(locked, _threads_plain(locked)):
        if not plain:
            counts.update((t.pk, _thread_forget(t, actor=actor)) for t in run)
            continue
        for agent_id in sorted({t.agent_id for t in run}):
            files_lock(FileAccess(agent=Agent(pk=agent_id)))
        # Their entry rows too, before they are looked at again: a quote written meanwhile either
        # committed before (seen below) or waits for this transaction (and finds its entry gone).
        _lock_rows(Entry.objects.filter(thread_id__in=[t.pk for t in run]))
        for still, again in _runs(run, _threads_plain(run)):
            if still:
                counts.update(_threads_drop(again, actor=actor))
            else:
                counts.update((t.pk, _thread_forget(t, actor=actor)) for t in again)
    return counts


def threads_with_origins_lock(threads: Sequence[Thread]) -> list[Thread]:
    """Lock these threads and the origins of the forks among them (`origins_forget_forks` rewrites
    an origin's metadata) in one pk order, the order every other locker of threads keeps (a
    cascade, a person's mentions' erasure): an origin locked after its fork let a fork's delete hold
    the fork and wait on the origin while an erasure held the origin and waited on the fork (each
    on the other: tests/forgetting/test_index_races.py). A fork's origin is read before the lock: it
    is set when the fork is made and only ever cleared. Answers the threads themselves, locked."""
    pks = {t.pk for t in threads}
    origins = {t.forked_from_id for t in threads if t.forked_from_id is not None} - pks
    locking = Thread.objects.select_for_update().filter(pk__in=sorted(pks | origins)).order_by("pk")
    return [t for t in locking if t.pk in pks]


def origins_forget_forks(threads: Sequence[Thread]) -> None:
    """The origins of these forks, deleted with them, forget their names (`metadata.memoryForks`,
    which `thread_fork` appends to): an origin deleted in the same batch is left as it is. The
    origins are locked here in pk order: `threads_delete` locked them already, with the forks
    (`threads_with_origins_lock`), as a person's erasure of her threads does: locking them again is
    nothing."""
    gone = {t.pk for t in threads}
    names: dict[int, set[str]] = {}
    for thread in threads:
        if thread.forked_from_id and thread.forked_from_id not in gone:
            names.setdefault(thread.forked_from_id, set()).add(thread.external_id)
    if not names:
        return
    for origin in Thread.objects.select_for_update().filter(pk__in=sorted(names)).order_by("pk"):
        forks = (origin.metadata or {}).get("memoryForks") or []
        kept = [f for f in forks if f not in names[origin.pk]]
        if kept != forks:
            # Saved, not updated: the metadata is sealed under the thread's owner's key (and its
            # columns made from it follow).
            origin.metadata = {**(origin.metadata or {}), "memoryForks": kept}
            origin.save(update_fields=["metadata"])


def _runs(threads: Sequence[Thread], plain: set[int]) -> list[tuple[bool, list[Thread]]]:
    """The threads (in pk order) cut into runs of plain ones and of the others, order kept."""
    runs: list[tuple[bool, list[Thread]]] = []
    for thread in threads:
        kind = thread.pk in plain
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(thread)
        else:
            runs.append((kind, [thread]))
    return runs


def _threads_plain(threads: Sequence[Thread]) -> set[int]:
    """The threads nothing outside their own rows stands on (one query for all of them): no fork,
    no quote of their entries (an item's or a graph edge's), no file version placed at them, no child of them in another
    thread, no item, entity or memory file of their scope. Deleting one of them touches no other
    row, so a batch of them can go together; `derived_forget` would find nothing for them.

    Each part is read from the threads' entries through an index (a quote by its entry, a version
    by its place, a child by its parent), never by a scan of the table it looks in.
    """
    pks = [t.pk for t in threads]
    mine = Thread.objects.filter(pk__in=pks)
    # What `_thread_scope_forget` takes: items and entities of the thread's id (whoever they are
    # about; `~Q(thread_id="")` lets their partial index serve), files of exactly its scope.
    scope = Q(agent_id=OuterRef("agent_id"), thread_id=OuterRef("external_id")) & ~Q(thread_id="")
    files = Q(agent_id=OuterRef("agent_id"), user_id="", project_id="", thread_id=OuterRef("external_id"))
    parts = [
        Thread.objects.filter(forked_from_id__in=pks).values_list("forked_from_id"),
        Evidence.objects.filter(entry__thread_id__in=pks).values_list("entry__thread_id"),
        RelationEvidence.objects.filter(entry__thread_id__in=pks).values_list("entry__thread_id"),
        MemoryFileVersion.objects.filter(place__thread_id__in=pks).values_list("place__thread_id"),
        Entry.objects.filter(parent__thread_id__in=pks)
        .exclude(thread_id=F("parent__thread_id"))
        .values_list("parent__thread_id"),
        mine.filter(Exists(MemoryItem.objects.filter(scope))).values_list("pk"),
        mine.filter(Exists(Entity.objects.filter(scope))).values_list("pk"),
        mine.filter(Exists(Relation.objects.filter(scope))).values_list("pk"),
        mine.filter(Exists(MemoryFileVersion.objects.filter(files))).values_list("pk"),
    ]
    first, *rest = (part.order_by() for part in parts)
    return set(pks) - {pk for (pk,) in first.union(*rest, all=True)}


def _thread_forget(locked: Thread, *, actor: str) -> Counts:
    """Delete one locked thread through the lineage (004 deleteThread).

    1. Lock its forks level by level (`fork_copies`).
    2. `derived_forget` over its entries and their copies (items, quotes, file versions, compactions).
    3. The items and entities of the thread's own scope are purged; the memory file versions of
       its scope are redacted and their files deleted (a path may name what was forgotten).
    4. The entries and the thread are deleted; the copies are spliced out of the forks.
    """
    counts = counts_zero()
    doomed = list(Entry.objects.filter(thread=locked).only("id", "agent_id", "thread_id", "embedding", "type"))
    copies = fork_copies(doomed)
    report = derived_forget(
        agent=locked.agent, entries=[*doomed, *copies], reason="thread.delete", actor=actor, entries_deleted=True
    )
    counts_add(counts, report.cascade_counts())
    cascade_step("derived")
    counts_add(counts, thread_scope_forget(agent=locked.agent, thread_id=locked.external_id, actor=actor))
    cascade_step("thread_scope")
    count = len(doomed)
    counts["summaries"] += sum(1 for e in doomed if e.type == EntryType.COMPACTION)
    counts["entries_deleted"] += sum(1 for e in doomed if e.type != EntryType.COMPACTION)
    counts["vectors"] += sum(1 for e in doomed if e.embedding is not None)
    _lock_rows(Entry.objects.filter(thread=locked))
    # Children point at their parents with DO_NOTHING; the parent constraint is checked at
    # commit, when the whole tree is gone, so the cascade may delete in any order.
    audit_append_many([_thread_audit(locked, entries=count, fork_copies=len(copies), actor=actor)])
    locked.delete()
    counts["threads"] += 1
    event_record(agent_id=locked.agent_id, type="thread.deleted", thread_id=locked.external_id)
    counts_add(counts, _delete_fork_copies(copies, reason="thread.delete", actor=actor))
    return counts


def _thread_audit(thread: Thread, *, entries: int, fork_copies: int, actor: str) -> AuditEntry:
    return AuditEntry(
        action="thread.delete",
        actor=actor,
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        subject=thread.external_id,
        outcome="deleted",
        details={"entries": entries, "fork_copies": fork_copies},
        person=thread.user_id,
    )


def _threads_drop(threads: Sequence[Thread], *, actor: str) -> dict[int, Counts]:
    """Delete locked threads nothing outside them stands on (`_threads_plain`, checked under the
    agents' file locks): one statement per table for all of them.

    Their entry rows are locked in id order as they are read (an embedding job storing a vector
    is waited for); each thread writes the records `_thread_forget` would: `lineage.forget` (its
    entries, nothing derived) and `thread.delete`, and its `thread.deleted` event.
    """
    pks = [t.pk for t in threads]
    rows = list(
        Entry.objects.select_for_update()
        .filter(thread_id__in=pks)
        .order_by("pk")
        .annotate(vector=ExpressionWrapper(Q(embedding__isnull=False), output_field=BooleanField()))
        .values_list("thread_id", "id", "type", "vector")
    )
    cascade_step("derived")
    by_thread: dict[int, list[tuple[int, str, str, bool]]] = {pk: [] for pk in pks}
    for row in rows:
        by_thread[row[0]].append(row)
    counts: dict[int, Counts] = {}
    records: list[AuditEntry] = []
    nothing = LineageReport()
    for thread in threads:
        mine = by_thread[thread.pk]
        ids = [r[1] for r in mine]
        if ids:
            records.append(
                lineage_audit(
                    agent_id=thread.agent_id,
                    thread_id=thread.external_id,
                    wanted=ids,
                    found=ids,
                    reason="thread.delete",
                    actor=actor,
                    report=nothing,
                    person=thread.user_id,
                )
            )
        records.append(_thread_audit(thread, entries=len(ids), fork_copies=0, actor=actor))
        counts[thread.pk] = counts_zero() | {
            "threads": 1,
            "summaries": sum(1 for r in mine if r[2] == EntryType.COMPACTION),
            "entries_deleted": sum(1 for r in mine if r[2] != EntryType.COMPACTION),
            "vectors": sum(1 for r in mine if r[3]),
        }
    cascade_step("thread_scope")
    with connection.cursor() as cursor:
        # Raw: the ORM would read every entry back to null references that `_threads_plain` found none of.
        cursor.execute(f"DELETE FROM {ENTRY_TABLE} WHERE thread_id = ANY(%s)", [pks])
    Thread.objects.filter(pk__in=pks).delete()
    audit_append_many(records)
    for agent_id in sorted({t.agent_id for t in threads}):
        gone = [(t.external_id, ()) for t in threads if t.agent_id == agent_id]
        event_record_many(agent_id=agent_id, type="thread.deleted", by_thread=gone)
    return counts


@atomic_retrying
def thread_clear(*, thread: Thread, actor: str = "") -> Counts:
    """Delete every entry of a thread and what stood on them; the thread stays, empty (004 clearThread)."""
    locked = thread_lock(thread)
    ids = list(Entry.objects.filter(thread=locked).order_by("pk").values_list("pk", flat=True))
    counts = entries_forget(agent=locked.agent, entry_ids=ids, keep_replies=True, actor=actor, because="thread.clear")
    Thread.objects.filter(pk=locked.pk).update(active_leaf=None)
    thread.refresh_from_db()
    return counts


def thread_scope_forget(*, agent: Agent, thread_id: str, actor: str) -> Counts:
    """What was kept for one thread alone goes with it: its items and entities are purged, its memory
    file versions redacted and each file then deleted (004 deleteThread)."""
    counts = counts_zero()
    items = list(
        MemoryItem.objects.select_for_update()
        .filter(agent=agent, thread_id=thread_id)
        .order_by("pk")
        .only("id", "entity_id", "embedding", "attribute")
    )
    pks = [i.pk for i in items]
    if pks:
        counts["vectors"] += sum(1 for i in items if i.embedding is not None)
        Evidence.objects.filter(item_id__in=pks).delete()
        ItemReview.objects.filter(item_id__in=pks).delete()
        counts["items_purged"] += MemoryItem.objects.filter(pk__in=pks).delete()[1].get("memoryapp.MemoryItem", 0)
    # The graph's edges kept for the thread alone go too (those about its entities go with them).
    scope_relations_delete(agent_id=agent.pk, thread_id=thread_id)
    entities = Entity.objects.filter(agent=agent, thread_id=thread_id)
    entity_relations_delete(agent_id=agent.pk, entities=entities)
    MemoryItem.objects.filter(agent=agent, entity__in=entities).update(entity=None)
    counts["entities"] += entities.delete()[0]
    counts_add(counts, scope_files_forget(agent=agent, scope=Scope(thread_id=thread_id), actor=actor))
    return counts


def scope_files_forget(*, agent: Agent, scope: Scope, actor: str) -> Counts:
    """Redact every version of the memory files of exactly one scope, then delete each file that
    stands (a deletion version), so no path of it stays in a listing; the history keeps the redacted
    versions. Call inside the cascade's transaction."""
    counts = counts_zero()
    files_lock(FileAccess(agent=agent))
    redacting = versions_unredacted(
        MemoryFileVersion.objects.filter(
            agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id
        )
    )
    ids = list(redacting.order_by("pk").values_list("pk", flat=True))
    counts["file_versions"] += versions_redact(MemoryFileVersion.objects.filter(pk__in=ids))
    redacted_heads_delete(agent=agent, version_ids=ids, actor=actor)
    return counts


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
        level = list(Entry.objects.select_related("thread").filter(thread_id__in=forks, fork_of__in=ids))
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


def _delete_fork_copies(copies: Sequence[Entry], *, reason: str, actor: str) -> Counts:
    """Splice out the fork copies of deleted entries (their threads locked, `derived_forget` done)."""
    counts = counts_zero()
    by_thread: dict[int, list[Entry]] = {}
    for copy in copies:
        by_thread.setdefault(copy.thread_id, []).append(copy)
    for thread_pk in sorted(by_thread):
        locked = thread_lock(by_thread[thread_pk][0].thread)
        doomed = {c.id for c in by_thread[thread_pk]}
        counts["vectors"] += Entry.objects.filter(pk__in=doomed, embedding__isnull=False).count()
        counts["entries_deleted"] += len(doomed)
        respliced = _splice_many(locked, doomed)
        event_record(agent_id=locked.agent_id, type="entry.deleted", thread_id=locked.external_id, ids=sorted(doomed))
        _audit_entries(
            locked,
            deleted=sorted(doomed),
            redacted=[],
            respliced=respliced,
            fork=True,
            because=reason,
            actor=actor,
        )
    return counts


# --- entries -------------------------------------------------------------------------------------


def replies_of(entries: Sequence[Entry]) -> list[Entry]:
    """The replies of the user messages among `entries`: the entries after each on every branch up
    to the next user message, events among them (004: an answer may say again what it said)."""
    asked = [e for e in entries if e.type == EntryType.MESSAGE and e.role == Role.USER]
    found: dict[str, Entry] = {}
    by_thread: dict[int, list[Entry]] = {}
    for entry in asked:
        by_thread.setdefault(entry.thread_id, []).append(entry)
    for thread_pk, starts in by_thread.items():
        children: dict[str | None, list[Entry]] = {}
        for row in Entry.objects.filter(thread_id=thread_pk).only(
            "id", "agent_id", "thread_id", "parent_id", "type", "role", "redacted_at", "embedding"
        ):
            children.setdefault(row.parent_id, []).append(row)
        frontier = [s.id for s in starts]
        while frontier:
            parent = frontier.pop()
            for child in children.get(parent, []):
                if child.type == EntryType.MESSAGE and child.role == Role.USER:
                    continue
                if child.id not in found:
                    found[child.id] = child
                    frontier.append(child.id)
    wanted = {e.id for e in entries}
    return [e for i, e in sorted(found.items()) if i not in wanted]


@atomic_retrying
def entries_forget(
    *,
    agent: Agent,
    entry_ids: Sequence[str],
    redact: bool = False,
    keep_replies: bool = False,
    reason: str = "",
    actor: str = "",
    because: str = "",
) -> Counts:
    """Delete (or redact) entries of one agent with their replies and their copies in forks, what
    memory derived from them first; returns the counts.

    1. Lock the entries' threads (pk order); read the entries within the agent; add the replies of
       user messages unless `keep_replies`; lock the forks level by level and read the copies.
    2. Redacting, the events among them (and compactions) are deleted, not redacted, and entries
       already redacted are left as they are.
    3. `derived_forget` over all of them (items, quotes, file versions, covering compactions, the
       vectors of their children); the files whose version in front it redacted are deleted.
    4. The entries are spliced out (children and the leaf to the nearest survivor) or redacted;
       one event and one audit record per thread, ids and counts only.
    """
    counts = counts_zero()
    wanted = sorted(set(entry_ids))
    thread_pks = sorted(set(Entry.objects.filter(agent=agent, id__in=wanted).values_list("thread_id", flat=True)))
    if not thread_pks:
        return counts
    list(Thread.objects.select_for_update().filter(pk__in=thread_pks).order_by("pk").values_list("pk", flat=True))
    entries = list(Entry.objects.select_related("thread").filter(agent=agent, id__in=wanted).order_by("pk"))
    targets = entries if keep_replies else [*entries, *replies_of(entries)]
    copies = [c for c in fork_copies(targets) if c.id not in {t.id for t in targets}]
    everything = [*targets, *copies]
    if redact:
        deleted = [e for e in everything if e.type in EVENT_TYPE_VALUES]
        redacted = [e for e in everything if e.type not in EVENT_TYPE_VALUES and e.redacted_at is None]
    else:
        deleted, redacted = everything, []
    if not deleted and not redacted:
        return counts
    if redacted:
        report = derived_forget(agent=agent, entries=redacted, reason=because or "entry.redact", actor=actor)
        counts_add(counts, report.cascade_counts())
    if deleted:
        report = derived_forget(
            agent=agent, entries=deleted, reason=because or "entry.delete", actor=actor, entries_deleted=True
        )
        counts_add(counts, report.cascade_counts())
    cascade_step("derived")
    # The entries themselves, a thread at a time (its own thread locked above, or a fork's by fork_copies).
    gone_ids = {e.id for e in deleted}
    counts["vectors"] += Entry.objects.filter(pk__in=[e.id for e in everything], embedding__isnull=False).count()
    by_thread: dict[int, tuple[list[Entry], list[Entry]]] = {}
    for entry in deleted:
        by_thread.setdefault(entry.thread_id, ([], []))[0].append(entry)
    for entry in redacted:
        by_thread.setdefault(entry.thread_id, ([], []))[1].append(entry)
    now = timezone.now()
    for thread_pk in sorted(by_thread):
        going, saying_nothing = by_thread[thread_pk]
        locked = Thread.objects.select_for_update().get(pk=thread_pk)
        going_ids = {e.id for e in going} & gone_ids
        respliced = 0
        if going_ids:
            respliced = _splice_many(locked, going_ids)
            counts["summaries"] += sum(1 for e in going if e.type == EntryType.COMPACTION)
            counts["entries_deleted"] += sum(1 for e in going if e.type != EntryType.COMPACTION)
            event_record(
                agent_id=locked.agent_id, type="entry.deleted", thread_id=locked.external_id, ids=sorted(going_ids)
            )
        rows = list(
            Entry.objects.select_for_update()
            .filter(thread=locked, pk__in=[e.id for e in saying_nothing], redacted_at__isnull=True)
            .order_by("pk")
        )
        for row in rows:
            redaction_apply(row, at=now, record={"at": now.isoformat(), "reason": reason})
            row.save(update_fields=REDACTED_FIELDS)
        if rows:
            # The index says what a redacted entry names now (its words went; the trigger of
            # migration 0055 sees deletes only).
            mentions_record(agent=agent, rows=[(SubjectMention.Table.ENTRY, r.pk, r) for r in rows], replace=True)
        counts["entries_redacted"] += len(rows)
        if rows:
            event_record(
                agent_id=locked.agent_id,
                type="entry.redacted",
                thread_id=locked.external_id,
                ids=[r.pk for r in rows],
            )
        cascade_step("thread")
        _audit_entries(
            locked,
            deleted=sorted(going_ids),
            redacted=[r.pk for r in rows],
            respliced=respliced,
            fork=thread_pk not in thread_pks,
            because=because or ("entry.redact" if redact else "entry.delete"),
            actor=actor,
            redact=redact,
            reason_given=bool(reason),
        )
    return counts


def _audit_entries(
    locked: Thread,
    *,
    deleted: list[str],
    redacted: list[str],
    respliced: int,
    fork: bool,
    because: str,
    actor: str,
    redact: bool = False,
    reason_given: bool = False,
) -> None:
    """One audit record per thread a cascade changed: ids and counts (what `governance.staff.consequences`
    reads back), never the words or the reason given."""
    ids = [*deleted, *redacted]
    audit_append(
        action="entry.redact" if redact else "entry.delete",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        person=locked.user_id,
        subject=ids[0] if len(ids) == 1 else f"{len(ids)} entries",
        outcome="redacted" if redact else "deleted",
        details={
            "because": because,
            "deleted": len(deleted),
            "redacted": len(redacted),
            "deleted_ids": deleted[:AUDIT_IDS],
            "redacted_ids": redacted[:AUDIT_IDS],
            "children_respliced": respliced,
            "fork": fork,
            "reason_given": reason_given,
        },
    )


def entry_delete(*, entry: Entry, keep_replies: bool = False, actor: str = "") -> Counts:
    """Splice an entry out of its branch (its children go under its parent), with its replies when it
    is a user message (unless `keep_replies`) and its copies in forks; what stood on them first."""
    if not Entry.objects.filter(pk=entry.pk, agent_id=entry.agent_id).exists():
        raise NotFound("Entry")
    counts = entries_forget(
        agent=entry.thread.agent, entry_ids=[entry.pk], keep_replies=keep_replies, actor=actor, because="entry.delete"
    )
    entry.thread.refresh_from_db()
    return counts


def entry_redact(*, entry: Entry, reason: str = "", keep_replies: bool = False, actor: str = "") -> Entry:
    """Replace what an entry said with `[redacted]`, keeping its place in the tree.

    Text, content blocks, tool call arguments and tool results become `[redacted]`; id, parent,
    seq, role, type, call ids and tool names stay; a user's sender name goes; the embedding is
    dropped and the content hash computed anew; `metadata.redacted` = {at, reason}. Event entries are
    refused (400). Its replies (a user message's, unless `keep_replies`; events among them are
    deleted) and its copies in forks are redacted the same way (`entries_redact` counts them).
    """
    entries_redact(entry=entry, reason=reason, keep_replies=keep_replies, actor=actor)
    return Entry.objects.get(pk=entry.pk)


def entries_redact(*, entry: Entry, reason: str = "", keep_replies: bool = False, actor: str = "") -> Counts:
    """`entry_redact`, answering with the cascade's counts."""
    if entry.type in EVENT_TYPE_VALUES:
        raise DomainError("not_redactable", "Event entries cannot be redacted.", field="entry_id")
    reason = short_text_check(reason, "reason", max_length=500)
    if not Entry.objects.filter(pk=entry.pk, agent_id=entry.agent_id).exists():
        raise NotFound("Entry")
    return entries_forget(
        agent=entry.thread.agent,
        entry_ids=[entry.pk],
        redact=True,
        keep_replies=keep_replies,
        reason=reason,
        actor=actor,
        because="entry.redact",
    )


# --- rewind --------------------------------------------------------------------------------------


@atomic_retrying
def thread_rewind_stale(*, thread: Thread, entry_id: str, actor: str = "") -> tuple[Thread, Counts]:
    """Rewind a thread to an entry of its active branch: nothing is deleted; the items that stood only
    on the abandoned turns become `stale` (`stale_because` {reason: rewound, thread_id, to_entry_id,
    at}) and leave every context (004 rewind).

    1. Lock the thread; the abandoned turns are the entries of the active branch after `entry_id`.
    2. The items (suggested or active) all of whose quotes lie on them are marked stale, before the
       thread moves, so a rewind that failed can be made again, and their slots are laid out again
       as the delete cascade lays out a purged item's: the value a stale one had replaced holds
       again. A thread at `entry_id` already is left as it is.
    3. The thread's leaf moves (`thread_rewind`: checks, audit).
    """
    counts = counts_zero()
    locked = thread_lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    if not entry_on_branch(thread=locked, leaf_id=locked.active_leaf_id, entry_id=entry_id):
        raise DomainError("not_on_branch", "entry_id is not on the active branch.", field="entry_id")
    if locked.active_leaf_id == entry_id:
        thread_sync(thread, locked)
        return locked, counts
    abandoned = path_ids(thread=locked, leaf_id=locked.active_leaf_id) - path_ids(thread=locked, leaf_id=entry_id)
    quoting = set(
        Evidence.objects.filter(agent_id=locked.agent_id, entry_id__in=list(abandoned)).values_list(
            "item_id", flat=True
        )
    )
    elsewhere = set(
        Evidence.objects.filter(agent_id=locked.agent_id, item_id__in=list(quoting))
        .filter(Q(entry_id__isnull=True) | ~Q(entry_id__in=list(abandoned)))
        .values_list("item_id", flat=True)
    )
    because: dict[str, Any] = {"reason": "rewound", "thread_id": locked.external_id, "to_entry_id": entry_id}
    marks = [StaleMark(item_id=i, because=because) for i in sorted(quoting - elsewhere)]
    counts["items_stale"] = len(
        items_mark_stale(marks=marks, actor=actor, only_from=(ItemStatus.ACTIVE, ItemStatus.SUGGESTED), lay_out=True)
    )
    cascade_step("stale")
    moved = thread_rewind(thread=locked, entry_id=entry_id, actor=actor)
    thread_sync(thread, moved)
    return moved, counts
