"""The erasure of a person's mentions (issue 25 §4): what stays of the rows that name them.

`person_erase` takes first what is the person's (owner, sender); then, with the person's
identifiers (registered, and given with the request), `mentions_erase` goes through the subject
index (memoryapp.subjects.index, rebuilt first so it says what is true now) for one agent:

1. Subjects: the items and facts whose subject names the person, and the entities whose name
   does (with the items about them), are answered for deletion (`person_erase` deletes them with
   the person's items, so slots, quotes and playbooks follow the same rules).
2. Mentions in rows that stay, each group unless excluded: another person's turn, a tool result,
   a summary or a fork's copy (`entry`: content, tool calls, event, metadata, sender name), a
   thread's metadata (`thread`), an agent-wide or other person's item or fact (`item`), an
   entity's aliases (`entity`), a quote (`evidence`), a memory file or context document version
   (`file_version`), a quote an edge of the graph stands on (`relation_evidence`), a knowledge
   document (`knowledge_document`: its name and text, its chunks cut and embedded again), an event
   a run published or a run's latest snapshot (`run_event`, `thread_run`: the run ledger of another
   person's thread), a job run (`job_run`, scrubbed whole as the person's own are). Each span
   naming the person, in the columns memoryapp.subjects.texts says hold text, is replaced by
   PLACEHOLDER (`row_redact`: the same replacement a write stores while she is being erased);
   the row's keyword index (the generated tsvector, the blind index) follows on save, its vector
   is cleared and the embedding job sent to make it again from the new text.
3. Participants: the person leaves every thread's `memoryUserIds` (`participants`).
4. The person's rows leave the index.

Counts by table and kind, as flat keys `mentions_<kind>_<table>` (kinds: deleted, redacted,
re_embedded); `examples` (when given) gets up to EXAMPLES row ids per group for the confirm step.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import Q

from governance.crypto.fields import sealed_update
from governance.models import JobRun
from memoryapp.graph.services import entity_relations_delete
from memoryapp.knowledge.services import knowledge_document_replace
from memoryapp.models import (
    Entity,
    Entry,
    Evidence,
    KnowledgeDocument,
    MemoryFileVersion,
    MemoryItem,
    RelationEvidence,
    RunEvent,
    SubjectMention,
    Thread,
    ThreadRun,
)
from memoryapp.models.people import MEMORY_USERS_KEY, participant_in, thread_participants
from memoryapp.retry import atomic_retrying
from memoryapp.search.indexing import embedding_schedule
from memoryapp.subjects.erasing import erasing_mark
from memoryapp.subjects.index import (
    mentions_of,
    mentions_scan,
    person_matcher,
    subject_index_apply,
    subject_index_forget,
    table_rows,
)
from memoryapp.subjects.matching import PersonMatcher
from memoryapp.subjects.texts import row_redact, row_texts, texts_redacted

Table = SubjectMention.Table
# The groups an officer may leave out of an erasure (the index's tables, and participants lists).
PARTICIPANTS = "participants"
GROUPS = (*Table.values, PARTICIPANTS)
EXAMPLES = 3
MENTION_MODES = ("redact", "keep")


def _count(counts: dict[str, int], kind: str, table: str, n: int = 1) -> None:
    if n:
        key = f"mentions_{kind}_{table}"
        counts[key] = counts.get(key, 0) + n


class MentionsFound:
    """What `mentions_erase` left for `person_erase` to delete: the items and entities about the person."""

    def __init__(self) -> None:
        self.item_ids: list[str] = []
        self.entity_ids: list[str] = []
        self.counts: dict[str, int] = {}


def mentions_erase(
    *,
    agent_id: int,
    matcher: PersonMatcher,
    exclude: Collection[str] = (),
    examples: dict[str, list[str]] | None = None,
    mode: str = "erase",
) -> MentionsFound:
    """Steps 1 to 4 of the module's docstring, for one agent, in one transaction (a batch per
    table would be kinder to a very large agent; the scan itself reads in chunks).

    Against writers on other connections (tests/forgetting/test_index_races.py):

    0. Before its scan, the person is marked as being erased, in a transaction of its own
       (`erasing_mark`, memoryapp.subjects.erasing; not with `mentions` "keep", nor when every
       table's group is excluded): it waits for the writes in flight that found her registered
       identifiers in their rows (each holds her erasure lock shared), so the scan sees them; every
       write after it stores the placeholder instead of her identifiers (in the groups not
       excluded) and records no mention of her. A write committing between the scan and the end
       therefore leaves no row naming her, indexed or not. Identifiers given only with the request
       are kept with the mark (`given` registry rows, sealed), so writers know them too.
       Inside a caller's transaction (a dry run) nothing is marked.
    1. The index is scanned, then the threads its rows stand in are locked in pk order
       (`_threads_lock`), before the index's writes and any row: the order of every cascade (the
       threads, then their rows), so a thread's or an entry's delete waits for the erasure or the
       erasure for it, never each for the other.
    2. Each row it changes is read locked (FOR UPDATE, per table in id order), so a merge or a
       delete holding it is waited for and its outcome read (a row gone is skipped, other names
       added are kept), never overwritten from an older read; one that names the person no more
       (a writer took them out after the scan) is left as it is and counted nowhere, so every
       count is a row that changed.
    3. A deadlock still left (a writer not thought of, locking in another order) runs the whole
       again (`atomic_retrying`, `examples` as the last try found them)."""
    groups = set(exclude)
    kept = sorted(groups & set(Table.values))
    if len(kept) < len(Table.values):
        # Writes naming her from now on store the placeholder; those in flight commit first, and
        # the scan below sees them (memoryapp.subjects.erasing).
        erasing_mark(agent_id=agent_id, user_id=matcher.user_id, keeps=kept, mode=mode, given=matcher.identifiers)

    @atomic_retrying
    def attempt() -> MentionsFound:
        tried: dict[str, list[str]] | None = None if examples is None else {}
        found = _mentions_erase(agent_id=agent_id, matcher=matcher, exclude=groups, examples=tried)
        if examples is not None and tried is not None:
            examples.clear()
            examples.update(tried)
        return found

    return attempt()


def _mentions_erase(
    *, agent_id: int, matcher: PersonMatcher, exclude: set[str], examples: dict[str, list[str]] | None
) -> MentionsFound:
    user_id = matcher.user_id
    found = MentionsFound()
    counts = found.counts
    # The index rebuilt (as `subject_index_rebuild`), its writes after the threads' locks.
    index = mentions_scan(
        agent_id=agent_id, matcher=person_matcher(agent_id=agent_id, user_id=user_id, given=matcher.identifiers)
    )
    held = mentions_of(agent_ids=[agent_id], user_id=user_id).get(agent_id, {})
    _threads_lock(agent_id=agent_id, user_id=user_id, rows={t: [*index[t], *held.get(t, [])] for t in index})
    subject_index_apply(agent_id=agent_id, user_id=user_id, found=index)
    reembed = False

    def names(table: str, row: Any) -> bool:
        # Read under its lock: a writer that took her out after the scan (and before this lock)
        # left nothing to redact, and the receipt counts no redaction that changed nothing.
        return matcher.holds(row_texts(table, row))

    def example(group: str, row_id: str) -> None:
        if examples is not None and len(examples.setdefault(group, [])) < EXAMPLES:
            examples[group].append(row_id)

    # 1. Subjects: entities named as the person, and the items about them or whose subject names them.
    entity_ids: list[str] = []
    if Table.ENTITY not in exclude:
        entities = table_rows(Table.ENTITY, agent_id=agent_id, row_ids=index[Table.ENTITY])
        for entity in entities.select_for_update().order_by("pk"):
            if matcher.spans(entity.name):
                entity_ids.append(entity.pk)
                example(Table.ENTITY, entity.pk)
            elif entity.aliases and matcher.holds(entity.aliases):
                entity.save(update_fields=row_redact(Table.ENTITY, entity, matcher))
                _count(counts, "redacted", Table.ENTITY)
                example(Table.ENTITY, entity.pk)
    if Table.ITEM not in exclude:
        about = Q(pk__in=index[Table.ITEM]) | Q(entity_id__in=entity_ids)
        for item in MemoryItem.objects.filter(about, agent_id=agent_id).select_for_update().order_by("pk"):
            if item.entity_id in entity_ids or matcher.spans(item.subject):
                found.item_ids.append(item.pk)
                _count(counts, "deleted", Table.ITEM)
                example(Table.ITEM, item.pk)
                continue
            if not names(Table.ITEM, item):
                continue
            example(Table.ITEM, item.pk)
            fields = row_redact(Table.ITEM, item, matcher)
            had_vector = item.embedding is not None
            item.embedding, item.embedded_at = None, None
            item.save(update_fields=[*fields, "embedding", "embedded_at"])
            _count(counts, "redacted", Table.ITEM)
            _count(counts, "re_embedded", Table.ITEM, int(had_vector))
            reembed = True
    if entity_ids:
        # The items about them go with the person's (person_erase); the entities after them.
        MemoryItem.objects.filter(agent_id=agent_id, entity_id__in=entity_ids).exclude(pk__in=found.item_ids).update(
            entity=None
        )
        _count(counts, "deleted", Table.ENTITY, len(entity_ids))
        found.entity_ids = entity_ids
    # 2. Mentions in rows that stay.
    if Table.ENTRY not in exclude:
        entries = Entry.objects.filter(agent_id=agent_id, pk__in=index[Table.ENTRY])
        for entry in entries.select_for_update().order_by("pk"):
            if not names(Table.ENTRY, entry):
                continue
            # Its text and hash made again with it (memoryapp.threads, registered at start).
            fields = row_redact(Table.ENTRY, entry, matcher)
            had_vector = entry.embedding is not None
            entry.embedding, entry.embedded_at = None, None
            entry.save(update_fields=[*fields, "embedding", "embedded_at"])
            _count(counts, "redacted", Table.ENTRY)
            _count(counts, "re_embedded", Table.ENTRY, int(had_vector))
            example(Table.ENTRY, entry.pk)
            reembed = True
    if Table.THREAD not in exclude:
        threads = Thread.objects.filter(agent_id=agent_id, pk__in=index[Table.THREAD])
        for thread in threads.select_for_update(no_key=True).order_by("pk"):
            if not names(Table.THREAD, thread):
                continue
            thread.save(update_fields=row_redact(Table.THREAD, thread, matcher))
            _count(counts, "redacted", Table.THREAD)
            example(Table.THREAD, thread.external_id)
    if Table.EVIDENCE not in exclude:
        evidence = Evidence.objects.filter(agent_id=agent_id, pk__in=index[Table.EVIDENCE])
        for quote in evidence.select_for_update(of=("self",)).order_by("pk"):
            if not names(Table.EVIDENCE, quote):
                continue
            quote.save(update_fields=row_redact(Table.EVIDENCE, quote, matcher))
            _count(counts, "redacted", Table.EVIDENCE)
            example(Table.EVIDENCE, str(quote.pk))
    if Table.RELATION_EVIDENCE not in exclude:
        quotes = RelationEvidence.objects.filter(agent_id=agent_id, pk__in=index[Table.RELATION_EVIDENCE])
        for edge_quote in quotes.select_for_update(of=("self",)).order_by("pk"):
            if not names(Table.RELATION_EVIDENCE, edge_quote):
                continue
            edge_quote.save(update_fields=row_redact(Table.RELATION_EVIDENCE, edge_quote, matcher))
            _count(counts, "redacted", Table.RELATION_EVIDENCE)
            example(Table.RELATION_EVIDENCE, str(edge_quote.pk))
    if Table.KNOWLEDGE_DOCUMENT not in exclude:
        documents = KnowledgeDocument.objects.filter(agent_id=agent_id, pk__in=index[Table.KNOWLEDGE_DOCUMENT])
        for document in documents.select_for_update().order_by("pk"):
            if not names(Table.KNOWLEDGE_DOCUMENT, document):
                continue
            # Its chunks are cut and embedded again from the redacted text.
            texts = texts_redacted(Table.KNOWLEDGE_DOCUMENT, document, matcher)
            knowledge_document_replace(document=document, content=texts["content"], name=texts["name"], actor="erasure")
            _count(counts, "redacted", Table.KNOWLEDGE_DOCUMENT)
            _count(counts, "re_embedded", Table.KNOWLEDGE_DOCUMENT)
            example(Table.KNOWLEDGE_DOCUMENT, document.pk)
    if Table.FILE_VERSION not in exclude:
        versions = MemoryFileVersion.objects.filter(agent_id=agent_id, pk__in=index[Table.FILE_VERSION])
        for version in versions.select_for_update(of=("self",)).order_by("pk"):
            if not names(Table.FILE_VERSION, version):
                continue
            version.save(update_fields=row_redact(Table.FILE_VERSION, version, matcher))
            _count(counts, "redacted", Table.FILE_VERSION)
            example(Table.FILE_VERSION, version.pk)
    if Table.RUN_EVENT not in exclude:
        events = RunEvent.objects.filter(agent_id=agent_id, pk__in=index[Table.RUN_EVENT]).select_related("thread")
        for event in events.select_for_update(of=("self",)).order_by("pk"):
            if not names(Table.RUN_EVENT, event):
                continue
            event.save(update_fields=row_redact(Table.RUN_EVENT, event, matcher))
            _count(counts, "redacted", Table.RUN_EVENT)
            example(Table.RUN_EVENT, str(event.pk))
    if Table.THREAD_RUN not in exclude:
        thread_runs = ThreadRun.objects.filter(agent_id=agent_id, pk__in=index[Table.THREAD_RUN])
        for run in thread_runs.select_related("thread").select_for_update(of=("self",)).order_by("pk"):
            if not names(Table.THREAD_RUN, run):
                continue
            run.save(update_fields=row_redact(Table.THREAD_RUN, run, matcher))
            _count(counts, "redacted", Table.THREAD_RUN)
            example(Table.THREAD_RUN, run.pk)
    if Table.JOB_RUN not in exclude and index[Table.JOB_RUN]:
        runs = JobRun.objects.filter(agent_id=agent_id, pk__in=index[Table.JOB_RUN])
        naming = [run.pk for run in runs.select_for_update().order_by("pk") if names(Table.JOB_RUN, run)]
        for pk in naming[:EXAMPLES]:
            example(Table.JOB_RUN, str(pk))
        if naming:
            scrubbed = sealed_update(runs.filter(pk__in=naming), arguments={"erased": True}, result={"erased": True})
            _count(counts, "redacted", Table.JOB_RUN, scrubbed)
    # 3. Participants lists.
    if PARTICIPANTS not in exclude:
        taking_part = Thread.objects.filter(participant_in(matcher.user_id, agent_id=agent_id))
        for thread in taking_part.select_for_update(no_key=True).order_by("pk"):
            taking = thread_participants(thread.metadata)
            left = [p for p in taking if p != matcher.user_id]
            if len(left) == len(taking):
                continue
            thread.metadata = {**thread.metadata, MEMORY_USERS_KEY: left}
            thread.save(update_fields=["metadata"])
            _count(counts, "redacted", PARTICIPANTS)
            example(PARTICIPANTS, thread.external_id)
    # 4. The index forgets the person.
    subject_index_forget(agent_id=agent_id, user_id=user_id)
    if reembed:
        transaction.on_commit(lambda: embedding_schedule(agent_id=agent_id))
    return found


def _threads_lock(*, agent_id: int, user_id: str, rows: Mapping[str, Sequence[str]]) -> None:
    """Lock, in pk order, the threads that the rows the erasure may change (by table, its scan's
    and the index's) stand in or on, before any of those rows: the lock order of every cascade
    (memoryapp.forgetting.services: the threads, then their rows). A thread's delete takes, after
    its thread, the thread's entries (`ON DELETE` and its run ledger with them), the quotes of its
    entries and the items standing on them, the file versions placed at them, the items and
    entities of the thread's scope (the items about an entity naming her among them, which the
    erasure reads locked too), the file versions of the thread's scope (`thread_id`) and those placed
    at it (`place`); a writer holding the thread waits here for the erasure, never
    the erasure on a row such a writer holds while it waits on the erasure
    (tests/forgetting/test_index_races.py). The participants lists' threads are among them.

    FOR NO KEY UPDATE, as the erasure changes no thread's key: a delete or a thread's writers
    (`thread_lock`) still wait for it, but not the key share of a row inserted in the thread (a
    run's events, published holding the run the erasure redacts next: each would wait on the other)."""

    def ids(table: str) -> list[str]:
        return list(rows.get(table, ()))

    # The items it reads locked: those naming her, and those about an entity naming her (their
    # entity goes; `found.item_ids`), whatever scope they are in.
    items = MemoryItem.objects.filter(Q(pk__in=ids(Table.ITEM)) | Q(entity_id__in=ids(Table.ENTITY)), agent_id=agent_id)
    entities = Entity.objects.filter(agent_id=agent_id, pk__in=ids(Table.ENTITY))
    versions = MemoryFileVersion.objects.filter(agent_id=agent_id, pk__in=ids(Table.FILE_VERSION))
    quotes = Q(pk__in=ids(Table.EVIDENCE)) | Q(item_id__in=ids(Table.ITEM))
    # Thread scopes (a thread's delete takes its scope's items, entities and file versions).
    scopes = {
        *items.values_list("thread_id", flat=True),
        *entities.values_list("thread_id", flat=True),
        *versions.values_list("thread_id", flat=True),
    } - {""}
    parts = [
        Thread.objects.filter(agent_id=agent_id, pk__in=ids(Table.THREAD)).values_list("pk"),
        Thread.objects.filter(participant_in(user_id, agent_id=agent_id)).values_list("pk"),
        Thread.objects.filter(agent_id=agent_id, external_id__in=scopes).values_list("pk"),
        Entry.objects.filter(agent_id=agent_id, pk__in=ids(Table.ENTRY)).values_list("thread_id"),
        Evidence.objects.filter(quotes, agent_id=agent_id).values_list("entry__thread_id"),
        RelationEvidence.objects.filter(agent_id=agent_id, pk__in=ids(Table.RELATION_EVIDENCE)).values_list(
            "entry__thread_id"
        ),
        versions.values_list("place__thread_id"),
        RunEvent.objects.filter(agent_id=agent_id, pk__in=ids(Table.RUN_EVENT)).values_list("thread_id"),
        ThreadRun.objects.filter(agent_id=agent_id, pk__in=ids(Table.THREAD_RUN)).values_list("thread_id"),
    ]
    pks = sorted({pk for part in parts for (pk,) in part if pk is not None})
    if pks:
        locking = Thread.objects.select_for_update(no_key=True).filter(pk__in=pks).order_by("pk")
        list(locking.values_list("pk", flat=True))


def mentions_delete_entities(*, agent_id: int, entity_ids: list[str]) -> int:
    """The entities named as the person, once the items about them are gone, and the graph's edges
    about them (whoever's scope they are in: an edge about the person names them)."""
    if not entity_ids:
        return 0
    entity_relations_delete(agent_id=agent_id, entities=entity_ids)
    return Entity.objects.filter(agent_id=agent_id, pk__in=entity_ids).delete()[0]


def mentions_counts(counts: dict[str, int]) -> dict[str, int]:
    """The mention counts of an erasure's counts, as `<kind>_<table>` (`redacted_entry`)."""
    return {key.removeprefix("mentions_"): n for key, n in counts.items() if key.startswith("mentions_")}
