"""What retention takes out of a thread that stays: abandoned branches, history before the kept
checkpoints, the content of old externalised tool results (002 RetentionOptions).

These run inside the prune's batch transaction (governance.retention), the thread row locked by
`thread_lock` first, so a writer of the thread waits at most one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.crypto.keyring import encryption_enabled
from memoryapp.events.services import event_record
from memoryapp.forgetting.lineage import AUDIT_IDS, derived_forget
from memoryapp.graph.services import relations_forget
from memoryapp.models import Agent, Entry, Evidence, Thread
from memoryapp.models.choices import EntryType
from memoryapp.threads.columns import ENTRY_TABLE
from memoryapp.threads.hashing import reparent
from memoryapp.threads.redaction import REDACTED_FIELDS, redaction_apply
from memoryapp.threads.selectors import path_ids
from memoryapp.threads.services import thread_lock


@dataclass
class ThreadTrim:
    """What trimming one thread drops: entries before the kept checkpoints, older checkpoints,
    abandoned branches (the number of branches and of their entries)."""

    history_ids: set[str] = field(default_factory=set)
    checkpoint_ids: set[str] = field(default_factory=set)
    branch_ids: set[str] = field(default_factory=set)
    branches: int = 0

    @property
    def empty(self) -> bool:
        return not (self.history_ids or self.checkpoint_ids or self.branch_ids)

    def counts(self) -> dict[str, int]:
        return {
            "checkpoints_deleted": len(self.checkpoint_ids),
            "history_entries_deleted": len(self.history_ids),
            "branches_deleted": self.branches,
            "branch_entries_deleted": len(self.branch_ids),
        }


def _cut_seq(event: dict[str, Any], compaction_seq: int, seqs: dict[str, int]) -> int | None:
    """The seq before which a compaction's summary stands in for the branch (None: it replaces nothing)."""
    first_kept = event.get("first_kept_entry_id")
    if first_kept:
        seq = seqs.get(str(first_kept))
        if seq is None:
            recorded = event.get("first_kept_seq")
            seq = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None
        return compaction_seq if seq is None else seq
    return compaction_seq if event.get("summary") else None


def thread_trim_plan(*, thread: Thread, keep_checkpoints: int | None, drop_branches: bool) -> ThreadTrim:
    """What `thread_trim` would drop from this thread now (reads only; the dry run's answer).

    1. The active branch is the path from the root to the active leaf; every other entry lies on a
       branch a rewind or checkout left behind. With `drop_branches` or `keep_checkpoints` they go
       (002: keepCheckpoints drops them too); each subtree hanging off the path counts as a branch.
    2. With `keep_checkpoints` = N and more than N compactions on the path: the newest N stay. The
       oldest kept one's summary stands in for what lies before its first kept entry: the path's
       entries before that seq go, and so do the older compactions (spliced out where they sit
       after it). The kept summaries stay, so the path still reads whole.
    """
    trim = ThreadTrim()
    if not keep_checkpoints and not drop_branches:
        return trim
    rows = list(Entry.objects.filter(thread=thread).values_list("id", "parent_id", "seq", "type"))
    if not rows:
        return trim
    on_path = path_ids(thread=thread)
    off = {r[0] for r in rows if r[0] not in on_path}
    trim.branch_ids = off
    trim.branches = sum(1 for r in rows if r[0] in off and r[1] not in off)
    if keep_checkpoints:
        compactions = sorted((r[2], r[0]) for r in rows if r[0] in on_path and r[3] == EntryType.COMPACTION)
        if len(compactions) > keep_checkpoints:
            kept = compactions[-keep_checkpoints:]
            oldest_seq, oldest_id = kept[0]
            event = Entry.objects.filter(pk=oldest_id).values_list("event", flat=True).first()
            seqs = {r[0]: r[2] for r in rows}
            cut = _cut_seq(event if isinstance(event, dict) else {}, oldest_seq, seqs)
            trim.checkpoint_ids = {cid for _, cid in compactions[: len(compactions) - keep_checkpoints]}
            if cut is not None:
                trim.history_ids = {
                    r[0] for r in rows if r[0] in on_path and r[2] < cut and r[0] not in trim.checkpoint_ids
                }
    return trim


