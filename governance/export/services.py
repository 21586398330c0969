"""Export of a person (a data subject access request): everything memory holds about them, across
the chosen agents, as one zip archive a privacy officer downloads from the admin or the staff API.

What is about the person (`PersonScope`), in the agents chosen (all when none are):

- threads whose `user_id` is theirs, with every entry, as the JSONL of a thread export (000's node
  records, `memoryapp.threads.transfer`): `threads/<agent>/<thread>.jsonl`, one file each;
- memory items scoped to them, or to one of their threads, or quoting one of their entries, with
  their evidence and review history (`items.jsonl`), and their facts, the `core:` items
  (`facts.jsonl`); the entities of their scope or of those items (`entities.jsonl`);
- the graph's edges of their scope, and the edges of others standing on a quote of their words,
  with the quotes of theirs (`relations.jsonl`);
- every version of the memory files of their scope or of their threads (`files.jsonl`);
- their channel sessions (`sessions.jsonl`): the channel type and id, status, times and thread of
  each conversation of theirs an agent mapped onto a thread;
- the messages they wrote in threads of others (`messages.jsonl`: the erasure's selector,
  `person_messages_elsewhere`), each with its thread, seq, role and time, without the messages of the
  others around it;
- the rows of others that name them by an identifier registered with the agent (`mentions.jsonl`,
  through the subject index, memoryapp.subjects): the table, the row and each place it names them
  with a little text around it, not the rest of the row (another person's);
- the run ledger (`runs.jsonl`): each run of their threads with its latest snapshot and the events
  it kept; and each run of another person's thread naming them (per the subject index), with only
  the places its events and snapshot name them;
- the job runs whose arguments or result name them (`job_runs.jsonl`: the erasure's selector too);
- the access log of what the agents were sent about them (`access_log.jsonl`, ids only): the rows of
  requests about them, and the rows of requests of others that sent their items or entries, each
  with only the ids that are theirs;
- the audit records that name any of those: their threads, items, file versions or entries (of their
  threads, or their messages elsewhere) (`audit.jsonl`);
- when the request asks for them (`include_vectors`, off by default), the embeddings of their entries
  and items (`vectors.jsonl`: id and vector). They are personal data, derived from the words the
  archive holds already, and large (a 384-dimension vector is about 4 KB of JSON, often more than
  the turn it stands for) and of no use without the model that made them: the person asks for them.

The job (`export_run`), idempotent and streaming:

1. Claim the request. One done whose archive is on disk is left as it is (the run is skipped).
2. Count threads, items, file versions and messages elsewhere: the progress bar's total.
3. Write each part into `<EXPORT_DIR>/export-<id>.<run>.partial` as it is read: threads a chunk at a
   time by keyset, their entries through one server-side cursor per chunk, items a chunk at a time
   with their evidence and history; each part's sha256, size and records noted as it closes (in a
   temporary file, so the notes of 10,000 threads are not held either). Memory stays bounded by a
   chunk, whatever the person's size (the zip's own directory aside: a few hundred bytes a part).
4. `manifest.json` last: format version, the request, the agents, counts, every part; and
   `receipt.json`: the manifest's sha256 signed (governance.receipts), so the person can check
   offline that the archive is the one the service produced.
5. fsync, rename to `export-<id>.zip` (atomic), mark the request done, audit `export.done` with
   ids, counts and the manifest's hash. A run cut short leaves a `.partial` the next run of the
   request replaces; a failed run marks the request failed (it can be run again from the admin).

The person's user id is held by the request only: audit records name the request by its id.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Collate
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.audit.pseudonyms import pseudonyms_of
from governance.jobs.broker import job_enqueue
from governance.jobs.runs import job_progress, job_skip
from governance.models import AuditRecord, ExportRequest, JobRun
from governance.receipts import receipt_sign
from memoryapp.errors import DomainError
from memoryapp.forgetting.person import person_job_runs, person_messages_elsewhere
from memoryapp.items.selectors import FACT_PREFIX
from memoryapp.models import (
    AccessLog,
    Agent,
    ChannelSession,
    Entity,
    Entry,
    Evidence,
    ItemReview,
    MemoryFileVersion,
    MemoryItem,
    Relation,
    RelationEvidence,
    RunEvent,
    SubjectMention,
    Thread,
    ThreadRun,
)
from memoryapp.search.access_log import access_log_of_person, access_log_person_reading
from memoryapp.subjects.index import person_matcher, row_texts, subject_index_rebuild, table_rows
from memoryapp.threads.columns import ENTRY_LIGHT_DEFER
from memoryapp.threads.transfer import thread_export_lines

FORMAT = "memory-person-export"
FORMAT_VERSION = 1
EXPORT_TASK = "governance.tasks.export_person"
# Rows read per query: threads per chunk, items per chunk, entries and versions per cursor fetch.
THREAD_CHUNK = 200
ITEM_CHUNK = 500
ROW_FETCH = 2000
# Entries per fetch of the cursor: each holds its content (up to a few KB, more with tool results).
ENTRY_FETCH = 100
# Bytes of a part gathered before they go to the zip stream (fewer, larger compressor calls).
PART_BUFFER = 64 * 1024
# Vectors per fetch: one is about 4 KB of text (384 dimensions).
VECTOR_FETCH = 500
# Deflate level 1: JSONL shrinks about as well as at 6, several times faster (bench/export.py).
COMPRESS_LEVEL = 1

# What every manifest counts (zero when the person has none); `vectors` too when they were asked for.
COUNTED = (
    "mentions",
    "threads",
    "entries",
    "items",
    "facts",
    "evidence",
    "history",
    "entities",
    "relations",
    "sessions",
    "file_versions",
    "messages_elsewhere",
    "job_runs",
    "runs",
    "run_events",
    "access_log",
    "audit_records",
)
# The kinds the progress bar counts (its total is counted before the run).
PROGRESS_COUNTED = ("threads", "items", "facts", "file_versions", "messages_elsewhere")

Status = ExportRequest.Status


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


# How a staff member is named where the admin acted (`staff:<username>`).
STAFF_PREFIX = "staff:"


def staff_unnamed(value: Any) -> Any:
    """`value` with every staff member's name left out (`staff:eve` becomes `staff`), at any depth:
    the archive says that staff decided (an item's `reviewed_by`, `stale_undone.by`, an audit
    record's actor), never who; that is the service's bookkeeping, not the person's data."""
    if isinstance(value, str):
        return "staff" if value.startswith(STAFF_PREFIX) else value
    if isinstance(value, dict):
        return {key: staff_unnamed(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [staff_unnamed(inner) for inner in value]
    return value


# --- who is the person ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonScope:
    """What is about one person in some agents: the querysets every part of the export reads."""

    user_id: str
    agent_ids: tuple[int, ...]

    def threads(self) -> QuerySet[Thread]:
        return Thread.objects.filter(agent_id__in=self.agent_ids, user_id=self.user_id)

    def _their_thread(self) -> Exists:
        """A row scoped to one of the person's threads (its agent and the thread's external id)."""
        return Exists(
            Thread.objects.filter(
                agent_id=OuterRef("agent_id"), external_id=OuterRef("thread_id"), user_id=self.user_id
            )
        )

    def sessions(self) -> QuerySet[ChannelSession]:
        return ChannelSession.objects.filter(agent_id__in=self.agent_ids, user_id=self.user_id)

    def entries(self) -> QuerySet[Entry]:
        return Entry.objects.filter(thread__in=self.threads())

    def messages_elsewhere(self) -> QuerySet[Entry]:
        """Their messages in threads of others: the erasure's own selector (by `metadata.userId`)."""
        return person_messages_elsewhere(user_id=self.user_id, agent_ids=self.agent_ids)

    def entry_ids(self) -> list[QuerySet[Any]]:
        """Every entry that is theirs, as selections of ids: of their threads, and their messages elsewhere."""
        return [self.entries().values("id"), self.messages_elsewhere().values("id")]

    def runs(self) -> QuerySet[ThreadRun]:
        """The runs of their threads: what each published to its ledger is theirs (000 RunLedger)."""
        return ThreadRun.objects.filter(agent_id__in=self.agent_ids, thread__in=self.threads())

    def runs_naming_them(self) -> dict[int, dict[str, list[str]]]:
        """Runs of others' threads whose events or snapshot name them, per the subject index (rebuilt
        by `_write_mentions` first): {agent: {"run_event": ids, "thread_run": ids}}."""
        found: dict[int, dict[str, list[str]]] = {}
        rows = SubjectMention.objects.filter(
            agent_id__in=self.agent_ids,
            user_id=self.user_id,
            table__in=[SubjectMention.Table.RUN_EVENT, SubjectMention.Table.THREAD_RUN],
        ).values_list("agent_id", "table", "row_id")
        for agent_id, table, row_id in rows.order_by("agent_id", "table", "row_id"):
            found.setdefault(agent_id, {}).setdefault(table, []).append(row_id)
        return found

    def job_runs(self) -> QuerySet[JobRun]:
        """The job runs naming them (arguments or result): the erasure's own selector."""
        return JobRun.objects.filter(
            pk__in=person_job_runs(user_id=self.user_id, agent_ids=self.agent_ids, unowned=True).values("pk")
        )

    def access_log(self) -> QuerySet[AccessLog]:
        """The access log's rows about them or sending their items or entries, with their ids only."""
        return access_log_of_person(
            agent_ids=self.agent_ids,
            user_id=self.user_id,
            item_ids=[self.all_items().values("id")],
            entry_ids=self.entry_ids(),
        )

    def all_items(self) -> QuerySet[MemoryItem]:
        """Items scoped to the person, or to one of their threads, or quoting one of their entries.

        One UNION of three index-friendly selections, as a subquery: an OR of EXISTS tests made
        PostgreSQL scan every item of the agents with a join per row (2 s a query at 20,000 items).
        """
        scoped = MemoryItem.objects.filter(agent_id__in=self.agent_ids, user_id=self.user_id).values("id")
        in_thread = (
            MemoryItem.objects.filter(agent_id__in=self.agent_ids)
            .exclude(thread_id="")
            .filter(self._their_thread())
            .values("id")
        )
        quoting = Evidence.objects.filter(
            agent_id__in=self.agent_ids, entry__thread__user_id=self.user_id, entry__thread__agent_id__in=self.agent_ids
        ).values("item_id")
        parts = [queryset.query.sql_with_params() for queryset in (scoped, in_thread, quoting)]
        union = RawSQL(" UNION ".join(sql for sql, _ in parts), tuple(p for _, params in parts for p in params))
        return MemoryItem.objects.filter(pk__in=union)

    def items(self) -> QuerySet[MemoryItem]:
        return self.all_items().exclude(attribute__startswith=FACT_PREFIX)

    def facts(self) -> QuerySet[MemoryItem]:
        return self.all_items().filter(attribute__startswith=FACT_PREFIX)

    def entities(self) -> QuerySet[Entity]:
        return Entity.objects.filter(agent_id__in=self.agent_ids).filter(
            Q(user_id=self.user_id)
            | (~Q(thread_id="") & self._their_thread())
            | Q(pk__in=self.all_items().exclude(entity_id=None).values("entity_id"))
        )

    def own_relations(self) -> Q:
        """An edge of the graph in their scope, or in one of their threads'."""
        return Q(user_id=self.user_id) | (~Q(thread_id="") & Q(self._their_thread()))

    def relations(self) -> QuerySet[Relation]:
        """The graph's edges of their scope, and the edges of others standing on a quote of one of
        their entries (of their threads, or their messages elsewhere): what their erasure takes."""
        quoting = [
            RelationEvidence.objects.filter(agent_id__in=self.agent_ids, entry__in=selection).values("relation_id")
            for selection in self.entry_ids()
        ]
        theirs = self.own_relations()
        for selection in quoting:
            theirs |= Q(pk__in=selection)
        return Relation.objects.filter(agent_id__in=self.agent_ids).filter(theirs)

    def file_versions(self) -> QuerySet[MemoryFileVersion]:
        return MemoryFileVersion.objects.filter(agent_id__in=self.agent_ids).filter(
            Q(user_id=self.user_id) | (~Q(thread_id="") & self._their_thread())
        )

    def audit_records(self) -> QuerySet[AuditRecord]:
        """Records of the agents naming the person's threads (by agent and external id), items or file
        versions (as their subject), or their items or entries (of their threads, or their messages
        elsewhere) in a list of ids of their details."""
        item_sql, item_params = self.all_items().values("id").query.sql_with_params()
        entry_parts = [selection.query.sql_with_params() for selection in self.entry_ids()]
        entry_sql = " UNION ".join(f"({sql})" for sql, _ in entry_parts)
        entry_params = tuple(p for _, params in entry_parts for p in params)
        names_in_details = RawSQL(
            "jsonb_typeof(details) = 'object' AND EXISTS (SELECT 1 FROM jsonb_each(details) AS kv "
            "CROSS JOIN LATERAL jsonb_array_elements_text(CASE WHEN jsonb_typeof(kv.value) = 'array' "
            "THEN kv.value ELSE '[]'::jsonb END) AS named(id) "
            f"WHERE named.id IN ({item_sql}) OR named.id IN ({entry_sql}))",
            (*item_params, *entry_params),
        )
        # Records written since the audit trail names people by pseudonym (governance.audit.pseudonyms).
        threads_by_agent: dict[int, list[str]] = {}
        for agent_id, external_id in self.threads().values_list("agent_id", "external_id"):
            threads_by_agent.setdefault(agent_id, []).append(external_id)
        pseudonyms = [
            name
            for agent_id in self.agent_ids
            for name in pseudonyms_of(
                agent_id=agent_id, user_id=self.user_id, values=[self.user_id, *threads_by_agent.get(agent_id, [])]
            )
        ]
        return (
            AuditRecord.objects.filter(agent_id__in=self.agent_ids)
            .alias(names_them=names_in_details)
            .filter(
                Q(thread_id__in=pseudonyms)
                | Q(subject__in=pseudonyms)
                | (~Q(thread_id="") & self._their_thread())
                | Q(subject__in=self.all_items().values("id"))
                | Q(subject__in=self.file_versions().values("id"))
                | Q(names_them=True)
            )
        )


# --- filing a request ----------------------------------------------------------------------------


def person_user_id_check(value: object) -> str:
    """The person's user id as a request names it (stripped), or a 400 naming `user_id`."""
    if not isinstance(value, str) or not value.strip():
        raise DomainError("invalid_value", "The person's user id must not be empty.", field="user_id")
    value = value.strip()
    if len(value) > 128:
        raise DomainError("too_long", "A user id is at most 128 characters.", field="user_id")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise DomainError("invalid_value", "A user id holds no control characters.", field="user_id")
    return value


def _agent_ids_check(value: object) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise DomainError("invalid_type", "agent_ids must be a list of agent ids.", field="agent_ids")
    wanted = sorted(set(value))
    known = set(Agent.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    missing = [pk for pk in wanted if pk not in known]
    if missing:
        raise DomainError("not_found", f"No agent has the id {missing[0]}.", field="agent_ids")
    return wanted


def _include_vectors_check(value: object) -> bool:
    if not isinstance(value, bool):
        raise DomainError("invalid_type", "include_vectors must be true or false.", field="include_vectors")
    return value


def _enqueue(request: ExportRequest) -> JobRun:
    run = job_enqueue(
        kind="export",
        task_name=EXPORT_TASK,
        arguments={"request_id": request.pk},
        dedupe_key=f"export:{request.pk}",
    )
    ExportRequest.objects.filter(pk=request.pk).update(job_run=run)
    request.job_run = run
    return run


@transaction.atomic
def export_request_create(
    *, user_id: str, agent_ids: list[int] | tuple[int, ...] = (), include_vectors: bool = False, actor: str
) -> ExportRequest:
    """File a request to export what memory holds about `user_id` in `agent_ids` (every agent when
    empty), with the embeddings of their entries and items when `include_vectors`, and send its job
    after commit. Audited as `export.request` by the request's id only."""
    person = person_user_id_check(user_id)
    agents = _agent_ids_check(list(agent_ids))
    vectors = _include_vectors_check(include_vectors)
    request = ExportRequest.objects.create(
        user_id=person, agent_ids=agents, include_vectors=vectors, requested_by=actor[:200]
    )
    audit_append(
        action="export.request",
        actor=actor,
        subject=f"export:{request.pk}",
        outcome="filed",
        details={"request_id": request.pk, "agents": len(agents), "all_agents": not agents, "vectors": vectors},
    )
    _enqueue(request)
    return request


class ExportRetryRefused(Exception):
    pass


@transaction.atomic
def export_request_retry(*, request: ExportRequest, actor: str) -> JobRun:
    """Run a failed request (or one whose run is stuck) again; a done one with its archive is refused."""
    locked = ExportRequest.objects.select_for_update().get(pk=request.pk)
    if not locked.user_id:
        raise ExportRetryRefused(f"Export #{locked.pk} names no one: the person was erased.")
    if locked.status == Status.DONE and export_archive_path(locked) is not None:
        raise ExportRetryRefused(f"Export #{locked.pk} is done: its archive is ready.")
    if locked.status in (Status.QUEUED, Status.RUNNING) and locked.job_run_id is not None:
        current = JobRun.objects.filter(pk=locked.job_run_id).values_list("status", flat=True).first()
        if current in (JobRun.Status.QUEUED, JobRun.Status.RUNNING):
            raise ExportRetryRefused(f"Export #{locked.pk} is {locked.status} already.")
    ExportRequest.objects.filter(pk=locked.pk).update(status=Status.QUEUED, error="")
    audit_append(
        action="export.retry",
        actor=actor,
        subject=f"export:{locked.pk}",
        outcome="queued",
        details={"request_id": locked.pk},
    )
    return _enqueue(locked)


# --- the archive ---------------------------------------------------------------------------------


def export_dir() -> Path:
    return Path(settings.EXPORT_DIR)


def archive_name(request_id: int) -> str:
    return f"export-{request_id}.zip"


def export_archive_path(request: ExportRequest) -> Path | None:
    """The archive of a done request, when it is on disk (never outside EXPORT_DIR)."""
    if request.status != Status.DONE or not request.archive_name or "/" in request.archive_name:
        return None
    path = export_dir() / request.archive_name
    return path if path.is_file() else None


class _Part:
    """One file of the archive, written as it is produced: its sha256, size and records counted."""

    def __init__(self, archive: zipfile.ZipFile, path: str):
        self.path = path
        self._stream: IO[bytes] = archive.open(path, "w", force_zip64=True)
        self._sha = hashlib.sha256()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.bytes = 0
        self.records = 0

    def line(self, text: str) -> None:
        data = (text + "\n").encode()
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.records += 1
        if self._pending_bytes >= PART_BUFFER:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        chunk = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self._sha.update(chunk)
        self._stream.write(chunk)
        self.bytes += len(chunk)

    def close(self) -> dict[str, Any]:
        self._flush()
        self._stream.close()
        return {"path": self.path, "sha256": self._sha.hexdigest(), "bytes": self.bytes, "records": self.records}


class _Writer:
    """The zip being written, the notes of its parts (in a temporary file) and the counts."""

    def __init__(self, archive: zipfile.ZipFile, notes: IO[str]):
        self.archive = archive
        self.notes = notes
        self.parts = 0
        self.counts: dict[str, int] = {}

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def part(self, path: str) -> _Part:
        return _Part(self.archive, path)

    def done(self, part: _Part) -> None:
        self.notes.write(json.dumps(part.close(), separators=(",", ":")) + "\n")
        self.parts += 1


class _Progress:
    def __init__(self, request: ExportRequest, run: JobRun | None, total: int):
        self.request, self.run, self.total, self.done = request, run, total, 0

    def add(self, n: int) -> None:
        self.done += n
        ExportRequest.objects.filter(pk=self.request.pk).update(progress_done=self.done, progress_total=self.total)
        if self.run is not None:
            job_progress(self.run, done=self.done, total=self.total)


def _entries_by_thread(thread_pks: list[int]) -> Iterator[tuple[int, Iterator[Entry]]]:
    """The entries of these threads, thread after thread in seq order, from one server-side cursor."""
    stream = iter(
        Entry.objects.filter(thread_id__in=thread_pks)
        .defer(*ENTRY_LIGHT_DEFER, "text")  # the node carries `content`; `text` is derived from it
        .order_by("thread_id", "seq")
        .iterator(ENTRY_FETCH)
    )
    pending: Entry | None = next(stream, None)
    for pk in sorted(thread_pks):

        def of_thread(pk: int = pk) -> Iterator[Entry]:
            nonlocal pending
            while pending is not None and pending.thread_id == pk:
                yield pending
                pending = next(stream, None)

        yield pk, of_thread()


class _Counted:
    """An iterator of entries that counts what went through it."""

    def __init__(self, entries: Iterator[Entry]):
        self._entries, self.n = entries, 0

    def __iter__(self) -> Iterator[Entry]:
        for entry in self._entries:
            self.n += 1
            yield entry


def _write_threads(scope: PersonScope, writer: _Writer, progress: _Progress) -> None:
    slugs = dict(Agent.objects.filter(pk__in=scope.agent_ids).values_list("pk", "slug"))
    last = 0
    while True:
        # One transaction a chunk: its entries' cursor needs no WITH HOLD, and the chunk is one snapshot.
        with transaction.atomic():
            threads = list(
                scope.threads().filter(pk__gt=last).select_related("forked_from").order_by("pk")[:THREAD_CHUNK]
            )
            if not threads:
                return
            by_pk = {thread.pk: thread for thread in threads}
            for pk, entries in _entries_by_thread(list(by_pk)):
                thread = by_pk[pk]
                part = writer.part(f"threads/{slugs[thread.agent_id]}/{thread.external_id}.jsonl")
                counted = _Counted(entries)
                for line in thread_export_lines(thread=thread, entries=counted):
                    part.line(line)
                writer.done(part)
                writer.count("threads")
                writer.count("entries", counted.n)
        last = threads[-1].pk
        progress.add(len(threads))


def _item_record(item: MemoryItem, evidence: list[Evidence], history: list[ItemReview], kind: str) -> dict[str, Any]:
    return {
        "type": kind,
        kind: {
            "id": item.pk,
            "agent_id": item.agent_id,
            "scope": {"user_id": item.user_id, "project_id": item.project_id, "thread_id": item.thread_id},
            "kind": item.kind,
            "entity_id": item.entity_id,
            "subject": item.subject,
            "attribute": item.attribute,
            "value": item.value,
            "value_json": item.value_json,
            "namespace": item.namespace,
            # What it was collected for (purpose limitation): the person's right to know why.
            "purposes": list(item.purposes or []),
            "trust": item.trust,
            "status": item.status,
            "confidence": item.confidence,
            "verified": item.verified,
            "valid_from": _iso(item.valid_from),
            "valid_to": _iso(item.valid_to),
            "recorded_at": _iso(item.recorded_at),
            "activated_at": _iso(item.activated_at),
            "expired_at": _iso(item.expired_at),
            "expires_at": _iso(item.expires_at),
            "times_retrieved": item.times_retrieved,
            "last_retrieved_at": _iso(item.last_retrieved_at),
            "metadata": staff_unnamed(item.metadata or {}),
            "evidence": [
                {"entry_id": e.entry_id, "quote": e.quote, "status": e.status, "created_at": _iso(e.created_at)}
                for e in evidence
            ],
            # The review steps, without the staff member's name (what was decided, not by whom).
            "history": [
                {
                    "action": step.action,
                    "at": _iso(step.at),
                    "status_before": step.status_before,
                    "status_after": step.status_after,
                    "value_before": step.value_before,
                    "value_after": step.value_after,
                    "reason": step.reason,
                }
                for step in history
            ],
        },
    }


def _by_item(rows: Iterator[Any]) -> Iterator[tuple[str, Any]]:
    for row in rows:
        yield row.item_id, row


class _Merged:
    """The rows of a side stream (evidence, review steps) ordered as the items are (by id, "C"
    collation, so Python's comparison agrees), taken item by item as the items stream past."""

    def __init__(self, rows: Iterator[tuple[str, Any]]):
        self._rows = rows
        self._pending = next(self._rows, None)

    def of(self, item_id: str) -> list[Any]:
        found: list[Any] = []
        while self._pending is not None and self._pending[0] <= item_id:
            if self._pending[0] == item_id:
                found.append(self._pending[1])
            self._pending = next(self._rows, None)  # a row of an item gone meanwhile is passed over
        return found


def _write_items(items: QuerySet[MemoryItem], *, path: str, kind: str, writer: _Writer, progress: _Progress) -> None:
    """The items, their evidence and their review steps: three server-side cursors ordered alike
    and merged as they stream (each query runs once, whatever the person's size)."""
    part = writer.part(path)
    by_id = Collate("id", "C")
    by_item = Collate("item_id", "C")
    stream = items.defer("embedding", "search_vector", "keyword_hashes").order_by(by_id).iterator(ROW_FETCH)
    evidence = _Merged(_by_item(Evidence.objects.filter(item__in=items).order_by(by_item, "pk").iterator(ROW_FETCH)))
    history = _Merged(
        _by_item(ItemReview.objects.filter(item__in=items).order_by(by_item, "at", "pk").iterator(ROW_FETCH))
    )
    done = 0
    for item in stream:
        found, steps = evidence.of(item.pk), history.of(item.pk)
        part.line(_dumps(_item_record(item, found, steps, kind)))
        writer.count("evidence", len(found))
        writer.count("history", len(steps))
        done += 1
        if done % ITEM_CHUNK == 0:
            progress.add(ITEM_CHUNK)
    writer.count("facts" if kind == "fact" else "items", done)
    progress.add(done % ITEM_CHUNK)
    writer.done(part)


def _records_write(
    writer: _Writer,
    path: str,
    kind: str,
    records: Iterable[dict[str, Any]],
    *,
    counted: str,
    progress: _Progress | None = None,
) -> None:
    """A part of JSON lines `{"type": kind, kind: record}`, one per record, counted as `counted`
    (0 when there is none); `progress` told every ROW_FETCH records."""
    part = writer.part(path)
    done = 0
    for record in records:
        part.line(_dumps({"type": kind, kind: record}))
        done += 1
        if progress is not None and done % ROW_FETCH == 0:
            progress.add(ROW_FETCH)
    writer.count(counted, done)
    if progress is not None:
        progress.add(done % ROW_FETCH)
    writer.done(part)


def _scope_of(row: Entity | MemoryFileVersion | Relation) -> dict[str, str]:
    return {"user_id": row.user_id, "project_id": row.project_id, "thread_id": row.thread_id}


def _write_entities(scope: PersonScope, writer: _Writer) -> None:
    entities = scope.entities().order_by("pk").iterator(ROW_FETCH)
    records = (
        {
            "id": entity.pk,
            "agent_id": entity.agent_id,
            "scope": _scope_of(entity),
            "name": entity.name,
            "aliases": entity.aliases,
            "created_at": _iso(entity.created_at),
        }
        for entity in entities
    )
    _records_write(writer, "entities.jsonl", "entity", records, counted="entities")


def _write_relations(scope: PersonScope, writer: _Writer) -> None:
    """The edges about them (`PersonScope.relations`), each with its names and predicate, and the
    quotes it stands on that are theirs: all of an edge of their scope, only the quotes of their
    own entries of an edge of others."""
    own = set(scope.relations().filter(scope.own_relations()).values_list("pk", flat=True))
    edges = scope.relations().select_related("subject", "object").order_by("pk").iterator(ROW_FETCH)

    def records() -> Iterable[dict[str, Any]]:
        for edge in edges:
            quotes = RelationEvidence.objects.filter(relation_id=edge.pk).order_by("pk")
            if edge.pk not in own:
                mine = Q()
                for selection in scope.entry_ids():
                    mine |= Q(entry__in=selection)
                quotes = quotes.filter(mine)
            yield {
                "id": edge.pk,
                "agent_id": edge.agent_id,
                "scope": _scope_of(edge),
                "subject": edge.subject.name,
                "predicate": edge.predicate,
                "object": edge.object.name,
                "status": edge.status,
                "trust": edge.trust,
                "confidence": edge.confidence,
                "verified": edge.verified,
                "created_at": _iso(edge.created_at),
                "quotes": [{"entry_id": q.entry_id, "quote": q.quote} for q in quotes],
            }

    _records_write(writer, "relations.jsonl", "relation", records(), counted="relations")


def _write_sessions(scope: PersonScope, writer: _Writer) -> None:
    rows = scope.sessions().select_related("thread").order_by("agent_id", "created_at", "pk").iterator(ROW_FETCH)
    records = (
        {
            "id": session.pk,
            "agent_id": session.agent_id,
            "channel_type": session.channel_type,
            "channel_id": session.channel_id,
            "status": session.status,
            "thread_id": session.thread.external_id,
            "created_at": _iso(session.created_at),
            "updated_at": _iso(session.updated_at),
            "closed_at": _iso(session.closed_at),
        }
        for session in rows
    )
    _records_write(writer, "sessions.jsonl", "session", records, counted="sessions")


def _write_files(scope: PersonScope, writer: _Writer, progress: _Progress) -> None:
    versions = scope.file_versions().order_by("agent_id", "user_id", "project_id", "thread_id", "path", "sequence")
    records = (
        {
            "id": version.pk,
            "agent_id": version.agent_id,
            "scope": _scope_of(version),
            "path": version.path,
            "sequence": version.sequence,
            "content": version.content,
            "deleted": version.content is None and version.redacted_at is None,
            "sha256": version.sha256,
            "size": version.size,
            "previous_id": version.previous_id,
            "place_entry_id": version.place_id,
            "renamed_from": version.renamed_from,
            "author": version.author,
            "created_at": _iso(version.created_at),
            "redacted_at": _iso(version.redacted_at),
        }
        for version in versions.iterator(ROW_FETCH)
    )
    _records_write(writer, "files.jsonl", "file_version", records, counted="file_versions", progress=progress)


def _write_audit(scope: PersonScope, writer: _Writer) -> None:
    records = (
        {
            "seq": record.seq,
            "at": _iso(record.at),
            "action": record.action,
            "actor": staff_unnamed(record.actor),
            "agent_id": record.agent_id,
            "thread_id": record.thread_id,
            "subject": record.subject,
            "outcome": record.outcome,
            "details": staff_unnamed(record.details),
            "hash": record.hash,
        }
        for record in scope.audit_records().order_by("seq").iterator(ROW_FETCH)
    )
    _records_write(writer, "audit.jsonl", "audit", records, counted="audit_records")


def _write_messages_elsewhere(scope: PersonScope, writer: _Writer, progress: _Progress) -> None:
    """Their messages in threads of others, each with what places it (agent, thread, seq, role, time),
    and nothing of the thread's other entries (they are the thread's person's, not theirs)."""
    messages = (
        scope.messages_elsewhere()
        .annotate(thread_external_id=F("thread__external_id"))
        .only("id", "agent_id", "thread_id", "seq", "role", "content", "created_at", "redacted_at")
        .order_by("agent_id", "thread_id", "seq")
    )
    records = (
        {
            "agent_id": message.agent_id,
            "thread_id": message.thread_external_id,  # type: ignore[attr-defined]
            "entry_id": message.pk,
            "seq": message.seq,
            "role": message.role,
            "created_at": _iso(message.created_at),
            "content": message.content,
            "redacted_at": _iso(message.redacted_at),
        }
        for message in messages.iterator(ENTRY_FETCH)
    )
    _records_write(writer, "messages.jsonl", "message", records, counted="messages_elsewhere", progress=progress)


def _write_mentions(scope: PersonScope, writer: _Writer) -> None:
    """The rows of others that name the person by an identifier registered with their agent
    (`mentions.jsonl`, through the subject index, rebuilt first): which row, and each place it
    names them with a little text around it; the rest of the row is another person's."""

    def records() -> Iterator[dict[str, Any]]:
        for agent_id in scope.agent_ids:
            matcher = person_matcher(agent_id=agent_id, user_id=scope.user_id)
            if not matcher:
                continue
            found = subject_index_rebuild(agent_id=agent_id, user_id=scope.user_id)
            for table, row_ids in found.items():
                for row in table_rows(table, agent_id=agent_id, row_ids=row_ids).order_by("pk"):
                    yield {
                        "agent_id": agent_id,
                        "table": table,
                        "id": str(row.pk),
                        "excerpts": matcher.excerpts(row_texts(table, row)),
                    }

    _records_write(writer, "mentions.jsonl", "mention", records(), counted="mentions")


def _write_runs(scope: PersonScope, writer: _Writer) -> None:
    """The run ledger (`runs.jsonl`): each run of their threads whole (status, times, how its ledger
    ended, its latest snapshot and the events it kept, in order); and each run of another person's
    thread that names them per the subject index, with only the places its events and snapshot name
    them (as `mentions.jsonl` shows a row of others), not the rest of that person's run."""

    def event_record(event: RunEvent) -> dict[str, Any]:
        return {"seq": event.seq, "kind": event.kind, "at": _iso(event.at), "body": event.body}

    def run_record(run: ThreadRun, thread_id: str) -> dict[str, Any]:
        return {
            "id": run.pk,
            "agent_id": run.agent_id,
            "thread_id": thread_id,
            "status": run.status,
            "started_at": _iso(run.started_at),
            "ended_at": _iso(run.ended_at),
            "ledger_outcome": run.ledger_outcome,
        }

    def records() -> Iterator[dict[str, Any]]:
        runs = scope.runs().annotate(thread_external_id=F("thread__external_id")).order_by("agent_id", "pk")
        for run in runs.iterator(ROW_FETCH):
            kept = [event_record(e) for e in RunEvent.objects.filter(run=run).order_by("seq")]
            writer.count("run_events", len(kept))
            yield {
                **run_record(run, run.thread_external_id),  # type: ignore[attr-defined]
                "theirs": True,
                "snapshot": run.snapshot,
                "events": kept,
            }
        for agent_id, tables in scope.runs_naming_them().items():
            matcher = person_matcher(agent_id=agent_id, user_id=scope.user_id)
            events_by_run: dict[str, list[RunEvent]] = {}
            for event in RunEvent.objects.filter(agent_id=agent_id, pk__in=tables.get("run_event", [])).order_by(
                "run_id", "seq"
            ):
                events_by_run.setdefault(event.run_id, []).append(event)
            run_ids = {*events_by_run, *tables.get("thread_run", [])}
            others = (
                ThreadRun.objects.filter(agent_id=agent_id, pk__in=run_ids)
                .exclude(thread__user_id=scope.user_id)
                .annotate(thread_external_id=F("thread__external_id"))
                .order_by("pk")
            )
            snapshots = set(tables.get("thread_run", []))
            for run in others:
                events = events_by_run.get(run.pk, [])
                writer.count("run_events", len(events))
                yield {
                    # Another person's run: its thread is theirs, named only by its id here.
                    **run_record(run, run.thread_external_id),  # type: ignore[attr-defined]
                    "theirs": False,
                    "snapshot_excerpts": matcher.excerpts(run.snapshot) if run.pk in snapshots else [],
                    "events": [
                        {"seq": e.seq, "kind": e.kind, "at": _iso(e.at), "excerpts": matcher.excerpts(e.body)}
                        for e in events
                    ],
                }

    _records_write(writer, "runs.jsonl", "run", records(), counted="runs")


def _write_job_runs(scope: PersonScope, writer: _Writer) -> None:
    """The job runs naming them: what ran, when, with which arguments and result (not its error text
    nor its model usage, which are the service's bookkeeping)."""
    runs = scope.job_runs().defer("error", "usage", "message_id", "dedupe_key", "task_name").order_by("pk")
    records = (
        {
            "id": run.pk,
            "kind": run.kind,
            "agent_id": run.agent_id,
            "status": run.status,
            "arguments": staff_unnamed(run.arguments),
            "result": staff_unnamed(run.result),
            "created_at": _iso(run.created_at),
            "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
        }
        for run in runs.iterator(ROW_FETCH)
    )
    _records_write(writer, "job_runs.jsonl", "job_run", records, counted="job_runs")


def _write_access_log(scope: PersonScope, writer: _Writer) -> None:
    """When, by which request and in which thread their items and entries were sent to an agent: a
    line per row, its time, source, agent and thread, and the ids in it that are theirs."""
    # The row's own id arrays are not read: they may name other people's memory. (The annotations
    # come from access_log_of_person, which the type checker's plugin cannot see from here.)
    rows = scope.access_log().values(  # type: ignore[misc]
        "id", "at", "source", "agent_id", "thread_external_id", "about_them", "their_item_ids", "their_entry_ids"
    )
    records = (
        {
            "id": row["id"],
            "at": _iso(row["at"]),
            "source": row["source"],
            "agent_id": row["agent_id"],
            "thread_id": row["thread_external_id"],
            "about_them": row["about_them"],
            "item_ids": row["their_item_ids"],
            "entry_ids": row["their_entry_ids"],
        }
        for row in rows.order_by("pk").iterator(ROW_FETCH)
    )
    with access_log_person_reading():  # room for its hashes of the person's ids
        _records_write(writer, "access_log.jsonl", "access", records, counted="access_log")


def _write_vectors(scope: PersonScope, writer: _Writer) -> None:
    """The embeddings of their entries (of their threads, then their messages elsewhere) and of their
    items and facts: a line of id and vector each, the vector as PostgreSQL prints it (exact, short)."""
    part = writer.part("vectors.jsonl")
    selections: list[tuple[str, QuerySet[Any]]] = [
        ("entry", scope.entries().order_by("thread_id", "seq")),
        ("entry", scope.messages_elsewhere().order_by("agent_id", "thread_id", "seq")),
        ("item", scope.all_items().order_by("pk")),
    ]
    for kind, selection in selections:
        vectors = (
            selection.filter(embedding__isnull=False)
            .annotate(vector_text=Cast("embedding", TextField()))
            .values_list("id", "vector_text")
        )
        for pk, vector in vectors.iterator(VECTOR_FETCH):
            part.line(f'{{"type":"vector","kind":"{kind}","id":{json.dumps(pk)},"vector":{vector}}}')
            writer.count("vectors")
    writer.done(part)


def _write_manifest(writer: _Writer, header: dict[str, Any]) -> str:
    """manifest.json: `header`, then `parts` copied from the notes line by line. Its sha256."""
    sha = hashlib.sha256()
    with writer.archive.open("manifest.json", "w", force_zip64=True) as stream:

        def put(text: str) -> None:
            data = text.encode()
            sha.update(data)
            stream.write(data)

        opening = json.dumps({**header, "parts": []}, ensure_ascii=False, indent=1)
        put(opening[: opening.rindex("[") + 1] + "\n")
        writer.notes.seek(0)
        for index, note in enumerate(writer.notes):
            put(("," if index else "") + "  " + note)
        put(" ]\n}\n")
    return sha.hexdigest()


def _write_archive(request: ExportRequest, scope: PersonScope, run: JobRun | None, path: Path) -> tuple[dict, str]:
    threads = scope.threads().count()
    total = threads + scope.all_items().count() + scope.file_versions().count() + scope.messages_elsewhere().count()
    progress = _Progress(request, run, total)
    progress.add(0)
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL) as archive,
        tempfile.TemporaryFile("w+", encoding="utf-8", dir=path.parent) as notes,
    ):
        writer = _Writer(archive, notes)
        _write_threads(scope, writer, progress)
        _write_items(scope.items(), path="items.jsonl", kind="item", writer=writer, progress=progress)
        _write_items(scope.facts(), path="facts.jsonl", kind="fact", writer=writer, progress=progress)
        _write_entities(scope, writer)
        _write_relations(scope, writer)
        _write_sessions(scope, writer)
        _write_files(scope, writer, progress)
        _write_messages_elsewhere(scope, writer, progress)
        _write_mentions(scope, writer)
        _write_runs(scope, writer)
        _write_job_runs(scope, writer)
        _write_access_log(scope, writer)
        _write_audit(scope, writer)
        if request.include_vectors:
            _write_vectors(scope, writer)
        counts = {"parts": writer.parts, **writer.counts}
        for kind in COUNTED:
            counts.setdefault(kind, 0)
        if request.include_vectors:
            counts.setdefault("vectors", 0)
        header = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "thread_format": "memoryapp.threads.transfer JSONL (000's node records)",
            "request_id": request.pk,
            "user_id": scope.user_id,
            "agents": [
                {"id": pk, "slug": slug}
                for pk, slug in Agent.objects.filter(pk__in=scope.agent_ids).order_by("pk").values_list("pk", "slug")
            ],
            "created_at": timezone.now().isoformat(),
            # Whether vectors.jsonl is there, and what made its vectors (they mean nothing without it).
            "vectors": {
                "included": request.include_vectors,
                "model": settings.EMBEDDING_MODEL,
                "dimensions": settings.EMBEDDING_DIMENSIONS,
            },
            "counts": counts,
        }
        manifest_sha = _write_manifest(writer, header)
        receipt = receipt_sign(
            {
                "kind": "export-manifest",
                "request_id": request.pk,
                "manifest_sha256": manifest_sha,
                "counts": counts,
            }
        )
        archive.writestr("receipt.json", json.dumps(receipt, indent=1) + "\n")
    with path.open("rb") as handle:
        os.fsync(handle.fileno())
    return counts, manifest_sha


def _claim(request_id: int, run: JobRun | None) -> ExportRequest | None:
    """The request, marked running under this run; None when there is nothing to do."""
    with transaction.atomic():
        request = ExportRequest.objects.select_for_update().filter(pk=request_id).first()
        if request is None:
            return None
        if request.status == Status.DONE and export_archive_path(request) is not None:
            return None
        if not request.user_id:
            return None  # the person was erased since (exports_forget_person): nothing to write
        ExportRequest.objects.filter(pk=request.pk).update(
            status=Status.RUNNING, error="", progress_done=0, job_run=run if run is not None else request.job_run
        )
        request.status = Status.RUNNING
        return request


def export_run(*, request_id: int, run: JobRun | None = None) -> dict[str, Any] | None:
    """The job of a request (see the module's docstring); its result holds ids and counts only."""
    request = _claim(request_id, run)
    if request is None:
        if run is not None:
            job_skip(run, "the export is done (or its request is gone)")
        return None
    agent_ids = request.agent_ids or list(Agent.objects.order_by("pk").values_list("pk", flat=True))
    scope = PersonScope(user_id=request.user_id, agent_ids=tuple(agent_ids))
    directory = export_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = directory / f"export-{request.pk}.{run.pk if run is not None else 0}.partial"
    try:
        counts, manifest_sha = _write_archive(request, scope, run, partial)
        name = archive_name(request.pk)
        os.replace(partial, directory / name)
        size = (directory / name).stat().st_size
        with transaction.atomic():
            ExportRequest.objects.filter(pk=request.pk).update(
                status=Status.DONE,
                archive_name=name,
                archive_size=size,
                manifest_sha256=manifest_sha,
                counts=counts,
                progress_done=sum(counts.get(k, 0) for k in PROGRESS_COUNTED),
                finished_at=timezone.now(),
            )
            audit_append(
                action="export.done",
                actor="job:export",
                subject=f"export:{request.pk}",
                outcome="done",
                details={"request_id": request.pk, "bytes": size, "manifest_sha256": manifest_sha, **counts},
            )
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        ExportRequest.objects.filter(pk=request.pk).update(
            status=Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000], finished_at=timezone.now()
        )
        raise
    return {"request_id": request.pk, "bytes": size, "manifest_sha256": manifest_sha, **counts}


