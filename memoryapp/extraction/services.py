"""Extraction as a service and a job per thread: new entries -> memory items, once.

Progress is a high-water mark, `Thread.extraction` = {"through_seq", "failed",
"prompt_version"}: every window's items and the mark move together in one transaction, so a job
that dies half-way leaves whole windows done and the next run starts after them, writing
nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from governance.audit.chain import audit_append
from governance.jobs.broker import job_enqueue
from governance.jobs.runs import job_progress, job_run, job_skip
from governance.models import JobRun
from memoryapp.errors import DomainError
from memoryapp.extraction.extractor import (
    WINDOW_TOKENS,
    ExtractedItem,
    WindowResult,
    extract_window,
    extraction_windows,
    quote_holds,
)
from memoryapp.extraction.times import zone_of
from memoryapp.graph.services import relation_write
from memoryapp.items.purposes import thread_purposes
from memoryapp.items.rules import Scope
from memoryapp.items.services import item_write
from memoryapp.llm.arrays import NoArrayError
from memoryapp.llm.model import ModelUnavailable
from memoryapp.llm.port import model_available, recording_usage
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import HISTORY_TYPES
from memoryapp.prompts import EXTRACTION
from memoryapp.subjects.erasing import PERSON_BEING_ERASED, person_being_erased
from memoryapp.threads.memory_switch import memory_off_ranges, seq_was_off
from memoryapp.threads.selectors import path_entries

JOB_KIND = "extraction"
# The job that runs `extraction_job` (memoryapp.tasks.extraction), sent by name.
JOB_TASK = "memoryapp.tasks.extract_thread"
# A window that failed is tried again by this many later runs, then given up (and said so).
FAILED_WINDOW_ATTEMPTS = 3


class ExtractionFailed(Exception):
    """Every window of the run failed: the job run fails with this."""


@dataclass
class ExtractionOutcome:
    windows: int = 0
    items_written: int = 0
    relations_written: int = 0
    items_left_out: int = 0
    items_dropped_gone: int = 0
    quotes_dropped: int = 0
    model_calls: int = 0
    continuations: int = 0
    through_seq: int = 0
    failed_windows: list[dict[str, Any]] = field(default_factory=list)
    item_ids: list[str] = field(default_factory=list)

    def as_result(self) -> dict[str, Any]:
        return {
            "windows": self.windows,
            "items_written": self.items_written,
            "relations_written": self.relations_written,
            "items_left_out": self.items_left_out,
            "items_dropped_entries_gone": self.items_dropped_gone,
            "quotes_dropped": self.quotes_dropped,
            "model_calls": self.model_calls,
            "continuations": self.continuations,
            "through_seq": self.through_seq,
            "failed_windows": self.failed_windows,
            "prompt_version": EXTRACTION,
        }


def extraction_progress(thread: Thread) -> dict[str, Any]:
    progress = thread.extraction
    return dict(progress) if isinstance(progress, dict) else {}


def _save_progress(thread: Thread, progress: dict[str, Any]) -> None:
    """Store the mark (its own column: the agent's metadata and updated_at are left alone)."""
    Thread.objects.filter(pk=thread.pk).update(extraction=progress)
    thread.extraction = progress


def _in_ranges(seq: int, ranges: list[dict[str, Any]]) -> bool:
    return any(int(r["from_seq"]) <= seq <= int(r["to_seq"]) for r in ranges)


def entries_to_extract(thread: Thread) -> tuple[list[Entry], list[Entry]]:
    """(new entries of the active branch, the whole branch): after the mark, or in a failed window.

    Turns written while the thread's memory was off are in neither: the model never reads them.
    """

    progress = extraction_progress(thread)
    through = int(progress.get("through_seq") or 0)
    failed = [r for r in progress.get("failed") or [] if isinstance(r, dict)]
    off = memory_off_ranges(thread)
    # A turn screening held (memoryapp.screening) is read by no model until a reviewer releases it.
    branch = [
        e for e in path_entries(thread=thread, types=HISTORY_TYPES) if not seq_was_off(e.seq, off) and e.held_at is None
    ]
    fresh = [e for e in branch if e.redacted_at is None and (e.seq > through or _in_ranges(e.seq, failed))]
    return fresh, branch


@transaction.atomic
def _write_window(
    *,
    thread: Thread,
    window: list[Entry],
    result: WindowResult,
    shadow: bool,
    actor: str,
    outcome: ExtractionOutcome,
) -> None:
    """Write one window's items and move the mark, or nothing at all.

    1. Lock the thread row: entry deletes and redactions of the thread wait until we are done.
    2. A window another run already wrote (the mark is past it) writes nothing.
    3. Re-read the quoted entries: a quote whose entry was deleted or redacted while the model
       answered (or no longer holds) is dropped, and an item left without one is dropped.
    4. Write each item through `item_write` (activation rules, merge of repeats, shadow mode), and
       each edge of the graph through `relation_write` (in the items' scope: the thread's person
       and project).
    5. Move the mark past the window, and take the window out of the failed ones.
    """

    locked = Thread.objects.select_for_update().filter(pk=thread.pk).first()
    if locked is None:
        return
    progress = extraction_progress(locked)
    through = int(progress.get("through_seq") or 0)
    first, last = window[0].seq, window[-1].seq
    failed = [r for r in progress.get("failed") or [] if isinstance(r, dict)]
    if last <= through and not _in_ranges(first, failed):
        return
    quoted_ids = {q["entry_id"] for item in result.items for q in item.evidence} | {
        q["entry_id"] for relation in result.relations for q in relation.evidence
    }
    off = memory_off_ranges(locked)
    current = {
        e.id: e
        for e in Entry.objects.filter(thread=locked, id__in=quoted_ids, redacted_at__isnull=True).only(
            "id", "text", "redacted_at", "seq"
        )
        if not seq_was_off(e.seq, off)
    }
    written: list[ExtractedItem] = []
    # Items drawn from a conversation held for a purpose are collected for it (metadata.purpose).
    purposes = thread_purposes(agent=locked.agent, metadata=locked.metadata)
    for item in result.items:
        evidence = [
            q for q in item.evidence if q["entry_id"] in current and quote_holds(q["quote"], current[q["entry_id"]])
        ]
        if not evidence:
            outcome.items_dropped_gone += 1
            continue
        saved = item_write(
            agent=locked.agent,
            kind=item.kind,
            subject=item.subject,
            attribute=item.attribute,
            value=item.value,
            trust=item.trust,
            user_id=locked.user_id,
            project_id=locked.project_scope,
            evidence=[{"entry_id": q["entry_id"], "quote": q["quote"]} for q in evidence],
            confidence=item.confidence,
            valid_from=item.valid_from,
            valid_to=item.valid_to,
            metadata={"extracted_from_thread": locked.external_id},
            prompt_version=EXTRACTION,
            shadow=shadow,
            actor=actor,
            purposes=purposes,
        )
        outcome.item_ids.append(saved.pk)
        written.append(item)
    edges = 0
    for relation in result.relations:
        evidence = [
            q for q in relation.evidence if q["entry_id"] in current and quote_holds(q["quote"], current[q["entry_id"]])
        ]
        if not evidence:
            outcome.items_dropped_gone += 1
            continue
        relation_write(
            agent=locked.agent,
            subject=relation.subject,
            predicate=relation.predicate,
            object=relation.object,
            trust=relation.trust,
            scope=Scope(user_id=locked.user_id, project_id=locked.project_scope),
            evidence=[{"entry_id": q["entry_id"], "quote": q["quote"]} for q in evidence],
            confidence=relation.confidence,
            shadow=shadow,
            prompt_version=EXTRACTION,
            actor=actor,
        )
        edges += 1
    outcome.relations_written += edges
    progress["through_seq"] = max(through, last)
    progress["failed"] = [r for r in failed if not (int(r["from_seq"]) >= first and int(r["to_seq"]) <= last)]
    progress["prompt_version"] = EXTRACTION
    _save_progress(locked, progress)
    thread.extraction = locked.extraction
    outcome.items_written += len(written)
    audit_append(
        action="thread.extract",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        person=locked.user_id,
        subject=f"seq {first}-{last}",
        outcome="written",
        details={
            "items": len(written),
            "relations": edges,
            "left_out": result.left_out,
            "quotes_dropped": result.quotes_dropped,
        },
    )


@transaction.atomic
def _note_failed_window(*, thread: Thread, window: list[Entry], error: str) -> dict[str, Any]:
    locked = Thread.objects.select_for_update().filter(pk=thread.pk).first()
    first, last = window[0].seq, window[-1].seq
    record = {"from_seq": first, "to_seq": last, "error": error[:300]}
    if locked is None:
        return record
    progress = extraction_progress(locked)
    failed = [r for r in progress.get("failed") or [] if isinstance(r, dict)]
    previous = next((r for r in failed if int(r["from_seq"]) == first), None)
    attempts = int(previous.get("attempts") or 0) + 1 if previous else 1
    failed = [r for r in failed if r is not previous]
    if attempts < FAILED_WINDOW_ATTEMPTS:
        failed.append({"from_seq": first, "to_seq": last, "attempts": attempts})
    progress["failed"] = failed
    progress["through_seq"] = max(int(progress.get("through_seq") or 0), last)
    _save_progress(locked, progress)
    thread.extraction = locked.extraction
    return {**record, "attempts": attempts, "given_up": attempts >= FAILED_WINDOW_ATTEMPTS}


def extraction_run(
    *, thread: Thread, run: JobRun | None = None, actor: str = "extraction", window_tokens: int = WINDOW_TOKENS
) -> ExtractionOutcome:
    """Extract memory items from the thread's entries not read yet, one window at a time.

    1. The new entries of the active branch (after the mark, or in a window that failed before).
    2. Windows of about `window_tokens`; for each, one model call (`extract_window`); a window
       with no JSON array after three tries fails alone and is tried again by a later run.
    3. Each window's items and the moved mark are written in one transaction (`_write_window`).
    4. Every window failed: ExtractionFailed (the run fails).
    """
    outcome = ExtractionOutcome()
    fresh, branch = entries_to_extract(thread)
    windows = extraction_windows(fresh, window_tokens)
    outcome.windows = len(windows)
    zone = zone_of((thread.metadata or {}).get("time_zone") or (thread.metadata or {}).get("timezone"))
    shadow = bool(thread.agent.shadow_mode)
    for index, window in enumerate(windows):
        try:
            with recording_usage(run):
                result = extract_window(window, user_id=thread.user_id, zone=zone, branch=branch)
        except NoArrayError as exc:
            outcome.failed_windows.append(_note_failed_window(thread=thread, window=window, error=str(exc)))
        else:
            outcome.items_left_out += result.left_out
            outcome.quotes_dropped += result.quotes_dropped
            outcome.model_calls += result.calls
            outcome.continuations += result.continuations
            _write_window(thread=thread, window=window, result=result, shadow=shadow, actor=actor, outcome=outcome)
        if run is not None:
            job_progress(run, done=index + 1, total=len(windows))
    outcome.through_seq = int(extraction_progress(thread).get("through_seq") or 0)
    if windows and len(outcome.failed_windows) == len(windows):
        raise ExtractionFailed(f"All {len(windows)} window(s) failed: the model answered without a JSON array.")
    return outcome


# --- jobs ----------------------------------------------------------------------------------------------


# Why an extraction of a thread whose person is being erased is skipped (never naming her).
# True in both of the erasure's modes: `erase` deletes her thread, `redact` keeps it, its turns redacted.
ERASING_SKIP = (
    "the thread's person is being erased: her erasure deletes the thread or redacts its turns, nothing is extracted"
)


def extraction_job(run: JobRun, outcomes: list[ExtractionOutcome] | None = None) -> dict[str, Any] | None:
    """The body of an extraction job run: skipped with its reason when it cannot run."""
    arguments = run.arguments or {}
    thread = Thread.objects.select_related("agent").filter(pk=int(arguments.get("thread_pk") or 0)).first()
    if thread is None:
        job_skip(run, "the thread was deleted")
        return None
    if not thread.memory_enabled:
        job_skip(run, "memory is off for this thread: nothing is extracted from it")
        return None
    if not model_available():
        job_skip(run, "no language model is configured (LLM_PROVIDER=none): extraction needs one")
        return None
    if thread.user_id and person_being_erased(agent_id=thread.agent_id, user_id=thread.user_id):
        job_skip(run, ERASING_SKIP)
        return None
    try:
        outcome = extraction_run(thread=thread, run=run, actor=str(arguments.get("actor") or "extraction"))
    except ModelUnavailable as exc:
        job_skip(run, f"no language model is configured: {exc}")
        return None
    except DomainError as exc:
        # Her erasure began while the model answered: the window's items were refused (409) and
        # rolled back with the mark; the erasure deletes or redacts her thread, nothing is left to do.
        if exc.code != PERSON_BEING_ERASED:
            raise
        job_skip(run, ERASING_SKIP)
        return None
    if outcomes is not None:
        outcomes.append(outcome)
    return outcome.as_result()


def _arguments(thread: Thread, actor: str) -> dict[str, Any]:
    return {"thread_pk": thread.pk, "actor": actor}


def extraction_debounce_key(thread_pk: int) -> str:
    return f"extract:{thread_pk}"


def extraction_request(*, thread: Thread, actor: str = "", countdown: float | None = None) -> JobRun:
    """Enqueue the thread's extraction job (API, admin "extract now"); one queued run per thread."""
    return job_enqueue(
        kind=JOB_KIND,
        task_name=JOB_TASK,
        arguments=_arguments(thread, actor or "extraction"),
        agent_id=thread.agent_id,
        dedupe_key=extraction_debounce_key(thread.pk),
        countdown=countdown,
    )


def extraction_now(*, thread: Thread, actor: str = "") -> tuple[JobRun, ExtractionOutcome | None]:
    """Run the thread's extraction in this process, still as a job run (errors mark it failed and raise)."""
    run = JobRun.objects.create(kind=JOB_KIND, agent_id=thread.agent_id, arguments=_arguments(thread, actor))
    outcomes: list[ExtractionOutcome] = []
    job_run(run.pk, lambda r: extraction_job(r, outcomes))
    run.refresh_from_db()
    return run, (outcomes[0] if outcomes else None)