def thread_trim(*, thread: Thread, keep_checkpoints: int | None, drop_branches: bool, actor: str) -> ThreadTrim:
    """Drop what `thread_trim_plan` names, under the thread's lock (call inside a transaction).

    1. Lock the thread; plan again under the lock (a write may have come since it was planned).
    2. Abandoned branches go through the forgetting lineage (`derived_forget`): what stood only on
       them (items, quotes, file versions) goes with them.
    3. History before the kept checkpoints is not forgotten that way: the kept summary was written
       from it and stays, and so does what memory learned from it (an item's quote loses its entry;
       a file version its place).
    4. Survivors whose parent goes move under their nearest surviving ancestor (the first kept
       entry becomes the root), their content hash computed anew; the leaf stays, being on the path.
    5. An `entry.deleted` event and one audit record of ids and counts.
    """
    locked = thread_lock(thread)
    trim = thread_trim_plan(thread=locked, keep_checkpoints=keep_checkpoints, drop_branches=drop_branches)
    if trim.empty:
        return trim
    if trim.branch_ids:
        derived_forget(
            agent=locked.agent,
            entries=list(
                Entry.objects.filter(thread=locked, pk__in=trim.branch_ids).only("id", "agent_id", "thread_id")
            ),
            reason="retention.drop_branches",
            actor=actor,
            entries_deleted=True,
        )
    doomed = trim.history_ids | trim.checkpoint_ids | trim.branch_ids
    parents = dict(Entry.objects.filter(thread=locked).values_list("id", "parent_id"))

    def survivor(entry_id: str | None) -> str | None:
        while entry_id is not None and entry_id in doomed:
            entry_id = parents.get(entry_id)
        return entry_id

    moves = {eid: survivor(pid) for eid, pid in parents.items() if eid not in doomed and pid in doomed}
    list(
        Entry.objects.filter(thread=locked, pk__in=[*doomed, *moves])
        .select_for_update()
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    reparent(moves)
    Entry.objects.filter(thread=locked, pk__in=doomed).delete()
    # What is off the active branch changed: caches keyed by (thread, branch_epoch) read anew.
    Thread.objects.filter(pk=locked.pk).update(branch_epoch=locked.branch_epoch + 1)
    event_record(agent_id=locked.agent_id, type="entry.deleted", thread_id=locked.external_id, ids=sorted(doomed))
    audit_append(
        action="retention.trim",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        person=locked.user_id,
        subject=locked.external_id,
        outcome="trimmed",
        details={**trim.counts(), "entry_ids": sorted(doomed)[:AUDIT_IDS]},
    )
    return trim


def externalised_results(*, agent_id: int, threads: QuerySet[Entry, Any] | None = None) -> Q:
    """A filter of Entry: tool results some compaction of the agent cleared behind a handle.

    With encryption on, the compactions' events are opened here: `threads` (thread ids, the
    caller's candidates') limits that to the compactions of those threads, where the results they
    clear are."""
    if encryption_enabled():
        # The ids, opened here, go as one array parameter (however many there are).
        cleared = _cleared_ids_opened(agent_id=agent_id, threads=threads)
        return Q(type=EntryType.TOOL_RESULT, id__in=RawSQL("SELECT unnest(%s::text[])", [cleared]))
    return Q(
        type=EntryType.TOOL_RESULT,
        id__in=RawSQL(
            f"SELECT jsonb_object_keys(event->'cleared') FROM {ENTRY_TABLE}"
            " WHERE agent_id = %s AND type = 'compaction' AND jsonb_typeof(event->'cleared') = 'object'",
            [agent_id],
        ),
    )


# Compaction events opened at a time by `_cleared_ids_opened` (each may hold a summary and atoms).
CLEARED_CHUNK = 200


def _cleared_ids_opened(*, agent_id: int, threads: QuerySet[Entry, Any] | None) -> list[str]:
    """The ids of the tool results the agent's compactions (of `threads`, when given) cleared, with
    their events sealed: the database cannot look inside them, so the events are read and opened
    here, a chunk at a time (a retention job's work, once a day)."""
    cleared: set[str] = set()
    compactions = Entry.objects.filter(agent_id=agent_id, type=EntryType.COMPACTION)
    if threads is not None:
        compactions = compactions.filter(thread_id__in=threads)
    events = compactions.values_list("event", flat=True).iterator(chunk_size=CLEARED_CHUNK)
    for event in events:
        named = event.get("cleared") if isinstance(event, dict) else None
        if isinstance(named, dict):
            cleared.update(str(entry_id) for entry_id in named)
    return sorted(cleared)


def tool_results_expire(*, entries: Sequence[Entry], actor: str) -> int:
    """The content of old externalised tool results goes: the rows stay in place, redacted (the
    handle answers `redacted`), their quotes with them. Call inside a transaction; threads locked here."""
    if not entries:
        return 0
    for thread_pk in sorted({e.thread_id for e in entries}):
        thread_lock(Thread(pk=thread_pk))
    now = timezone.now()
    rows = list(
        Entry.objects.select_for_update()
        .filter(pk__in=[e.pk for e in entries], redacted_at__isnull=True)
        .order_by("pk")
        .select_related("thread")
    )
    for row in rows:
        redaction_apply(row, at=now, record={"at": now.isoformat(), "reason": "retention: tool result expired"})
        row.save(update_fields=REDACTED_FIELDS)
    # A quote is content: it goes with the words it quoted.
    Evidence.objects.filter(entry_id__in=[r.pk for r in rows]).delete()
    # The graph's edges lose those quotes too, and one left with none goes (as the lineage does).
    for agent_id in sorted({r.agent_id for r in rows}):
        relations_forget(agent=Agent(pk=agent_id), entry_ids=[r.pk for r in rows if r.agent_id == agent_id])
    by_thread: dict[int, list[Entry]] = {}
    for row in rows:
        by_thread.setdefault(row.thread_id, []).append(row)
    for group in by_thread.values():
        thread = group[0].thread
        event_record(
            agent_id=thread.agent_id, type="entry.redacted", thread_id=thread.external_id, ids=[r.pk for r in group]
        )
        audit_append(
            action="retention.tool_results",
            actor=actor,
            agent_id=thread.agent_id,
            thread_id=thread.external_id,
            person=thread.user_id,
            subject=group[0].pk if len(group) == 1 else f"{len(group)} tool results",
            outcome="expired",
            details={"entries": len(group), "entry_ids": [r.pk for r in group][:AUDIT_IDS]},
        )
    return len(rows)
