"""Derived memory goes with its source (004 "Forgetting, Redacting and Rewinding").

What memory derives from a conversation names the entries it stands on: the evidence rows of
memory items, the place of a memory file version, and a compaction's first kept entry, cleared
tool results and atoms. When entries are deleted or redacted, `derived_forget` follows that
lineage so that nothing written from a turn outlives the turn. The services that delete or
redact entries (`entry_delete`, `entry_redact`, `thread_delete`) call it inside their
transaction, before the entries change. Rewind is no cascade: it deletes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from governance.audit.chain import AuditEntry, audit_append_many
from memoryapp.consolidation.lineage import derived_files_forget
from memoryapp.events.services import event_record
from memoryapp.files.access import FileAccess
from memoryapp.files.selectors import versions_unredacted
from memoryapp.files.services import files_lock, redacted_heads_delete, versions_redact
from memoryapp.graph.services import entities_unused_delete, relations_forget
from memoryapp.items.services import items_verify_again, slots_lay_out, slots_lock
from memoryapp.models import Agent, Entry, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.models.choices import EntryType
from memoryapp.threads.hashing import reparent  # threads imports this module
from memoryapp.threads.hooks import after_vectors_cleared
from memoryapp.threads.selectors import path_ids

# The audit record lists ids up to this many per kind (a thread's delete may name thousands).
AUDIT_IDS = 50
_SUMMARIZED_TYPES = (EntryType.MESSAGE, EntryType.TOOL_RESULT, EntryType.COMPACTION)


@dataclass
class LineageReport:
    items_purged: int = 0
    items_trimmed: int = 0
    evidence_removed: int = 0
    file_versions_redacted: int = 0
    summaries_removed: int = 0
    entities_deleted: int = 0
    vectors_cleared: int = 0
    # The playbooks, drafts and observations that named a purged item (memoryapp.consolidation.lineage).
    playbook_rules_removed: int = 0
    observations_deleted: int = 0
    # The graph's edges quoting the entries (memoryapp.graph.services.relations_forget).
    edges_purged: int = 0
    edges_trimmed: int = 0
    # Ids for the audit record (not counts): what went.
    purged_item_ids: list[str] = field(default_factory=list, repr=False)
    summary_ids: list[str] = field(default_factory=list, repr=False)
    # For the change events (ids only): the file versions redacted, the compactions removed by thread.
    redacted_version_ids: list[str] = field(default_factory=list, repr=False)
    summaries_by_thread: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in asdict(self).items() if isinstance(v, int)}

    def cascade_counts(self) -> dict[str, int]:
        """The counts under the names a cascade answers with (004's names)."""
        return {
            "summaries": self.summaries_removed,
            "items_purged": self.items_purged,
            "items_trimmed": self.items_trimmed,
            "entities": self.entities_deleted,
            "file_versions": self.file_versions_redacted,
            "playbook_rules": self.playbook_rules_removed,
            "vectors": self.vectors_cleared,
        }


@dataclass(frozen=True)
class _Row:
    id: str
    thread_id: int
    seq: int
    parent_id: str | None
    type: str


def derived_forget(
    *,
    agent: Agent,
    entries: Sequence[Entry],
    reason: str,
    actor: str = "",
    entries_deleted: bool = False,
) -> LineageReport:
    """Take away what stands on `entries` before they are deleted or redacted (call inside the transaction).

    1. Lock the threads of the entries (in id order), so no entry write, compaction or extraction
       window of them runs meanwhile; read the entries again within the agent.
    2. Find the compaction entries of those threads that cover them: a forgotten entry lies on the
       compaction's branch before its first kept entry (by seq; everything before the compaction
       when it has a summary and no first kept entry; turns and summaries, not events), or the compaction names it in `cleared`,
       `cleared_inputs` or the evidence of an atom in `levels`. They go in step 6, so the next
       compaction writes them again; their quotes count as the entries' own in step 3 (a summary
       says again what the entries said).
    3. Memory items and the graph's edges: the evidence rows of these entries are deleted (a quote is content and must
       not survive a redaction). Items left with no evidence are purged; the others are trimmed and
       their `verified` is recomputed: only when every remaining quote holds in its entry. The slots
       of purged items are laid out again, so a state the purged one had closed holds again.
    4. Entities of purged items that no item is about any more are deleted.
    5. Memory file versions written at these entries are redacted (content `[redacted]`, sha256
       and size of that, `redacted_at`). With `entries_deleted`, and for the compactions removed,
       the versions' place moves to the nearest surviving ancestor, as their children do, so they
       stay on the branches that held them. The playbooks, drafts and observations naming a purged
       item go the same way (`derived_files_forget`): the one in front first loses the rules
       standing on such a lesson, or is deleted when it is an observation.
    6. The vectors of the entries' children and of the covering compactions' children are cleared:
       a short turn is embedded with the turn it answers (`entry_embedding_text`), so its vector
       carries the words of the parent being forgotten, and a splice gives it another parent. Their
       rows are locked first, in id order, so an embedding job that read the old words cannot store
       them meanwhile (it skips locked rows, and checks the parent it read when it stores); the job
       is sent once the transaction commits and embeds them from what remains.
    7. The covering compactions are spliced out like `entry_delete` does (children and the active
       leaf go to the parent), without following their lineage again.
    8. One audit record, ids and counts only, in the caller's transaction.
    """
    report = LineageReport()
    wanted = sorted({e.pk for e in entries})
    if not wanted:
        return report
    thread_pks = sorted(set(Entry.objects.filter(agent=agent, id__in=wanted).values_list("thread_id", flat=True)))
    threads = list(Thread.objects.select_for_update().filter(agent=agent, pk__in=thread_pks).order_by("pk"))
    rows = {
        r.id: r
        for r in (
            _Row(*values)
            for values in Entry.objects.filter(agent=agent, id__in=wanted).values_list(
                "id", "thread_id", "seq", "parent_id", "type"
            )
        )
    }
    if not rows:
        return report

    summaries = _covering_compactions(agent=agent, threads=threads, gone=rows)
    quoted_ids = set(rows) | {c.id for c in summaries}
    _forget_items(agent=agent, entry_ids=quoted_ids, report=report)
    _redact_file_versions(
        agent=agent,
        gone=rows,
        summaries=summaries,
        entries_deleted=entries_deleted,
        report=report,
    )
    if report.purged_item_ids:
        named = derived_files_forget(agent=agent, item_ids=report.purged_item_ids)
        report.file_versions_redacted += named.versions_redacted
        report.redacted_version_ids += named.redacted_version_ids
        report.playbook_rules_removed = named.playbook_rules_removed
        report.observations_deleted = named.observations_deleted
    _clear_context_vectors(agent=agent, parent_ids=set(rows) | {c.id for c in summaries}, report=report)
    _splice_out(agent=agent, threads=threads, summaries=summaries, report=report)
    # What the model sees of these threads changed (entries, summaries gone): their running count of
    # history tokens is counted again by the next automatic compaction check.
    Thread.objects.filter(pk__in=[t.pk for t in threads]).update(history_tokens=None)

    single_thread = threads[0].external_id if len(threads) == 1 else ""
    single_owner = threads[0].user_id if len(threads) == 1 else ""
    # What went of derived memory is a change of memory too (ids only), in this transaction: a
    # follower that mirrors items or files must drop them as the caller's event drops the entries.
    if report.purged_item_ids:
        event_record(agent_id=agent.pk, type="item.forgotten", ids=report.purged_item_ids)
    if report.redacted_version_ids:
        event_record(agent_id=agent.pk, type="file.redacted", ids=sorted(report.redacted_version_ids))
    for thread_external_id, summary_ids in sorted(report.summaries_by_thread.items()):
        event_record(agent_id=agent.pk, type="entry.deleted", thread_id=thread_external_id, ids=summary_ids)
    audit_append_many(
        [
            lineage_audit(
                agent_id=agent.pk,
                thread_id=single_thread,
                wanted=wanted,
                found=sorted(rows),
                reason=reason,
                actor=actor,
                report=report,
                person=single_owner,
            )
        ]
    )
    return report


def lineage_audit(
    *,
    agent_id: int,
    thread_id: str,
    wanted: Sequence[str],
    found: Sequence[str],
    reason: str,
    actor: str,
    report: LineageReport,
    person: str = "",
) -> AuditEntry:
    """The audit record of one `derived_forget` (ids and counts only): `wanted` the entries asked
    for, `found` those of the agent (sorted). A batch of deleted threads writes the same record for
    each thread (memoryapp.forgetting.services). `person` owns the thread: its id is written as
    their pseudonym."""
    return AuditEntry(
        action="lineage.forget",
        actor=actor,
        agent_id=agent_id,
        thread_id=thread_id,
        subject=wanted[0] if len(wanted) == 1 else f"{len(found)} entries",
        outcome="forgotten",
        details={
            "because": reason,
            "entries": len(found),
            "entry_ids": list(found[:AUDIT_IDS]),
            **report.counts(),
            "purged_item_ids": report.purged_item_ids[:AUDIT_IDS],
            "summary_ids": report.summary_ids[:AUDIT_IDS],
        },
        person=person,
    )


def derived_forget_threads(
    *, agent: Agent, thread_pks: Sequence[int], report: LineageReport | None = None
) -> LineageReport:
    """What stands on every entry of whole threads that are about to be deleted (call inside the
    transaction, the threads locked): `derived_forget`'s steps 3 to 5 over all their entries.

    Compactions, vectors and places inside those threads go with them, so only what lies outside
    is looked for: the items quoting their entries (purged or trimmed), the entities left without
    items, the file versions written at them (redacted), the playbooks naming a purged item.
    """
    report = report or LineageReport()
    entry_ids = set(Entry.objects.filter(agent=agent, thread_id__in=list(thread_pks)).values_list("id", flat=True))
    if not entry_ids:
        return report
    _forget_items(agent=agent, entry_ids=entry_ids, report=report)
    files_lock(FileAccess(agent=agent))
    redacting = versions_unredacted(
        MemoryFileVersion.objects.filter(agent=agent, place__thread_id__in=list(thread_pks))
    )
    redacted_ids = list(redacting.order_by("pk").values_list("pk", flat=True))
    report.file_versions_redacted += versions_redact(MemoryFileVersion.objects.filter(pk__in=redacted_ids))
    _redacted_files_delete(agent=agent, version_ids=redacted_ids)
    if report.purged_item_ids:
        named = derived_files_forget(agent=agent, item_ids=report.purged_item_ids)
        report.file_versions_redacted += named.versions_redacted
        report.playbook_rules_removed += named.playbook_rules_removed
        report.observations_deleted += named.observations_deleted
    return report


# --- compactions -----------------------------------------------------------------------------------


def _entry_ids_in(value: Any) -> Iterator[str]:
    """Every `entry_id` named anywhere in a JSON value (the evidence of atoms, of closing atoms...)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "entry_id" and isinstance(inner, str):
                yield inner
            else:
                yield from _entry_ids_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _entry_ids_in(inner)


def _names(event: dict[str, Any]) -> set[str]:
    """The entries a compaction names outright: cleared results, cleared inputs, quoted by atoms."""
    named: set[str] = set()
    for key in ("cleared", "cleared_inputs"):
        value = event.get(key)
        if isinstance(value, dict):
            named.update(str(k) for k in value)
    named.update(_entry_ids_in(event.get("levels")))
    return named


def _cut_seq(*, agent: Agent, thread: Thread, compaction: Entry, event: dict[str, Any]) -> int | None:
    """The seq before which the compaction's summary stands in for the branch; None: it replaces nothing."""
    first_kept_id = event.get("first_kept_entry_id")
    if first_kept_id:
        seq = (
            Entry.objects.filter(agent=agent, thread=thread, id=str(first_kept_id))
            .values_list("seq", flat=True)
            .first()
        )
        if seq is None:
            recorded = event.get("first_kept_seq")
            seq = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None
        # No trace of where the cut was: the summary stood in for everything before the compaction.
        return compaction.seq if seq is None else seq
    return compaction.seq if event.get("summary") else None


def _covering_compactions(*, agent: Agent, threads: list[Thread], gone: dict[str, _Row]) -> list[Entry]:
    """Step 2: the compaction entries (not forgotten themselves) that cover a forgotten entry."""
    covering: list[Entry] = []
    for thread in threads:
        forgotten = {r.id: r for r in gone.values() if r.thread_id == thread.pk}
        if not forgotten:
            continue
        # What a summary was written from: turns and earlier summaries, not events such as labels.
        summarized = [r for r in forgotten.values() if r.type in _SUMMARIZED_TYPES]
        # Only a later entry can cover an earlier one: a compaction reads the branch before it.
        candidates = (
            Entry.objects.filter(
                agent=agent,
                thread=thread,
                type=EntryType.COMPACTION,
                seq__gt=min(r.seq for r in forgotten.values()),
            )
            .exclude(id__in=list(forgotten))
            .only("id", "seq", "parent_id", "event")
            .order_by("seq")
        )
        for compaction in candidates:
            event = compaction.event if isinstance(compaction.event, dict) else {}
            if _names(event) & set(forgotten):
                covering.append(compaction)
                continue
            cut = _cut_seq(agent=agent, thread=thread, compaction=compaction, event=event)
            before_cut = [r.id for r in summarized if cut is not None and r.seq < cut]
            if before_cut and set(before_cut) & path_ids(thread=thread, leaf_id=compaction.id):
                covering.append(compaction)
    return covering


# --- memory items ----------------------------------------------------------------------------------


def _forget_items(*, agent: Agent, entry_ids: set[str], report: LineageReport) -> None:
    """Steps 3 and 4: purge or trim the items and the graph's edges quoting the entries; drop
    entities left without items and edges."""
    _forget_edges(agent=agent, entry_ids=entry_ids, report=report)
    touched_ids = set(
        Evidence.objects.filter(agent=agent, entry_id__in=list(entry_ids)).values_list("item_id", flat=True)
    )
    if not touched_ids:
        return
    touched = list(
        MemoryItem.objects.filter(agent=agent, pk__in=list(touched_ids)).only(
            "id",
            "agent_id",
            "user_id",
            "project_id",
            "thread_id",
            "subject",
            "attribute",
            "entity_id",
            "status",
            "verified",
        )
    )
    # The item writers of these slots wait for us (a repeat must not merge into a purged item).
    slots_lock(items=touched)

    report.evidence_removed, _ = Evidence.objects.filter(agent=agent, entry_id__in=list(entry_ids)).delete()
    still_quoted = set(
        Evidence.objects.filter(agent=agent, item_id__in=list(touched_ids)).values_list("item_id", flat=True)
    )
    purged = [i for i in touched if i.pk not in still_quoted]
    trimmed = [i for i in touched if i.pk in still_quoted]

    if purged:
        MemoryItem.objects.filter(agent=agent, pk__in=[i.pk for i in purged]).delete()
        report.items_purged = len(purged)
        report.purged_item_ids = sorted(i.pk for i in purged)
        slots_lay_out(agent=agent, items=purged)
        entity_ids = {i.entity_id for i in purged if i.entity_id}
        # An entity an edge of the graph is still about stays (deleting it would take the edge).
        report.entities_deleted += entities_unused_delete(agent=agent, entity_ids=entity_ids)

    if trimmed:
        report.items_trimmed = len(trimmed)
        _verify_again(agent=agent, items=trimmed)


def _forget_edges(*, agent: Agent, entry_ids: set[str], report: LineageReport) -> None:
    """Step 3 for the graph: the edges quoting the entries lose those quotes, and those left with
    none are purged with the entities no item or edge is about any more."""
    forgotten = relations_forget(agent=agent, entry_ids=entry_ids)
    report.edges_purged += forgotten.edges_purged
    report.edges_trimmed += forgotten.edges_trimmed
    report.entities_deleted += forgotten.entities_deleted


def _verify_again(*, agent: Agent, items: list[MemoryItem]) -> None:
    """An item is verified only when every quote it has left still holds where it points (its
    entry, its tool call, its file lines: memoryapp.items.services.items_verify_again)."""
    items_verify_again(agent=agent, items=items)


# --- memory files ----------------------------------------------------------------------------------


def _surviving_ancestor(entry_id: str | None, parents: dict[str, str | None], going: set[str]) -> str | None:
    while entry_id is not None and entry_id in going:
        entry_id = parents.get(entry_id)
    return entry_id


def _redact_file_versions(
    *,
    agent: Agent,
    gone: dict[str, _Row],
    summaries: list[Entry],
    entries_deleted: bool,
    report: LineageReport,
) -> None:
    """Step 5: redact the versions written at the entries; move places off entries that go."""
    # The agent's file writers wait for us, so no version is written at an entry being forgotten meanwhile.
    files_lock(FileAccess(agent=agent))
    at_entries = MemoryFileVersion.objects.filter(agent=agent, place_id__in=list(gone))
    redacting = versions_unredacted(at_entries)
    redacted_ids = list(redacting.order_by("pk").values_list("pk", flat=True))
    report.redacted_version_ids = redacted_ids
    report.file_versions_redacted = versions_redact(MemoryFileVersion.objects.filter(agent=agent, pk__in=redacted_ids))
    # A file whose version in front was redacted is then deleted (its path may name what went).
    _redacted_files_delete(agent=agent, version_ids=redacted_ids)
    going = {c.id for c in summaries} | (set(gone) if entries_deleted else set())
    if not going:
        return
    parents = {r.id: r.parent_id for r in gone.values()} | {c.id: c.parent_id for c in summaries}
    placed = (
        MemoryFileVersion.objects.filter(agent=agent, place_id__in=list(going))
        .values_list("place_id", flat=True)
        .distinct()
    )
    for place_id in list(placed):
        MemoryFileVersion.objects.filter(agent=agent, place_id=place_id).update(
            place_id=_surviving_ancestor(place_id, parents, going)
        )


def _redacted_files_delete(*, agent: Agent, version_ids: Sequence[str]) -> None:
    """The files whose version in front among these was redacted are deleted (`redacted_heads_delete`)."""
    redacted_heads_delete(agent=agent, version_ids=list(version_ids), actor="lineage")


# --- vectors -----------------------------------------------------------------------------------------


def _clear_context_vectors(*, agent: Agent, parent_ids: set[str], report: LineageReport) -> None:
    """Step 6: clear the vectors of the children of these entries (see the steps above)."""
    children = Entry.objects.filter(agent=agent, parent_id__in=list(parent_ids)).exclude(id__in=list(parent_ids))
    # Every child, embedded or not: a job in flight that claimed one is waited for here (it never
    # waits itself), so the UPDATE below sees and clears what it stored. NO KEY: only vectors change.
    locked = list(children.select_for_update(no_key=True).order_by("pk").values_list("pk", flat=True))
    if not locked:
        return
    report.vectors_cleared = Entry.objects.filter(pk__in=locked, embedding__isnull=False).update(
        embedding=None, embedded_at=None
    )
    if report.vectors_cleared:
        after_vectors_cleared(agent_id=agent.pk)


# --- removing compactions ---------------------------------------------------------------------------


def _splice_out(*, agent: Agent, threads: list[Thread], summaries: list[Entry], report: LineageReport) -> None:
    """Step 6: delete each covering compaction; its children and the active leaf go to its parent."""
    by_pk = {t.pk: t for t in threads}
    for compaction in summaries:
        thread = by_pk[compaction.thread_id]
        # Read the parent now: an earlier splice may have moved this compaction under another entry.
        parent_id = Entry.objects.filter(agent=agent, pk=compaction.pk).values_list("parent_id", flat=True).first()

        children = Entry.objects.filter(agent=agent, thread=thread, parent_id=compaction.pk).values_list(
            "id", flat=True
        )
        reparent(dict.fromkeys(children, parent_id))
        if thread.active_leaf_id == compaction.pk:
            thread.active_leaf_id = parent_id
            Thread.objects.filter(pk=thread.pk).update(active_leaf_id=parent_id)
        Entry.objects.filter(agent=agent, pk=compaction.pk).delete()
        report.summaries_removed += 1
        report.summary_ids.append(compaction.pk)
        report.summaries_by_thread.setdefault(thread.external_id, []).append(compaction.pk)