def export_download_audit(*, request: ExportRequest, actor: str) -> None:
    """Who took a copy of a person's data, and when (ids only)."""
    audit_append(
        action="export.download",
        actor=actor,
        subject=f"export:{request.pk}",
        outcome="downloaded",
        details={"request_id": request.pk},
    )


@transaction.atomic
def _files_remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def exports_forget_person(*, user_id: str, actor: str, agent_id: int | None = None) -> dict[str, int]:
    """What an erasure of the person calls: their export archives deleted from disk and the requests
    about them no longer naming them (the request rows stay, as the audit trail names them).
    With `agent_id` (an agent's own `forget`), the exports that hold that agent's memory of them:
    those of every agent and those naming it; an archive cannot lose one agent's part, so it goes
    whole, and staff export the person again if they need the rest.

    A request still queued or running is marked failed first, so its job writes no archive after this
    (a run claims only a queued, running or failed request that names a person). Returns the counts
    (requests, archives deleted); audited as `export.forget` by counts only.
    """
    mine = ExportRequest.objects.filter(user_id=user_id)
    if agent_id is not None:
        mine = mine.filter(Q(agent_ids=[]) | Q(agent_ids__contains=[agent_id]))
    requests = list(mine.select_for_update().order_by("pk"))
    files = [path for request in requests for path in export_dir().glob(f"export-{request.pk}.*")]
    archives = sum(1 for path in files if path.suffix == ".zip")
    # Removed once the erasure commits: a dry run of it (rolled back) leaves them where they are.
    transaction.on_commit(lambda: _files_remove(files))
    ExportRequest.objects.filter(pk__in=[r.pk for r in requests]).update(
        user_id="",
        archive_name="",
        archive_size=None,
        status=Status.FAILED,
        error="The person was erased: their export is gone.",
    )
    if requests:
        audit_append(
            action="export.forget",
            actor=actor,
            subject=f"{len(requests)} export(s)",
            outcome="forgotten",
            details={"request_ids": [r.pk for r in requests], "archives": archives},
        )
    return {"requests": len(requests), "archives": archives}
