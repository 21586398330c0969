"""The subject index's mentions: which rows of an agent name a person without being theirs.

`mentions_scan` reads every table that can hold personal data (entries: turns, tool results,
summaries and their metadata; threads' metadata; items and facts; entities; quotes; memory file
versions, context documents among them; the graph's quotes; knowledge documents; the run ledger's
events and snapshots; job runs' arguments and results), opened through the
ORM (sealed columns open with the live keys), and answers the rows whose text names the person
(`PersonMatcher`). `subject_index_rebuild` keeps that answer in `SubjectMention`, replacing what
the index held for the person: the job after `PUT /users/{id}/identifiers` (the index follows
the registry), and the erasure and the export before they read it (they act on what is true now,
with the identifiers given with the request too). Rebuilding twice writes the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from django.db.models import Model, QuerySet

from governance.audit.pseudonyms import pseudonym_names, pseudonyms_resolve
from governance.jobs.broker import job_enqueue
from governance.models import JobRun
from memoryapp.models import (
    Agent,
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
from memoryapp.retry import atomic_retrying
from memoryapp.screening.identifiers import LISTS, identifiers_of
from memoryapp.subjects.matching import PersonMatcher
from memoryapp.subjects.texts import TEXT_COLUMNS, row_texts

Table = SubjectMention.Table
JOB_KIND = "subject_index"
JOB_TASK = "memoryapp.tasks.subject_index_rebuild"
CHUNK = 1000


def _read(table: str, *columns: str) -> tuple[str, ...]:
    """The columns the scan loads of a table's rows: those named (ids, scope) and its texts
    (memoryapp.subjects.texts), every one of them: a deferred column costs a query per row."""
    return (*columns, *(column for column, _ in TEXT_COLUMNS[table]))


# Each table: its rows of one agent, with the columns read.
_TABLES: dict[str, Callable[[int], QuerySet[Any]]] = {
    Table.ENTRY: lambda a: Entry.objects.filter(agent_id=a).only(*_read(Table.ENTRY, "id", "agent_id", "thread_id")),
    Table.THREAD: lambda a: Thread.objects.filter(agent_id=a).only(*_read(Table.THREAD, "id")),
    Table.ITEM: lambda a: MemoryItem.objects.filter(agent_id=a).only(
        *_read(Table.ITEM, "id", "agent_id", "user_id", "project_id", "thread_id")
    ),
    Table.ENTITY: lambda a: Entity.objects.filter(agent_id=a).only(
        *_read(Table.ENTITY, "id", "agent_id", "user_id", "project_id", "thread_id")
    ),
    Table.EVIDENCE: lambda a: (
        Evidence.objects.filter(agent_id=a)
        .select_related(None)
        .only(*_read(Table.EVIDENCE, "id", "agent_id", "item_id"))
    ),
    Table.FILE_VERSION: lambda a: MemoryFileVersion.objects.filter(agent_id=a, content__isnull=False).only(
        *_read(Table.FILE_VERSION, "id", "agent_id", "user_id", "project_id", "thread_id")
    ),
    # The graph's quotes (memoryapp.graph): an edge standing on another person's turn that names her.
    Table.RELATION_EVIDENCE: lambda a: (
        RelationEvidence.objects.filter(agent_id=a)
        .select_related(None)
        .only(*_read(Table.RELATION_EVIDENCE, "id", "agent_id", "entry_id", "relation_id"))
    ),
    # Knowledge documents (memoryapp.knowledge): their name and text (the chunks are cut from it).
    Table.KNOWLEDGE_DOCUMENT: lambda a: KnowledgeDocument.objects.filter(agent_id=a).only(
        *_read(Table.KNOWLEDGE_DOCUMENT, "id", "agent_id")
    ),
    # The run ledger (memoryapp.ledger): what a run published (deltas, tool outcomes, snapshots of
    # the conversation) and the run's latest snapshot, of a thread of another person naming her.
    Table.RUN_EVENT: lambda a: RunEvent.objects.filter(agent_id=a).only(
        *_read(Table.RUN_EVENT, "id", "agent_id", "thread_id", "run_id")
    ),
    Table.THREAD_RUN: lambda a: ThreadRun.objects.filter(agent_id=a, snapshot__isnull=False).only(
        *_read(Table.THREAD_RUN, "id", "agent_id", "thread_id")
    ),
    Table.JOB_RUN: lambda a: JobRun.objects.filter(agent_id=a).only(*_read(Table.JOB_RUN, "id")),
}


def table_rows(table: str, *, agent_id: int, row_ids: Iterable[str]) -> QuerySet[Any]:
    """The rows of one table of the index, by the ids it records (of this agent only)."""
    return _TABLES[table](agent_id).filter(pk__in=list(row_ids))


def mentions_scan(*, agent_id: int, matcher: PersonMatcher) -> dict[str, list[str]]:
    """The rows of the agent, by table, whose text names the person (module's docstring)."""
    found: dict[str, list[str]] = {table: [] for table in _TABLES}
    if not matcher:
        return found
    for table, rows in _TABLES.items():
        row: Model
        for row in rows(agent_id).order_by("pk").iterator(chunk_size=CHUNK):
            if matcher.holds(row_texts(table, row)):
                found[table].append(str(row.pk))
    return found


def person_matcher(*, agent_id: int, user_id: str, given: Mapping[str, Sequence[str]] | None = None) -> PersonMatcher:
    """The person's identifiers as this agent registered them (with those kept from an erasure's
    request, memoryapp.subjects.erasing), and those `given` (normalised)."""
    registered = identifiers_of(agent=Agent(pk=agent_id), user_id=user_id, with_given=True)
    merged = {name: list(dict.fromkeys([*registered[name], *((given or {}).get(name) or [])])) for name in LISTS}
    return PersonMatcher(user_id=user_id, identifiers=merged)


@atomic_retrying
def subject_index_rebuild(
    *, agent_id: int, user_id: str, given: Mapping[str, Sequence[str]] | None = None
) -> dict[str, list[str]]:
    """Find the rows of the agent that mention the person (registered identifiers and `given`) and
    make the index say exactly that; answers them by table.

    Against writers on other connections (tests/forgetting/test_index_races.py): only what
    changes is touched. A mention the index already holds stays as it is (its row not locked, so a
    merge or a delete whose trigger drops it never waits on this transaction, nor this one on
    them); the mentions the scan no longer finds are locked in id order and deleted; the missing
    ones are inserted with ON CONFLICT DO NOTHING, so a writer that recorded the same mention
    (rewriting a row the scan read) keeps its row instead of failing this one with a unique
    violation. A deadlock left (writers lock their rows in no one order) runs it again
    (`atomic_retrying`); inside a caller's transaction, the caller's to handle.

    The scan reads without locks: a row a writer stops naming the person between the scan and the
    commit may stay indexed until the next rebuild (its rows are not locked here: that would put
    the rebuild job in every cascade's lock order). What acts on the index reads the row again
    under its lock: the erasure redacts and counts only rows that name the person then."""
    found = mentions_scan(agent_id=agent_id, matcher=person_matcher(agent_id=agent_id, user_id=user_id, given=given))
    subject_index_apply(agent_id=agent_id, user_id=user_id, found=found)
    return found


def subject_index_apply(*, agent_id: int, user_id: str, found: Mapping[str, Sequence[str]]) -> None:
    """Make the index hold exactly the person's rows `found` by a scan (`subject_index_rebuild`'s
    writes; the erasure calls it between its scan and its writes, once it holds the threads)."""
    wanted = {(table, row_id) for table, ids in found.items() for row_id in ids}
    held: dict[tuple[str, str], int] = {
        (table, row_id): pk
        for pk, table, row_id in SubjectMention.objects.filter(agent_id=agent_id, user_id=user_id).values_list(
            "pk", "table", "row_id"
        )
    }
    stale = sorted(pk for key, pk in held.items() if key not in wanted)
    if stale:
        locked = list(SubjectMention.objects.select_for_update().filter(pk__in=stale).order_by("pk").values_list("pk"))
        if locked:
            SubjectMention.objects.filter(pk__in=[pk for (pk,) in locked]).delete()
    SubjectMention.objects.bulk_create(
        [
            SubjectMention(agent_id=agent_id, user_id=user_id, table=table, row_id=row_id)
            for table, ids in found.items()
            for row_id in ids
            if (table, row_id) not in held
        ],
        ignore_conflicts=True,
    )


def mentions_of(*, agent_ids: Sequence[int], user_id: str) -> dict[int, dict[str, list[str]]]:
    """What the index holds for the person: row ids by table, by agent."""
    by_agent: dict[int, dict[str, list[str]]] = {}
    for agent_id, table, row_id in (
        SubjectMention.objects.filter(agent_id__in=list(agent_ids), user_id=user_id)
        .order_by("agent_id", "table", "row_id")
        .values_list("agent_id", "table", "row_id")
    ):
        by_agent.setdefault(agent_id, {}).setdefault(table, []).append(row_id)
    return by_agent


def subject_index_forget(*, agent_id: int, user_id: str) -> int:
    """Drop the person's rows from the index (their erasure, once the rows it named are done)."""
    return SubjectMention.objects.filter(agent_id=agent_id, user_id=user_id).delete()[0]


def subject_index_schedule(*, agent_id: int, user_id: str) -> None:
    """Rebuild the person's mentions in a job, after commit (their identifiers changed). The run's
    record names the person by their pseudonym (governance.audit.pseudonyms), never by id, in its
    arguments as in its dedupe key: the job resolves it while the person's pseudonym secret lives,
    and once their erasure deleted it the record links to no one (the job has nothing to do)."""
    person = pseudonym_names(agent_id=agent_id, user_id=user_id)[user_id]
    job_enqueue(
        kind=JOB_KIND,
        task_name=JOB_TASK,
        arguments={"agent_id": agent_id, "person": person},
        agent_id=agent_id,
        dedupe_key=f"{JOB_KIND}:{agent_id}:{person}",
    )


def subject_index_person(arguments: Mapping[str, Any]) -> str | None:
    """The user id a rebuild job's arguments name (their pseudonym, resolved), or None when it
    links to no one any more (the person was erased). A run queued before records named people by
    pseudonym carries `user_id`."""
    if arguments.get("user_id"):
        return str(arguments["user_id"])
    person = str(arguments.get("person") or "")
    return pseudonyms_resolve(pseudonyms=[person], agent_ids=[int(arguments["agent_id"])]).get(person)
